"""One rebuild over a history where each topic shows exactly one fault: each detector fires exactly there."""

from __future__ import annotations

from typing import Any

from engine.local_run import run_local
from tests.history import History


def _faulty() -> History:
    h = History()
    h.broker(1).broker(2).controller(1, 1)
    for t, parts in {"a": [1, 2], "b": [1, 2], "c": [1, 3], "d": [1, 2], "e": [1, 2], "f": [1, 2]}.items():
        h.topic(t, {0: parts})
    h.state("a", 0, 1, 0, 1, [2], op="CREATE")  # leader not in ISR
    h.state("b", 0, 1, 0, 1, [1, 3], op="CREATE")  # 3 is not assigned
    h.state("c", 0, 3, 0, 1, [3], op="CREATE")  # broker 3 never registered
    h.state("d", 0, 1, 0, 1, [1, 2], op="CREATE").state("d", 0, -1, 1, 1, [1])  # offline
    h.state("e", 0, 1, 0, 1, [1], op="CREATE").state("e", 0, 2, 1, 1, [2])  # unclean: 2 not in ISR [1]
    h.state("f", 0, 1, 5, 1, [1, 2], op="CREATE").state("f", 0, 1, 3, 1, [1, 2])  # epoch went back
    h.state("g", 0, 1, 0, 1, [1], op="CREATE")  # no assignment: NonExistent -> Online
    h.add("/brokers", "GAP", detail="reconnect")  # the txnlog collector's own gap: kept
    h.add("/brokers", "GAP", detail="reconnect", source="watch")  # covered by later txnlog rows: no anomaly
    h.add("/controller_epoch", "MULTI_FAILED", detail="/controller_epoch")
    h.add("/controller_epoch", "SET", b"0")  # regression
    h.add("/controller", "DELETE", seconds=100)
    h.broker(1, op="SET")  # 100+ s later: still no controller
    h.rows[-1]["txn_time"] = h.rows[-1]["observed_at"] = h.rows[-2]["txn_time"].replace(minute=5)
    return h


def test_each_fault_yields_exactly_its_anomaly(lake: Any) -> None:
    lake.append("znode_events", _faulty().rows, writer_id="t", batch_seq=1)
    run_local(lake)
    got = sorted((r["kind"], r["topic"]) for r in lake.read_arrow("anomalies").to_pylist())
    assert got == sorted([
        ("LEADER_NOT_IN_ISR", "a"), ("ISR_NOT_SUBSET_OF_REPLICAS", "b"), ("LEADER_NOT_LIVE", "c"),
        ("OFFLINE_PARTITION", "d"), ("UNCLEAN_LEADER_ELECTION", "e"), ("LEADER_EPOCH_REGRESSION", "f"),
        ("ILLEGAL_PARTITION_TRANSITION", "g"), ("ILLEGAL_REPLICA_TRANSITION", "g"),
        ("ILLEGAL_REPLICA_TRANSITION", "b"),  # replica 3 of b was never assigned
        ("COLLECTION_GAP", None), ("FENCED_CONTROLLER_WRITE", None), ("CONTROLLER_EPOCH_REGRESSION", None),
        ("NO_ACTIVE_CONTROLLER", None),
    ])
    ids = [r["anomaly_id"] for r in lake.read_arrow("anomalies").to_pylist()]
    assert len(set(ids)) == len(ids)
