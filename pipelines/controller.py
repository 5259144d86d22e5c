"""The cluster-wide timeline (controller, controller epoch, live brokers), replayed on the driver.

These events are few (elections, broker (de)registrations), so the whole timeline - committed history
plus the increment - is replayed in zxid order every increment. That makes ``rebuild`` and ``monitor``
agree by construction. Anomalies found here carry the id of the event that triggered them, and an
increment keeps only those triggered by its own events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from models.anomalies import SEVERITY, AnomalyKind
from models.ids import event_id
from pipelines.state_machines import GlobalContext

GLOBAL_TYPES = (
    "CONTROLLER_ELECTED", "CONTROLLER_RESIGNED", "CONTROLLER_EPOCH_CHANGED", "BROKER_REGISTERED",
    "BROKER_UPDATED", "BROKER_DEREGISTERED", "CONTROLLER_WRITE_FENCED", "COLLECTION_GAP",
)

# NO_ACTIVE_CONTROLLER: how long /controller may be absent (a normal re-election takes well under a second).
DEFAULT_NO_CONTROLLER_THRESHOLD = timedelta(seconds=30)


@dataclass
class Timeline:
    """Replay result: context for the per-key fold, zk controller terms, anomalies with trigger ids."""

    ctx: GlobalContext
    tenure: list[dict[str, Any]] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)


def anomaly(cluster: str, kind: AnomalyKind, evidence: Sequence[str], row: dict[str, Any],
            details: dict[str, Any], **cols: Any) -> dict[str, Any]:
    """One anomalies row; the id depends only on kind and evidence (deterministic across runs)."""
    out: dict[str, Any] = {
        "cluster": cluster, "anomaly_id": event_id(cluster, str(kind), *evidence), "kind": str(kind),
        "severity": SEVERITY[kind], "event_time": row.get("event_time"), "zxid": row.get("zxid"),
        "detected_at": row.get("event_time"), "details": json.dumps(details, sort_keys=True, default=str),
        "evidence": list(evidence),
    }
    for c in ("topic", "partition", "replica", "broker", "controller_id", "controller_epoch"):
        out[c] = cols.get(c, row.get(c))
    return out


def replay(cluster: str, events: Iterable[dict[str, Any]],
           no_controller_threshold: timedelta = DEFAULT_NO_CONTROLLER_THRESHOLD) -> Timeline:
    """Replay global metadata events (sorted here by zxid, path, event_id) into context, terms, anomalies."""
    ordered = sorted(events, key=lambda e: (e["zxid"], e.get("_seq") or 0, e.get("path") or "", e["event_id"]))
    tl = Timeline(GlobalContext())
    max_epoch: int | None = None
    term: dict[str, Any] | None = None
    absent_since: dict[str, Any] | None = None  # the resign event while /controller is missing
    absent_flagged = False
    for e in ordered:
        kind, z = e["type"], e["zxid"]
        if absent_since is not None and not absent_flagged and _too_long(absent_since, e, no_controller_threshold):
            tl.anomalies.append(_no_controller(cluster, absent_since, e))
            absent_flagged = True
        if kind == "CONTROLLER_EPOCH_CHANGED" and e.get("controller_epoch") is not None:
            epoch = int(e["controller_epoch"])
            if max_epoch is not None and epoch < max_epoch:
                tl.anomalies.append({**anomaly(cluster, AnomalyKind.CONTROLLER_EPOCH_REGRESSION, [e["event_id"]], e,
                                               {"epoch": epoch, "previous_max": max_epoch}), "_trigger": e["event_id"]})
            max_epoch = epoch if max_epoch is None else max(max_epoch, epoch)
            tl.ctx.epoch_zxids.append(z)
            tl.ctx.epoch_values.append(epoch)
            if term is not None and term["controller_epoch"] is None:
                term["controller_epoch"] = epoch
        elif kind == "CONTROLLER_ELECTED":
            if term is not None:
                _close(term, e)
            term = {"cluster": cluster, "controller_id": e.get("controller_id"), "controller_epoch": None,
                    "start_zxid": z, "end_zxid": None, "start_time": e.get("event_time"), "end_time": None,
                    "source": "zk"}
            # 2.1+ writes /controller_epoch in the same multi, <=2.0 right after: the next epoch is this term's
            if tl.ctx.epoch_zxids and tl.ctx.epoch_zxids[-1] == z:
                term["controller_epoch"] = tl.ctx.epoch_values[-1]
            tl.tenure.append(term)
            absent_since, absent_flagged = None, False
        elif kind == "CONTROLLER_RESIGNED":
            if term is not None:
                _close(term, e)
                term = None
            absent_since, absent_flagged = e, False
        elif kind in ("BROKER_REGISTERED", "BROKER_UPDATED", "BROKER_DEREGISTERED") and e.get("broker") is not None:
            zs, lives = tl.ctx.broker_points.setdefault(int(e["broker"]), ([], []))
            zs.append(z)
            lives.append(kind != "BROKER_DEREGISTERED")
        elif kind == "CONTROLLER_WRITE_FENCED":
            tl.anomalies.append({**anomaly(cluster, AnomalyKind.FENCED_CONTROLLER_WRITE, [e["event_id"]], e,
                                           {"path": e.get("path"), "detail": e.get("detail")}), "_trigger": e["event_id"]})
        elif kind == "COLLECTION_GAP":
            tl.anomalies.append({**anomaly(cluster, AnomalyKind.COLLECTION_GAP, [e["event_id"]], e,
                                           {"path": e.get("path"), "detail": e.get("detail")}), "_trigger": e["event_id"]})
    return tl


def _close(term: dict[str, Any], e: dict[str, Any]) -> None:
    term["end_zxid"] = e["zxid"]
    term["end_time"] = e.get("event_time")


def _too_long(since: dict[str, Any], e: dict[str, Any], threshold: timedelta) -> bool:
    t0: datetime | None = since.get("event_time")
    t1: datetime | None = e.get("event_time")
    return t0 is not None and t1 is not None and t1 - t0 > threshold


def _no_controller(cluster: str, since: dict[str, Any], trigger: dict[str, Any]) -> dict[str, Any]:
    """/controller missing for longer than the threshold, seen at the first later event past it."""
    gap = (trigger["event_time"] - since["event_time"]).total_seconds()
    row = anomaly(cluster, AnomalyKind.NO_ACTIVE_CONTROLLER, [since["event_id"]], since,
                  {"reason": "no /controller", "absent_seconds_at_least": gap, "seen_at_zxid": trigger["zxid"]})
    return {**row, "_trigger": trigger["event_id"]}
