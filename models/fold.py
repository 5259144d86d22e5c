"""The pure, version-aware fold of Kafka's partition and replica state machines.

One rule set (``models.states``' tables, Kafka's ``validPreviousStates``) with three faces:

- ``apply_partition`` / ``apply_replica``: one step. An illegal step leaves the state unchanged and yields a
  violation, as Kafka 1.1+ logs and skips invalid transitions (``logInvalidTransition``).
- ``project`` / ``project_metadata``: left folds over explicit targets or over decoded metadata events.
- integer codes and ``transition_matrix`` / ``legal_matrix``: the same table as small-int matrices for the
  pipelines' vectorised (numpy) segmented prefix-composition scan.

How metadata events turn into state-machine targets is ``infer_partition_target`` /
``infer_replica_targets`` (kafka-zk-metadata.md §1-§3); ``reseed_after_failover`` is the controller's
silent re-initialisation (§2).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
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


_DELETION_EVENTS: Final = frozenset({T.TOPIC_DELETED, T.PARTITION_STATE_DELETED})


def infer_partition_target(
    prev: PartitionView | None, event: MetadataEvent, live_brokers: frozenset[int] | set[int]
) -> PartitionState | None:
    """The partition target the controller moved to when ``event`` happened (None: no step).

    Rules (kafka-zk-metadata.md §1 writers 1-5, §2 tables, TopicDeletionManager):
    - PARTITION_ASSIGNED of an unknown / NonExistent partition -> NewPartition (assignment loaded).
    - PARTITION_STATE_WRITTEN: leader >= 0 -> OnlinePartition, leader -1 -> OfflinePartition; an ISR-only
      write (same leader and leader_epoch: leader-originated or AlterIsr, writers 3/4) is no step.
    - TOPIC_DELETION_REQUESTED -> OfflinePartition (onTopicDeletion moves partitions Offline first).
    - TOPIC_DELETED / PARTITION_STATE_DELETED -> NonExistentPartition (then nothing: already gone).
    ``live_brokers`` is not needed for partitions (the leader field decides) but keeps one signature.
    """
    del live_brokers
    current = P.NON_EXISTENT if prev is None else prev.state
    if event.type is T.PARTITION_ASSIGNED:
        return P.NEW if current is P.NON_EXISTENT else None
    if event.type is T.PARTITION_STATE_WRITTEN:
        if event.leader is None:
            return None
        if prev is not None and prev.leader == event.leader and prev.leader_epoch == event.leader_epoch:
            return None  # ISR-only write: not a state-machine step
        return P.ONLINE if event.leader >= 0 else P.OFFLINE
    if event.type is T.TOPIC_DELETION_REQUESTED:
        return P.OFFLINE if current is not P.NON_EXISTENT else None
    if event.type in _DELETION_EVENTS:
        return P.NON_EXISTENT if current is not P.NON_EXISTENT else None
    return None


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


def infer_replica_targets(
    prev: PartitionView | None, event: MetadataEvent, live_brokers: frozenset[int] | set[int]
) -> list[tuple[int, ReplicaState]]:
    """Ordered (replica, target) steps of one partition's replicas when ``event`` happened.

    ``live_brokers`` is the set of registered brokers *after* the event. Rules (§1-§2, RSM, KC):
    - PARTITION_ASSIGNED: new replicas -> NewReplica; replicas dropped from the assignment (reassignment
      done) -> Offline -> DeletionStarted -> DeletionSuccessful -> NonExistent.
    - PARTITION_STATE_WRITTEN with leader >= 0: assigned replicas on live brokers that are New/Offline ->
      OnlineReplica (onNewPartitionCreation / onBrokerStartup); a replica removed from the ISR whose broker
      is dead -> OfflineReplica (and the former leader when leader becomes -1 and it is dead).
    - BROKER_DEREGISTERED -> the broker's replica OfflineReplica (onBrokerFailure);
      BROKER_REGISTERED -> the broker's Offline/DeletionIneligible replica OnlineReplica (onBrokerStartup).
    - TOPIC_DELETION_REQUESTED: replicas on live brokers -> Offline -> DeletionStarted; on dead brokers ->
      DeletionIneligible (from Offline: legal only on 2.3+, KAFKA-8237).
    - TOPIC_DELETED / PARTITION_STATE_DELETED: every replica along the rest of the deletion chain.
    """
    view = prev if prev is not None else PartitionView()
    states = view.replica_states

    def st(r: int) -> ReplicaState:
        return states.get(r, R.NON_EXISTENT)

    if event.type is T.PARTITION_ASSIGNED:
        new = event.replicas or ()
        steps = [(r, R.NEW) for r in new if st(r) is R.NON_EXISTENT]
        for r in view.replicas:
            if r not in new and st(r) is not R.NON_EXISTENT:
                steps.extend((r, s) for s in _DELETE_CHAIN[st(r)])
        return steps
    if event.type is T.PARTITION_STATE_WRITTEN:
        return _state_write_replica_steps(view, event, live_brokers)
    if event.type is T.BROKER_DEREGISTERED and event.broker in view.replicas:
        b = event.broker
        return [(b, R.OFFLINE)] if st(b) in (R.NEW, R.ONLINE) else []
    if event.type is T.BROKER_REGISTERED and event.broker in view.replicas:
        b = event.broker
        return [(b, R.ONLINE)] if st(b) in (R.OFFLINE, R.DELETION_INELIGIBLE) else []
    if event.type is T.TOPIC_DELETION_REQUESTED:
        steps = []
        for r in view.replicas:
            if st(r) in (R.NON_EXISTENT, R.DELETION_STARTED, R.DELETION_SUCCESSFUL):
                continue
            if r in live_brokers:
                steps += (
                    [(r, R.OFFLINE), (r, R.DELETION_STARTED)]
                    if st(r) is not R.OFFLINE
                    else [(r, R.DELETION_STARTED)]
                )
            elif st(r) is not R.DELETION_INELIGIBLE:
                steps.append((r, R.DELETION_INELIGIBLE))
        return steps
    if event.type in _DELETION_EVENTS:
        return [(r, s) for r in sorted(states) for s in _DELETE_CHAIN[st(r)]]
    return []


def _state_write_replica_steps(
    view: PartitionView, event: MetadataEvent, live_brokers: frozenset[int] | set[int]
) -> list[tuple[int, ReplicaState]]:
    states = view.replica_states
    new_isr = set(event.isr or ())
    steps: list[tuple[int, ReplicaState]] = []
    leader = event.leader if event.leader is not None else -1
    for r in view.replicas:
        s = states.get(r, R.NON_EXISTENT)
        if leader >= 0 and r in live_brokers and s in (R.NEW, R.OFFLINE):
            steps.append((r, R.ONLINE))
            continue
        removed = r in view.isr and r not in new_isr
        lost_leadership = leader == -1 and view.leader == r
        if (removed or lost_leadership) and r not in live_brokers and s in (R.NEW, R.ONLINE):
            steps.append((r, R.OFFLINE))
    return steps


@dataclass(frozen=True)
class Reseed:
    """States a newly elected controller re-initialises silently (no transitions are logged)."""

    partitions: dict[PartitionKey, PartitionState]
    replicas: dict[ReplicaKey, ReplicaState]


def reseed_after_failover(
    partitions: Mapping[PartitionKey, PartitionView], live_brokers: frozenset[int] | set[int]
) -> Reseed:
    """The controller's silent re-seeding on failover (kafka-zk-metadata.md §2).

    PSM@3.8.0 l85-98 ``initializePartitionState``: Online if the ZK leader is alive, Offline if not, New if
    there is no state znode. RSM@3.8.0 l36-70 ``initializeReplicaState``: Online if the broker is alive,
    else ReplicaDeletionIneligible. Deleted (NonExistent) partitions and replicas stay absent.
    """
    parts: dict[PartitionKey, PartitionState] = {}
    reps: dict[ReplicaKey, ReplicaState] = {}
    for key, view in partitions.items():
        if view.state is P.NON_EXISTENT:
            continue
        if view.leader is None:
            parts[key] = P.NEW
        else:
            parts[key] = P.ONLINE if view.leader >= 0 and view.leader in live_brokers else P.OFFLINE
        for r in view.replicas:
            reps[(key[0], key[1], r)] = R.ONLINE if r in live_brokers else R.DELETION_INELIGIBLE
    return Reseed(parts, reps)


# ------------------------------------------------------------------------- fold of metadata events
@dataclass
class MetadataProjection(Projection):
    """``Projection`` plus the controller's cached view of every partition and the live brokers."""

    views: dict[PartitionKey, PartitionView] = field(default_factory=dict)
    live_brokers: set[int] = field(default_factory=set)


