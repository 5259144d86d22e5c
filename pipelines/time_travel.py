"""The cluster's metadata as of a zxid or a time, replayed from ``metadata_events`` and ``partition_transitions``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from models.events import MetadataEventType

T = MetadataEventType


def _upto(row: dict[str, Any], zxid: int | None, at: datetime | None) -> bool:
    if zxid is not None:
        return bool(row["zxid"] <= zxid)
    return at is None or (row["event_time"] is not None and row["event_time"] <= at)


def state_at(metadata: Iterable[dict[str, Any]], transitions: Iterable[dict[str, Any]], *,
             zxid: int | None = None, at: datetime | None = None, topic: str | None = None) -> dict[str, Any]:
    """Controller + epoch, live brokers, and per partition leader/ISR/replicas/state up to the point."""
    ctl: dict[str, Any] = {"controller_id": None, "controller_epoch": None}
    live: set[int] = set()
    parts: dict[tuple[str, int], dict[str, Any]] = {}
    # one multi can delete a topic and its partition znodes at one zxid: apply the topic deletion last
    for e in sorted((m for m in metadata if _upto(m, zxid, at)),
                    key=lambda m: (m["zxid"], m["type"] == T.TOPIC_DELETED, m["event_id"])):
        kind = e["type"]
        if kind == T.CONTROLLER_ELECTED:
            ctl["controller_id"] = e["controller_id"]
        elif kind == T.CONTROLLER_RESIGNED:
            ctl["controller_id"] = None
        elif kind == T.CONTROLLER_EPOCH_CHANGED:
            ctl["controller_epoch"] = e["controller_epoch"]
        elif kind in (T.BROKER_REGISTERED, T.BROKER_UPDATED) and e["broker"] is not None:
            live.add(e["broker"])
        elif kind == T.BROKER_DEREGISTERED:
            live.discard(e["broker"])
        elif e["topic"] is None or (topic is not None and e["topic"] != topic):
            continue
        elif kind == T.TOPIC_DELETED:
            for key in [k for k in parts if k[0] == e["topic"]]:
                del parts[key]
        elif e["partition"] is not None and kind in (T.PARTITION_ASSIGNED, T.PARTITION_STATE_WRITTEN):
            p = parts.setdefault((e["topic"], e["partition"]), {"topic": e["topic"], "partition": e["partition"],
                                                                 "leader": None, "leader_epoch": None, "isr": None,
                                                                 "replicas": None, "state": None})
            if kind == T.PARTITION_ASSIGNED:
                p["replicas"] = e["replicas"]
            elif kind == T.PARTITION_STATE_WRITTEN:
                p.update(leader=e["leader"], leader_epoch=e["leader_epoch"], isr=e["isr"])
    for t in sorted((t for t in transitions if _upto(t, zxid, at) and t["legal"]), key=lambda t: (t["zxid"], t["event_id"])):
        key = (t["topic"], t["partition"])
        if key in parts:
            parts[key]["state"] = t["to_state"]
    return {**ctl, "live_brokers": sorted(live), "partitions": [parts[k] for k in sorted(parts)]}
