"""The pure, version-aware fold of Kafka's partition and replica state machines.

One rule set (``models.states``' tables, Kafka's ``validPreviousStates``) with three faces:

- ``apply_partition`` / ``apply_replica``: one step. An illegal step leaves the state unchanged and yields a
  violation, as Kafka 1.1+ logs and skips invalid transitions (``logInvalidTransition``).
- ``project`` / ``project_metadata``: left folds over explicit targets or over decoded metadata events.
- integer codes and ``transition_matrix`` / ``legal_matrix``: the same table as small-int matrices for the
  pipelines' vectorised (numpy) segmented prefix-composition scan.

How metadata events turn into steps of both machines is ``PartitionFold`` (docs/kafka-metadata.md),
including the controller's silent re-initialisation at a failover (``PartitionFold.reseed``): the one
home of the inference rules, which the pipelines' row fold calls and their vectorised fold mirrors.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final, Generic, Literal, TypeVar

from models.anomalies import AnomalyKind
from models.errors import IllegalTransitionError, OutOfOrderEventError
from models.events import MetadataEvent, MetadataEventType
from models.states import (
    DEFAULT_KAFKA_VERSION,
    PartitionState,
    ReplicaState,
    parse_kafka_version,
    partition_valid_previous,
    replica_valid_previous,
)

log = logging.getLogger(__name__)

P = PartitionState
R = ReplicaState
T = MetadataEventType
S = TypeVar("S", PartitionState, ReplicaState)
Kind = Literal["partition", "replica"]


# ------------------------------------------------------------------------------------------- steps
@dataclass(frozen=True)
class Transition:
    """One state-machine step as Kafka would log it (``partition_transitions`` / ``replica_transitions``)."""

    from_state: str
    to_state: str
    legal: bool
    cause: str | None = None


@dataclass(frozen=True)
class Violation:
    """An illegal step: its previous state is not a valid previous state of the target."""

    kind: AnomalyKind
    from_state: str
    to_state: str
    cause: str | None
    kafka_version: str


@dataclass(frozen=True)
class Step(Generic[S]):
    """Result of applying one target: the new state (unchanged when illegal), the transition, a violation."""

    state: S
    transition: Transition | None
    violation: Violation | None = None


def _step(
    state: S,
    target: S,
    legal: bool,
    cause: str | None,
    kind: AnomalyKind,
    kafka_version: str,
    strict: bool,
) -> Step[S]:
    transition = Transition(str(state), str(target), legal, cause)
    if legal:
        return Step(target, transition)
    if strict:
        raise IllegalTransitionError(
            "partition" if kind is AnomalyKind.ILLEGAL_PARTITION_TRANSITION else "replica",
            str(state),
            str(target),
            cause,
        )
    # Kafka 1.1+ logs the invalid transition and skips it: the state stays where it was
    return Step(state, transition, Violation(kind, str(state), str(target), cause, kafka_version))


def apply_partition(
    state: PartitionState | None,
    target: PartitionState,
    cause: str | None = None,
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    *,
    strict: bool = False,
) -> Step[PartitionState]:
    """Apply ``target`` to a partition in ``state`` (None = NonExistentPartition).

    Raises:
        IllegalTransitionError: only when ``strict`` and the step is illegal.
    """
    current = P.NON_EXISTENT if state is None else state
    legal = current in partition_valid_previous(kafka_version)[target]
    return _step(
        current, target, legal, cause, AnomalyKind.ILLEGAL_PARTITION_TRANSITION, kafka_version, strict
    )


def apply_replica(
    state: ReplicaState | None,
    target: ReplicaState,
    cause: str | None = None,
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    *,
    strict: bool = False,
) -> Step[ReplicaState]:
    """Apply ``target`` to a replica in ``state`` (None = NonExistentReplica); version-aware (KAFKA-8237)."""
    current = R.NON_EXISTENT if state is None else state
    legal = current in replica_valid_previous(kafka_version)[target]
    return _step(current, target, legal, cause, AnomalyKind.ILLEGAL_REPLICA_TRANSITION, kafka_version, strict)


# -------------------------------------------------------------------------------- integer matrices
PARTITION_STATES_BY_CODE: Final[tuple[PartitionState, ...]] = (P.NEW, P.ONLINE, P.OFFLINE, P.NON_EXISTENT)
"""Index = Kafka's byte code of the partition state (PSM: New 0, Online 1, Offline 2, NonExistent 3)."""
REPLICA_STATES_BY_CODE: Final[tuple[ReplicaState, ...]] = (
    R.NEW,
    R.ONLINE,
    R.OFFLINE,
    R.DELETION_STARTED,
    R.DELETION_SUCCESSFUL,
    R.DELETION_INELIGIBLE,
    R.NON_EXISTENT,
)
"""Index = Kafka's byte code of the replica state minus 1 (RSM codes are 1..7), so codes are dense 0..6."""

