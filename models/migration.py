"""ZooKeeper -> KRaft migrations (KIP-866, Kafka 3.4-3.9): the phases, each store's view, their alignment and the
hazards: the one home of the migration rules (docs/migration.md).

During a migration the cluster's metadata lives in two stores. The KRaft controller's metadata log is the source of
truth once the metadata is loaded; it writes every change to the log first and to ZooKeeper after (write-behind),
and records in the ``/migration`` znode the log offset ZooKeeper reflects. This module:

- derives the phase timeline from the log's ``ZkMigrationStateRecord``s, its broker registrations
  (``isMigratingZkBroker``) and ZooKeeper's ``/controller`` claims (``phase_timeline``);
- folds each store into the same shape at a point (``zk_view`` up to a zxid, ``kraft_view`` up to an offset),
  reusing ``models.fold.PartitionFold`` for ZooKeeper's partitions and ``models.kraft_image.MetadataImage`` for
  the log;
- pairs ZooKeeper's ``/migration`` writes with log offsets (``aligned_points``) and compares the two views at every
  settled point (``compare``, ``check_alignment``);
- finds the migration's hazards (``hazards``) and says whether finalizing is safe (``finalize_verdict``).

Pure Python, no I/O: the inputs are ZooKeeper changes (``ZnodeChange``, decoded here) and decoded log records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum, StrEnum
from itertools import groupby
from typing import Final

from models.anomalies import SEVERITY, AnomalyKind
from models.errors import MalformedZnodeError
from models.events import MetadataEvent, MetadataEventType, ZnodeChange, ZnodeOp
from models.fold import PartitionFold, PartitionView
from models.kraft_image import MetadataImage
from models.kraft_records import ControlRecord, MetadataRecord, MetadataRecordType
from models.znode_codec import PathInfo, PathKind, classify_path, decode

T = MetadataEventType
R = MetadataRecordType
K = AnomalyKind


# ------------------------------------------------------------------------------------------------ phases
class ZkMigrationState(IntEnum):
    """``ZkMigrationStateRecord.zkMigrationState`` as Kafka 3.5+ reads it (3.4 wrote 1 for what 3.5 calls
    MIGRATION, so 3.5 swapped the names of 1 and 2 and kept the values)."""

    NONE = 0  # a cluster born in KRaft mode: never a migration
    MIGRATION = 1  # ZooKeeper's metadata is loaded; the controller writes to both stores
    PRE_MIGRATION = 2  # a quorum with migration enabled, waiting for the brokers; the log holds no metadata yet
    POST_MIGRATION = 3  # finalized: the controllers run without the migration flag; no way back


class MigrationPhase(StrEnum):
    """Where a migration stands (docs/migration.md, Phases)."""

    ZOOKEEPER = "zookeeper"  # a ZooKeeper-mode cluster (or one rolled back to it)
    PRE_MIGRATION = "pre_migration"  # the quorum waits for every ZooKeeper broker to register in migration mode
    LOADING = "loading"  # the KRaft controller claimed ZooKeeper's controllership and copies its metadata
    DUAL_WRITE = "dual_write"  # loaded; KRaft leads and writes ZooKeeper behind it; ZooKeeper brokers remain
    KRAFT_BROKERS = "kraft_brokers"  # every registered broker is a KRaft broker; dual-write on, rollback possible
    FINALIZED = "finalized"  # POST_MIGRATION: ZooKeeper is no longer written


ROLLBACK_POSSIBLE: Final = frozenset({MigrationPhase.LOADING, MigrationPhase.DUAL_WRITE,
                                      MigrationPhase.KRAFT_BROKERS})
"""Phases after the KRaft controller claimed ZooKeeper from which the operator can still go back to ZooKeeper."""


class PhaseSignal(StrEnum):
    """What moved a migration into a phase."""

    MIGRATION_STATE_RECORD = "ZkMigrationStateRecord"
    LOAD_TRANSACTION = "metadata transaction"  # 3.6+ loads ZooKeeper's metadata inside one (KIP-868)
    CONTROLLER_CLAIMED = "KRaft controller claimed /controller"
    BROKER_REGISTRATIONS = "broker registrations"
    ZK_CONTROLLER_ELECTED = "ZooKeeper broker elected controller"  # after a KRaft claim: a rollback


@dataclass(frozen=True)
class PhaseChange:
    """The migration entered ``phase`` at ``at``: at log ``offset`` or ZooKeeper ``zxid``, whichever store said so."""

    phase: MigrationPhase
    signal: PhaseSignal
    at: datetime | None
    offset: int | None = None
    zxid: int | None = None


# ------------------------------------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class ZkEntry:
    """One ZooKeeper change and its decoded events; ``change.session_id`` is the writer's session (txnlog rows)."""

    change: ZnodeChange
    info: PathInfo
    events: tuple[MetadataEvent, ...]

    @property
    def zxid(self) -> int:
        return self.change.zxid

    @property
    def at(self) -> datetime | None:
        return self.change.txn_time


def zk_entries(changes: Iterable[ZnodeChange], chroot: str | None = None,
               kafka_version: str | None = None) -> list[ZkEntry]:
    """ZooKeeper changes (``znode_events`` rows) decoded, in zxid order. A payload Kafka cannot have written
    decodes to no events here (the pipeline quarantines it): its znode still counts as written."""
    out = []
    for change in sorted(changes, key=lambda c: c.zxid):
        try:
            events = tuple(decode(change, kafka_version, chroot))
        except MalformedZnodeError:
            events = ()
        out.append(ZkEntry(change, classify_path(change.path, chroot), events))
    return out


@dataclass(frozen=True)
class KraftEntry:
    """One record of the metadata log: its offset, its batch's quorum epoch and append time."""

    offset: int
    epoch: int
    at: datetime | None
    record: MetadataRecord | ControlRecord


@dataclass(frozen=True)
class MigrationHistory:
    """Both stores' histories of one cluster: ZooKeeper's in zxid order, the log's in offset order."""

    zk: tuple[ZkEntry, ...]
    kraft: tuple[KraftEntry, ...]

    @property
    def last_offset(self) -> int | None:
        return self.kraft[-1].offset if self.kraft else None


# ------------------------------------------------------------------------------------------------ views
class Store(StrEnum):
    ZOOKEEPER = "zookeeper"
    KRAFT = "kraft"


