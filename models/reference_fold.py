"""The row-by-row reference folds: what the tests hold the pipelines' folds equal to and the benchmarks' naive
baselines run. Production code does not import this module; the rules themselves live in ``models.fold``.

- ``apply_partition`` / ``apply_replica``: one explicit step against ``models.states``' tables. An illegal step
  leaves the state unchanged and yields a violation, as Kafka 1.1+ logs and skips invalid transitions
  (``logInvalidTransition``).
- ``project``: a left fold of explicit targets; ``project_metadata``: the reference fold of decoded metadata
  events (``models.fold.PartitionFold`` per event and partition, row at a time); ``reseed_after_failover``: a
  failover's re-seed of many partitions.
- ``transition_matrix`` / ``legal_matrix``, ``target_function``, ``compose``, ``fold_codes``: the tables as
  small-int matrices and the sequential scan that a segmented prefix composition must reproduce.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from models.anomalies import AnomalyKind
from models.errors import IllegalTransitionError, OutOfOrderEventError
from models.events import MetadataEvent, MetadataEventType
from models.fold import (
    CLUSTER_WIDE_EVENTS,
    FOLDED_EVENTS,
    NOT_RESEEDED,
    PARTITION_STATES_BY_CODE,
    REPLICA_STATES_BY_CODE,
    FoldStep,
    PartitionFold,
    PartitionView,
)
from models.states import (
    DEFAULT_KAFKA_VERSION,
    PartitionState,
    ReplicaState,
    partition_valid_previous,
    replica_valid_previous,
)

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


# ------------------------------------------------------------------------------------ failover re-seed
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
        if view.state in NOT_RESEEDED:
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
    """Partitions an event touches: its own, all of its topic's (topic-level), or every known one (cluster-wide
    events; ``PartitionFold`` decides which of them change)."""
    if event.topic is not None and event.partition is not None:
        return [(event.topic, event.partition)]
    if event.topic is not None:
        return sorted(k for k in proj.views if k[0] == event.topic)
    if event.type is T.CONTROLLER_ELECTED and not proj.brokers_known:
        return []  # liveness unknown (history began without /brokers/ids): nothing to re-derive
    if event.type in CLUSTER_WIDE_EVENTS:
        return sorted(proj.views)
    return []


def project_metadata(
    events: Iterable[MetadataEvent], kafka_version: str = DEFAULT_KAFKA_VERSION
) -> MetadataProjection:
    """Reference fold of decoded metadata events into both state machines (row at a time).

    Events must be sorted by zxid (``OutOfOrderEventError`` otherwise). The pipelines are held equal to this.
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
