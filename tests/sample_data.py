"""A small, consistent lake story for the users' tests: two controllers (with an overlap), one topic whose
partition 0 went offline and came back, and anomalies (one with a hostile topic name and details)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from collectors.bronze import change_row
from lakehouse import Lake
from models.events import Source, ZnodeChange, ZnodeOp
from models.ids import event_id

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HOSTILE_TOPIC = "<script>alert(1)</script>"
HOSTILE_DETAILS = json.dumps({"note": "</td><img src=x onerror=alert(2)><script>alert(3)</script>", "x": "&amp;"})


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def znode_events() -> list[dict[str, Any]]:
    """The story's ZooKeeper writes, as the transaction-log collector records them: the ``metadata_events`` view
    decodes them (two controllers, partition 0 of orders offline from 120 s to 200 s). The hostile topic name
    holds a ``/``, so no znode can name it: only an anomaly names it."""
    rows: list[dict[str, Any]] = []

    def w(zxid: int, t: float, path: str, op: ZnodeOp, data: Any = None, version: int = 0) -> None:
        payload = data if data is None or isinstance(data, bytes) else json.dumps(data).encode()
        change = ZnodeChange(zxid=zxid, path=path, op=op, data=payload, version=version, txn_time=at(t))
        row = change_row(change, cluster="local", source=Source.TXNLOG, observed_at=at(t))
        rows.append({k: v for k, v in row.items() if k != "cluster"})  # the lake's own, as the other tables

    def state(zxid: int, t: float, p: int, leader: int, epoch: int, isr: list[int], controller_epoch: int,
              version: int) -> None:
        w(zxid, t, f"/brokers/topics/orders/partitions/{p}/state", ZnodeOp.CREATE if version == 0 else ZnodeOp.SET,
          {"controller_epoch": controller_epoch, "leader": leader, "version": 1, "leader_epoch": epoch, "isr": isr},
          version)

    w(1, 0, "/controller", ZnodeOp.CREATE, {"version": 1, "brokerid": 1, "timestamp": "0"})
    w(2, 0, "/controller_epoch", ZnodeOp.SET, b"1")
    w(10, 5, "/brokers/topics/orders", ZnodeOp.CREATE, {"version": 1, "partitions": {"0": [1, 2, 3], "1": [1, 2, 3]}})
    for p in (0, 1):
        state(20 + p, 6, p, 1 + p, 0, [1, 2, 3], 1, 0)
    state(30, 60, 0, 2, 1, [2, 3], 1, 1)
    w(39, 99, "/controller", ZnodeOp.DELETE)
    w(40, 100, "/controller", ZnodeOp.CREATE, {"version": 1, "brokerid": 2, "timestamp": "100000"})
    w(41, 100, "/controller_epoch", ZnodeOp.SET, b"2", 1)
    state(50, 120, 0, -1, 2, [3], 2, 2)
    state(60, 200, 0, 3, 3, [3], 2, 3)
    state(70, 240, 0, 3, 3, [1, 2, 3], 2, 4)
    return rows


def metadata_events() -> list[dict[str, Any]]:
    """What the ``metadata_events`` view shows of the story's ``znode_events``."""
    from lakehouse.arrow_schema import arrow_schema
    from pipelines.decode import metadata_events_of

    rows = [{"cluster": "local", **r} for r in znode_events()]
    return metadata_events_of(pa.Table.from_pylist(rows, schema=arrow_schema("znode_events"))).to_pylist()


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


def all_tables() -> dict[str, list[dict[str, Any]]]:
    return {
        "znode_events": znode_events(),
        "partition_transitions": partition_transitions(),
        "replica_transitions": replica_transitions(),
        "partition_state": partition_state(),
        "controller_tenure": controller_tenure(),
        "anomalies": anomalies(),
    }


def write_story(lake: Lake, tables: dict[str, list[dict[str, Any]]] | None = None) -> None:
    for name, rows in (tables or all_tables()).items():
        lake.append(name, rows, writer_id=f"test:{name}", batch_seq=0)
