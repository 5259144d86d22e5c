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
