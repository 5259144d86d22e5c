"""zkledger's history against what Kafka reported: state at every settled point, controller tenures against the
brokers' own controller.log lines, anomalies per phase.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from kafkalab.cluster import KafkaLine
from kafkalab.scenarios import Phase
from kafkalab.truth import NO_LEADER, PartitionView, Point, Sample, settled_points
from models.anomalies import SEVERITY, AnomalyKind
from models.events import MetadataEventType

SERIOUS = ("error", "critical")
LAGS_S = (0.5, 1.0, 2.0, 3.0, 5.0)
"""How far behind ZooKeeper a broker's answer may be: its metadata cache follows the controller's UpdateMetadata,
which on two loaded cores arrived more than a second after the controller's ZooKeeper write."""
ISR_NOTIFICATION_LAGS_S = tuple(x / 2 for x in range(1, 121))
"""Lines that propagate ISR changes through /isr_change_notification: an ISR-only difference may trail up to the
brokers' 60 s propagation bound."""

# "[Controller id=2] 2 successfully elected as the controller. Epoch incremented to 3 and epoch zk version is now 2"
# (2.x/3.x) and "[Controller 2]: Controller 2 incremented epoch to 3" (older lines)
_ELECTED = re.compile(r"(?:\[Controller id=(\d+)\] \d+ successfully elected as the controller\. Epoch incremented to (\d+)"
                      r"|\[Controller (\d+)\]: Controller \d+ incremented epoch to (\d+))")


@dataclass
class StateCheck:
    points: int = 0
    unsettled: int = 0
    pending_deletion: int = 0  # partitions zkledger lists while their topic's deletion is pending; Kafka omits them
    lagged: int = 0  # points where Kafka's answer equals zkledger's state a little earlier (see LAGS_S)
    isr_lagged: int = 0  # lines with ISR change notifications: an ISR Kafka's caches had not caught up with yet
    mismatches: list[str] = field(default_factory=list)


def zkledger_state(metadata: list[dict[str, Any]], transitions: list[dict[str, Any]], at: datetime) -> dict[str, Any]:
    from pipelines.time_travel import state_at

    return state_at(metadata, transitions, at=at)


def _view_at(metadata: list[dict[str, Any]], transitions: list[dict[str, Any]], at: datetime,
             key: tuple[str, int] | None, line: KafkaLine) -> PartitionView | int | None:
    st = zkledger_state(metadata, transitions, at)
    if key is None:
        controller: int | None = st["controller_id"]
        return controller
    return next((as_reported(p, st["live_brokers"], line) for p in st["partitions"]
                 if (p["topic"], p["partition"]) == key), None)


def as_reported(p: dict[str, Any], live: Iterable[int], line: KafkaLine) -> PartitionView:
    """A partition of zkledger's state as the line's Metadata reports it: a broker answers leader -1 when the
    leader ZooKeeper names is not a live broker, and 2.1 then leaves out the leader epoch and the ISR."""
    view = _as_view(p)
    if view.leader != NO_LEADER and view.leader not in set(live):
        view = PartitionView(NO_LEADER, view.leader_epoch, view.isr, view.replicas)
    if view.leader == NO_LEADER and not line.leaderless_detail:
        view = PartitionView(NO_LEADER, -1, (), view.replicas)
    return view


def _isr_only(mine: PartitionView | int | None, theirs: PartitionView | int | None) -> bool:
    return (isinstance(mine, PartitionView) and isinstance(theirs, PartitionView) and mine.isr != theirs.isr
            and (mine.leader, mine.leader_epoch, mine.replicas) == (theirs.leader, theirs.leader_epoch, theirs.replicas))


def _as_view(p: dict[str, Any]) -> PartitionView:
    leader = p["leader"] if p["leader"] is not None else NO_LEADER
    return PartitionView(int(leader), p["leader_epoch"], tuple(sorted(p["isr"] or ())), tuple(p["replicas"] or ()))


