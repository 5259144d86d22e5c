"""How metadata events move Kafka's partition and replica state machines: the inference rules' one home.

``PartitionFold`` steps one partition and its replicas through one decoded metadata event as the controller
would (docs/kafka-metadata.md), including its silent re-initialisation at a failover (``PartitionFold.reseed``).
Its single guarded steps are ``StepRule`` values (the target, the cause, the states the step is attempted in);
every step is checked against ``models.states``' tables (version-aware): an illegal one is reported and leaves
the state unchanged, as Kafka 1.1+ logs and skips it (``logInvalidTransition``).

The pipelines' row fold steps with ``PartitionFold``; their vectorised fold evaluates the same rules on every
state's integer code (``PARTITION_CODES``, ``REPLICA_CODES``) to build its tables. ``models.reference_fold``
holds the row-by-row reference folds the tests and benchmarks use.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final, Generic, TypeVar

from models.events import MetadataEvent, MetadataEventType
from models.states import (
    DEFAULT_KAFKA_VERSION,
    PartitionState,
    ReplicaState,
    parse_kafka_version,
    partition_valid_previous,
    replica_valid_previous,
)

P = PartitionState
R = ReplicaState
T = MetadataEventType
S = TypeVar("S", PartitionState, ReplicaState)


# ------------------------------------------------------------------------------------ integer codes
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
"""The state of a partition nothing has been seen of."""
INITIAL_REPLICA_CODE: Final = REPLICA_CODES[R.NON_EXISTENT]


# ------------------------------------------------------------------------------------------ steps
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


def _attempt(state: S, target: S, cause: Cause, valid_previous: Mapping[S, frozenset[S]],
             replica: int | None) -> tuple[S, FoldStep]:
    """The state after a step toward ``target`` (unchanged when illegal: Kafka 1.1+ skips it) and the step."""
    legal = state in valid_previous[target]
    return (target if legal else state), FoldStep(replica, str(state), str(target), legal, cause)


@dataclass(frozen=True)
class StepRule(Generic[S]):
    """A guarded step: in a state of ``attempted_in`` the controller moves toward ``target`` for ``cause`` (legal
    or not); in any other state nothing happens and no step is logged."""

    target: S
    cause: Cause
    attempted_in: frozenset[S]

    def apply(self, state: S, valid_previous: Mapping[S, frozenset[S]],
              replica: int | None = None) -> tuple[S, FoldStep | None]:
        """The state after this rule in ``state`` and the step it logs (None when not attempted there)."""
        if state not in self.attempted_in:
            return state, None
        return _attempt(state, self.target, self.cause, valid_previous, replica)


# The guarded steps of ``PartitionFold`` (its docstring says when each is taken).
NEW_PARTITION: Final = StepRule(P.NEW, Cause.ASSIGNMENT, frozenset({P.NON_EXISTENT}))
FIRST_LEADER: Final = StepRule(P.ONLINE, Cause.STATE_CREATED, frozenset(P))
NEW_LEADER: Final = StepRule(P.ONLINE, Cause.LEADER_ELECTED, frozenset(P))
SAME_LEADER: Final = StepRule(P.ONLINE, Cause.LEADER_ELECTED, frozenset(P) - {P.ONLINE})
NO_LEADER: Final = StepRule(P.OFFLINE, Cause.NO_LEADER, frozenset(P) - {P.OFFLINE})
DELETION_REQUESTED_OFFLINE: Final = StepRule(P.OFFLINE, Cause.DELETION_REQUESTED,
                                             frozenset(P) - {P.OFFLINE, P.NON_EXISTENT})
TOPIC_DELETED_OFFLINE: Final = StepRule(P.OFFLINE, Cause.TOPIC_DELETION, frozenset(P) - {P.OFFLINE, P.NON_EXISTENT})
TOPIC_DELETED_GONE: Final = StepRule(P.NON_EXISTENT, Cause.TOPIC_DELETION, frozenset(P) - {P.NON_EXISTENT})
NEW_REPLICA: Final = StepRule(R.NEW, Cause.ASSIGNMENT, frozenset({R.NON_EXISTENT}))
INTO_ISR: Final = StepRule(R.ONLINE, Cause.IN_ISR, frozenset(R) - {R.ONLINE})
OUT_OF_ISR: Final = StepRule(R.OFFLINE, Cause.OUT_OF_ISR, frozenset({R.ONLINE}))
BROKER_GONE: Final = StepRule(R.OFFLINE, Cause.BROKER_DEREGISTERED, frozenset({R.NEW, R.ONLINE}))
BROKER_BACK: Final = StepRule(R.ONLINE, Cause.BROKER_REGISTERED, frozenset({R.OFFLINE, R.DELETION_INELIGIBLE}))
INELIGIBLE_OFFLINE: Final = StepRule(R.OFFLINE, Cause.FAILOVER_OFFLINE, frozenset({R.DELETION_INELIGIBLE}))


# ------------------------------------------------------------------------------------ failover re-seed
NOT_RESEEDED: Final = frozenset({P.NON_EXISTENT})
"""Partition states a new controller re-initialises nothing of (a deleted partition and its replicas stay)."""


def reseeded_partition_state(has_state_znode: bool, leader_live: bool) -> PartitionState:
    """PSM@3.8.0 ``initializePartitionState``: New without a state znode, Online if its leader is alive, else Offline."""
    if not has_state_znode:
        return P.NEW
    return P.ONLINE if leader_live else P.OFFLINE


def reseeded_replica_state(broker_live: bool) -> ReplicaState:
    """RSM@3.8.0 ``initializeReplicaState``: Online if its broker is alive, else ReplicaDeletionIneligible."""
    return R.ONLINE if broker_live else R.DELETION_INELIGIBLE


# ----------------------------------------------------------------------------------- the inference
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
DELETION_EVENTS: Final = frozenset({T.TOPIC_DELETED, T.PARTITION_STATE_DELETED})
"""Event types that end a partition's incarnation (a recreated topic is a new one)."""
DELETING_REPLICA_STATES: Final = frozenset({R.DELETION_STARTED, R.DELETION_SUCCESSFUL})
"""Replica states only a started topic deletion reaches (a failover re-seed or the topic's removal ends them)."""
CLUSTER_WIDE_EVENTS: Final = frozenset({T.BROKER_REGISTERED, T.BROKER_DEREGISTERED, T.CONTROLLER_ELECTED})
"""Folded event types about no topic: each reaches every known partition (``PartitionFold`` decides which change)."""
FOLDED_EVENTS: Final = frozenset(
    {
        T.PARTITION_ASSIGNED,
        T.PARTITION_STATE_WRITTEN,
        T.TOPIC_DELETION_REQUESTED,
        *DELETION_EVENTS,
        *CLUSTER_WIDE_EVENTS,
    }
)
"""The metadata event types ``PartitionFold`` steps on."""


