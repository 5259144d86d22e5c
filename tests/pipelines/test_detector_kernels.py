"""The detectors' list kernels against plain Python on random lists (nulls included), and one rule end to end."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.detectors import detect_unclean_elections, leader_not_in_isr_mask
from pipelines.list_kernels import list_contains, list_has_duplicates, list_has_outside, member_of_row, padded

ints = st.lists(st.one_of(st.none(), st.integers(-1, 5)), max_size=5)
maybe_list = st.one_of(st.none(), ints)
rows = st.lists(st.tuples(maybe_list, maybe_list, st.one_of(st.none(), st.integers(-1, 5))), max_size=30)


def _lists(values: list[list[int | None] | None]) -> pa.Array:
    return pa.array(values, pa.list_(pa.int32()))


@settings(max_examples=200, deadline=None)
@given(rows)
def test_list_kernels_match_python(data: list[tuple[list[int | None] | None, list[int | None] | None, int | None]]) -> None:
    a, b, v = _lists([r[0] for r in data]), _lists([r[1] for r in data]), pa.array([r[2] for r in data], pa.int32())
    contains = list_contains(a, v).to_pylist()
    outside = list_has_outside(a, b).tolist()
    dupes = list_has_duplicates(a).tolist()
    for i, (la, lb, x) in enumerate(data):
        # Spark's array_contains: null for a null list or value, and for "no match" in a list holding a null
        expected = None if la is None or x is None else True if x in la else None if None in la else False
        assert contains[i] == expected
        # array_except / array_distinct compare a null element like a value
        assert outside[i] == (la is not None and lb is not None and any(e not in lb for e in la))
        assert dupes[i] == (len(set(la or [])) != len(la or []))


def _writes(**cols: list[object]) -> pa.Table:
    n = len(next(iter(cols.values())))
    base: dict[str, list[object]] = {
        "cluster": ["c"] * n, "event_id": [f"e{i}" for i in range(n)], "zxid": list(range(n)),
        "event_time": [datetime(2026, 1, 1, tzinfo=UTC)] * n, "topic": ["t"] * n, "partition": list(range(n)),
        "controller_epoch": [2] * n, "leader_epoch": [1] * n, "replicas": [[1, 2, 3]] * n, "prev_leader": [1] * n,
        "prev_leader_epoch": [0] * n, "cur_controller_epoch": [2] * n, "leader_live": [True] * n,
    }
    base.update(cols)
    return pa.table({k: pa.array(v, pa.list_(pa.int32()) if k in ("isr", "prev_isr", "replicas") else None)
                     for k, v in base.items()})


def test_leader_not_in_isr_flags_a_missing_leader_and_a_null_isr_but_not_a_leaderless_write() -> None:
    w = _writes(leader=[1, 2, 3, -1], isr=[[1, 2], [1, 3], None, [1]], prev_isr=[[1]] * 4)
    got = w.filter(leader_not_in_isr_mask(w))
    assert sorted(got["partition"].to_pylist()) == [1, 2]


def test_unclean_election_needs_a_new_leader_outside_a_known_previous_isr() -> None:
    w = _writes(leader=[2, 3, 3, 1], isr=[[2]] * 4, prev_isr=[[1, 2], [1, 2], None, [2]],
                prev_leader=[1, 1, 1, 1])
    # 0: 2 was in the ISR (clean); 1: 3 was not (unclean); 2: previous ISR unknown; 3: same leader
    assert detect_unclean_elections(w)["partition"].to_pylist() == [1]


@settings(max_examples=200, deadline=None)
@given(st.lists(maybe_list, max_size=30), st.lists(st.tuples(st.integers(0, 29), st.integers(-1, 5)), max_size=40))
def test_member_of_row_matches_python(lists: list[list[int | None] | None], probes: list[tuple[int, int]]) -> None:
    probes = [(r, v) for r, v in probes if r < len(lists)]
    matrix = padded(_lists(lists))
    rows = np.array([r for r, _ in probes], np.int64)
    values = np.array([v for _, v in probes], np.int64)
    got = member_of_row(values, rows, matrix).tolist()
    assert got == [v in (lists[r] or []) for r, v in probes]
