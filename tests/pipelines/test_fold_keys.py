"""The int keys of the keyed fold: ``pipelines.keyed_fold._key_codes`` and ``_fold_order`` against plain Python."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.fold_records import FOLD_ORDER
from pipelines.keyed_fold import _fold_order, _key_codes

topics = st.one_of(st.none(), st.sampled_from(["a", "b", "orders", "a\x1f1"]))  # "a\x1f1" once fooled string keys
partitions = st.one_of(st.none(), st.integers(0, 3), st.just(2**31 - 1))
key_row = st.fixed_dictionaries({"topic": topics, "partition": partitions})
KEY_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32())])


@settings(max_examples=200, deadline=None)
@given(st.lists(key_row, max_size=12), st.lists(key_row, max_size=12))
def test_key_codes_are_equal_exactly_for_equal_keys_across_tables(a: list[dict[str, Any]],
                                                                   b: list[dict[str, Any]]) -> None:
    codes_a, codes_b = _key_codes(pa.Table.from_pylist(a, schema=KEY_SCHEMA), pa.Table.from_pylist(b, schema=KEY_SCHEMA))
    rows = [(r["topic"], r["partition"]) for r in a + b]
    codes = codes_a.to_pylist() + codes_b.to_pylist()
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (codes[i] == codes[j]) == (rows[i] == rows[j])


fold_row = st.fixed_dictionaries({
    "topic": st.sampled_from(["t1", "t0", "x"]), "partition": st.integers(0, 2), "ord": st.integers(0, 1),
    "zxid": st.integers(0, 4), "_seq": st.integers(0, 1), "event_id": st.sampled_from(["e1", "e0", "e2"]),
})
FOLD_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("ord", pa.int32()), ("zxid", pa.int64()),
                         ("_seq", pa.int32()), ("event_id", pa.string())])


@settings(max_examples=200, deadline=None)
@given(st.lists(fold_row, max_size=20))
def test_fold_order_keeps_keys_together_in_fold_order(rows: list[dict[str, Any]]) -> None:
    order, key = _fold_order(pa.Table.from_pylist(rows, schema=FOLD_SCHEMA))
    ordered = [rows[i] for i in order]
    assert sorted(order.tolist()) == list(range(len(rows)))
    # each (topic, partition) is one contiguous run with one key code, and within it rows follow FOLD_ORDER
    runs: list[tuple[Any, ...]] = []
    for r, k in zip(ordered, key.tolist(), strict=True):
        if not runs or runs[-1][0] != k:
            runs.append((k, (r["topic"], r["partition"]), []))
        assert runs[-1][1] == (r["topic"], r["partition"])
        runs[-1][2].append(tuple(r[c] for c in FOLD_ORDER[2:]))
    assert len({name for _, name, _ in runs}) == len(runs)
    for _, _, within in runs:
        assert within == sorted(within)
