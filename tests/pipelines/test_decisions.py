"""Detectors over controller/broker log records (controller_decisions), next to a clean ZooKeeper history."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from engine.rebuild import rebuild
from models.ids import event_id
from tests.history import T0, clean_history

pytestmark = pytest.mark.spark


def _decision(n: int, kind: str, **cols: Any) -> dict[str, Any]:
    return {"ts": T0 + timedelta(seconds=n), "source_file": "controller.log", "line_no": n, "kind": kind,
            "event_id": event_id("test", "controller.log", n), **cols}


def test_log_detectors(spark: Any, lake: Any) -> None:
    lake.append("znode_events", clean_history().rows, writer_id="t", batch_seq=1)
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
