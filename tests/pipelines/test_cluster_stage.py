"""A cluster's stage of the stateful query (``pipelines.cluster_stage``): what it carries between micro-batches."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from models.anomalies import AnomalyKind
from models.events import Source
from pipelines import bucket_fold
from pipelines.bucket_fold import (
    CLUSTER_STAGE,
    RECENT_IDS,
    TXNLOG_COLUMN,
    TXNLOG_RANGE,
    first_seen,
    range_bounds,
)
from pipelines.cluster_stage import ClusterState, StreamPart, cluster_step
from pipelines.detectors import GAP_COLUMNS

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _gap(zxid: int, source: Source = Source.WATCH) -> pa.Table:
    row = {"cluster": "c", "zxid": zxid, "path": "/brokers/topics/t/partitions/0/state", "missed_versions": 2,
           "source": str(source), "observed_at": T0, "event_id": f"gap-{zxid}"}
    return pa.Table.from_pylist([row]).select(list(GAP_COLUMNS))


def _empty_state() -> ClusterState:
    return ClusterState.empty(pa.schema([pa.field(c, pa.string() if c in ("cluster", "path", "event_id", "type",
                                                                         "detail") else pa.int64())
                                         for c in bucket_fold.GLOBAL_COLUMNS if c != "event_time"]
                                        + [pa.field("event_time", pa.timestamp("us", tz="UTC"))]))


def test_a_watch_gap_inside_the_txnlog_range_of_an_earlier_batch_is_not_an_anomaly() -> None:
    _, state = cluster_step("c", _empty_state(), {StreamPart.TXNLOG: pa.table({"lo": [100], "hi": [200]}, TXNLOG_RANGE)})
    assert range_bounds(state.txnlog) == (100, 200)
    state = ClusterState.from_bytes(state.to_bytes())  # as Spark's state store gives it back
    covered, state = cluster_step("c", state, {StreamPart.GAPS: _gap(150)})
    outside, _ = cluster_step("c", state, {StreamPart.GAPS: _gap(250)})
    assert covered["anomalies"].num_rows == 0
    assert outside["anomalies"]["kind"].to_pylist() == [str(AnomalyKind.COLLECTION_GAP)]


def _read(zxids: list[int], ids: list[str], from_log: bool = False) -> pa.Table:
    return pa.table({"zxid": pa.array(zxids, pa.int64()), "event_id": ids, TXNLOG_COLUMN: [from_log] * len(ids)})


NO_LOG = TXNLOG_RANGE.empty_table()


def _log_range(lo: int, hi: int) -> pa.Table:
    return pa.table({"lo": [lo], "hi": [hi]}, TXNLOG_RANGE)


def test_reads_the_log_has_covered_are_forgotten_after_their_batch() -> None:
    _, recent = first_seen(_read([5, 6, 9], ["a", "b", "c"]), RECENT_IDS.empty_table(), NO_LOG)
    # the log delivers zxids 1..6 (its copy of "a" among them) in the next batch: that copy is still dropped,
    # then the reads it covers are forgotten; "c", beyond the log, is kept
    kept, recent = first_seen(_read([5, 4], ["a", "x"], from_log=True), recent, _log_range(1, 6))
    assert kept["event_id"].to_pylist() == ["x"]
    assert recent["event_id"].to_pylist() == ["c"]
    _, recent = first_seen(_read([12], ["d"]), recent, _log_range(1, 9))
    assert recent["event_id"].to_pylist() == ["d"]


def test_a_change_seen_twice_is_kept_once_across_batches() -> None:
    kept, recent = first_seen(_read([5, 5, 6], ["a", "a", "b"]), RECENT_IDS.empty_table(), NO_LOG)
    assert kept["event_id"].to_pylist() == ["a", "b"]
    later, _ = first_seen(_read([5, 7], ["a", "c"], from_log=True), recent, NO_LOG)
    assert later["event_id"].to_pylist() == ["c"]  # the log's copy of a change a watch read first, a batch later


def test_the_logs_events_are_not_remembered_and_reads_only_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    _, recent = first_seen(_read([1, 2], ["l1", "l2"], from_log=True), RECENT_IDS.empty_table(), NO_LOG)
    assert recent.num_rows == 0  # the log delivers a zxid once; a read of it is dropped by its range
    monkeypatch.setattr(bucket_fold, "RECENT_IDS_PER_KEY", 3)
    _, recent = first_seen(_read(list(range(10)), [f"e{i}" for i in range(10)]), RECENT_IDS.empty_table(), NO_LOG)
    assert sorted(recent["zxid"].to_pylist()) == [7, 8, 9]


def test_a_multi_read_by_both_collectors_in_different_batches_is_one_event() -> None:
    """Kafka registers a broker with one multi (create, then set): the transaction log has both rows, a watch one
    create with the payload, under another event id. Whichever batch the watch's copy arrives in after the log's,
    only the log's event is kept, by the cluster's stage and by the metadata_events view."""
    from engine.local_run import LocalRunner
    from lakehouse.spark_schema import spark_arrow_schema
    from pipelines.decode import metadata_events_of
    from simulator import payloads as zc
    from tests.history import History

    h = History()
    h.broker(2)
    payload = zc.encode_broker_registration(1, "h1", 9092, "3.8")
    h.add("/brokers/ids/1", "CREATE", b"", zxid=2, version=0)
    h.add("/brokers/ids/1", "SET", payload, zxid=2, version=1)
    h.add("/brokers/ids/1", "CREATE", payload, zxid=2, source="watch", version=1)
    schema = spark_arrow_schema("znode_events")
    rows = [{k: {**r, "cluster": "c"}.get(k) for k in schema.names} for r in h.rows]
    no_decisions = spark_arrow_schema("controller_decisions").empty_table()

    def registrations(batches: list[list[dict[str, object]]]) -> list[str]:
        runner = LocalRunner(buckets=4)
        for b in batches:
            runner.step(pa.Table.from_pylist(b, schema=schema), no_decisions)
        stage = runner.states[("c", CLUSTER_STAGE)]
        assert isinstance(stage, ClusterState)
        return [e["event_id"] for e in stage.global_events.to_pylist() if e["path"] == "/brokers/ids/1"]

    together = registrations([rows])
    assert len(together) == 1
    view = metadata_events_of(pa.Table.from_pylist(rows, schema=schema)).to_pylist()
    assert [e["event_id"] for e in view if e["path"] == "/brokers/ids/1"] == together  # the view keeps the same
    assert registrations([rows[:-1], rows[-1:]]) == together  # the watch's copy a batch after the log's
