"""Controller terms and the pure predicates over them (docs/kafka-metadata.md; docs/invariants.md).

A *term* is one controller's tenure: from its ``/controller`` create to its delete (or the next election).
Its epoch comes from the ``/controller_epoch`` write of the same election: a separate later write on
≤2.0 (KC@2.0.0 l621-647), the same ``multi`` (same zxid) on 2.1+ (KAFKA-6082, KZC@3.8.0 l123-170).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from models.anomalies import AnomalyKind
from models.events import MetadataEvent, MetadataEventType

log = logging.getLogger(__name__)

T = MetadataEventType


@dataclass(frozen=True)
class ControllerTerm:
    """One controller's tenure (a ``controller_tenure`` row less cluster/source). end_* None = still open."""

    controller_id: int
    controller_epoch: int | None
    start_zxid: int
    end_zxid: int | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None

    def contains(self, zxid: int) -> bool:
        """Is ``zxid`` inside this term (start inclusive, end exclusive)."""
        return self.start_zxid <= zxid and (self.end_zxid is None or zxid < self.end_zxid)


_TERM_EVENTS: Final = frozenset({T.CONTROLLER_ELECTED, T.CONTROLLER_EPOCH_CHANGED, T.CONTROLLER_RESIGNED})


class _TermBuilder:
    """Left fold of controller events into terms."""

    def __init__(self) -> None:
        self.terms: list[ControllerTerm] = []
        self.open: ControllerTerm | None = None
        self.pending_epoch: tuple[int, int] | None = None  # (zxid, epoch) seen before its /controller create

    def close(self, zxid: int, time: datetime | None) -> None:
        if self.open is not None:
            self.terms.append(replace(self.open, end_zxid=zxid, end_time=time))
            self.open = None

    def elected(self, e: MetadataEvent) -> None:
        if e.controller_id is None:
            return
        if self.open is not None and self.open.controller_id == e.controller_id:
            return  # the same /controller observed again (resync, duplicate watch): same term
        self.close(e.zxid, e.event_time)
        epoch = None
        if self.pending_epoch is not None and self.pending_epoch[0] == e.zxid:
            epoch = self.pending_epoch[1]  # 2.1+ multi: the epoch write came first in the stream
        self.pending_epoch = None
        self.open = ControllerTerm(e.controller_id, epoch, e.zxid, start_time=e.event_time)

    def epoch_changed(self, e: MetadataEvent) -> None:
        if e.controller_epoch is None:
            return
        if self.open is not None and self.open.controller_epoch is None:
            self.open = replace(self.open, controller_epoch=e.controller_epoch)
        else:
            self.pending_epoch = (e.zxid, e.controller_epoch)

    def resigned(self, e: MetadataEvent) -> None:
        self.close(e.zxid, e.event_time)


def build_terms(events: Iterable[MetadataEvent]) -> list[ControllerTerm]:
    """Controller terms from CONTROLLER_ELECTED / CONTROLLER_EPOCH_CHANGED / CONTROLLER_RESIGNED events.

    Works for the ≤2.0 two-step election (create, then a later epoch write) and the 2.1+ multi (both at
    one zxid, in either order). Events are sorted by zxid here (stable); other event types are ignored.
    The last term is open (end_zxid None) unless a resignation closed it.
    """
    b = _TermBuilder()
    for e in sorted((e for e in events if e.type in _TERM_EVENTS), key=lambda e: e.zxid):
        if e.type is T.CONTROLLER_ELECTED:
            b.elected(e)
        elif e.type is T.CONTROLLER_EPOCH_CHANGED:
            b.epoch_changed(e)
        else:
            b.resigned(e)
    if b.open is not None:
        b.terms.append(b.open)
    return b.terms


# ---------------------------------------------------------------------- current-controller-writes
def is_zombie_write(
    state_write_controller_epoch: int | None,
    current_controller_epoch: int | None,
    leader_changed_or_epoch_bumped: bool,
) -> bool:
    """current-controller-writes: a state write that changes leadership with an older ``controller_epoch``.

    Leader-originated ISR writes (IBP <2.7-IV2) carry an old controller_epoch legitimately but leave the
    leader and leader_epoch unchanged, hence the third argument.
    """
    if state_write_controller_epoch is None or current_controller_epoch is None:
        return False
    return leader_changed_or_epoch_bumped and state_write_controller_epoch < current_controller_epoch


# ---------------------------------------------------------------------- one-controller (split brain)
@dataclass(frozen=True)
class Decision:
    """One controller action: a logged decision or a ZK write attributed to a controller.

    ``at`` orders decisions (zxid, or microseconds since the epoch for log lines); ``ref`` is an event id.
    """

    controller_id: int
    controller_epoch: int | None
    at: int
    ref: str | None = None


@dataclass(frozen=True)
class SplitBrainFinding:
    """Evidence of two controllers acting at once.

    reason: ``same_epoch`` (two ids claim one epoch), ``stale_epoch`` (a decision below the highest epoch
    already seen: Kafka's soft-failure rule, PSM@3.8.0 l386) or ``overlapping_terms`` (two ids whose
    first..last decision spans overlap).
    """

    reason: str
    controller_ids: tuple[int, ...]
    controller_epochs: tuple[int | None, ...]
    at: int
    refs: tuple[str, ...] = ()
    kind: AnomalyKind = AnomalyKind.SPLIT_BRAIN


def _refs(*ds: Decision) -> tuple[str, ...]:
    return tuple(d.ref for d in ds if d.ref is not None)