PARTITION_CODES: Final[Mapping[PartitionState, int]] = {s: i for i, s in enumerate(PARTITION_STATES_BY_CODE)}
REPLICA_CODES: Final[Mapping[ReplicaState, int]] = {s: i for i, s in enumerate(REPLICA_STATES_BY_CODE)}
INITIAL_PARTITION_CODE: Final = PARTITION_CODES[P.NON_EXISTENT]
INITIAL_REPLICA_CODE: Final = REPLICA_CODES[R.NON_EXISTENT]


def _states(kind: Kind) -> tuple[PartitionState, ...] | tuple[ReplicaState, ...]:
    if kind == "partition":
        return PARTITION_STATES_BY_CODE
    if kind == "replica":
        return REPLICA_STATES_BY_CODE
    raise ValueError(f"kind must be 'partition' or 'replica', got {kind!r}")


def legal_matrix(kind: Kind, kafka_version: str = DEFAULT_KAFKA_VERSION) -> tuple[tuple[bool, ...], ...]:
    """``L[s][t]``: is applying target code ``t`` in state code ``s`` legal."""
    if kind == "partition":
        ptable = partition_valid_previous(kafka_version)
        return tuple(
            tuple(s in ptable[t] for t in PARTITION_STATES_BY_CODE) for s in PARTITION_STATES_BY_CODE
        )
    _states(kind)  # validates kind
    rtable = replica_valid_previous(kafka_version)
    return tuple(tuple(s in rtable[t] for t in REPLICA_STATES_BY_CODE) for s in REPLICA_STATES_BY_CODE)


def transition_matrix(kind: Kind, kafka_version: str = DEFAULT_KAFKA_VERSION) -> tuple[tuple[int, ...], ...]:
    """``M[s][t]``: the resulting state code when target ``t`` is applied in state ``s`` (t if legal else s).

    Each target ``t`` is the function ``s -> M[s][t]`` on a tiny finite set, so a sequence of targets
    composes associatively (``compose``): a segmented prefix scan over (key, zxid) yields every state.
    """
    legal = legal_matrix(kind, kafka_version)
    return tuple(tuple(t if legal[s][t] else s for t in range(len(row))) for s, row in enumerate(legal))


def target_function(matrix: Sequence[Sequence[int]], target: int) -> tuple[int, ...]:
    """The state map of one target: ``f[s] = M[s][target]``."""
    return tuple(row[target] for row in matrix)


def compose(first: Sequence[int], then: Sequence[int]) -> tuple[int, ...]:
    """``then ∘ first`` as a state map (apply ``first``, then ``then``)."""
    return tuple(then[s] for s in first)


def fold_codes(matrix: Sequence[Sequence[int]], initial: int, targets: Iterable[int]) -> list[int]:
    """Reference scan: the state code after each target (what the vectorised scan must reproduce)."""
    out: list[int] = []
    s = initial
    for t in targets:
        s = matrix[s][t]
        out.append(s)
    return out


# ---------------------------------------------------------------------------------- explicit folds
@dataclass(frozen=True)
class PartitionTarget:
    """A request to move one partition to ``target`` (at ``zxid``, for ``cause``)."""

    zxid: int
    topic: str
    partition: int
    target: PartitionState
    cause: str | None = None


@dataclass(frozen=True)
class ReplicaTarget:
    """A request to move one replica to ``target``."""

    zxid: int
    topic: str
    partition: int
    replica: int
    target: ReplicaState
    cause: str | None = None


@dataclass(frozen=True)
class PartitionTransitionRecord:
    """A ``partition_transitions`` row less cluster/event_time/event_id."""

    zxid: int
    topic: str
    partition: int
    from_state: str
    to_state: str
    legal: bool
    cause: str | None