def _affected(proj: MetadataProjection, event: MetadataEvent) -> list[PartitionKey]:
    """Partitions an event touches: its own, all of its topic's (topic-level), or a broker's replicas."""
    if event.topic is not None and event.partition is not None:
        return [(event.topic, event.partition)]
    if event.topic is not None:
        return sorted(k for k in proj.views if k[0] == event.topic)
    if event.broker is not None and event.type in (T.BROKER_REGISTERED, T.BROKER_DEREGISTERED):
        return sorted(k for k, v in proj.views.items() if event.broker in v.replicas)
    return []


_PARTITION_EVENTS: Final = frozenset(
    {
        T.PARTITION_ASSIGNED,
        T.PARTITION_STATE_WRITTEN,
        T.PARTITION_STATE_DELETED,
        T.TOPIC_DELETED,
        T.TOPIC_DELETION_REQUESTED,
        T.BROKER_REGISTERED,
        T.BROKER_DEREGISTERED,
    }
)


def project_metadata(
    events: Iterable[MetadataEvent], kafka_version: str = DEFAULT_KAFKA_VERSION
) -> MetadataProjection:
    """Reference fold of decoded metadata events into both state machines (row at a time).

    Events must be sorted by zxid (``OutOfOrderEventError`` otherwise). The pipelines mirror this.
    """
    proj = MetadataProjection()
    last: int | None = None
    for event in events:
        last = _check_order(last, event.zxid)
        _track_brokers(proj, event)
        if event.type is T.CONTROLLER_ELECTED:
            _apply_reseed(proj, event, kafka_version)
        elif event.type in _PARTITION_EVENTS:
            for key in _affected(proj, event):
                _apply_event(proj, key, event, kafka_version)
    return proj


