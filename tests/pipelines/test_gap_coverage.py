"""A watch collector's version gap is covered only where the txnlog delivered the history: between the lowest
and the highest zxid it delivered. Below (files purged, collector started late) and above, the gap is real."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from pipelines.detectors import GAP_COLUMNS, detect_collection_gaps

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _gaps(zxids: list[int]) -> pa.Table:
    rows = [{"cluster": "c", "zxid": z, "path": f"/brokers/ids/{i}", "missed_versions": 2, "source": "watch",
             "observed_at": T0, "event_id": f"g{z}"} for i, z in enumerate(zxids)]
    return pa.Table.from_pylist(rows).select(list(GAP_COLUMNS))


def test_gaps_inside_the_txnlog_range_are_covered_and_outside_it_are_reported() -> None:
    found = detect_collection_gaps(_gaps([5, 10, 50, 100, 500]), (10, 100))
    assert sorted(found["zxid"].to_pylist()) == [5, 500]
    assert set(found["kind"].to_pylist()) == {"COLLECTION_GAP"}


def test_without_a_txnlog_every_gap_is_reported() -> None:
    assert sorted(detect_collection_gaps(_gaps([5, 50]))["zxid"].to_pylist()) == [5, 50]