@dataclass(frozen=True)
class PartitionFacts:
    """What both stores hold of a partition. ``leader`` None: ZooKeeper has its assignment but no state znode."""

    replicas: tuple[int, ...]
    leader: int | None
    leader_epoch: int | None
    isr: tuple[int, ...]


@dataclass(frozen=True)
class StoreView:
    """One store's metadata at a point (a zxid or an offset), in the shape both stores share."""

    store: Store
    position: int
    topics: Mapping[str, str | None]  # name -> topic id
    partitions: Mapping[tuple[str, int], PartitionFacts]
    brokers: frozenset[int]  # registered: /brokers/ids, or a KRaft registration (fenced or not)
    topic_configs: Mapping[str, Mapping[str, str]]
    migrating_brokers: frozenset[int] = frozenset()  # KRaft: registered with isMigratingZkBroker
    withheld_configs: Mapping[str, frozenset[str]] = field(default_factory=dict)  # KRaft: secret-looking names

    @property
    def kraft_brokers(self) -> frozenset[int]:
        """Brokers registered with the quorum as KRaft brokers (not ZooKeeper brokers in migration mode)."""
        return self.brokers - self.migrating_brokers


_PARTITION_EVENTS: Final = frozenset({T.PARTITION_ASSIGNED, T.PARTITION_STATE_WRITTEN, T.PARTITION_STATE_DELETED,
                                      T.TOPIC_DELETED, T.TOPIC_DELETION_REQUESTED})
_TOPIC_CONFIGS: Final = "topics"  # the entity type of /config/topics/<t>
KRAFT_TOPIC_RESOURCE: Final = 2  # ConfigResource.Type.TOPIC in a ConfigRecord


class ZkReplay:
    """ZooKeeper's view folded one change at a time; ``advance`` moves it to a zxid, ``view`` reads it."""

    def __init__(self, entries: Sequence[ZkEntry]) -> None:
        self._entries, self._next = entries, 0
        self._fold = PartitionFold()
        self.partitions: dict[tuple[str, int], PartitionView] = {}
        self.topics: dict[str, str | None] = {}
        self.brokers: set[int] = set()
        self.configs: dict[str, dict[str, str]] = {}
        self.zxid = -1

    def advance(self, zxid: int) -> list[ZkEntry]:
        """Apply every change up to and including ``zxid``; the changes applied."""
        done = []
        while self._next < len(self._entries) and self._entries[self._next].zxid <= zxid:
            entry = self._entries[self._next]
            self._next += 1
            for event in entry.events:
                self._apply(event)
            done.append(entry)
        self.zxid = max(self.zxid, zxid)
        return done

    def advance_to_time(self, at: datetime | None) -> None:
        """Apply every change ZooKeeper stamped no later than ``at`` (changes without a time count as earlier)."""
        while self._next < len(self._entries):
            when = self._entries[self._next].at
            if at is not None and when is not None and when > at:
                return
            self.advance(self._entries[self._next].zxid)

    def _apply(self, event: MetadataEvent) -> None:
        kind = event.type
        if event.broker is not None and kind in (T.BROKER_REGISTERED, T.BROKER_UPDATED):
            self.brokers.add(event.broker)
        elif event.broker is not None and kind is T.BROKER_DEREGISTERED:
            self.brokers.discard(event.broker)
        elif kind is T.CONFIG_CHANGED and event.topic is not None and event.detail.get("entity_type") == _TOPIC_CONFIGS:
            config = event.detail.get("config")
            if event.detail.get("deleted"):
                self.configs.pop(event.topic, None)
            elif isinstance(config, dict):
                self.configs[event.topic] = {str(k): str(v) for k, v in config.items()}
        if kind not in _PARTITION_EVENTS or event.topic is None:
            return
        if kind is T.PARTITION_ASSIGNED and event.partition is not None:
            topic_id = event.detail.get("topic_id")
            self.topics[event.topic] = topic_id if isinstance(topic_id, str) else None
        elif kind is T.TOPIC_DELETED:
            self.topics.pop(event.topic, None)
            self.configs.pop(event.topic, None)
        keys = ([(event.topic, event.partition)] if event.partition is not None
                else sorted(k for k in self.partitions if k[0] == event.topic))
        for key in keys:
            view, _ = self._fold.apply(self.partitions.get(key, PartitionView()), event, self.brokers)
            if view.replicas or view.leader is not None:
                self.partitions[key] = view
            else:
                self.partitions.pop(key, None)  # deleted: a recreated topic is a new incarnation

    def view(self) -> StoreView:
        partitions = {key: PartitionFacts(tuple(v.replicas), v.leader, v.leader_epoch, tuple(v.isr))
                      for key, v in self.partitions.items() if key[0] in self.topics}
        return StoreView(Store.ZOOKEEPER, self.zxid, dict(self.topics), partitions, frozenset(self.brokers),
                         {t: dict(c) for t, c in self.configs.items()})


class KraftReplay:
    """The log's view, one record at a time through ``MetadataImage``; ``advance`` moves it to an offset."""

    def __init__(self, entries: Sequence[KraftEntry]) -> None:
        self._entries, self._next = entries, 0
        self.image = MetadataImage()
        self.configs: dict[str, dict[str, str]] = {}
        self.withheld: dict[str, set[str]] = {}
        self.migrating: dict[int, bool] = {}  # broker -> registered with isMigratingZkBroker
        self.offset = -1

    def advance(self, offset: int) -> list[tuple[KraftEntry, list[MetadataEvent]]]:
        """Apply every record up to and including ``offset``; each record applied with its events."""
        done = []
        while self._next < len(self._entries) and self._entries[self._next].offset <= offset:
            entry = self._entries[self._next]
            self._next += 1
            done.append((entry, self._apply(entry)))
        self.offset = max(self.offset, offset)
        return done

    def _apply(self, entry: KraftEntry) -> list[MetadataEvent]:
        record = entry.record
        if isinstance(record, ControlRecord):
            return self.image.apply_control(record, entry.offset, entry.epoch, entry.at)
        events = self.image.apply(record, entry.offset, entry.epoch, entry.at)
        self.image.findings.clear()  # the KRaft stage reports those; a view needs none
        if record.record_type is R.REGISTER_BROKER_RECORD:
            self.migrating[int(record.fields["brokerId"])] = bool(record.fields.get("isMigratingZkBroker", False))
        elif record.record_type is R.UNREGISTER_BROKER_RECORD:
            self.migrating.pop(int(record.fields["brokerId"]), None)
        for event in events:
            if event.type is T.TOPIC_DELETED and event.topic is not None:  # a removed topic's configs go with it
                self.configs.pop(event.topic, None)
                self.withheld.pop(event.topic, None)
            elif event.type is T.CONFIG_CHANGED and event.detail.get("resource_type") == KRAFT_TOPIC_RESOURCE:
                topic, name, value = str(event.detail["resource"]), str(event.detail["name"]), event.detail["value"]
                configs = self.configs.setdefault(topic, {})
                if event.detail.get("deleted"):
                    configs.pop(name, None)
                    self.withheld.get(topic, set()).discard(name)
                elif value is None:  # a secret-looking name: the image keeps no value
                    self.withheld.setdefault(topic, set()).add(name)
                else:
                    configs[name] = str(value)
        return events

    def view(self) -> StoreView:
        image = self.image
        topics: dict[str, str | None] = {name: topic_id for topic_id, name in image.topics.items()}
        partitions = {(p.topic, p.partition): PartitionFacts(tuple(p.replicas), p.leader, p.leader_epoch, tuple(p.isr))
                      for p in image.partitions.values()}
        brokers = frozenset(image.brokers)
        migrating = frozenset(b for b in brokers if self.migrating.get(b, False))
        return StoreView(Store.KRAFT, self.offset, topics, partitions, brokers,
                         {t: dict(c) for t, c in self.configs.items() if t in topics}, migrating,
                         {t: frozenset(n) for t, n in self.withheld.items() if n})


