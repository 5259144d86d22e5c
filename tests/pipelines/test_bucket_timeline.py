"""A bucket carries its cluster's replayed timeline: a batch without timeline events reads it back rather than
replaying every carried election and broker change, and answers as the replay does."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse import arrow_schema
from lakehouse.spark_schema import spark_arrow_schema
from pipelines.bucket_fold import BUCKET_COLUMN, TXNLOG_COLUMN, BucketState, bucket_step
from pipelines.cluster_stage import StreamPart
from pipelines.controller import GLOBAL_TYPES, replay
from pipelines.keyed_pipeline import META_SEQ, route_znode_rows
from pipelines.state_machines import CONTEXT_POINTS, GlobalContext
from tests.history import History, split_brain_history

TIMELINE_PARTS = ("global_events", "context", "tenure")


def _routed() -> tuple[pa.Table, int]:
    h = split_brain_history()
    h.state("t", 1, 2, 2, 2, [2, 3])  # zxid 16: a write after the broker churn, in a batch of its own
    bronze = pa.Table.from_pylist(h.rows, schema=arrow_schema("znode_events")).cast(spark_arrow_schema("znode_events"))
    events = dict(route_znode_rows(bronze, 1))[StreamPart.EVENTS]
    return events.filter(pc.equal(events[BUCKET_COLUMN], 0)).drop_columns([BUCKET_COLUMN]), h.zxid


def test_the_context_survives_its_table() -> None:
    routed, _ = _routed()
    ctx = replay("test", routed.to_pylist()).ctx
    assert ctx.epoch_zxids and ctx.held_zxids and len(ctx.broker_points) == 3  # every kind of point is there
    table = ctx.to_table()
    assert table.schema == CONTEXT_POINTS
    assert GlobalContext.from_table(table) == ctx
    assert GlobalContext.from_table(GlobalContext().to_table()) == GlobalContext()


def test_a_batch_without_timeline_events_reads_the_carried_replay_back() -> None:
    routed, last = _routed()
    cuts = [0, 10, 12, 13, 15, last]  # elections in the first, zombie writes alone, churn, then a write alone
    carried = replayed = BucketState.empty(META_SEQ)
    found = []
    for lo, hi in pairwise(cuts):
        batch = routed.filter(pc.and_(pc.greater(routed["zxid"], lo), pc.less_equal(routed["zxid"], hi)))
        out, after = bucket_step("test", carried, batch, None, "2.0")
        # the state a checkpoint from before the carried replay holds: the events, not what they gave
        forgotten = dataclasses.replace(replayed, context=CONTEXT_POINTS.empty_table(),
                                        tenure=replayed.tenure.slice(0, 0))
        expected, replayed = bucket_step("test", forgotten, batch, None, "2.0")
        assert out.keys() == expected.keys()
        for name, rows in out.items():
            assert rows.equals(expected[name]), name
        for name in TIMELINE_PARTS:
            assert getattr(after, name).equals(getattr(replayed, name)), name
        if not pc.any(pc.is_in(batch["type"], pa.array(GLOBAL_TYPES))).as_py():  # nothing replayed or rewritten
            assert all(getattr(after, n) is getattr(carried, n) for n in TIMELINE_PARTS)
        found.append(sorted(out["anomalies"]["kind"].to_pylist()))
        carried = after
    # the zombie writes came in batches of their own: their split brain is judged by the carried terms
    assert found[1] == found[2] == ["SPLIT_BRAIN", "ZOMBIE_CONTROLLER_WRITE"]
    assert carried.tenure["controller_id"].to_pylist() == [1, 2]
    assert GlobalContext.from_table(carried.context).broker_points[3] == ([3, 14, 15], [True, False, True])


def test_another_clusters_transaction_log_does_not_vouch_for_a_watchs_row() -> None:
    # two ensembles at the same zxids in one batch: cluster a's /controller DELETE seen by a watch only,
    # cluster b's by its transaction log; a's row must stay a watch's row, which a's own log may supersede
    a, b = History(cluster="a"), History(cluster="b")
    for h, source in ((a, "watch"), (b, "txnlog")):
        h.add("/controller", "CREATE", b'{"version":1,"brokerid":1,"timestamp":"1"}', zxid=7, source=source)
        h.add("/controller", "DELETE", zxid=8, source=source)
    bronze = pa.Table.from_pylist(a.rows + b.rows, schema=arrow_schema("znode_events")).cast(
        spark_arrow_schema("znode_events"))
    events = dict(route_znode_rows(bronze, 1))[StreamPart.EVENTS]
    delivered = {(r["cluster"], r["zxid"]): r[TXNLOG_COLUMN] for r in events.to_pylist()}
    assert delivered == {("a", 7): False, ("a", 8): False, ("b", 7): True, ("b", 8): True}