@dataclass(frozen=True)
class ReplicaTransitionRecord:
    """A ``replica_transitions`` row less cluster/event_time/event_id."""

    zxid: int
    topic: str
    partition: int
    replica: int
    from_state: str
    to_state: str
    legal: bool
    cause: str | None


PartitionKey = tuple[str, int]
ReplicaKey = tuple[str, int, int]


@dataclass
class Projection:
    """Final states, every transition (legal or not) and the illegal ones, of a fold."""

    partitions: dict[PartitionKey, PartitionState] = field(default_factory=dict)
    replicas: dict[ReplicaKey, ReplicaState] = field(default_factory=dict)
    partition_transitions: list[PartitionTransitionRecord] = field(default_factory=list)
    replica_transitions: list[ReplicaTransitionRecord] = field(default_factory=list)

    @property
    def violations(self) -> list[PartitionTransitionRecord | ReplicaTransitionRecord]:
        illegal: list[PartitionTransitionRecord | ReplicaTransitionRecord] = []
        illegal.extend(t for t in self.partition_transitions if not t.legal)
        illegal.extend(t for t in self.replica_transitions if not t.legal)
        return sorted(illegal, key=lambda t: t.zxid)


def _check_order(previous: int | None, zxid: int) -> int:
    if previous is not None and zxid < previous:
        raise OutOfOrderEventError(previous, zxid)
    return zxid


def project(
    targets: Iterable[PartitionTarget | ReplicaTarget],
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    initial: Projection | None = None,
    *,
    strict: bool = False,
) -> Projection:
    """Left fold of explicit targets (sorted by zxid; ties keep their order).

    Raises:
        OutOfOrderEventError: a target's zxid is lower than the previous one.
        IllegalTransitionError: only when ``strict``.
    """
    out = initial if initial is not None else Projection()
    last: int | None = None
    for t in targets:
        last = _check_order(last, t.zxid)
        if isinstance(t, PartitionTarget):
            _fold_partition(out, t, kafka_version, strict)
        else:
            _fold_replica(out, t, kafka_version, strict)
    return out


def _fold_partition(out: Projection, t: PartitionTarget, kafka_version: str, strict: bool) -> None:
    key = (t.topic, t.partition)
    step = apply_partition(out.partitions.get(key), t.target, t.cause, kafka_version, strict=strict)
    out.partitions[key] = step.state
    if step.transition is not None:
        tr = step.transition
        out.partition_transitions.append(
            PartitionTransitionRecord(
                t.zxid, t.topic, t.partition, tr.from_state, tr.to_state, tr.legal, tr.cause
            )
        )


def _fold_replica(out: Projection, t: ReplicaTarget, kafka_version: str, strict: bool) -> None:
    key = (t.topic, t.partition, t.replica)
    step = apply_replica(out.replicas.get(key), t.target, t.cause, kafka_version, strict=strict)
    out.replicas[key] = step.state
    if step.transition is not None:
        tr = step.transition
        out.replica_transitions.append(
            ReplicaTransitionRecord(
                t.zxid, t.topic, t.partition, t.replica, tr.from_state, tr.to_state, tr.legal, tr.cause
            )
        )


# ------------------------------------------------------------------- inference from metadata events
class Cause(StrEnum):
    """Why an inferred step happened (the ``cause`` column of the transition tables)."""

    ASSIGNMENT = "assignment"
    STATE_CREATED = "state created"
    LEADER_ELECTED = "leader elected"
    NO_LEADER = "no leader"
    IN_ISR = "in isr"
    OUT_OF_ISR = "removed from isr"
    REASSIGNED_AWAY = "reassigned away"
    BROKER_REGISTERED = "broker registered"
    BROKER_DEREGISTERED = "broker deregistered"
    DELETION_REQUESTED = "topic deletion requested"
    TOPIC_DELETION = "topic deletion"
    FAILOVER_RESEED = "failover reseed"
    FAILOVER_OFFLINE = "failover: replica on a dead broker"


@dataclass(frozen=True)
class PartitionView:
    """What the controller knows of one partition before an event (its cached context)."""

    state: PartitionState = P.NON_EXISTENT
    replicas: tuple[int, ...] = ()
    leader: int | None = None  # None: no state znode yet
    leader_epoch: int | None = None
    controller_epoch: int | None = None
    isr: tuple[int, ...] = ()
    replica_states: Mapping[int, ReplicaState] = field(default_factory=dict)