def zk_view(entries: Sequence[ZkEntry], zxid: int) -> StoreView:
    """ZooKeeper's view after every change up to and including ``zxid``."""
    replay = ZkReplay(entries)
    replay.advance(zxid)
    return replay.view()


def kraft_view(entries: Sequence[KraftEntry], offset: int) -> StoreView:
    """The log's view after every record up to and including ``offset``."""
    replay = KraftReplay(entries)
    replay.advance(offset)
    return replay.view()


# ------------------------------------------------------------------------------------------------ compare
class EntityKind(StrEnum):
    TOPIC = "topic"
    PARTITION = "partition"
    BROKER = "broker"
    TOPIC_CONFIG = "topic_config"


class ViewField(StrEnum):
    """The fields ``compare`` holds equal (a topic config's field is the config's own name)."""

    EXISTS = "exists"
    TOPIC_ID = "topic_id"
    REPLICAS = "replicas"
    LEADER = "leader"
    LEADER_EPOCH = "leader_epoch"
    ISR = "isr"
    REGISTERED = "registered"


@dataclass(frozen=True)
class Divergence:
    """One field on which the two stores disagree; a value of None is an absent one."""

    entity: EntityKind
    key: str  # the topic, ``<topic>-<partition>``, or the broker id
    field: str  # a ``ViewField``, or a config name for TOPIC_CONFIG
    zk_value: object
    kraft_value: object
    topic: str | None = None
    partition: int | None = None
    broker: int | None = None

    @property
    def identity(self) -> tuple[EntityKind, str, str]:
        """What diverges, whatever the values: the same divergence at two points has one identity."""
        return (self.entity, self.key, self.field)


def compare(zk: StoreView, kraft: StoreView) -> list[Divergence]:
    """Where ZooKeeper's view differs from the log's: topics (existence, topic id), partitions of topics both
    have (existence, replicas in order, leader, leader epoch, the ISR as a set), brokers ZooKeeper has registered
    that the quorum has not, and the topic configs of topics both have (names the log withholds are skipped)."""
    out: list[Divergence] = []
    D = Divergence
    for topic in sorted(set(zk.topics) | set(kraft.topics)):
        if (topic in zk.topics) != (topic in kraft.topics):
            out.append(D(EntityKind.TOPIC, topic, ViewField.EXISTS, topic in zk.topics, topic in kraft.topics,
                         topic=topic))
        elif None not in (zk.topics[topic], kraft.topics[topic]) and zk.topics[topic] != kraft.topics[topic]:
            out.append(D(EntityKind.TOPIC, topic, ViewField.TOPIC_ID, zk.topics[topic], kraft.topics[topic],
                         topic=topic))
    both = set(zk.topics) & set(kraft.topics)
    for key in sorted(k for k in set(zk.partitions) | set(kraft.partitions) if k[0] in both):
        name = f"{key[0]}-{key[1]}"
        mine, theirs = zk.partitions.get(key), kraft.partitions.get(key)
        if mine is None or theirs is None:
            out.append(D(EntityKind.PARTITION, name, ViewField.EXISTS, mine is not None, theirs is not None,
                         topic=key[0], partition=key[1]))
            continue
        for attr, zk_value, kraft_value in (
                (ViewField.REPLICAS, mine.replicas, theirs.replicas), (ViewField.LEADER, mine.leader, theirs.leader),
                (ViewField.LEADER_EPOCH, mine.leader_epoch, theirs.leader_epoch),
                (ViewField.ISR, tuple(sorted(mine.isr)), tuple(sorted(theirs.isr)))):
            if zk_value != kraft_value:
                out.append(D(EntityKind.PARTITION, name, attr, zk_value, kraft_value, topic=key[0], partition=key[1]))
    for broker in sorted(zk.brokers - kraft.brokers):
        out.append(D(EntityKind.BROKER, str(broker), ViewField.REGISTERED, True, False, broker=broker))
    for topic in sorted(both):
        mine_c, theirs_c = zk.topic_configs.get(topic, {}), kraft.topic_configs.get(topic, {})
        withheld = kraft.withheld_configs.get(topic, frozenset())
        for name in sorted((set(mine_c) | set(theirs_c)) - withheld):
            if mine_c.get(name) != theirs_c.get(name):
                out.append(D(EntityKind.TOPIC_CONFIG, topic, name, mine_c.get(name), theirs_c.get(name), topic=topic))
    return out


# ------------------------------------------------------------------------------------------------ alignment
class Unsettled(StrEnum):
    """Why a ``/migration`` write is no point to compare the stores at."""

    NOT_LOADED = "not loaded"  # offset -1: the log does not hold ZooKeeper's metadata yet
    WITHIN_BATCH = "within a batch"  # the offset did not move: a multi of a batch, or a claim's rewrite
    LOG_NOT_COLLECTED = "log not collected"  # the log history does not reach the offset yet


