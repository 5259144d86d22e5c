"""Detectors over controller/broker log records (controller_decisions), next to a clean ZooKeeper history."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from engine.rebuild import rebuild
from models.ids import event_id
from pipelines import detectors as D
from tests.history import T0, clean_history

pytestmark = pytest.mark.spark


def _decision(n: int, kind: str, **cols: Any) -> dict[str, Any]:
    return {"ts": T0 + timedelta(seconds=n), "source_file": "controller.log", "line_no": n, "kind": kind,
            "event_id": event_id("test", "controller.log", n), **cols}


def test_log_detectors(spark: Any, lake: Any) -> None:
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
    rebuild(spark, lake)
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