@dataclass(frozen=True)
class FoldStep:
    """One inferred step of a partition (``replica`` None) or of one of its replicas.

    ``legal`` is Kafka's ``validPreviousStates`` verdict, except for a failover re-seed (``Cause.FAILOVER_RESEED``):
    the new controller re-initialises states without a transition (nothing to validate), so it is always legal.
    """

    replica: int | None
    from_state: str
    to_state: str
    legal: bool
    cause: Cause


_DELETE_CHAIN: Final[Mapping[ReplicaState, tuple[ReplicaState, ...]]] = {
    # from the replica's state to NonExistentReplica along the deletion flow (TopicDeletionManager@3.8.0)
    R.NEW: (R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT),
    R.ONLINE: (R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT),
    R.OFFLINE: (R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT),
    R.DELETION_INELIGIBLE: (R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT),
    R.DELETION_STARTED: (R.DELETION_SUCCESSFUL, R.NON_EXISTENT),
    R.DELETION_SUCCESSFUL: (R.NON_EXISTENT,),
    R.NON_EXISTENT: (),
}
_DELETION_EVENTS: Final = frozenset({T.TOPIC_DELETED, T.PARTITION_STATE_DELETED})
DELETING_REPLICA_STATES: Final = frozenset({R.DELETION_STARTED, R.DELETION_SUCCESSFUL})
"""Replica states only a started topic deletion reaches (a failover re-seed or the topic's removal ends them)."""


def deletion_pending(replica_states: Iterable[ReplicaState | str]) -> bool:
    """Whether a partition's topic deletion has started and not finished: one of its replicas is deleting."""
    return any(s in DELETING_REPLICA_STATES for s in replica_states)