def compare_state(metadata: list[dict[str, Any]], transitions: list[dict[str, Any]],
                  samples: list[Sample], line: KafkaLine) -> StateCheck:
    """`state_at(T)` against Kafka's settled answer at every recorded T, for every partition and the controller;
    a partition zkledger holds at T that Kafka did not report around T is a mismatch too. zkledger's state is
    put the way the line's Metadata answers it (`as_reported`) before the comparison."""
    points, unsettled = settled_points(samples)
    check = StateCheck(len(points), unsettled)
    by_time: dict[datetime, list[Point]] = {}
    for pt in points:
        by_time.setdefault(pt.at, []).append(pt)
    index = {s.at: i for i, s in enumerate(samples)}
    requested = sorted((m["event_time"], m["topic"]) for m in metadata
                       if m["type"] == MetadataEventType.TOPIC_DELETION_REQUESTED and m["event_time"] is not None)
    for at, pts in sorted(by_time.items()):
        st = zkledger_state(metadata, transitions, at)
        ours = {(p["topic"], p["partition"]): as_reported(p, st["live_brokers"], line) for p in st["partitions"]}
        for pt in pts:
            mine = st["controller_id"] if pt.key is None else ours.get(pt.key)
            if mine == pt.view:
                continue
            isr_notified = line.isr_via_notifications and _isr_only(mine, pt.view)
            lags = ISR_NOTIFICATION_LAGS_S if isr_notified else LAGS_S
            if any(_view_at(metadata, transitions, at - timedelta(seconds=lag), pt.key, line) == pt.view for lag in lags):
                if isr_notified:
                    check.isr_lagged += 1
                else:
                    check.lagged += 1
                continue
            what = "controller" if pt.key is None else f"{pt.key[0]}-{pt.key[1]}"
            check.mismatches.append(f"{at.isoformat()} {what}: kafka {pt.view}, zkledger {mine}")
        i = index[at]
        around = [samples[j].reported for j in (i - 1, i, i + 1)]
        deleting = {t for when, t in requested if when <= at}
        for key in ours.keys() - set().union(*around):
            if key[0] in deleting:
                check.pending_deletion += 1
                continue
            if any(_view_at(metadata, transitions, at - timedelta(seconds=lag), key, line) is None for lag in LAGS_S):
                check.lagged += 1  # a topic just created: the answering broker's cache does not hold it yet
                continue
            check.mismatches.append(f"{at.isoformat()} {key[0]}-{key[1]}: kafka none, zkledger {ours[key]}")
    return check


def logged_elections(logs_root: Path) -> set[tuple[int, int]]:
    """(controller id, epoch) of every election the brokers' controller.log files record."""
    found: set[tuple[int, int]] = set()
    for path in sorted(logs_root.glob("broker-*/controller.log*")):
        for line in path.read_text(errors="replace").splitlines():
            m = _ELECTED.search(line)
            if m:
                cid, epoch = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
                found.add((int(cid), int(epoch)))
    return found


def tenures(rows: Iterable[dict[str, Any]], source: str = "zk") -> set[tuple[int, int]]:
    return {(int(r["controller_id"]), int(r["controller_epoch"])) for r in rows
            if r.get("source") == source and r.get("controller_epoch") is not None}


def phase_of(row: dict[str, Any], phases: list[Phase]) -> Phase | None:
    """The phase an anomaly belongs to, by its event time (phases follow each other, never overlap); None for
    what happened outside every phase (start-up, the final shutdown)."""
    t = row.get("event_time") or row.get("detected_at")
    for ph in phases:
        if t is not None and ph.start <= t <= (ph.end or t):
            return ph
    return None


def anomalies_by_phase(anomalies: list[dict[str, Any]], phases: list[Phase]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {ph.name: [] for ph in phases}
    out["(outside)"] = []
    for row in anomalies:
        ph = phase_of(row, phases)
        out[ph.name if ph else "(outside)"].append(row)
    return out


def serious(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if str(r.get("severity")) in SERIOUS and r.get("kind") != AnomalyKind.COLLECTION_GAP]


def severity(kind: AnomalyKind) -> str:
    return SEVERITY[kind]