def _track_brokers(proj: MetadataProjection, event: MetadataEvent) -> None:
    if event.broker is None:
        return
    if event.type is T.BROKER_REGISTERED:
        proj.live_brokers.add(event.broker)
    elif event.type is T.BROKER_DEREGISTERED:
        proj.live_brokers.discard(event.broker)


def _apply_event(
    proj: MetadataProjection, key: PartitionKey, event: MetadataEvent, kafka_version: str
) -> None:
    view = proj.views.get(key, PartitionView())
    live = frozenset(proj.live_brokers)
    targets: list[PartitionTarget | ReplicaTarget] = []
    p_target = infer_partition_target(view, event, live)
    r_steps = infer_replica_targets(view, event, live)
    cause = str(event.type)
    if p_target is not None:
        targets.append(PartitionTarget(event.zxid, key[0], key[1], p_target, cause))
    targets.extend(ReplicaTarget(event.zxid, key[0], key[1], r, s, cause) for r, s in r_steps)
    project(targets, kafka_version, proj)
    replica_states = dict(view.replica_states)
    for r, _ in r_steps:  # only the touched replicas changed: keeps the fold linear
        replica_states[r] = proj.replicas[(key[0], key[1], r)]
    proj.views[key] = _next_view(proj, key, view, event, replica_states)


def _next_view(
    proj: MetadataProjection,
    key: PartitionKey,
    view: PartitionView,
    event: MetadataEvent,
    replica_states: dict[int, ReplicaState],
) -> PartitionView:
    new = replace(
        view,
        state=proj.partitions.get(key, P.NON_EXISTENT),
        replica_states=replica_states,
    )
    if event.type is T.PARTITION_ASSIGNED and event.replicas is not None:
        new = replace(new, replicas=event.replicas)
    elif event.type is T.PARTITION_STATE_WRITTEN:
        new = replace(
            new,
            leader=event.leader,
            leader_epoch=event.leader_epoch,
            controller_epoch=event.controller_epoch,
            isr=event.isr or (),
        )
    elif event.type in _DELETION_EVENTS:
        # a recreated topic is a new incarnation: forget leader, epochs and assignment
        new = PartitionView(state=new.state, replica_states=replica_states)
    return new


def _replicas_by_partition(proj: MetadataProjection) -> dict[PartitionKey, dict[int, ReplicaState]]:
    grouped: dict[PartitionKey, dict[int, ReplicaState]] = {}
    for (topic, partition, replica), state in proj.replicas.items():
        grouped.setdefault((topic, partition), {})[replica] = state
    return grouped


def _apply_reseed(proj: MetadataProjection, event: MetadataEvent, kafka_version: str) -> None:
    seed = reseed_after_failover(proj.views, proj.live_brokers)
    proj.partitions.update(seed.partitions)
    proj.replicas.update(seed.replicas)
    if parse_kafka_version(kafka_version) >= (2, 3):
        # 2.3+ (KAFKA-3143): the new controller moves replicas on dead brokers to OfflineReplica
        moves = [
            ReplicaTarget(event.zxid, k[0], k[1], k[2], R.OFFLINE, "failover:offline_replicas")
            for k, s in sorted(seed.replicas.items())
            if s is R.DELETION_INELIGIBLE
        ]
        project(moves, kafka_version, proj)
    grouped = _replicas_by_partition(proj)
    for key, view in proj.views.items():
        proj.views[key] = replace(
            view, state=proj.partitions.get(key, view.state), replica_states=grouped.get(key, {})
        )
