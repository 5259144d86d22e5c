"""Anomaly kinds with their default severity (docs/invariants.md says when each fires)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final


class AnomalyKind(StrEnum):
    ILLEGAL_PARTITION_TRANSITION = "ILLEGAL_PARTITION_TRANSITION"
    ILLEGAL_REPLICA_TRANSITION = "ILLEGAL_REPLICA_TRANSITION"
    SPLIT_BRAIN = "SPLIT_BRAIN"
    ZOMBIE_CONTROLLER_WRITE = "ZOMBIE_CONTROLLER_WRITE"
    FENCED_CONTROLLER_WRITE = "FENCED_CONTROLLER_WRITE"
    STALE_CONTROLLER_REQUEST = "STALE_CONTROLLER_REQUEST"
    CONTROLLER_EPOCH_REGRESSION = "CONTROLLER_EPOCH_REGRESSION"
    LEADER_EPOCH_REGRESSION = "LEADER_EPOCH_REGRESSION"
    LEADER_NOT_IN_ISR = "LEADER_NOT_IN_ISR"
    ISR_NOT_SUBSET_OF_REPLICAS = "ISR_NOT_SUBSET_OF_REPLICAS"
    LEADER_NOT_LIVE = "LEADER_NOT_LIVE"
    OFFLINE_PARTITION = "OFFLINE_PARTITION"
    UNCLEAN_LEADER_ELECTION = "UNCLEAN_LEADER_ELECTION"
    NO_ACTIVE_CONTROLLER = "NO_ACTIVE_CONTROLLER"
    FAILED_STATE_CHANGE = "FAILED_STATE_CHANGE"
    DECISION_ZK_DIVERGENCE = "DECISION_ZK_DIVERGENCE"
    COLLECTION_GAP = "COLLECTION_GAP"
    STALE_ZK_VERSION_ISR_UPDATE = "STALE_ZK_VERSION_ISR_UPDATE"  # KAFKA-2729: a leader's ISR write refused


class SplitBrainReason(StrEnum):
    """Why the logs show two controllers at once (``details.reason`` of a SPLIT_BRAIN from the logs)."""

    SAME_EPOCH = "same_epoch"  # two ids claim one controller epoch: one election makes one controller
    OVERLAPPING_TERMS = "overlapping_terms"  # an older epoch's controller still acting after a newer one began


SEVERITY: Final[dict[AnomalyKind, str]] = {
    AnomalyKind.ILLEGAL_PARTITION_TRANSITION: "error",
    AnomalyKind.ILLEGAL_REPLICA_TRANSITION: "error",
    AnomalyKind.SPLIT_BRAIN: "critical",
    AnomalyKind.ZOMBIE_CONTROLLER_WRITE: "critical",
    AnomalyKind.FENCED_CONTROLLER_WRITE: "warning",
    AnomalyKind.STALE_CONTROLLER_REQUEST: "warning",
    AnomalyKind.CONTROLLER_EPOCH_REGRESSION: "critical",
    AnomalyKind.LEADER_EPOCH_REGRESSION: "critical",
    AnomalyKind.LEADER_NOT_IN_ISR: "error",
    AnomalyKind.ISR_NOT_SUBSET_OF_REPLICAS: "error",
    AnomalyKind.LEADER_NOT_LIVE: "error",
    AnomalyKind.OFFLINE_PARTITION: "error",
    AnomalyKind.UNCLEAN_LEADER_ELECTION: "warning",
    AnomalyKind.NO_ACTIVE_CONTROLLER: "critical",
    AnomalyKind.FAILED_STATE_CHANGE: "warning",
    AnomalyKind.DECISION_ZK_DIVERGENCE: "error",
    AnomalyKind.COLLECTION_GAP: "info",
    AnomalyKind.STALE_ZK_VERSION_ISR_UPDATE: "warning",
}


def describe(row: Mapping[str, Any]) -> str:
    """One readable line for an anomaly row (monitor alerts, `zkledger anomalies`, the demo summary)."""
    parts = [f"[{row.get('severity') or '?'}] {row.get('kind')}"]
    when = row.get("event_time")
    if when is not None:
        parts.append(f"at {when.isoformat(sep=' ', timespec='seconds') if hasattr(when, 'isoformat') else when}")
    if row.get("zxid") is not None:
        parts.append(f"zxid={row['zxid']:#x}" if isinstance(row["zxid"], int) else f"zxid={row['zxid']}")
    if row.get("topic") is not None:
        where = f"{row['topic']}-{row['partition']}" if row.get("partition") is not None else str(row["topic"])
        if row.get("replica") is not None:
            where += f" replica {row['replica']}"
        parts.append(where)
    if row.get("broker") is not None:
        parts.append(f"broker {row['broker']}")
    if row.get("controller_id") is not None:
        ctl = f"controller {row['controller_id']}"
        if row.get("controller_epoch") is not None:
            ctl += f" (epoch {row['controller_epoch']})"
        parts.append(ctl)
    line = " ".join(parts)
    summary = _details_summary(row.get("details"))
    if summary:
        line += f": {summary}"
    evidence = row.get("evidence") or []
    if evidence:
        line += f" [evidence: {len(evidence)} event(s), first {evidence[0]}]"
    return line


def _details_summary(details: object) -> str:
    """The 'message' (or a compact key=value list) of an anomaly's JSON details."""
    if details is None:
        return ""
    if isinstance(details, str):
        try:
            details = json.loads(details)
        except ValueError:
            return str(details)[:200]
    if isinstance(details, dict):
        if "message" in details:
            return str(details["message"])[:200]
        return ", ".join(f"{k}={v}" for k, v in list(details.items())[:6])[:200]
    return str(details)[:200]