class PartitionFold:
    """The controller's view of one partition, folded one metadata event at a time: the inference rules' home.

    ``project_metadata`` (the reference), the pipelines' row fold (``pipelines.state_machines.BucketFolder``)
    and, through the differential tests, the vectorised fold (``pipelines.vector_fold``) all step with this.
    Each step is checked against ``models.states`` (version-aware): an illegal one is reported and leaves the
    state unchanged, as Kafka 1.1+ logs and skips it; the rules below read the state as it runs.
    ``live`` holds the brokers registered once the event happened. Rules (docs/kafka-metadata.md):

    * PARTITION_ASSIGNED: an unknown partition -> NewPartition; each unknown replica -> NewReplica; a replica
      dropped from the assignment (reassignment done) -> Offline -> DeletionStarted -> DeletionSuccessful ->
      NonExistent.
    * PARTITION_STATE_WRITTEN: leader >= 0 -> OnlinePartition, except an ISR-only write (same leader and
      leader_epoch: leader-originated or AlterIsr, writers 3/4) of an online partition; no leader ->
      OfflinePartition. Each ISR member -> OnlineReplica. A replica dropped from the ISR goes OfflineReplica
      when the controller took it out (leader_epoch bumped: writer 2, an election or removeReplicasFromIsr)
      or its broker is gone; a live follower the leader dropped (same leader_epoch) changes no state.
      While the topic's deletion is pending (``deletion_pending``) a write moves nothing to Online: those are
      the controller taking each replica offline before deleting it (TopicDeletionManager.onPartitionDeletion:
      removeReplicasFromIsr writes leader -1 and keeps the last ISR member), no election and no replica
      coming back.
    * BROKER_DEREGISTERED: the broker's New/Online replica -> OfflineReplica (onBrokerFailure);
      BROKER_REGISTERED: its Offline/DeletionIneligible replica -> OnlineReplica (onBrokerStartup).
    * TOPIC_DELETION_REQUESTED: the partition -> OfflinePartition; replicas on live brokers -> Offline ->
      DeletionStarted, on dead ones -> DeletionIneligible (from Offline legal on 2.3+ only, KAFKA-8237).
    * TOPIC_DELETED / PARTITION_STATE_DELETED: the partition -> Offline -> NonExistent, every replica along the
      rest of the deletion chain; the view is forgotten (a recreated topic is a new incarnation).
    * CONTROLLER_ELECTED: ``reseed``.
    """

    def __init__(self, kafka_version: str = DEFAULT_KAFKA_VERSION) -> None:
        self.kafka_version = kafka_version
        self._p_valid = partition_valid_previous(kafka_version)
        self._r_valid = replica_valid_previous(kafka_version)
        self._offline_after_reseed = parse_kafka_version(kafka_version) >= (2, 3)

    def apply(self, view: PartitionView, event: MetadataEvent, live: Container[int]) -> tuple[PartitionView, list[FoldStep]]:
        """The view after ``event`` and the steps it caused, in order (partition step first)."""
        run = _Run(self, view)
        kind = event.type
        if kind is T.PARTITION_ASSIGNED:
            self._assigned(run, view, event)
        elif kind is T.PARTITION_STATE_WRITTEN:
            self._written(run, view, event, live)
        elif kind in (T.BROKER_REGISTERED, T.BROKER_DEREGISTERED):
            self._broker(run, view, event)
        elif kind is T.TOPIC_DELETION_REQUESTED:
            self._deletion_requested(run, view, live)
        elif kind in _DELETION_EVENTS:
            run.partition(P.OFFLINE, Cause.TOPIC_DELETION, unless=(P.OFFLINE, P.NON_EXISTENT))
            run.partition(P.NON_EXISTENT, Cause.TOPIC_DELETION, unless=(P.NON_EXISTENT,))
            for r in sorted(run.replica_states):
                for target in _DELETE_CHAIN[run.replica(r)]:
                    run.replica_step(r, target, Cause.TOPIC_DELETION)
            return PartitionView(state=run.state, replica_states=run.replica_states), run.steps
        elif kind is T.CONTROLLER_ELECTED:
            return self.reseed(view, live)
        new_view = replace(view, state=run.state, replica_states=run.replica_states)
        if kind is T.PARTITION_ASSIGNED and event.replicas is not None:
            new_view = replace(new_view, replicas=event.replicas)
        elif kind is T.PARTITION_STATE_WRITTEN:
            new_view = replace(new_view, leader=event.leader, leader_epoch=event.leader_epoch,
                               controller_epoch=event.controller_epoch, isr=event.isr or ())
        return new_view, run.steps

    def reseed(self, view: PartitionView, live: Container[int]) -> tuple[PartitionView, list[FoldStep]]:
        """A newly elected controller's silent re-initialisation of this partition (docs/kafka-metadata.md).

        PSM@3.8.0 ``initializePartitionState``: Online if the ZK leader is alive, Offline if not, New without a
        state znode. RSM@3.8.0 ``initializeReplicaState``: each assigned replica Online if its broker is alive,
        else ReplicaDeletionIneligible; 2.3+ (KAFKA-3143) then moves those to OfflineReplica (a real step). A
        deleted (NonExistent) partition stays as it is. A re-seed that changes a state is a ``FoldStep``
        (legal, ``Cause.FAILOVER_RESEED``), so history and time travel see it.
        """
        run = _Run(self, view)
        if run.state is P.NON_EXISTENT:
            return view, []
        if view.leader is None:
            target = P.NEW
        else:
            target = P.ONLINE if view.leader >= 0 and view.leader in live else P.OFFLINE
        run.reset_partition(target)
        for r in view.replicas:
            run.reset_replica(r, R.ONLINE if r in live else R.DELETION_INELIGIBLE)
        if self._offline_after_reseed:
            for r in view.replicas:
                if run.replica(r) is R.DELETION_INELIGIBLE:
                    run.replica_step(r, R.OFFLINE, Cause.FAILOVER_OFFLINE)
        return replace(view, state=run.state, replica_states=run.replica_states), run.steps

    # -- rules ----------------------------------------------------------------------------------------
    @staticmethod
    def _assigned(run: _Run, view: PartitionView, event: MetadataEvent) -> None:
        run.partition(P.NEW, Cause.ASSIGNMENT, only_from=P.NON_EXISTENT)
        new = event.replicas or ()
        for r in new:
            if run.replica(r) is R.NON_EXISTENT:
                run.replica_step(r, R.NEW, Cause.ASSIGNMENT)
        if event.replicas is None:
            return
        for r in view.replicas:
            if r not in new:
                for target in _DELETE_CHAIN[run.replica(r)]:
                    run.replica_step(r, target, Cause.REASSIGNED_AWAY)

    @staticmethod
    def _written(run: _Run, view: PartitionView, event: MetadataEvent, live: Container[int]) -> None:
        leader, epoch = event.leader, event.leader_epoch
        deleting = deletion_pending(view.replica_states.values())
        if leader is not None and leader >= 0:
            isr_only = run.state is P.ONLINE and leader == view.leader and epoch == view.leader_epoch
            if not (isr_only or deleting):
                run.partition(P.ONLINE, Cause.LEADER_ELECTED if view.leader is not None else Cause.STATE_CREATED)
        else:
            run.partition(P.OFFLINE, Cause.NO_LEADER, unless=(P.OFFLINE,))
        isr = event.isr or ()
        for r in () if deleting else isr:
            if run.replica(r) is not R.ONLINE:
                run.replica_step(r, R.ONLINE, Cause.IN_ISR)
        by_controller = epoch is not None and view.leader_epoch is not None and epoch > view.leader_epoch
        for r in view.isr:
            if r not in isr and run.replica(r) is R.ONLINE and (by_controller or r not in live):
                run.replica_step(r, R.OFFLINE, Cause.OUT_OF_ISR)

    @staticmethod
    def _broker(run: _Run, view: PartitionView, event: MetadataEvent) -> None:
        b = event.broker
        if b is None or b not in view.replicas:
            return
        if event.type is T.BROKER_DEREGISTERED and run.replica(b) in (R.NEW, R.ONLINE):
            run.replica_step(b, R.OFFLINE, Cause.BROKER_DEREGISTERED)
        elif event.type is T.BROKER_REGISTERED and run.replica(b) in (R.OFFLINE, R.DELETION_INELIGIBLE):
            run.replica_step(b, R.ONLINE, Cause.BROKER_REGISTERED)

    @staticmethod
    def _deletion_requested(run: _Run, view: PartitionView, live: Container[int]) -> None:
        run.partition(P.OFFLINE, Cause.DELETION_REQUESTED, unless=(P.OFFLINE, P.NON_EXISTENT))
        for r in view.replicas:
            s = run.replica(r)
            if s in (R.NON_EXISTENT, R.DELETION_STARTED, R.DELETION_SUCCESSFUL):
                continue
            if r in live:
                if s is not R.OFFLINE:
                    run.replica_step(r, R.OFFLINE, Cause.DELETION_REQUESTED)
                run.replica_step(r, R.DELETION_STARTED, Cause.DELETION_REQUESTED)
            elif s is not R.DELETION_INELIGIBLE:
                run.replica_step(r, R.DELETION_INELIGIBLE, Cause.DELETION_REQUESTED)


