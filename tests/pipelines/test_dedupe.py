"""``decode.dedupe_table`` against the rule written out in plain Python, on random multi-collector histories."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.decode import SOURCE_RANK, UNKNOWN_SOURCE_RANK, dedupe_table

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCHEMA = pa.schema([("cluster", pa.string()), ("zxid", pa.int64()), ("path", pa.string()), ("op", pa.string()),
                    ("source", pa.string()), ("observed_at", pa.timestamp("us", tz="UTC")), ("event_id", pa.string())])

row = st.fixed_dictionaries({
    "cluster": st.sampled_from(["a", "b"]), "zxid": st.integers(1, 12), "path": st.sampled_from(["/p", "/q", None]),
    "op": st.sampled_from(["SET", "DELETE"]), "source": st.sampled_from(["txnlog", "watch", "resync", "other"]),
    "observed_at": st.one_of(st.none(), st.integers(0, 3).map(lambda s: T0 + timedelta(seconds=s))),
    "event_id": st.text("xyz", min_size=1, max_size=3),
})


def expected(rows: list[dict[str, Any]], txnlog_range: tuple[int, int] | None) -> list[dict[str, Any]]:
    bounds: dict[str, tuple[int, int]] = {}
    for r in rows:
        if r["source"] == "txnlog":
            lo, hi = bounds.get(r["cluster"], (r["zxid"], r["zxid"]))
            bounds[r["cluster"]] = (min(lo, r["zxid"]), max(hi, r["zxid"]))

    def covered(r: dict[str, Any]) -> bool:
        b = bounds.get(r["cluster"])
        in_range = txnlog_range is not None and txnlog_range[0] <= r["zxid"] <= txnlog_range[1]
        return in_range or (b is not None and b[0] <= r["zxid"] <= b[1])

    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in (r for r in rows if r["source"] == "txnlog" or not covered(r)):
        key = (r["cluster"], r["zxid"], r["path"], r["op"])
        rank = (SOURCE_RANK.get(r["source"], UNKNOWN_SOURCE_RANK), r["observed_at"] is not None,
                r["observed_at"] or T0, r["event_id"])
        old = best.get(key)
        if old is None or rank < old["_rank"]:
            best[key] = {**r, "_rank": rank}
    return [{k: v for k, v in r.items() if k != "_rank"} for r in best.values()]


def _canon(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    def norm(v: Any) -> str:
        return repr(v.timestamp() if isinstance(v, datetime) else v)

    return sorted(tuple(norm(r[c]) for c in SCHEMA.names) for r in rows)


@settings(max_examples=300, deadline=None)
@given(st.lists(row, max_size=40), st.one_of(st.none(), st.tuples(st.integers(0, 6), st.integers(6, 9))))
def test_dedupe_table_keeps_one_row_per_change_from_the_best_source(rows: list[dict[str, Any]],
                                                                     txnlog_range: tuple[int, int] | None) -> None:
    got = dedupe_table(pa.Table.from_pylist(rows, schema=SCHEMA), txnlog_range).to_pylist()
    assert _canon(got) == _canon(expected(rows, txnlog_range))
