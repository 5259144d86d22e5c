"""Anomaly kinds with their default severity (docs/invariants.md says when each fires)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
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
    FENCED_BROKER_IN_ISR = "FENCED_BROKER_IN_ISR"  # KRaft: an ISR still names a fenced broker beside others
    METADATA_TRANSACTION_UNFINISHED = "METADATA_TRANSACTION_UNFINISHED"  # KRaft: a transaction begun, never ended
    # ZooKeeper -> KRaft migration (models/migration.py)
    MIGRATION_STORES_DIVERGED = "MIGRATION_STORES_DIVERGED"  # ZooKeeper and the log disagree at a settled point
    MIGRATION_OUT_OF_BAND_ZK_WRITE = "MIGRATION_OUT_OF_BAND_ZK_WRITE"  # a write to ZooKeeper by another session
    MIGRATION_RESYNC_OVERWROTE_ZK = "MIGRATION_RESYNC_OVERWROTE_ZK"  # a full KRaft->ZK sync changed znodes
    MIGRATION_STALE_ZNODE = "MIGRATION_STALE_ZNODE"  # /migration left by an earlier attempt (KAFKA-17146)
    MIGRATION_KRAFT_EPOCH_AHEAD = "MIGRATION_KRAFT_EPOCH_AHEAD"  # KRaft epoch above /controller_epoch (rollback)
    MIGRATION_FINALIZED_BROKER_UNREGISTERED = "MIGRATION_FINALIZED_BROKER_UNREGISTERED"  # finalized too early
    MIGRATION_ROLLED_BACK = "MIGRATION_ROLLED_BACK"  # a ZooKeeper broker elected controller after a KRaft claim


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
    AnomalyKind.FENCED_BROKER_IN_ISR: "error",
    AnomalyKind.METADATA_TRANSACTION_UNFINISHED: "error",
    AnomalyKind.MIGRATION_STORES_DIVERGED: "error",
    AnomalyKind.MIGRATION_OUT_OF_BAND_ZK_WRITE: "error",
    AnomalyKind.MIGRATION_RESYNC_OVERWROTE_ZK: "warning",
    AnomalyKind.MIGRATION_STALE_ZNODE: "critical",
    AnomalyKind.MIGRATION_KRAFT_EPOCH_AHEAD: "warning",
    AnomalyKind.MIGRATION_FINALIZED_BROKER_UNREGISTERED: "critical",
    AnomalyKind.MIGRATION_ROLLED_BACK: "warning",
}

EPISODE_KINDS: Final = frozenset({AnomalyKind.OFFLINE_PARTITION, AnomalyKind.NO_ACTIVE_CONTROLLER,
                                  AnomalyKind.LEADER_NOT_IN_ISR, AnomalyKind.ISR_NOT_SUBSET_OF_REPLICAS})
"""Findings about a condition that lasts: two rows each, one when it starts (reported at once) and one when it
ends (``ended_at``, ``ended_zxid``, ``duration_ms``), linked by ``episode_id`` (docs/invariants.md, Episodes)."""

DEFAULT_OFFLINE_BLIP_MS: Final = 1000
"""Settings ``pipeline.offline_blip_ms``: an OFFLINE_PARTITION episode that ends within this is a blip."""
BLIP_SEVERITY: Final = "warning"
"""The severity of a blip's end row (the episode as a whole; its start row was reported as an error)."""


def is_episode_end(row: Mapping[str, Any]) -> bool:
    """The row that ends an episode (it holds the interval)."""
    return row.get("episode_id") is not None and row.get("ended_zxid") is not None


def describe(row: Mapping[str, Any]) -> str:
    """One readable line for an anomaly row (monitor alerts, `zkledger anomalies`, the demo summary): an
    episode's start says it started, its end the interval and how long it lasted. Printers pass it through
    ``services.sanitize.terminal_safe``, which keeps a multi-line log message on the line (``\\n``)."""
    parts = [f"[{row.get('severity') or '?'}] {row.get('kind')}"]
    if is_episode_end(row):
        parts.append(f"from {_when(row.get('event_time'))} to {_when(row.get('ended_at'))} "
                     f"({_interval(row)})")
        parts.append(f"zxid={_zxid(row.get('zxid'))}..{_zxid(row.get('ended_zxid'))}")
    else:
        when = row.get("event_time")
        if when is not None:
            parts.append(f"at {_when(when)}")
        if row.get("zxid") is not None:
            parts.append(f"zxid={_zxid(row['zxid'])}")
    parts.extend(_where(row))
    if row.get("episode_id") is not None and not is_episode_end(row):
        parts.append("started")
    line = " ".join(parts)
    summary = _details_summary(row.get("details"))
    if summary:
        line += f": {summary}"
    evidence = row.get("evidence") or []
    if evidence:
        line += f" [evidence: {len(evidence)} event(s), first {evidence[0]}]"
    return line


def _when(when: object) -> str:
    if when is None:
        return "?"
    return when.isoformat(sep=" ", timespec="seconds") if isinstance(when, datetime) else str(when)