def deletion_pending(replica_states: Iterable[ReplicaState | str]) -> bool:
    """Whether a partition's topic deletion has started and not finished: one of its replicas is deleting."""
    return any(s in DELETING_REPLICA_STATES for s in replica_states)


class PartitionFold:
    """The controller's view of one partition, folded one metadata event at a time: the inference rules' home.

    The reference fold (``models.reference_fold.project_metadata``) and the pipelines' row fold
    (``pipelines.state_machines.BucketFolder``) step with this; the vectorised fold (``pipelines.vector_fold``)
    builds its tables from the ``StepRule`` values below. ``live`` holds the brokers registered once the event
    happened. Rules (docs/kafka-metadata.md):

    * PARTITION_ASSIGNED: an unknown partition -> NewPartition (``NEW_PARTITION``); each unknown replica ->
      NewReplica (``NEW_REPLICA``); a replica dropped from the assignment (reassignment done) -> Offline ->
      DeletionStarted -> DeletionSuccessful -> NonExistent.
    * PARTITION_STATE_WRITTEN: leader >= 0 -> OnlinePartition (``FIRST_LEADER`` for the first state znode,
      ``NEW_LEADER``), except an ISR-only write (same leader and leader_epoch: leader-originated or AlterIsr,
      writers 3/4) of an online partition (``SAME_LEADER``); no leader -> OfflinePartition (``NO_LEADER``). Each
      ISR member -> OnlineReplica (``INTO_ISR``). A replica dropped from the ISR goes OfflineReplica
      (``OUT_OF_ISR``) when the controller took it out (leader_epoch bumped: writer 2, an election or
      removeReplicasFromIsr) or its broker is gone; a live follower the leader dropped (same leader_epoch)
      changes no state. While the topic's deletion is pending (``deletion_pending``) a write moves nothing to
      Online: those are the controller taking each replica offline before deleting it
      (TopicDeletionManager.onPartitionDeletion: removeReplicasFromIsr writes leader -1 and keeps the last ISR
      member), no election and no replica coming back.
    * BROKER_DEREGISTERED: the broker's New/Online replica -> OfflineReplica (onBrokerFailure, ``BROKER_GONE``);
      BROKER_REGISTERED: its Offline/DeletionIneligible replica -> OnlineReplica (onBrokerStartup, ``BROKER_BACK``).
    * TOPIC_DELETION_REQUESTED: the partition -> OfflinePartition (``DELETION_REQUESTED_OFFLINE``); replicas on live
      brokers -> Offline -> DeletionStarted, on dead ones -> DeletionIneligible (from Offline legal on 2.3+ only,
      KAFKA-8237).
    * TOPIC_DELETED / PARTITION_STATE_DELETED: the partition -> Offline -> NonExistent (``TOPIC_DELETED_OFFLINE``,
      ``TOPIC_DELETED_GONE``), every replica along the rest of the deletion chain; the view is forgotten (a
      recreated topic is a new incarnation).
    * CONTROLLER_ELECTED: ``reseed``.
    """

    def __init__(self, kafka_version: str = DEFAULT_KAFKA_VERSION) -> None:
        self.kafka_version = kafka_version
        self.partition_valid = partition_valid_previous(kafka_version)
        self.replica_valid = replica_valid_previous(kafka_version)
        # 2.3+ (KAFKA-3143): a re-seed's ineligible replicas then go OfflineReplica (INELIGIBLE_OFFLINE)
        self.offline_after_reseed = parse_kafka_version(kafka_version) >= (2, 3)

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
        elif kind in DELETION_EVENTS:
            run.step_partition(TOPIC_DELETED_OFFLINE)
            run.step_partition(TOPIC_DELETED_GONE)
            for r in sorted(run.replica_states):
                for target in _DELETE_CHAIN[run.replica(r)]:
                    run.move_replica(r, target, Cause.TOPIC_DELETION)
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

        The partition's state: ``reseeded_partition_state`` (from its leader in the ZK state znode); each assigned
        replica's: ``reseeded_replica_state``; 2.3+ (KAFKA-3143) then moves the ineligible ones to OfflineReplica
        (``INELIGIBLE_OFFLINE``, a real step). A partition in ``NOT_RESEEDED`` stays as it is. A re-seed that
        changes a state is a ``FoldStep`` (legal, ``Cause.FAILOVER_RESEED``), so history and time travel see it.
        """
        run = _Run(self, view)
        if run.state in NOT_RESEEDED:
            return view, []
        leader = view.leader
        run.reset_partition(reseeded_partition_state(leader is not None, leader is not None and leader >= 0
                                                     and leader in live))
        for r in view.replicas:
            run.reset_replica(r, reseeded_replica_state(r in live))
        if self.offline_after_reseed:
            for r in view.replicas:
                run.step_replica(r, INELIGIBLE_OFFLINE)
        return replace(view, state=run.state, replica_states=run.replica_states), run.steps

    # -- rules ----------------------------------------------------------------------------------------
    @staticmethod
    def _assigned(run: _Run, view: PartitionView, event: MetadataEvent) -> None:
        run.step_partition(NEW_PARTITION)
        new = event.replicas or ()
        for r in new:
            run.step_replica(r, NEW_REPLICA)
        if event.replicas is None:
            return
        for r in view.replicas:
            if r not in new:
                for target in _DELETE_CHAIN[run.replica(r)]:
                    run.move_replica(r, target, Cause.REASSIGNED_AWAY)

    @staticmethod
    def _written(run: _Run, view: PartitionView, event: MetadataEvent, live: Container[int]) -> None:
        leader, epoch = event.leader, event.leader_epoch
        deleting = deletion_pending(view.replica_states.values())
        if leader is None or leader < 0:
            run.step_partition(NO_LEADER)
        elif not deleting:
            if leader == view.leader and epoch == view.leader_epoch:
                run.step_partition(SAME_LEADER)
            else:
                run.step_partition(FIRST_LEADER if view.leader is None else NEW_LEADER)
        isr = event.isr or ()
        for r in () if deleting else isr:
            run.step_replica(r, INTO_ISR)
        by_controller = epoch is not None and view.leader_epoch is not None and epoch > view.leader_epoch
        for r in view.isr:
            if r not in isr and (by_controller or r not in live):
                run.step_replica(r, OUT_OF_ISR)

    @staticmethod
    def _broker(run: _Run, view: PartitionView, event: MetadataEvent) -> None:
        b = event.broker
        if b is None or b not in view.replicas:
            return
        run.step_replica(b, BROKER_GONE if event.type is T.BROKER_DEREGISTERED else BROKER_BACK)

    @staticmethod
    def _deletion_requested(run: _Run, view: PartitionView, live: Container[int]) -> None:
        run.step_partition(DELETION_REQUESTED_OFFLINE)
        for r in view.replicas:
            s = run.replica(r)
            if s in (R.NON_EXISTENT, R.DELETION_STARTED, R.DELETION_SUCCESSFUL):
                continue
            if r in live:
                if s is not R.OFFLINE:
                    run.move_replica(r, R.OFFLINE, Cause.DELETION_REQUESTED)
                run.move_replica(r, R.DELETION_STARTED, Cause.DELETION_REQUESTED)
            elif s is not R.DELETION_INELIGIBLE:
                run.move_replica(r, R.DELETION_INELIGIBLE, Cause.DELETION_REQUESTED)


class _Run:
    """The running states of one ``PartitionFold`` step and the steps taken so far."""

    def __init__(self, fold: PartitionFold, view: PartitionView) -> None:
        self.fold = fold
        self.state = view.state
        self.replica_states = dict(view.replica_states)
        self.steps: list[FoldStep] = []

    def replica(self, r: int) -> ReplicaState:
        return self.replica_states.get(r, R.NON_EXISTENT)

    def step_partition(self, rule: StepRule[PartitionState]) -> None:
        self.state, step = rule.apply(self.state, self.fold.partition_valid)
        if step is not None:
            self.steps.append(step)

    def step_replica(self, r: int, rule: StepRule[ReplicaState]) -> None:
        self._replica_moved(r, *rule.apply(self.replica(r), self.fold.replica_valid, r))

    def move_replica(self, r: int, target: ReplicaState, cause: Cause) -> None:
        """An unguarded step (the deletion flows)."""
        self._replica_moved(r, *_attempt(self.replica(r), target, cause, self.fold.replica_valid, r))

    def _replica_moved(self, r: int, after: ReplicaState, step: FoldStep | None) -> None:
        if step is None:
            return
        self.steps.append(step)
        if step.legal:  # an illegal step leaves an unknown replica unknown
            self.replica_states[r] = after

    def reset_partition(self, target: PartitionState) -> None:
        if self.state is not target:
            self.steps.append(FoldStep(None, str(self.state), str(target), True, Cause.FAILOVER_RESEED))
            self.state = target

    def reset_replica(self, r: int, target: ReplicaState) -> None:
        before = self.replica(r)
        if before is not target:
            self.steps.append(FoldStep(r, str(before), str(target), True, Cause.FAILOVER_RESEED))
            self.replica_states[r] = target
