"""Small literal ZooKeeper histories as bronze ``znode_events`` rows (payloads from simulator.payloads)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from models.ids import event_id
from simulator import payloads as zc

V = "2.0"  # a version where zombie writes can land
T0 = datetime(2024, 1, 1, tzinfo=UTC)


class History:
    """Builds znode_events rows with increasing zxids (one change each unless a zxid is given)."""

    def __init__(self, cluster: str = "test") -> None:
        self.cluster = cluster
        self.rows: list[dict[str, Any]] = []
        self.zxid = 0

    def add(self, path: str, op: str, data: bytes | None = None, *, zxid: int | None = None,
            source: str = "txnlog", seconds: float | None = None, **extra: Any) -> History:
        if zxid is None:
            self.zxid += 1
            zxid = self.zxid
        t = T0 + timedelta(seconds=seconds if seconds is not None else zxid)
        row = {"cluster": self.cluster, "zxid": zxid, "path": path, "op": op, "data": data, "source": source,
               "txn_time": t, "observed_at": t, "czxid": zxid, "mzxid": zxid,
               "event_id": event_id(self.cluster, source, zxid, path, op), **extra}
        self.rows.append(row)
        return self

    def broker(self, b: int, op: str = "CREATE") -> History:
        data = zc.encode_broker_registration(b, f"h{b}", 9092, V) if op != "DELETE" else None
        return self.add(f"/brokers/ids/{b}", op, data)

    def controller(self, b: int, epoch: int, **kw: Any) -> History:
        self.add("/controller", "CREATE", zc.encode_controller(b, 0, V), **kw)
        return self.add("/controller_epoch", "SET", zc.encode_controller_epoch(epoch), **kw)

    def topic(self, t: str, parts: dict[int, list[int]]) -> History:
        return self.add(f"/brokers/topics/{t}", "CREATE", zc.encode_topic_assignment(parts, V))

    def state(self, t: str, p: int, leader: int, le: int, ce: int, isr: list[int], op: str = "SET",
              **kw: Any) -> History:
        data = zc.encode_partition_state(leader, le, ce, isr, V)
        return self.add(f"/brokers/topics/{t}/partitions/{p}/state", op, data, **kw)


def clean_history() -> History:
    """Two brokers, one controller, one topic with one partition elected once then an ISR change."""
    h = History()
    h.broker(1).broker(2).controller(1, 1)
    h.topic("t", {0: [1, 2]})
    h.state("t", 0, 1, 0, 1, [1, 2], op="CREATE")
    h.state("t", 0, 1, 0, 1, [1])  # leader shrinks the ISR
    h.state("t", 0, 1, 0, 1, [1, 2])
    return h


def decision(seconds: float, kind: str, *, source_file: str = "controller.log", line_no: int | None = None,
             cluster: str = "test", **cols: Any) -> dict[str, Any]:
    """One controller_decisions row logged ``seconds`` after T0 (line number defaults to the milliseconds)."""
    line = line_no if line_no is not None else int(seconds * 1000)
    return {"cluster": cluster, "ts": T0 + timedelta(seconds=seconds), "source_file": source_file, "line_no": line,
            "kind": kind, "event_id": event_id(cluster, source_file, 0, line), **cols}


def zombie_offline_history() -> History:
    """The clean history, then a failover to controller 2, a zombie write of controller 1, an offline partition."""
    h = clean_history()
    h.controller(2, 2)
    h.state("t", 0, 2, 1, 2, [2])
    h.state("t", 0, 1, 2, 1, [1, 2])  # zombie write
    h.state("t", 0, -1, 3, 2, [1])  # offline
    return h


def split_brain_history() -> History:
    """Controller 1 (epoch 1) is replaced by 2 (epoch 2) but writes twice more; then 2 resigns, stays
    /controller, and a broker leaves with no controller reaction (with `split_brain_log`)."""
    h = History()
    h.broker(1).broker(2).broker(3).controller(1, 1)  # zxid 1-5
    h.topic("t", {0: [1, 2, 3], 1: [1, 2, 3]})
    h.state("t", 0, 1, 0, 1, [1, 2, 3], op="CREATE").state("t", 1, 2, 0, 1, [1, 2, 3], op="CREATE")
    h.controller(2, 2)  # zxid 9-10
    h.state("t", 0, 2, 1, 2, [2, 3])
    h.state("t", 0, 3, 2, 1, [2, 3])  # zxid 12: zombie write (epoch 1 after epoch 2)
    h.state("t", 1, 3, 1, 1, [1, 2, 3])  # zxid 13: the same zombie again, another partition
    h.broker(3, op="DELETE")  # zxid 14, 14 s: churn while /controller still names 2
    h.broker(3)  # zxid 15: more churn, still the same finding
    return h


def split_brain_log() -> list[dict[str, Any]]:
    """Controller 2's log: ready at epoch 2, then resigned (the KAFKA-13407 shape with `split_brain_history`)."""
    return [decision(10.5, "CONTROLLER_READY", controller_id=2, controller_epoch=2, broker_id=2),
            decision(12.5, "CONTROLLER_RESIGNED", controller_id=2, broker_id=2)]


def recluster(rows: list[dict[str, Any]], cluster: str) -> list[dict[str, Any]]:
    """``rows`` built here (znode_events or controller_decisions) for another cluster: the cluster column and
    the event ids, which name it (two clusters' copies of one history then share no id)."""
    out = []
    for r in rows:
        if "zxid" in r:
            eid = event_id(cluster, r["source"], r["zxid"], r["path"], r["op"])
        else:
            eid = event_id(cluster, r["source_file"], 0, r["line_no"])
        out.append({**r, "cluster": cluster, "event_id": eid})
    return out