def _zxid(zxid: object) -> str:
    return f"{zxid:#x}" if isinstance(zxid, int) else "?" if zxid is None else str(zxid)


def _interval(row: Mapping[str, Any]) -> str:
    """How long an ended episode lasted, and whether it was a blip."""
    took = "duration unknown" if row.get("duration_ms") is None else f"lasted {duration_text(int(row['duration_ms']))}"
    details = _details_dict(row.get("details"))
    if details.get("blip") is True:
        took += f", a blip: under {duration_text(int(details.get('blip_threshold_ms') or 0))}"
    return took


def duration_text(ms: int) -> str:
    """A duration for people: ``12 ms``, ``3.4 s``, ``5 min 2 s``, ``2 h 3 min``."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(ms // 1000, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    return f"{minutes // 60} h {minutes % 60} min"


def _where(row: Mapping[str, Any]) -> list[str]:
    parts = []
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
    return parts


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


def _details_dict(details: object) -> dict[str, Any]:
    if isinstance(details, str):
        try:
            details = json.loads(details)
        except ValueError:
            return {}
    return details if isinstance(details, dict) else {}


# --- findings grouped for a terminal: one line per kind of thing that happened --------------------------------
def findings(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One row per finding: an ended episode is its end row (which holds the interval) instead of both rows, an
    open one its start row; every other row as it is."""
    rows = list(rows)
    ended = {r["episode_id"] for r in rows if is_episode_end(r)}
    return [r for r in rows if is_episode_end(r) or r.get("episode_id") is None or r["episode_id"] not in ended]


@dataclass(frozen=True)
class FindingGroup:
    """Findings of one kind, severity, cause and subject (``group_findings``)."""

    kind: str
    severity: str
    cause: str
    subject: str
    rows: tuple[Mapping[str, Any], ...]


def cause_of(row: Mapping[str, Any]) -> str:
    """What made a finding, from its details: the stated reason or cause, else the refused state change, else
    the logged decision's kind; an episode's says first whether it is open, ended, or ended as a blip."""
    details = _details_dict(row.get("details"))
    base = next((str(details[k]) for k in ("reason", "cause") if details.get(k)), "")
    if not base and details.get("from_state") and details.get("to_state"):
        base = f"{details['from_state']} -> {details['to_state']}"
    if row.get("episode_id") is not None:
        state = "blip" if details.get("blip") is True else "ended" if is_episode_end(row) else "open"
        return f"{state}, {base}" if base else state
    return base or str(details.get("kind") or "")


def subject_of(row: Mapping[str, Any]) -> str:
    """What a finding is about, coarsely: its topic, else its broker, else its controller."""
    if row.get("topic") is not None:
        return str(row["topic"])
    if row.get("broker") is not None:
        return f"broker {row['broker']}"
    if row.get("controller_id") is not None:
        return f"controller {row['controller_id']}"
    return ""


def group_findings(rows: Iterable[Mapping[str, Any]]) -> list[FindingGroup]:
    """``findings`` grouped by (kind, severity, cause, subject), in the order of each group's first finding."""
    groups: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for r in sorted(findings(rows), key=_order):
        key = (str(r.get("kind")), str(r.get("severity") or "?"), cause_of(r), subject_of(r))
        groups.setdefault(key, []).append(r)
    return [FindingGroup(*key, tuple(found)) for key, found in groups.items()]


def _order(row: Mapping[str, Any]) -> tuple[bool, int, str, str]:
    when = row.get("event_time")
    return (row.get("zxid") is None, int(row.get("zxid") or 0), _when(when) if when is not None else "",
            str(row.get("anomaly_id") or ""))


def describe_group(group: FindingGroup, width: int | None = None) -> str:
    """One line for a group: a single finding as ``describe`` says it; several as the kind, how many, the
    cause and subject, the first and last time, the partitions or brokers, and the first one's summary.
    ``width``: cut the line there."""
    if len(group.rows) == 1:
        line = describe(group.rows[0])
    else:
        first, last = group.rows[0], group.rows[-1]
        head = f"[{group.severity}] {group.kind} x{len(group.rows)}"
        if group.cause:
            head += f" ({group.cause})"
        if group.subject:
            head += f" {group.subject}"
        line = f"{head}: first {_when(first.get('event_time'))}, last {_when(last.get('event_time'))}"
        partitions = sorted({r["partition"] for r in group.rows if r.get("partition") is not None})
        if partitions:
            shown = ", ".join(str(p) for p in partitions[:8]) + (", ..." if len(partitions) > 8 else "")
            line += f"; partitions {shown}"
        lasted = sorted(int(r["duration_ms"]) for r in group.rows if r.get("duration_ms") is not None)
        if lasted:
            line += f"; lasted {duration_text(lasted[0])} to {duration_text(lasted[-1])}"
        summary = _details_summary(first.get("details"))
        if summary:
            line += f"; e.g. {summary}"
    return line if width is None or len(line) <= width else line[: width - 3] + "..."
