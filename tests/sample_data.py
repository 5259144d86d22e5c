"""A small, consistent lake story for the users' tests: two controllers (with an overlap), one topic whose
partition 0 went offline and came back, and anomalies (one with a hostile topic name and details)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from lakehouse import Lake
from models.ids import event_id

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HOSTILE_TOPIC = "<script>alert(1)</script>"
HOSTILE_DETAILS = json.dumps({"note": "</td><img src=x onerror=alert(2)><script>alert(3)</script>", "x": "&amp;"})


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def metadata_events() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def ev(zxid: int, t: float, type_: str, **kw: Any) -> None:
        rows.append({"zxid": zxid, "event_time": at(t), "type": type_,
                     "event_id": event_id("local", "meta", zxid, type_, kw.get("topic"), kw.get("partition")), **kw})

    ev(1, 0, "CONTROLLER_ELECTED", controller_id=1)
    ev(2, 0, "CONTROLLER_EPOCH_CHANGED", controller_epoch=1, zk_version=0)
    for p in (0, 1):
        ev(10 + p, 5, "PARTITION_ASSIGNED", topic="orders", partition=p, replicas=[1, 2, 3])
        ev(20 + p, 6, "PARTITION_STATE_WRITTEN", topic="orders", partition=p, leader=1 + p, leader_epoch=0,
           isr=[1, 2, 3], controller_epoch=1)
    ev(12, 5, "PARTITION_ASSIGNED", topic=HOSTILE_TOPIC, partition=0, replicas=[1, 2])
    ev(22, 6, "PARTITION_STATE_WRITTEN", topic=HOSTILE_TOPIC, partition=0, leader=1, leader_epoch=0, isr=[1, 2],
       controller_epoch=1)
    ev(30, 60, "PARTITION_STATE_WRITTEN", topic="orders", partition=0, leader=2, leader_epoch=1, isr=[2, 3],
       controller_epoch=1)
    ev(40, 100, "CONTROLLER_ELECTED", controller_id=2)
    ev(41, 100, "CONTROLLER_EPOCH_CHANGED", controller_epoch=2, zk_version=1)
    ev(50, 120, "PARTITION_STATE_WRITTEN", topic="orders", partition=0, leader=-1, leader_epoch=2, isr=[3],
       controller_epoch=2)
    ev(60, 200, "PARTITION_STATE_WRITTEN", topic="orders", partition=0, leader=3, leader_epoch=3, isr=[3],
       controller_epoch=2)
    ev(70, 240, "PARTITION_STATE_WRITTEN", topic="orders", partition=0, leader=3, leader_epoch=3, isr=[1, 2, 3],
       controller_epoch=2)
    return rows


def _transition(topic: str, p: int, zxid: int, t: float, fr: str, to: str, legal: bool = True) -> dict[str, Any]:
    return {"topic": topic, "partition": p, "zxid": zxid, "event_time": at(t), "from_state": fr, "to_state": to,
            "legal": legal, "cause": "test", "event_id": event_id("local", "pt", topic, p, zxid)}


def partition_transitions() -> list[dict[str, Any]]:
    return [
        _transition("orders", 0, 10, 5, "NonExistentPartition", "NewPartition"),
        _transition("orders", 0, 20, 6, "NewPartition", "OnlinePartition"),
        _transition("orders", 0, 50, 120, "OnlinePartition", "OfflinePartition"),
        _transition("orders", 0, 60, 200, "OfflinePartition", "OnlinePartition"),
        _transition("orders", 1, 11, 5, "NonExistentPartition", "NewPartition"),
        _transition("orders", 1, 21, 6, "NewPartition", "OnlinePartition"),
        _transition(HOSTILE_TOPIC, 0, 12, 5, "NonExistentPartition", "NewPartition"),
        _transition(HOSTILE_TOPIC, 0, 22, 6, "NewPartition", "OnlinePartition"),
    ]


def replica_transitions() -> list[dict[str, Any]]:
    return [
        {"topic": "orders", "partition": 0, "replica": r, "zxid": 10, "event_time": at(5),
         "from_state": "NonExistentReplica", "to_state": "NewReplica", "legal": True,
         "event_id": event_id("local", "rt", "orders", 0, r, 10)}
        for r in (1, 2, 3)
    ]


def controller_tenure() -> list[dict[str, Any]]:
    return [
        {"controller_id": 1, "controller_epoch": 1, "start_zxid": 1, "end_zxid": 45, "start_time": at(0),
         "end_time": at(130), "source": "zk"},
        {"controller_id": 2, "controller_epoch": 2, "start_zxid": 40, "end_zxid": None, "start_time": at(100),
         "end_time": None, "source": "zk"},
    ]


def anomalies() -> list[dict[str, Any]]:
    def an(kind: str, sev: str, t: float, zxid: int, **kw: Any) -> dict[str, Any]:
        return {"anomaly_id": event_id("local", kind, zxid), "kind": kind, "severity": sev, "event_time": at(t),
                "zxid": zxid, "detected_at": at(300), "evidence": [event_id("x", zxid)], **kw}

    return [
        an("SPLIT_BRAIN", "critical", 100, 40, controller_id=2, controller_epoch=2,
           details=json.dumps({"controllers": [1, 2], "overlap_s": 30})),
        an("OFFLINE_PARTITION", "error", 120, 50, topic="orders", partition=0, controller_id=2,
           controller_epoch=2, details=json.dumps({"leader": -1})),
        an("LEADER_EPOCH_REGRESSION", "critical", 6, 22, topic=HOSTILE_TOPIC, partition=0, controller_id=1,
           controller_epoch=1, details=HOSTILE_DETAILS),
    ]


def partition_state() -> list[dict[str, Any]]:
    return [
        {"topic": "orders", "partition": 0, "state": "OnlinePartition", "leader": 3, "leader_epoch": 3,
         "controller_epoch": 2, "isr": [1, 2, 3], "replicas": [1, 2, 3], "as_of_zxid": 70, "event_time": at(240)},
        {"topic": "orders", "partition": 1, "state": "OnlinePartition", "leader": 2, "leader_epoch": 0,
         "controller_epoch": 1, "isr": [1, 2, 3], "replicas": [1, 2, 3], "as_of_zxid": 21, "event_time": at(6)},
    ]


def znode_events() -> list[dict[str, Any]]:
    return [
        {"zxid": z, "path": "/controller", "op": op, "source": "txnlog", "observed_at": at(z),
         "event_id": event_id("local", "txnlog", z, "/controller", op)}
        for z, op in ((1, "CREATE"), (39, "DELETE"), (40, "CREATE"))
    ]


def all_tables() -> dict[str, list[dict[str, Any]]]:
    return {
        "znode_events": znode_events(),
        "metadata_events": metadata_events(),
        "partition_transitions": partition_transitions(),
        "replica_transitions": replica_transitions(),
        "partition_state": partition_state(),
        "controller_tenure": controller_tenure(),
        "anomalies": anomalies(),
    }


def write_story(lake: Lake, tables: dict[str, list[dict[str, Any]]] | None = None) -> None:
    for name, rows in (tables or all_tables()).items():
        lake.append(name, rows, writer_id=f"test:{name}", batch_seq=0)