def _epoch_findings(ordered: list[Decision]) -> list[SplitBrainFinding]:
    findings: list[SplitBrainFinding] = []
    owner: dict[int, Decision] = {}  # epoch -> first decision claiming it
    highest: Decision | None = None
    for d in ordered:
        if d.controller_epoch is None:
            continue
        first = owner.setdefault(d.controller_epoch, d)
        if first.controller_id != d.controller_id:
            findings.append(
                SplitBrainFinding(
                    "same_epoch",
                    (first.controller_id, d.controller_id),
                    (d.controller_epoch, d.controller_epoch),
                    d.at,
                    _refs(first, d),
                )
            )
        if (
            highest is not None
            and highest.controller_epoch is not None
            and d.controller_epoch < highest.controller_epoch
        ):
            findings.append(
                SplitBrainFinding(
                    "stale_epoch",
                    (highest.controller_id, d.controller_id),
                    (highest.controller_epoch, d.controller_epoch),
                    d.at,
                    _refs(highest, d),
                )
            )
        elif highest is None or d.controller_epoch > (highest.controller_epoch or -1):
            highest = d
    return findings


def _overlap_findings(ordered: list[Decision]) -> list[SplitBrainFinding]:
    spans: dict[int, tuple[Decision, Decision]] = {}  # controller id -> (first, last)
    for d in ordered:
        first, _ = spans.get(d.controller_id, (d, d))
        spans[d.controller_id] = (first, d)
    findings = []
    ids = sorted(spans)
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            (a0, a1), (b0, b1) = spans[a], spans[b]
            if a0.at <= b1.at and b0.at <= a1.at:  # closed intervals intersect
                at = max(a0.at, b0.at)
                findings.append(
                    SplitBrainFinding(
                        "overlapping_terms",
                        (a, b),
                        (a1.controller_epoch, b1.controller_epoch),
                        at,
                        _refs(a0, a1, b0, b1),
                    )
                )
    return findings


def split_brain(decisions: Iterable[Decision]) -> list[SplitBrainFinding]:
    """All split-brain evidence in ``decisions`` (any order), sorted by ``at``."""
    ordered = sorted(decisions, key=lambda d: d.at)
    return sorted(_epoch_findings(ordered) + _overlap_findings(ordered), key=lambda f: (f.at, f.reason))


# ------------------------------------------------------ controller-epoch-rises, leader-epoch-rises
@dataclass(frozen=True)
class EpochRegression:
    """An epoch that went backwards (/controller_epoch, or a partition's leader_epoch)."""

    kind: AnomalyKind
    zxid: int
    previous: int
    current: int
    reason: str
    topic: str | None = None
    partition: int | None = None


def _controller_regression(prev: int | None, e: MetadataEvent) -> EpochRegression | None:
    cur = e.controller_epoch
    if prev is None or cur is None or cur >= prev:
        return None
    return EpochRegression(
        AnomalyKind.CONTROLLER_EPOCH_REGRESSION, e.zxid, prev, cur, "controller_epoch_decreased"
    )


def _leader_regression(prev: MetadataEvent | None, e: MetadataEvent) -> EpochRegression | None:
    if prev is None or prev.leader_epoch is None or e.leader_epoch is None:
        return None
    if e.leader_epoch < prev.leader_epoch:
        reason = "leader_epoch_decreased"
    elif e.leader_epoch == prev.leader_epoch and e.leader != prev.leader:
        reason = "leader_changed_without_epoch_bump"  # leader-epoch-rises: a leader change must bump it
    else:
        return None
    return EpochRegression(
        AnomalyKind.LEADER_EPOCH_REGRESSION,
        e.zxid,
        prev.leader_epoch,
        e.leader_epoch,
        reason,
        e.topic,
        e.partition,
    )


def epoch_regressions(events: Iterable[MetadataEvent]) -> list[EpochRegression]:
    """controller-epoch-rises and leader-epoch-rises over metadata events sorted by zxid.

    A partition incarnation ends at TOPIC_DELETED / PARTITION_STATE_DELETED, or (2.8+) when the topic's
    ``topic_id`` changes in an assignment: leader_epoch restarts at 0 after that and is not a regression.
    A controller-epoch jump of more than +1 is not reported here (it means missed writes: a gap).
    """
    found: list[EpochRegression] = []
    controller_epoch: int | None = None
    last_state: dict[tuple[str, int], MetadataEvent] = {}
    topic_ids: dict[str, object] = {}
    for e in sorted(events, key=lambda e: e.zxid):
        if e.type is T.CONTROLLER_EPOCH_CHANGED:
            reg = _controller_regression(controller_epoch, e)
            if reg is not None:
                found.append(reg)
            if e.controller_epoch is not None:
                controller_epoch = max(controller_epoch or 0, e.controller_epoch)
        elif e.type is T.PARTITION_STATE_WRITTEN and e.topic is not None and e.partition is not None:
            key = (e.topic, e.partition)
            reg = _leader_regression(last_state.get(key), e)
            if reg is not None:
                found.append(reg)
            last_state[key] = e
        elif e.type in (T.TOPIC_DELETED, T.PARTITION_STATE_DELETED) and e.topic is not None:
            for key in [k for k in last_state if k[0] == e.topic and e.partition in (None, k[1])]:
                del last_state[key]
        elif e.type is T.PARTITION_ASSIGNED and e.topic is not None and "topic_id" in e.detail:
            new_id = e.detail["topic_id"]
            if (
                topic_ids.get(e.topic, new_id) != new_id
            ):  # recreated (or KAFKA-14190 rewrite): new incarnation
                for key in [k for k in last_state if k[0] == e.topic]:
                    del last_state[key]
            topic_ids[e.topic] = new_id
    return found