class _Run:
    """The running states of one ``PartitionFold`` step and the steps taken so far."""

    def __init__(self, fold: PartitionFold, view: PartitionView) -> None:
        self.fold = fold
        self.state = view.state
        self.replica_states = dict(view.replica_states)
        self.steps: list[FoldStep] = []

    def replica(self, r: int) -> ReplicaState:
        return self.replica_states.get(r, R.NON_EXISTENT)

    def partition(self, target: PartitionState, cause: Cause, *, unless: tuple[PartitionState, ...] = (),
                  only_from: PartitionState | None = None) -> None:
        if self.state in unless or (only_from is not None and self.state is not only_from):
            return
        legal = self.state in self.fold._p_valid[target]
        self.steps.append(FoldStep(None, str(self.state), str(target), legal, cause))
        if legal:
            self.state = target

    def replica_step(self, r: int, target: ReplicaState, cause: Cause) -> None:
        before = self.replica(r)
        legal = before in self.fold._r_valid[target]
        self.steps.append(FoldStep(r, str(before), str(target), legal, cause))
        if legal:
            self.replica_states[r] = target

    def reset_partition(self, target: PartitionState) -> None:
        if self.state is not target:
            self.steps.append(FoldStep(None, str(self.state), str(target), True, Cause.FAILOVER_RESEED))
            self.state = target

    def reset_replica(self, r: int, target: ReplicaState) -> None:
        before = self.replica(r)
        if before is not target:
            self.steps.append(FoldStep(r, str(before), str(target), True, Cause.FAILOVER_RESEED))
            self.replica_states[r] = target


@dataclass(frozen=True)
class Reseed:
    """States a newly elected controller re-initialises silently (no transitions are logged)."""

    partitions: dict[PartitionKey, PartitionState]
    replicas: dict[ReplicaKey, ReplicaState]


