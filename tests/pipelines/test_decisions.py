"""Detectors over controller/broker log records (controller_decisions), next to a clean ZooKeeper history."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.local_run import run_local
from lakehouse import arrow_schema
from lakehouse.spark_schema import spark_arrow_schema
from models.ids import event_id
from pipelines import detectors as D
from pipelines.bucket_fold import BUCKET_COLUMN, TICK_STATE, BucketState, bucket_step, bucket_tick, zk_times
from pipelines.cluster_stage import StreamPart
from pipelines.keyed_pipeline import META_SEQ, route_znode_rows
from tests.history import T0, History, clean_history, decision


def _decision(n: int, kind: str, **cols: Any) -> dict[str, Any]:
    return {"ts": T0 + timedelta(seconds=n), "source_file": "controller.log", "line_no": n, "kind": kind,
            "event_id": event_id("test", "controller.log", n), **cols}


def test_log_detectors(lake: Any) -> None:
    history = clean_history()
    history.state("t", 0, 1, 0, 1, [1, 2], seconds=60)  # ZooKeeper's history runs on: the decisions settle
    lake.append("znode_events", history.rows, writer_id="t", batch_seq=1)
    lake.append("controller_decisions", [
        _decision(1, "PARTITION_TRANSITION_FAILED", topic="t", partition=0),
        _decision(2, "STALE_CONTROLLER_REQUEST", broker_id=2),
        _decision(3, "INVALID_TRANSITION", topic="t", partition=0, replica=2,
                  from_state="ReplicaDeletionSuccessful", to_state="ReplicaDeletionIneligible"),
        _decision(4, "PARTITION_TRANSITION", topic="t", partition=0, from_state="OfflinePartition",
                  to_state="OnlinePartition", leader=9, leader_epoch=9),
        _decision(5, "PARTITION_TRANSITION", topic="t", partition=0, from_state="NewPartition",
                  to_state="OnlinePartition", leader=1, leader_epoch=0),  # matches ZK: no divergence
        _decision(10, "EPOCH_INCREMENTED", controller_id=1, controller_epoch=1),
        _decision(20, "EPOCH_INCREMENTED", controller_id=2, controller_epoch=2),
        _decision(50, "PARTITION_TRANSITION", controller_id=1, controller_epoch=1, topic="t", partition=0,
                  from_state="OnlinePartition", to_state="OnlinePartition"),  # old controller still acting
    ], writer_id="d", batch_seq=1)
    run_local(lake)
    got = sorted(r["kind"] for r in lake.read_arrow("anomalies").to_pylist())
    # the invalid transition is also a failed state change (its cause is the illegal step)
    assert got == ["DECISION_ZK_DIVERGENCE", "FAILED_STATE_CHANGE", "FAILED_STATE_CHANGE",
                   "ILLEGAL_REPLICA_TRANSITION", "SPLIT_BRAIN", "STALE_CONTROLLER_REQUEST"]
    terms = {(r["controller_id"], r["controller_epoch"], r["source"]) for r in lake.read_arrow("controller_tenure").to_pylist()}
    assert {(1, 1, "logs"), (2, 2, "logs"), (1, 1, "zk")} <= terms


def _online(n: float, leader: int, epoch: int) -> dict[str, Any]:
    return {**_decision(int(n), "PARTITION_TRANSITION", topic="t", partition=0, from_state="OfflinePartition",
                        to_state="OnlinePartition", leader=leader, leader_epoch=epoch), "cluster": "test"}


def _micros(seconds: float) -> int:
    return int((T0 + timedelta(seconds=seconds)).timestamp() * 1_000_000)


def test_a_decision_waits_until_zookeeper_has_run_past_it() -> None:
    logged = pa.Table.from_pylist([_online(4, 1, 1), _online(5, 2, 2)], schema=D.PENDING_DECISIONS)
    none = D.PENDING_DECISIONS.empty_table()
    settle = D.DECISION_SETTLE.total_seconds()
    # ZooKeeper seen up to the decisions' own time: both wait (their writes may still be on their way)
    settled, pending = D.settle_decisions(none, logged, _micros(5))
    assert (settled.num_rows, pending["line_no"].to_pylist()) == (0, [4, 5])
    # no ZooKeeper event yet: they wait too
    assert D.settle_decisions(none, logged, None)[1].num_rows == 2
    # ZooKeeper's history past the first by DECISION_SETTLE: that one is checked, the other carried on
    settled, pending = D.settle_decisions(pending, none, _micros(4 + settle))
    assert (settled["line_no"].to_pylist(), pending["line_no"].to_pylist()) == ([4], [5])
    # checked against the writes known then: (1, 1) written, (2, 2) never
    writes = pa.Table.from_pylist([{"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 1}],
                                  schema=D.ZK_WRITE_SCHEMA)
    assert D.detect_decision_zk_divergence(settled, writes).num_rows == 0
    settled, pending = D.settle_decisions(pending, none, _micros(60))
    found = D.detect_decision_zk_divergence(settled, writes)
    assert (found["kind"].to_pylist(), pending.num_rows) == (["DECISION_ZK_DIVERGENCE"], 0)


def test_only_decisions_with_a_leader_and_epoch_wait() -> None:
    logged = pa.Table.from_pylist([_online(4, 1, 1),
                                   {**_decision(6, "PARTITION_TRANSITION_FAILED", topic="t", partition=0), "cluster": "test"}],
                                  schema=D.PENDING_DECISIONS)
    settled, pending = D.settle_decisions(D.PENDING_DECISIONS.empty_table(), logged, None)
    assert (settled.num_rows, pending["line_no"].to_pylist()) == (0, [4])


KEPT = D.ZK_WRITES_KEPT_EPOCHS


def _writes(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(D.ZK_WRITE_COLUMNS, r, strict=True)) for r in rows], schema=D.ZK_WRITE_SCHEMA)


def _rows(t: pa.Table) -> set[tuple[Any, ...]]:
    return set(zip(*(t[c].to_pylist() for c in D.ZK_WRITE_COLUMNS), strict=True))


def _leaderships(topic: str, partition: int, epochs: range) -> list[tuple[Any, ...]]:
    """One leadership per epoch, leaders 1, 2, 3 in turn."""
    return [(topic, partition, 1 + e % 3, e) for e in epochs]


def test_each_partition_keeps_its_newest_leader_epochs() -> None:
    many = _leaderships("t", 0, range(KEPT + 8))
    few = _leaderships("t", 1, range(5))
    exact = _leaderships("u", 0, range(KEPT))
    tie = [("t", 0, 9, 8)]  # epoch 8 at the cut twice (leaders 3 and 9): the higher leader is kept
    repeats = many[-3:] + few[:2]  # ISR changes rewrite a leadership
    partial = [("t", 0, None, 99), ("t", 0, 1, None), ("t", None, 1, 99)]  # never match a decision
    kept = D.distinct_writes(_writes(many + few + exact + tie + repeats + partial))
    assert _rows(kept) == set(_leaderships("t", 0, range(9, KEPT + 8))) | {("t", 0, 9, 8)} | set(few) | set(exact)
    assert kept.num_rows == KEPT + 5 + KEPT  # one row each, partial rows dropped
    assert _rows(D.distinct_writes(kept)) == _rows(kept)  # idempotent


def test_keeping_the_newest_epochs_composes_over_any_split() -> None:
    rng = np.random.default_rng(7)
    n = 5_000
    all_rows = _writes([(f"t{t}", int(p), int(leader), int(e)) for t, p, leader, e in zip(
        rng.integers(0, 3, n), rng.integers(0, 4, n), rng.integers(0, 4, n), rng.integers(0, 60, n), strict=True)])
    whole = _rows(D.distinct_writes(all_rows))
    assert 0 < len(whole) < n
    for cut in (0, 1, 100, 2_500, n - 1, n):
        a, b = all_rows.slice(0, cut), all_rows.slice(cut)
        assert _rows(D.distinct_writes(pa.concat_tables([D.distinct_writes(a), b]))) == whole
    order = pa.array(rng.permutation(n))
    assert _rows(D.distinct_writes(all_rows.take(order))) == whole


def _lines(found: pa.Table) -> list[int]:
    """The flagged decisions' line numbers (from the anomalies' details)."""
    return sorted(json.loads(d)["line_no"] for d in found["details"].to_pylist()) if found.num_rows else []


def test_a_decision_older_than_the_kept_epochs_is_not_judged() -> None:
    full = _leaderships("t", 0, range(40))  # kept: epochs 8..39, floor 8
    short = _leaderships("t", 1, range(10))  # all ten kept
    rows = [
        _online(1, 1 + 39 % 3, 39),  # the newest: ZooKeeper held it
        _online(2, 9, 20),  # never held, above the floor: divergent
        _online(3, 9, 8),  # never held, at the floor of a full window: beyond judgement
        _online(4, 9, 3),  # below it
        _online(5, 1 + 3 % 3, 3),  # held once, no longer kept: not flagged either
        {**_online(6, 9, 3), "partition": 1},  # never held, the window not full: divergent
        {**_online(7, 1 + 3 % 3, 3), "partition": 1},  # held
    ]
    settled = pa.Table.from_pylist(rows, schema=D.PENDING_DECISIONS)
    raw = _writes(full + short + full[10:])  # as the fold gives them, repeats included
    carried, batch = D.distinct_writes(_writes(full[:30] + short)), _writes(full[30:] + full[35:])
    for writes in (raw, D.distinct_writes(raw), pa.concat_tables([batch, carried])):
        found = D.detect_decision_zk_divergence(settled, writes)
        assert _lines(found) == [2, 6]
        assert set(found["kind"].to_pylist()) == {"DECISION_ZK_DIVERGENCE"}
    # with only the writes up to epoch 30, t-0's floor is lower (epochs 0..30, 31 rows: not full): all judged
    found = D.detect_decision_zk_divergence(settled, _writes(full[:31] + short))
    assert _lines(found) == [1, 2, 3, 4, 6]


def _bronze_leader_changes(changes: int) -> History:
    h = History()
    h.broker(1).broker(2).broker(3).controller(1, 1)
    h.topic("t", {0: [1, 2, 3]})
    for e in range(changes):
        h.state("t", 0, 1 + e % 3, e, 1, [1, 2, 3], op="CREATE" if e == 0 else "SET")
    return h


def test_a_buckets_carried_writes_stay_bounded_over_many_leader_changes() -> None:
    changes = 4 * KEPT
    h = _bronze_leader_changes(changes)
    bronze = pa.Table.from_pylist(h.rows, schema=arrow_schema("znode_events"))
    parts = dict(route_znode_rows(bronze.cast(spark_arrow_schema("znode_events")), 1))
    routed = parts[StreamPart.EVENTS].filter(pc.equal(parts[StreamPart.EVENTS][BUCKET_COLUMN], 0)).drop_columns(
        [BUCKET_COLUMN])
    state = BucketState.empty(META_SEQ)
    cuts = np.linspace(0, h.zxid, 9).astype(int)  # eight micro-batches by zxid
    newest = 1 + (changes - 1) % 3
    logged = pa.Table.from_pylist([  # logged at 1 s, delivered with the last batch: settled at once
        decision(1, "PARTITION_TRANSITION", line_no=1, topic="t", partition=0, to_state="OnlinePartition",
                 leader=newest, leader_epoch=changes - 1),  # held by the last batch
        decision(1, "PARTITION_TRANSITION", line_no=2, topic="t", partition=0, to_state="OnlinePartition",
                 leader=9, leader_epoch=changes - 2),  # never held, within the window
        decision(1, "PARTITION_TRANSITION", line_no=3, topic="t", partition=0, to_state="OnlinePartition",
                 leader=9, leader_epoch=2),  # never held, long before the window
    ], schema=D.PENDING_DECISIONS)
    found = []
    for i, (lo, hi) in enumerate(pairwise(cuts)):
        batch = routed.filter(pc.and_(pc.greater(routed["zxid"], lo), pc.less_equal(routed["zxid"], hi)))
        last = i == len(cuts) - 2
        out, state = bucket_step("test", state, batch, logged if last else None, "2.0",
                                 zk_times(batch, 1).drop_columns([BUCKET_COLUMN]))
        so_far = sorted(set(routed.filter(pc.less_equal(routed["zxid"], hi))["leader_epoch"].drop_null().to_pylist()))
        assert sorted(state.zk_writes["leader_epoch"].to_pylist()) == so_far[-KEPT:]  # at most KEPT rows, the newest
        found += out["anomalies"].filter(pc.equal(out["anomalies"]["kind"], "DECISION_ZK_DIVERGENCE")).to_pylist()
    assert sorted(state.zk_writes["leader_epoch"].to_pylist()) == list(range(changes - KEPT, changes))
    assert _lines(pa.Table.from_pylist(found)) == [2]


def test_advancing_the_carried_writes_windows_only_the_partitions_written() -> None:
    rng = np.random.default_rng(7)

    def writes(n: int) -> pa.Table:
        return pa.table({"topic": pa.array([f"t{i}" for i in rng.integers(0, 3, n)]),
                         "partition": pa.array(rng.integers(0, 40, n), pa.int32()),
                         "leader": pa.array(rng.integers(0, 3, n), pa.int32()),
                         "leader_epoch": pa.array(rng.integers(0, 3 * KEPT, n), pa.int32())}, schema=D.ZK_WRITE_SCHEMA)

    carried, seen = D.ZK_WRITE_SCHEMA.empty_table(), []
    for n in (0, 900, 3, 0, 400, 1, 2000):  # a batch that writes nothing leaves the carried rows as they were
        batch = writes(n)
        seen.append(batch)
        advanced = D.advanced_writes(carried, batch)
        assert n or advanced is carried
        whole = D.distinct_writes(pa.concat_tables(seen))
        assert advanced.num_rows == whole.num_rows
        assert advanced.sort_by([(c, "ascending") for c in D.ZK_WRITE_COLUMNS]).equals(
            whole.sort_by([(c, "ascending") for c in D.ZK_WRITE_COLUMNS]))
        carried = advanced
    assert carried.num_rows < sum(t.num_rows for t in seen)  # the windows did drop rows


def _ticked(state: BucketState, zk_time: pa.Table | None, txnlog: pa.Table | None) -> BucketState | None:
    changed = bucket_tick({n: getattr(state, n) for n in TICK_STATE}, zk_time, txnlog)
    return None if changed is None else dataclasses.replace(state, **changed)


def test_a_batch_of_ticks_moves_the_clock_and_range_as_the_whole_step_would() -> None:
    h = _bronze_leader_changes(3)
    bronze = pa.Table.from_pylist(h.rows, schema=arrow_schema("znode_events")).cast(spark_arrow_schema("znode_events"))
    parts = dict(route_znode_rows(bronze, 1))
    events = parts[StreamPart.EVENTS].drop_columns([BUCKET_COLUMN])
    _, state = bucket_step("test", BucketState.empty(META_SEQ), events, None, "2.0")
    clock = pa.table({"zk_time": pa.array([_micros(30)], pa.int64())})
    txnlog = pa.table({"lo": pa.array([1], pa.int64()), "hi": pa.array([h.zxid + 5], pa.int64())})
    nothing = META_SEQ.empty_table()
    for zk_time, txn in ((clock, None), (None, txnlog), (clock, txnlog), (None, None)):
        out, stepped = bucket_step("test", state, nothing, None, "2.0", zk_time, txn)
        assert all(t.num_rows == 0 for t in out.values())
        ticked = _ticked(state, zk_time, txn)
        assert ticked is not None
        for name in (*TICK_STATE, "partition_state", "zk_writes", "recent_ids"):
            assert getattr(ticked, name).equals(getattr(stepped, name)), name
    assert _ticked(state, None, None) == state  # nothing moved: nothing to write


def test_a_tick_to_a_bucket_with_a_decision_waiting_runs_the_whole_step() -> None:
    waiting = pa.Table.from_pylist([_online(4, 1, 1)], schema=D.PENDING_DECISIONS)
    state = dataclasses.replace(BucketState.empty(META_SEQ), pending_decisions=waiting)
    assert _ticked(state, pa.table({"zk_time": pa.array([_micros(60)], pa.int64())}), None) is None