@dataclass(frozen=True)
class AlignedPoint:
    """A ``/migration`` write: at ``zxid`` ZooKeeper says it reflects the log up to ``offset`` (of quorum
    ``epoch``). ``settled``: the write moved the offset on, so every ZooKeeper write of the log's changes up to
    ``offset`` precedes it and none of a later change does (``unsettled`` says why not otherwise)."""

    zxid: int
    offset: int
    epoch: int
    at: datetime | None
    session_id: int | None
    kraft_controller_id: int
    kraft_controller_epoch: int
    settled: bool
    unsettled: Unsettled | None = None


def _migration_event(entry: ZkEntry) -> MetadataEvent | None:
    return next((e for e in entry.events if e.type is T.MIGRATION_STATE), None)


def _int(value: object, default: int = -1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def aligned_points(history: MigrationHistory) -> list[AlignedPoint]:
    """Every ``/migration`` write, paired with its log offset and judged settled or not (docs/migration.md,
    Alignment). A deleted ``/migration`` (a rollback's cleanup) starts over."""
    points: list[AlignedPoint] = []
    last_offset = history.last_offset
    previous: int | None = None
    for entry in history.zk:
        if entry.info.kind is not PathKind.MIGRATION:
            continue
        if entry.change.op is ZnodeOp.DELETE:
            previous = None
            continue
        event = _migration_event(entry)
        if event is None:
            continue
        offset = _int(event.detail.get("kraft_metadata_offset"))
        why: Unsettled | None = None
        if offset < 0:
            why = Unsettled.NOT_LOADED
        elif offset == previous:
            why = Unsettled.WITHIN_BATCH
        elif last_offset is None or last_offset < offset:
            why = Unsettled.LOG_NOT_COLLECTED
        points.append(AlignedPoint(entry.zxid, offset, _int(event.detail.get("kraft_metadata_epoch")), entry.at,
                                   entry.change.session_id, _int(event.detail.get("kraft_controller_id")),
                                   _int(event.detail.get("kraft_controller_epoch")), why is None, why))
        previous = offset
    return points


@dataclass(frozen=True)
class PointCheck:
    """The comparison of the two stores at one settled aligned point."""

    point: AlignedPoint
    divergences: tuple[Divergence, ...]


def check_alignment(history: MigrationHistory, points: Sequence[AlignedPoint] | None = None) -> list[PointCheck]:
    """``compare`` at every settled aligned point, in order (one pass over each history)."""
    zk, kraft = ZkReplay(history.zk), KraftReplay(history.kraft)
    out = []
    for point in points if points is not None else aligned_points(history):
        if not point.settled:
            continue
        zk.advance(point.zxid)
        kraft.advance(point.offset)
        out.append(PointCheck(point, tuple(compare(zk.view(), kraft.view()))))
    return out


# ------------------------------------------------------------------------------------------------ phase timeline
def _is_claim(event: MetadataEvent) -> bool:
    """A KRaft controller writing /controller (with its kraftControllerEpoch) to lead the ZooKeeper brokers."""
    return event.type is T.CONTROLLER_ELECTED and event.detail.get("kraft") is True


def _is_zk_election(event: MetadataEvent) -> bool:
    return event.type is T.CONTROLLER_ELECTED and event.detail.get("kraft") is not True


@dataclass(frozen=True)
class _Signal:
    at: datetime | None
    signal: PhaseSignal
    offset: int | None = None
    zxid: int | None = None
    state: ZkMigrationState | None = None
    all_kraft: bool = False  # broker registrations: every registered broker is a KRaft broker
    begin: bool = True  # load transaction: begun (or aborted)


def _kraft_signals(history: MigrationHistory) -> list[_Signal]:
    out = []
    replay = KraftReplay(history.kraft)
    for entry in history.kraft:
        replay.advance(entry.offset)
        record = entry.record
        if isinstance(record, ControlRecord):
            continue
        kind = record.record_type
        if kind is R.ZK_MIGRATION_STATE_RECORD:
            value = _int(record.fields.get("zkMigrationState"))
            if value in {s.value for s in ZkMigrationState}:
                out.append(_Signal(entry.at, PhaseSignal.MIGRATION_STATE_RECORD, entry.offset,
                                   state=ZkMigrationState(value)))
        elif kind in (R.BEGIN_TRANSACTION_RECORD, R.ABORT_TRANSACTION_RECORD):
            out.append(_Signal(entry.at, PhaseSignal.LOAD_TRANSACTION, entry.offset,
                               begin=kind is R.BEGIN_TRANSACTION_RECORD))
        elif kind in (R.REGISTER_BROKER_RECORD, R.UNREGISTER_BROKER_RECORD):
            view = replay.view()
            out.append(_Signal(entry.at, PhaseSignal.BROKER_REGISTRATIONS, entry.offset,
                               all_kraft=bool(view.brokers) and not view.migrating_brokers))
    return out


def _zk_signals(history: MigrationHistory) -> list[_Signal]:
    out = []
    claimed = False
    for entry in history.zk:
        for event in entry.events:
            if _is_claim(event):
                claimed = True
                out.append(_Signal(entry.at, PhaseSignal.CONTROLLER_CLAIMED, zxid=entry.zxid))
            elif _is_zk_election(event) and claimed:
                claimed = False
                out.append(_Signal(entry.at, PhaseSignal.ZK_CONTROLLER_ELECTED, zxid=entry.zxid))
    return out


def _zk_first(zk: _Signal, kraft: _Signal) -> bool:
    return zk.at is None or kraft.at is None or zk.at <= kraft.at


def _merged(zk: list[_Signal], kraft: list[_Signal]) -> Iterator[_Signal]:
    """Both stores' signals by time; where one has no time, ZooKeeper's first (each store keeps its order)."""
    i = j = 0
    while i < len(zk) or j < len(kraft):
        if j == len(kraft) or (i < len(zk) and _zk_first(zk[i], kraft[j])):
            yield zk[i]
            i += 1
        else:
            yield kraft[j]
            j += 1


def phase_timeline(history: MigrationHistory) -> list[PhaseChange]:
    """Every change of phase, in order; the history starts in ``ZOOKEEPER``. Both stores' signals are merged by
    time (docs/migration.md, Phases)."""
    P = MigrationPhase
    phase, state, all_kraft = P.ZOOKEEPER, None, False
    out: list[PhaseChange] = []
    for s in _merged(_zk_signals(history), _kraft_signals(history)):
        after = phase
        if s.signal is PhaseSignal.MIGRATION_STATE_RECORD:
            state = s.state
            if state is ZkMigrationState.PRE_MIGRATION:
                after = P.PRE_MIGRATION
            elif state is ZkMigrationState.MIGRATION:
                after = P.KRAFT_BROKERS if all_kraft else P.DUAL_WRITE
            elif state is ZkMigrationState.POST_MIGRATION:
                after = P.FINALIZED
        elif s.signal is PhaseSignal.LOAD_TRANSACTION:
            if s.begin and phase is P.PRE_MIGRATION:
                after = P.LOADING
            elif not s.begin and phase is P.LOADING:
                after = P.PRE_MIGRATION
        elif s.signal is PhaseSignal.BROKER_REGISTRATIONS:
            all_kraft = s.all_kraft
            if phase in (P.DUAL_WRITE, P.KRAFT_BROKERS):
                after = P.KRAFT_BROKERS if all_kraft else P.DUAL_WRITE
        elif s.signal is PhaseSignal.CONTROLLER_CLAIMED:
            if phase is P.PRE_MIGRATION:
                after = P.LOADING
            elif phase is P.ZOOKEEPER and state is ZkMigrationState.MIGRATION:
                after = P.KRAFT_BROKERS if all_kraft else P.DUAL_WRITE  # a quorum back after a rollback
        elif s.signal is PhaseSignal.ZK_CONTROLLER_ELECTED and phase in ROLLBACK_POSSIBLE:
            after = P.ZOOKEEPER
        if after is not phase:
            out.append(PhaseChange(after, s.signal, s.at, s.offset, s.zxid))
            phase = after
    return out


def phase_at(timeline: Sequence[PhaseChange], at: datetime | None) -> MigrationPhase:
    """The phase at a time (a time unknown: the last phase)."""
    phase = MigrationPhase.ZOOKEEPER
    for change in timeline:
        if at is not None and change.at is not None and change.at > at:
            break
        phase = change.phase
    return phase


# ------------------------------------------------------------------------------------------------ hazards
@dataclass(frozen=True)
class MigrationFinding:
    """A migration hazard: where ZooKeeper shows it (``zxid``), the log (``offset``), or both."""

    kind: AnomalyKind
    at: datetime | None
    details: dict[str, object]
    zxid: int | None = None
    offset: int | None = None
    topic: str | None = None
    partition: int | None = None
    broker: int | None = None

    @property
    def severity(self) -> str:
        return SEVERITY[self.kind]


DRIVER_WRITTEN: Final = frozenset({PathKind.TOPIC, PathKind.PARTITION, PathKind.PARTITION_STATE, PathKind.CONFIG,
                                   PathKind.DELETE_TOPIC, PathKind.REASSIGNMENT, PathKind.PREFERRED_ELECTION})
"""Znodes only the KRaft controller may write once it has claimed ZooKeeper: topics, partitions, entity configs,
and the admin requests no ZooKeeper controller is left to act on."""
RESYNC_LISTED: Final = 50
"""The most paths of each kind a re-sync finding lists (its counts are whole)."""


def driver_sessions(history: MigrationHistory) -> frozenset[int]:
    """The ZooKeeper sessions of KRaft controllers: those that wrote ``/migration`` or claimed ``/controller``."""
    sessions = set()
    for entry in history.zk:
        sid = entry.change.session_id
        if sid is None:
            continue
        if (entry.info.kind is PathKind.MIGRATION and entry.change.op is not ZnodeOp.DELETE) or any(
                _is_claim(e) for e in entry.events):
            sessions.add(sid)
    return frozenset(sessions)


def _window_open(history: MigrationHistory, timeline: Sequence[PhaseChange]) -> Iterator[tuple[ZkEntry, bool]]:
    """Each ZooKeeper change with whether a KRaft controller holds ZooKeeper then: from its claim to a ZooKeeper
    broker's election (a rollback) or the finalization (by time)."""
    finalized = next((c.at for c in timeline if c.phase is MigrationPhase.FINALIZED), None)
    held = False
    for entry in history.zk:
        if any(_is_claim(e) for e in entry.events):
            held = True
        elif any(_is_zk_election(e) for e in entry.events):
            held = False
        after_final = finalized is not None and entry.at is not None and entry.at > finalized
        yield entry, held and not after_final


def _out_of_band(history: MigrationHistory, timeline: Sequence[PhaseChange]) -> list[MigrationFinding]:
    """migration-single-writer: while a KRaft controller holds ZooKeeper, only its sessions write topics,
    partitions and configs. A change without a session (a watch row) cannot be judged here."""
    drivers = driver_sessions(history)
    out = []
    for entry, held in _window_open(history, timeline):
        sid = entry.change.session_id
        if not held or entry.info.kind not in DRIVER_WRITTEN or sid is None or sid in drivers:
            continue
        if entry.change.op not in (ZnodeOp.CREATE, ZnodeOp.SET, ZnodeOp.DELETE):
            continue
        out.append(MigrationFinding(
            K.MIGRATION_OUT_OF_BAND_ZK_WRITE, entry.at,
            {"path": entry.change.path, "op": str(entry.change.op), "session_id": sid,
             "driver_sessions": sorted(drivers)},
            zxid=entry.zxid, topic=entry.info.topic, partition=entry.info.partition))
    return out


ChangeKey = tuple[str, ...]
"""What a write is of, as a ZooKeeper write and a log change name it alike: ``("assignment", topic)``,
``("state", topic, partition)``, ``("config", topic)``, ``("topic", topic)`` (all of a topic), ``("cluster",)``."""


def _zk_change_key(info: PathInfo) -> ChangeKey:
    """What a driver write is of (non-topic configs: the cluster's)."""
    if info.topic is None:
        return ("cluster",)
    if info.kind is PathKind.PARTITION_STATE:
        return ("state", info.topic, str(info.partition))
    if info.kind is PathKind.CONFIG:
        return ("config", info.topic)
    return ("assignment", info.topic)


_WHOLE_TOPIC_EVENTS: Final = frozenset({T.TOPIC_CREATED, T.TOPIC_DELETED, T.TOPIC_DELETION_REQUESTED,
                                        T.TOPIC_DELETION_COMPLETED, T.PARTITION_STATE_DELETED})


def _kraft_change_keys(event: MetadataEvent) -> list[ChangeKey]:
    """What ZooKeeper writes a log change may cause."""
    if event.type is T.CONFIG_CHANGED:
        if event.detail.get("resource_type") == KRAFT_TOPIC_RESOURCE:
            return [("config", str(event.detail.get("resource")))]
        return [("cluster",)]
    if event.topic is None:
        return [("cluster",)] if event.type is T.OTHER else []
    if event.type in _WHOLE_TOPIC_EVENTS:
        return [("topic", event.topic)]
    if event.type is T.PARTITION_STATE_WRITTEN:
        return [("state", event.topic, str(event.partition))]
    return [("assignment", event.topic)]  # PARTITION_ASSIGNED, REASSIGNMENT_REQUESTED


def _explained(key: ChangeKey, changed: set[ChangeKey]) -> bool:
    return key in changed or (len(key) > 1 and ("topic", key[1]) in changed)


def _kraft_changed(history: MigrationHistory, after: int, upto: int | None) -> set[ChangeKey]:
    """What the log changed in (``after``, ``upto``]: the ZooKeeper writes that range explains."""
    keys: set[ChangeKey] = set()
    replay = KraftReplay(history.kraft)
    for entry, events in replay.advance(upto if upto is not None else 2**63 - 1):
        if entry.offset > after:
            for event in events:
                keys.update(_kraft_change_keys(event))
    return keys


@dataclass
class _Resync:
    """A KRaft->ZooKeeper full sync: after a claim of a loaded migration (a failover, KAFKA-15010) or after the
    load, to the next write of ``/migration`` that moves the offset on."""

    start_zxid: int
    from_offset: int
    after: str  # "failover" or "load"
    at: datetime | None
    writes: list[ZkEntry] = field(default_factory=list)


def _resyncs(history: MigrationHistory) -> list[MigrationFinding]:
    drivers = driver_sessions(history)
    out: list[MigrationFinding] = []
    offset: int | None = None
    window: _Resync | None = None

    def close(upto: int | None) -> None:
        if window is None or not window.writes:
            return
        explained = _kraft_changed(history, window.from_offset, upto)
        unexplained = [w for w in window.writes if not _explained(_zk_change_key(w.info), explained)]
        if not unexplained:
            return
        by_op: dict[str, list[str]] = {"created": [], "changed": [], "deleted": []}
        for w in unexplained:
            verb = {ZnodeOp.CREATE: "created", ZnodeOp.DELETE: "deleted"}.get(w.change.op, "changed")
            by_op[verb].append(w.change.path)
        details: dict[str, object] = {"after": window.after, "from_offset": window.from_offset, "to_offset": upto,
                                      "started_at_zxid": window.start_zxid}
        for verb, paths in by_op.items():
            details[verb] = sorted(set(paths))[:RESYNC_LISTED]
            details[f"{verb}_count"] = len(set(paths))
        first = unexplained[0]
        out.append(MigrationFinding(K.MIGRATION_RESYNC_OVERWROTE_ZK, first.at, details, zxid=first.zxid,
                                    offset=window.from_offset))

    for entry in history.zk:
        if entry.info.kind is PathKind.MIGRATION:
            event = _migration_event(entry)
            if entry.change.op is ZnodeOp.DELETE:
                offset = None
                continue
            new = _int(event.detail.get("kraft_metadata_offset")) if event is not None else -1
            if new >= 0 and new != offset:
                if offset is None or offset < 0:  # the load is done: its full sync follows
                    close(new)
                    window = _Resync(entry.zxid, new, "load", entry.at)
                else:
                    close(new)
                    window = None
            offset = new
        elif any(_is_claim(e) for e in entry.events):
            if offset is not None and offset >= 0:
                close(None)
                window = _Resync(entry.zxid, offset, "failover", entry.at)
        elif (window is not None and entry.info.kind in DRIVER_WRITTEN and entry.change.session_id in drivers
              and entry.change.op in (ZnodeOp.CREATE, ZnodeOp.SET, ZnodeOp.DELETE)):
            window.writes.append(entry)
    close(history.last_offset)
    return out


def _stale_migration_znode(history: MigrationHistory, timeline: Sequence[PhaseChange]) -> list[MigrationFinding]:
    """KAFKA-17146: a claim that opens a migration attempt finds ``/migration`` already holding an offset, left by
    an earlier attempt: the controller then skips loading ZooKeeper's metadata, and its full sync makes ZooKeeper
    what the (empty) log holds."""
    out = []
    offset: int | None = None
    holder_is_kraft = False
    rolled_back_since_write = False
    for entry in history.zk:
        if entry.info.kind is PathKind.MIGRATION:
            event = _migration_event(entry)
            offset = None if entry.change.op is ZnodeOp.DELETE or event is None else _int(
                event.detail.get("kraft_metadata_offset"))
            rolled_back_since_write = False
            continue
        for event in entry.events:
            if _is_zk_election(event):
                if holder_is_kraft:
                    rolled_back_since_write = True
                holder_is_kraft = False
            elif _is_claim(event):
                opens = not holder_is_kraft
                holder_is_kraft = True
                if not opens or offset is None or offset < 0:
                    continue
                phase = phase_at(timeline, entry.at)
                loaded = phase in (MigrationPhase.DUAL_WRITE, MigrationPhase.KRAFT_BROKERS)
                if rolled_back_since_write or (history.kraft and not loaded):
                    out.append(MigrationFinding(
                        K.MIGRATION_STALE_ZNODE, entry.at,
                        {"kraft_metadata_offset": offset, "phase": str(phase),
                         "rolled_back_since_written": rolled_back_since_write},
                        zxid=entry.zxid))
    return out


def _kraft_epoch_ahead(history: MigrationHistory, timeline: Sequence[PhaseChange]) -> list[MigrationFinding]:
    """KAFKA-20488: while a rollback is possible, the KRaft controller epoch ZooKeeper carries (in ``/controller``,
    ``/migration`` and the partition states the controller writes) is above ``/controller_epoch``: after a rollback
    the ZooKeeper controller elected at ``/controller_epoch`` + 1 finds partition states written by a newer epoch
    and will not elect their leaders. Once per KRaft epoch."""
    drivers = driver_sessions(history)
    out = []
    zk_epoch: int | None = None
    kraft_epoch = -1
    reported: set[int] = set()
    # judged once per zxid: a claim's multi sets /controller_epoch and creates /controller in one transaction
    for zxid, group in groupby(_window_open(history, timeline), key=lambda pair: pair[0].zxid):
        held, at = False, None
        for entry, entry_held in group:
            held, at = entry_held, entry.at
            for event in entry.events:
                if event.type is T.CONTROLLER_EPOCH_CHANGED and event.controller_epoch is not None:
                    zk_epoch = event.controller_epoch
                elif entry_held and (_is_claim(event) or event.type is T.MIGRATION_STATE):
                    kraft_epoch = max(kraft_epoch, _int(event.detail.get("kraft_controller_epoch")))
                elif (entry_held and event.type is T.PARTITION_STATE_WRITTEN and event.controller_epoch is not None
                      and entry.change.session_id in drivers):
                    kraft_epoch = max(kraft_epoch, event.controller_epoch)
        if held and zk_epoch is not None and kraft_epoch > zk_epoch and kraft_epoch not in reported:
            reported.add(kraft_epoch)
            out.append(MigrationFinding(K.MIGRATION_KRAFT_EPOCH_AHEAD, at,
                                        {"kraft_controller_epoch": kraft_epoch, "zk_controller_epoch": zk_epoch},
                                        zxid=zxid))
    return out


def _rollbacks(history: MigrationHistory, timeline: Sequence[PhaseChange]) -> list[MigrationFinding]:
    """migration-rollback: each rollback of the timeline (a ZooKeeper broker elected controller after a KRaft
    controller's claim, before finalization), with how far the attempt had gone: the phase it left, whether every
    broker had been a KRaft broker (Kafka's revert then takes two rolls), the brokers still registered with the
    quorum as KRaft brokers at the election (no ZooKeeper controller leads them), and the offset ``/migration``
    still holds (the revert Kafka 3.9 documents after the brokers moved does not remove it: KAFKA-17146)."""
    out = []
    kraft = KraftReplay(history.kraft)
    zk_next, migration_offset = 0, None
    left, moved = MigrationPhase.ZOOKEEPER, False
    for change in timeline:
        if change.signal is PhaseSignal.ZK_CONTROLLER_ELECTED and change.zxid is not None:
            elected = None
            while zk_next < len(history.zk) and history.zk[zk_next].zxid <= change.zxid:
                entry = history.zk[zk_next]
                zk_next += 1
                if entry.info.kind is PathKind.MIGRATION:
                    event = _migration_event(entry)
                    migration_offset = (None if entry.change.op is ZnodeOp.DELETE or event is None
                                        else _int(event.detail.get("kraft_metadata_offset")))
                elected = next((e.controller_id for e in entry.events if _is_zk_election(e)), elected)
            kraft.advance(max((e.offset for e in history.kraft
                               if e.at is None or change.at is None or e.at <= change.at), default=-1))
            out.append(MigrationFinding(
                K.MIGRATION_ROLLED_BACK, change.at,
                {"from_phase": str(left), "brokers_had_moved": moved,
                 "kraft_brokers": sorted(kraft.view().kraft_brokers), "migration_offset": migration_offset},
                zxid=change.zxid, broker=elected))
            moved = False
        moved = moved or change.phase is MigrationPhase.KRAFT_BROKERS
        left = change.phase
    return out


def brokers_not_on_kraft(zk: StoreView, kraft: StoreView) -> dict[int, str]:
    """Brokers the cluster still needs that are not registered with the quorum as KRaft brokers, with why:
    registered in ZooKeeper, holding replicas, or registered with the quorum at all."""
    needed = set(zk.brokers) | set(kraft.brokers)
    needed.update(r for p in kraft.partitions.values() for r in p.replicas)
    out = {}
    for broker in sorted(needed - kraft.kraft_brokers):
        out[broker] = ("a ZooKeeper broker in migration mode" if broker in kraft.migrating_brokers
                       else "not registered with the quorum")
    return out


def _finalized_early(history: MigrationHistory) -> list[MigrationFinding]:
    """Finalization (a POST_MIGRATION record) while a broker the cluster needs is not a KRaft broker: with no
    ZooKeeper controller left, nothing will lead it."""
    out: list[MigrationFinding] = []
    zk, kraft = ZkReplay(history.zk), KraftReplay(history.kraft)
    for entry in history.kraft:
        record = entry.record
        if (isinstance(record, ControlRecord) or record.record_type is not R.ZK_MIGRATION_STATE_RECORD
                or _int(record.fields.get("zkMigrationState")) != ZkMigrationState.POST_MIGRATION):
            continue
        kraft.advance(entry.offset)
        zk.advance_to_time(entry.at)
        for broker, why in brokers_not_on_kraft(zk.view(), kraft.view()).items():
            out.append(MigrationFinding(K.MIGRATION_FINALIZED_BROKER_UNREGISTERED, entry.at, {"why": why},
                                        offset=entry.offset, broker=broker))
    return out


def _diverged(checks: Sequence[PointCheck]) -> list[MigrationFinding]:
    """One finding where a divergence starts: at the first settled point that shows it, or for a broker the second
    in a row (broker registrations reach each store on their own, not through the controller's writes). One that
    went away and comes back is reported again."""
    out = []
    still: set[tuple[EntityKind, str, str]] = set()  # reported, and present at the last point
    previous: set[tuple[EntityKind, str, str]] = set()
    for check in checks:
        now = {d.identity for d in check.divergences}
        for d in check.divergences:
            if d.identity in still or (d.entity is EntityKind.BROKER and d.identity not in previous):
                continue
            out.append(_divergence_finding(check.point, d))
            still.add(d.identity)
        still &= now
        previous = now
    return out


def _divergence_finding(point: AlignedPoint, d: Divergence) -> MigrationFinding:
    return MigrationFinding(
        K.MIGRATION_STORES_DIVERGED, point.at,
        {"entity": str(d.entity), "key": d.key, "field": d.field, "zk_value": _jsonable(d.zk_value),
         "kraft_value": _jsonable(d.kraft_value)},
        zxid=point.zxid, offset=point.offset, topic=d.topic, partition=d.partition, broker=d.broker)


def _jsonable(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def hazards(history: MigrationHistory, timeline: Sequence[PhaseChange] | None = None,
            checks: Sequence[PointCheck] | None = None) -> list[MigrationFinding]:
    """Every migration hazard of the history (docs/invariants.md, ZooKeeper -> KRaft migration), ZooKeeper's
    by zxid first, then the log's by offset."""
    timeline = phase_timeline(history) if timeline is None else timeline
    checks = check_alignment(history) if checks is None else checks
    found = (_stale_migration_znode(history, timeline) + _out_of_band(history, timeline) + _resyncs(history)
             + _kraft_epoch_ahead(history, timeline) + _rollbacks(history, timeline) + _diverged(checks)
             + _finalized_early(history))
    return sorted(found, key=lambda f: (f.zxid is None, f.zxid or 0, f.offset or 0))


# ------------------------------------------------------------------------------------------------ the report
@dataclass(frozen=True)
class MigrationReport:
    """What zkledger knows of a migration at the end of both histories."""

    timeline: tuple[PhaseChange, ...]
    points: tuple[AlignedPoint, ...]
    checks: tuple[PointCheck, ...]  # one per settled point
    findings: tuple[MigrationFinding, ...]
    brokers_not_on_kraft: Mapping[int, str]  # at the end: broker -> why it is not a KRaft broker
    zk_gaps: tuple[int, ...]  # zxids of ZooKeeper collection gaps while a KRaft controller held ZooKeeper

    @property
    def phase(self) -> MigrationPhase:
        return self.timeline[-1].phase if self.timeline else MigrationPhase.ZOOKEEPER


def check_migration(history: MigrationHistory) -> MigrationReport:
    """The phases, the aligned points, the comparison at each settled one, the hazards and the brokers still to
    move: everything ``finalize_verdict`` judges."""
    timeline = phase_timeline(history)
    points = aligned_points(history)
    checks = check_alignment(history, points)
    zk, kraft = ZkReplay(history.zk), KraftReplay(history.kraft)
    zk.advance(history.zk[-1].zxid if history.zk else -1)
    kraft.advance(history.last_offset if history.last_offset is not None else -1)
    gaps = tuple(e.zxid for e, held in _window_open(history, timeline)
                 if held and any(ev.type is T.COLLECTION_GAP for ev in e.events))
    return MigrationReport(tuple(timeline), tuple(points), tuple(checks), tuple(hazards(history, timeline, checks)),
                           brokers_not_on_kraft(zk.view(), kraft.view()), gaps)


class BlockReason(StrEnum):
    """Why finalizing is not (yet) safe."""

    NOT_LOADED = "not loaded"  # the log does not hold ZooKeeper's metadata yet
    ROLLED_BACK = "rolled back"  # a ZooKeeper broker leads again: there is no migration to finalize
    ALREADY_FINALIZED = "already finalized"
    BROKERS_NOT_ON_KRAFT = "brokers not on KRaft"  # finalizing strands them
    NOT_VERIFIED = "not verified"  # no settled aligned point to compare the stores at
    STORES_DIVERGED = "stores diverged"  # at the last settled point
    UNJUDGED_ZK_WRITES = "out-of-band ZooKeeper writes"  # after the last settled point: lost at finalization
    STALE_MIGRATION_ZNODE = "stale /migration znode"  # the load may have been skipped
    ZK_HISTORY_INCOMPLETE = "ZooKeeper history incomplete"  # gaps while the KRaft controller held ZooKeeper


@dataclass(frozen=True)
class Blocker:
    reason: BlockReason
    message: str


@dataclass(frozen=True)
class Verdict:
    """Whether taking the controllers out of migration mode is safe now; ``blockers`` say why not."""

    safe: bool
    phase: MigrationPhase
    blockers: tuple[Blocker, ...]


def finalize_verdict(report: MigrationReport) -> Verdict:
    """Safe to finalize: every broker is a KRaft broker, the stores agree at the last settled aligned point, no
    ZooKeeper write since is out of band, and nothing suggests the log missed ZooKeeper's metadata."""
    P, B = MigrationPhase, BlockReason
    blockers: list[Blocker] = []
    phase = report.phase
    last_change = report.timeline[-1] if report.timeline else None
    rolled_back = last_change is not None and last_change.signal is PhaseSignal.ZK_CONTROLLER_ELECTED
    if phase is P.FINALIZED:
        blockers.append(Blocker(B.ALREADY_FINALIZED, "the migration is finalized: there is nothing left to decide"))
    elif last_change is not None and rolled_back:
        blockers.append(Blocker(B.ROLLED_BACK, f"rolled back to ZooKeeper mode at zxid {last_change.zxid or 0:#x}: a "
                                               "ZooKeeper broker leads; a new attempt starts with controllers formatted "
                                               "anew and /migration removed"))
    elif phase in (P.ZOOKEEPER, P.PRE_MIGRATION, P.LOADING):
        blockers.append(Blocker(B.NOT_LOADED, f"the migration is in phase {phase}: ZooKeeper's metadata is not "
                                              "loaded into the log"))
    if phase is not P.FINALIZED and not rolled_back and report.brokers_not_on_kraft:
        listed = ", ".join(f"{b} ({why})" for b, why in report.brokers_not_on_kraft.items())
        blockers.append(Blocker(B.BROKERS_NOT_ON_KRAFT, f"brokers not registered as KRaft brokers: {listed}"))
    last = report.checks[-1] if report.checks else None
    if last is None:
        blockers.append(Blocker(B.NOT_VERIFIED, "no settled aligned point: the stores were never compared"))
    elif last.divergences:
        first = last.divergences[0]
        blockers.append(Blocker(B.STORES_DIVERGED,
                                f"{len(last.divergences)} divergence(s) at zxid {last.point.zxid:#x} / offset "
                                f"{last.point.offset}, e.g. {first.entity} {first.key} {first.field}: ZooKeeper "
                                f"{first.zk_value!r}, KRaft {first.kraft_value!r}"))
    since = last.point.zxid if last is not None else -1
    late = [f for f in report.findings if f.kind is K.MIGRATION_OUT_OF_BAND_ZK_WRITE and (f.zxid or 0) > since]
    if late:
        blockers.append(Blocker(B.UNJUDGED_ZK_WRITES,
                                f"{len(late)} ZooKeeper write(s) by other sessions since the last settled point, "
                                f"first {late[0].details.get('path')}: KRaft never saw them"))
    stale = [f for f in report.findings if f.kind is K.MIGRATION_STALE_ZNODE]
    if stale:
        blockers.append(Blocker(B.STALE_MIGRATION_ZNODE,
                                f"/migration held offset {stale[-1].details.get('kraft_metadata_offset')} when the "
                                "KRaft controller first claimed ZooKeeper: the load may have been skipped"))
    if report.zk_gaps:
        blockers.append(Blocker(B.ZK_HISTORY_INCOMPLETE,
                                f"{len(report.zk_gaps)} gap(s) in ZooKeeper's history since the KRaft controller "
                                f"claimed it, first at zxid {report.zk_gaps[0]:#x}"))
    return Verdict(not blockers, phase, tuple(blockers))