def reseed_after_failover(
    partitions: Mapping[PartitionKey, PartitionView], live_brokers: Container[int],
    kafka_version: str = DEFAULT_KAFKA_VERSION,
) -> Reseed:
    """Every partition's and replica's state right after a failover (``PartitionFold.reseed`` over the views)."""
    fold = PartitionFold(kafka_version)
    parts: dict[PartitionKey, PartitionState] = {}
    reps: dict[ReplicaKey, ReplicaState] = {}
    for key, view in partitions.items():
        if view.state is P.NON_EXISTENT:
            continue
        after, _ = fold.reseed(view, live_brokers)
        parts[key] = after.state
        reps.update({(key[0], key[1], r): after.replica_states[r] for r in view.replicas})
    return Reseed(parts, reps)


# ------------------------------------------------------------------------- fold of metadata events
@dataclass
class MetadataProjection(Projection):
    """``Projection`` plus the controller's cached view of every partition and the live brokers."""

    views: dict[PartitionKey, PartitionView] = field(default_factory=dict)
    live_brokers: set[int] = field(default_factory=set)
    brokers_known: bool = False  # a broker event was seen: liveness means something (else no re-seed)


def _affected(proj: MetadataProjection, event: MetadataEvent) -> list[PartitionKey]:
    """Partitions an event touches: its own, all of its topic's (topic-level), or every known one (broker events
    and elections; ``PartitionFold`` decides which of them change)."""
    if event.topic is not None and event.partition is not None:
        return [(event.topic, event.partition)]
    if event.topic is not None:
        return sorted(k for k in proj.views if k[0] == event.topic)
    if event.type is T.CONTROLLER_ELECTED and not proj.brokers_known:
        return []  # liveness unknown (history began without /brokers/ids): nothing to re-derive
    if event.type in (T.BROKER_REGISTERED, T.BROKER_DEREGISTERED, T.CONTROLLER_ELECTED):
        return sorted(proj.views)
    return []


FOLDED_EVENTS: Final = frozenset(
    {
        T.PARTITION_ASSIGNED,
        T.PARTITION_STATE_WRITTEN,
        T.PARTITION_STATE_DELETED,
        T.TOPIC_DELETED,
        T.TOPIC_DELETION_REQUESTED,
        T.BROKER_REGISTERED,
        T.BROKER_DEREGISTERED,
        T.CONTROLLER_ELECTED,
    }
)
"""The metadata event types ``PartitionFold`` steps on."""


def project_metadata(
    events: Iterable[MetadataEvent], kafka_version: str = DEFAULT_KAFKA_VERSION
) -> MetadataProjection:
    """Reference fold of decoded metadata events into both state machines (row at a time).

    Events must be sorted by zxid (``OutOfOrderEventError`` otherwise). The pipelines mirror this.
    """
    proj = MetadataProjection()
    fold = PartitionFold(kafka_version)
    last: int | None = None
    for event in events:
        last = _check_order(last, event.zxid)
        _track_brokers(proj, event)
        if event.type not in FOLDED_EVENTS:
            continue
        live = frozenset(proj.live_brokers)
        for key in _affected(proj, event):
            view, steps = fold.apply(proj.views.get(key, PartitionView()), event, live)
            proj.views[key] = view
            _record(proj, key, event.zxid, steps)
    return proj


def _record(proj: MetadataProjection, key: PartitionKey, zxid: int, steps: list[FoldStep]) -> None:
    topic, partition = key
    for s in steps:
        if s.replica is None:
            proj.partition_transitions.append(
                PartitionTransitionRecord(zxid, topic, partition, s.from_state, s.to_state, s.legal, str(s.cause)))
            proj.partitions[key] = P(s.to_state) if s.legal else P(s.from_state)
        else:
            proj.replica_transitions.append(ReplicaTransitionRecord(
                zxid, topic, partition, s.replica, s.from_state, s.to_state, s.legal, str(s.cause)))
            proj.replicas[(topic, partition, s.replica)] = R(s.to_state) if s.legal else R(s.from_state)


def _track_brokers(proj: MetadataProjection, event: MetadataEvent) -> None:
    if event.broker is None:
        return
    if event.type in (T.BROKER_REGISTERED, T.BROKER_UPDATED):
        proj.live_brokers.add(event.broker)
        proj.brokers_known = True
    elif event.type is T.BROKER_DEREGISTERED:
        proj.live_brokers.discard(event.broker)
        proj.brokers_known = True
