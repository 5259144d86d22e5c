"""A KRaft cluster's metadata image, and what each metadata-log record means in zkledger's model.

KRaft's metadata log holds deltas keyed by topic id (a ``PartitionChangeRecord`` names only the fields that
changed), while ZooKeeper's znodes hold whole values keyed by name. ``MetadataImage`` keeps what the log has
said so far (topic names, each partition's full state, each broker's registration and fencing, the quorum's
leader) and turns every record into the ``MetadataEvent``s a ZooKeeper history would have shown for the same
change, with the record's offset where ZooKeeper has the zxid. The partition and replica state machines, the
detectors and the one engine then run over them unchanged:

- the quorum's leader is the active controller and its epoch the controller epoch (a ``LeaderChange`` control
  record: ``CONTROLLER_EPOCH_CHANGED`` then ``CONTROLLER_ELECTED``); every write carries its batch's epoch;
- a broker is live when it is registered and unfenced (``BROKER_REGISTERED``), not live when fenced, shut down
  or unregistered (``BROKER_DEREGISTERED``); the broker epoch takes the place of the registration's czxid;
- a partition's record or change is a write of its whole state (``PARTITION_STATE_WRITTEN``), preceded by
  ``PARTITION_ASSIGNED`` when its replicas changed; a removed topic is deleted with its partitions.

What has no ZooKeeper counterpart keeps its KRaft meaning in ``detail`` (partition epoch, ELR, recovery state,
controlled shutdown, metadata transactions). Pure Python: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from models.anomalies import AnomalyKind
from models.events import MetadataEvent, MetadataEventType
from models.kraft_records import ControlRecord, ControlRecordType, MetadataRecord, MetadataRecordType

T = MetadataEventType
R = MetadataRecordType

NO_LEADER = -1
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.leader when the leader did not change
SAME_EPOCH_LEADER = "same_epoch_leader"
"""In a ``CONTROLLER_ELECTED`` event's detail: the other leader the log named in the same quorum epoch."""
RECOVERING = 1
"""``leaderRecoveryState`` of a partition whose leader was elected uncleanly (Kafka's own mark)."""
ELECTED_FROM_ELR = "elected_from_elr"
"""In a partition write's detail: its new leader came from the eligible leader replicas (KIP-966), not the ISR."""
KRAFT_PATH = "kraft"
"""The ``path`` of a metadata event decoded from the metadata log (it has no znode)."""

_SECRET_CONFIG = re.compile(r"password|secret|jaas|credential|(^|\.)key($|\.)|token", re.IGNORECASE)
"""Config names whose values are never copied out of the log (the raw record stays in bronze)."""


@dataclass
class PartitionImage:
    """One partition's whole state, as the log's records have built it."""

    topic: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)
    leader_recovery_state: int = 0


@dataclass
class BrokerImage:
    broker: int
    epoch: int
    fenced: bool
    in_controlled_shutdown: bool = False
    fenced_at: int | None = None  # the offset that fenced it

    @property
    def live(self) -> bool:
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True)
class Finding:
    """A KRaft-only invariant broken at ``offset`` (the KRaft key makes it an ``anomalies`` row)."""

    kind: AnomalyKind
    offset: int
    at: datetime | None
    details: dict[str, Any]
    topic: str | None = None
    partition: int | None = None
    broker: int | None = None


@dataclass
class MetadataImage:
    """What the metadata log has said up to ``offset``; ``apply`` and ``apply_control`` move it on one record."""

    topics: dict[str, str] = field(default_factory=dict)  # topic id -> name
    partitions: dict[tuple[str, int], PartitionImage] = field(default_factory=dict)  # (topic id, partition)
    brokers: dict[int, BrokerImage] = field(default_factory=dict)
    quorum_leader: int | None = None
    quorum_epoch: int | None = None
    offset: int = -1
    log_epoch: int = -1  # the highest leader epoch of the batches applied: a record below offset at a higher one
    # is Raft's rewrite of a tail it truncated
    open_transaction: int | None = None  # the offset of a BeginTransactionRecord not yet ended
    transaction_epoch: int | None = None  # the quorum epoch that began it
    findings: list[Finding] = field(default_factory=list)  # KRaft-only invariants broken; the caller drains them

    def apply(self, record: MetadataRecord, offset: int, epoch: int, at: datetime | None) -> list[MetadataEvent]:
        """The events one metadata record at ``offset`` (in a batch of quorum epoch ``epoch``) means."""
        self.offset, self.log_epoch = max(self.offset, offset), max(self.log_epoch, epoch)
        handler = _HANDLERS.get(record.record_type)
        out = _Events(offset, epoch, at, record)
        if (self.open_transaction is not None and self.transaction_epoch is not None and epoch > self.transaction_epoch
                and record.record_type not in _TRANSACTION_RECORDS):
            # transactions-end: a new quorum leader aborts what its predecessor left open before writing anything
            self._unfinished(out, "a new quorum leader wrote records without aborting it")
        if handler is None:
            out.add(T.OTHER)
        else:
            handler(self, record.fields, out)
        return out.events

    def apply_control(self, record: ControlRecord, offset: int, epoch: int, at: datetime | None) -> list[MetadataEvent]:
        """The events a control record means: a new quorum leader is a controller election."""
        self.offset, self.log_epoch = max(self.offset, offset), max(self.log_epoch, epoch)
        if record.record_type is not ControlRecordType.LEADER_CHANGE:
            return []
        leader = int(record.fields["leaderId"])
        events = _Events(offset, epoch, at, None)
        if epoch != self.quorum_epoch:
            events.add(T.CONTROLLER_EPOCH_CHANGED, controller_epoch=epoch)
        if leader >= 0 and (leader, epoch) != (self.quorum_leader, self.quorum_epoch):
            detail: dict[str, Any] = {"voters": [v["voterId"] for v in record.fields.get("voters") or []]}
            if epoch == self.quorum_epoch and self.quorum_leader is not None:
                detail[SAME_EPOCH_LEADER] = self.quorum_leader  # Raft allows one leader per epoch
            events.add(T.CONTROLLER_ELECTED, controller_id=leader, controller_epoch=epoch, detail=detail)
        self.quorum_leader, self.quorum_epoch = (leader if leader >= 0 else None), epoch
        return events.events

    def rebase(self, snapshot: list[MetadataRecord], end_offset: int, epoch: int,
               at: datetime | None) -> list[MetadataEvent]:
        """Take a snapshot's image where the log's records are missing (deleted before they were read): the
        events that turn this image into the snapshot's, dated at the snapshot's last offset."""
        fresh = MetadataImage(quorum_leader=self.quorum_leader, quorum_epoch=self.quorum_epoch)
        for record in snapshot:
            fresh.apply(record, end_offset - 1, epoch, at)
        out = _Events(end_offset - 1, epoch, at, None, "Snapshot")
        for topic_id in list(self.topics):
            if topic_id not in fresh.topics:
                gone = MetadataRecord(R.REMOVE_TOPIC_RECORD, 0, {"topicId": topic_id})
                out.record = gone
                _remove_topic(self, gone.fields, out)
                out.record = None
        for key, part in fresh.partitions.items():
            if self.partitions.get(key) != part:
                before = self.partitions.get(key)
                self.partition_events(part, out, replicas_changed=before is None or before.replicas != part.replicas)
        for broker in sorted(set(self.brokers) | set(fresh.brokers)):
            now = fresh.brokers.get(broker) or BrokerImage(broker, -1, True)
            _set_liveness(self, now, out, {"from_snapshot": True})
        self.topics, self.partitions = dict(fresh.topics), dict(fresh.partitions)
        self.brokers = {b: v for b, v in fresh.brokers.items()}
        self.offset, self.log_epoch = max(self.offset, end_offset - 1), max(self.log_epoch, epoch)
        return out.events

    def _unfinished(self, out: _Events, why: str) -> None:
        self.findings.append(Finding(AnomalyKind.METADATA_TRANSACTION_UNFINISHED, out.offset, out.at,
                                     {"begun_at": self.open_transaction, "begun_in_epoch": self.transaction_epoch,
                                      "why": why}))
        self.open_transaction = self.transaction_epoch = None

    def fenced_in_isr(self, part: PartitionImage, out: _Events, *, fenced: set[int] | None = None,
                      since: int | None = None) -> None:
        """fenced-out-of-isr: KRaft's controller takes a fenced broker out of every ISR it shares with others
        (the last member stays, or moves to the ELR). ``fenced``: the brokers to look for (default: those the
        image holds fenced); ``since``: the offset that fenced them, when known."""
        if len(part.isr) < 2:
            return
        for broker in part.isr:
            known = self.brokers.get(broker)
            if (broker in fenced) if fenced is not None else (known is not None and known.fenced):
                self.findings.append(Finding(
                    AnomalyKind.FENCED_BROKER_IN_ISR, out.offset, out.at,
                    {"isr": part.isr, "leader": part.leader,
                     "fenced_at": since if since is not None else (known.fenced_at if known else None)},
                    topic=part.topic, partition=part.partition, broker=broker))

    def partition_events(self, image: PartitionImage, out: _Events, *, replicas_changed: bool,
                         extra: dict[str, Any] | None = None) -> None:
        if replicas_changed:
            out.add(T.PARTITION_ASSIGNED, topic=image.topic, partition=image.partition,
                    replicas=tuple(image.replicas))
        out.add(T.PARTITION_STATE_WRITTEN, topic=image.topic, partition=image.partition, leader=image.leader,
                leader_epoch=image.leader_epoch, isr=tuple(image.isr), replicas=tuple(image.replicas),
                controller_epoch=out.epoch, zk_version=image.partition_epoch,
                detail={"partition_epoch": image.partition_epoch, "elr": image.elr,
                        "last_known_elr": image.last_known_elr, "leader_recovery_state": image.leader_recovery_state,
                        "adding": image.adding, "removing": image.removing, **(extra or {})})


class _Events:
    """The events of one record, in order (their ``_seq`` is their index)."""

    def __init__(self, offset: int, epoch: int, at: datetime | None, record: MetadataRecord | None,
                 source: str = "LeaderChange") -> None:
        self.offset, self.epoch, self.at, self.record, self.source = offset, epoch, at, record, source
        self.events: list[MetadataEvent] = []

    def add(self, kind: MetadataEventType, *, detail: dict[str, Any] | None = None, **columns: Any) -> None:
        info: dict[str, object] = {"record": _record_name(self.record) if self.record is not None else self.source}
        info.update(detail or {})
        self.events.append(MetadataEvent(zxid=self.offset, type=kind, event_time=self.at, path=KRAFT_PATH,
                                         detail=info, **columns))


def _record_name(record: MetadataRecord | None) -> str:
    if record is None:
        return ""
    words = record.record_type.name.lower().split("_")
    return "".join(w.capitalize() for w in words)


# -- one handler per record type ----------------------------------------------------------------------------

def _topic(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    image.topics[f["topicId"]] = f["name"]
    out.add(T.TOPIC_CREATED, topic=f["name"], detail={"topic_id": f["topicId"]})


def _partition(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    key = (f["topicId"], int(f["partitionId"]))
    name = image.topics.get(f["topicId"], f["topicId"])  # a snapshot may order a topic's records oddly
    before = image.partitions.get(key)
    now = PartitionImage(
        topic=name, partition=key[1], replicas=list(f["replicas"]), isr=list(f["isr"]), leader=int(f["leader"]),
        leader_epoch=int(f["leaderEpoch"]), partition_epoch=int(f["partitionEpoch"]),
        adding=list(f.get("addingReplicas") or []), removing=list(f.get("removingReplicas") or []),
        elr=list(f.get("eligibleLeaderReplicas") or []), last_known_elr=list(f.get("lastKnownElr") or []),
        leader_recovery_state=int(f.get("leaderRecoveryState") or 0))
    image.partitions[key] = now
    image.partition_events(now, out, replicas_changed=before is None or before.replicas != now.replicas)
    image.fenced_in_isr(now, out)


def _partition_change(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    key = (f["topicId"], int(f["partitionId"]))
    before = image.partitions.get(key)
    if before is None:  # a change of a partition the log never created here: the history has a hole
        out.add(T.OTHER, detail={"problem": "change of an unknown partition", "topic_id": key[0],
                                 "partition": key[1]})
        return
    now = replace(before, partition_epoch=before.partition_epoch + 1)
    leader = int(f.get("leader", NO_LEADER_CHANGE))
    from_elr = False
    if leader != NO_LEADER_CHANGE:
        now.leader, now.leader_epoch = leader, before.leader_epoch + 1
        # KIP-966: a replica in the eligible leader replicas was in sync when the ISR emptied; electing it is clean,
        # unless Kafka itself marks the election unclean (the leader's log must recover)
        from_elr = (leader >= 0 and leader != before.leader and leader not in before.isr and leader in before.elr
                    and int(f.get("leaderRecoveryState", -1)) != RECOVERING)
    for name, attr in (("isr", "isr"), ("replicas", "replicas"), ("addingReplicas", "adding"),
                       ("removingReplicas", "removing"), ("eligibleLeaderReplicas", "elr"),
                       ("lastKnownElr", "last_known_elr")):
        if f.get(name) is not None:
            setattr(now, attr, list(f[name]))
    if int(f.get("leaderRecoveryState", -1)) >= 0:
        now.leader_recovery_state = int(f["leaderRecoveryState"])
    image.partitions[key] = now
    if (now.adding or now.removing) and not (before.adding or before.removing):
        target = tuple(r for r in now.replicas if r not in now.removing)
        out.add(T.REASSIGNMENT_REQUESTED, topic=now.topic, partition=now.partition, replicas=target)
    image.partition_events(now, out, replicas_changed=before.replicas != now.replicas,
                           extra={ELECTED_FROM_ELR: True} if from_elr else None)
    image.fenced_in_isr(now, out)


def _remove_topic(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    topic_id = f["topicId"]
    name = image.topics.pop(topic_id, topic_id)
    out.add(T.TOPIC_DELETION_REQUESTED, topic=name)
    for key in sorted(k for k in image.partitions if k[0] == topic_id):
        gone = image.partitions.pop(key)
        out.add(T.PARTITION_STATE_DELETED, topic=name, partition=gone.partition)
    out.add(T.TOPIC_DELETED, topic=name)
    out.add(T.TOPIC_DELETION_COMPLETED, topic=name)


def _set_liveness(image: MetadataImage, broker: BrokerImage, out: _Events, detail: dict[str, Any]) -> None:
    """Emit the liveness change (if any) of ``broker`` against what the image held."""
    before = image.brokers.get(broker.broker)
    image.brokers[broker.broker] = broker
    was_live = before is not None and before.live
    if broker.fenced and (before is None or not before.fenced):
        broker.fenced_at = out.offset
    elif before is not None and before.fenced and not broker.fenced:
        # unfenced: an ISR that still names it beside others kept a fenced broker all along
        for part in image.partitions.values():
            if broker.broker in part.isr and len(part.isr) > 1:
                image.fenced_in_isr(part, out, fenced={broker.broker}, since=before.fenced_at)
    if broker.live and not was_live:
        out.add(T.BROKER_REGISTERED, broker=broker.broker, czxid=broker.epoch, detail=detail)
    elif was_live and not broker.live:
        out.add(T.BROKER_DEREGISTERED, broker=broker.broker, czxid=broker.epoch, detail=detail)


def _register_broker(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    broker = BrokerImage(int(f["brokerId"]), int(f["brokerEpoch"]), bool(f["fenced"]),
                         bool(f.get("inControlledShutdown", False)))
    if broker.broker in image.brokers and image.brokers[broker.broker].live:
        # a new incarnation replaces a live one: the old one is gone first
        image.brokers[broker.broker] = replace(image.brokers[broker.broker], fenced=True)
        out.add(T.BROKER_DEREGISTERED, broker=broker.broker, detail={"reason": "re-registered"})
    image.brokers.pop(broker.broker, None)
    _set_liveness(image, broker, out, {"fenced": broker.fenced, "rack": f.get("rack")})


def _unregister_broker(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    broker_id = int(f["brokerId"])
    before = image.brokers.pop(broker_id, None)
    if before is not None and before.live:
        out.add(T.BROKER_DEREGISTERED, broker=broker_id, czxid=int(f["brokerEpoch"]), detail={"reason": "unregistered"})


def _fence(fenced: bool) -> Any:
    def handler(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
        broker_id = int(f["id"])
        before = image.brokers.get(broker_id) or BrokerImage(broker_id, int(f["epoch"]), True)
        _set_liveness(image, replace(before, fenced=fenced, epoch=int(f["epoch"])), out, {"fenced": fenced})
    return handler


def _registration_change(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    broker_id = int(f["brokerId"])
    before = image.brokers.get(broker_id) or BrokerImage(broker_id, int(f["brokerEpoch"]), True)
    now = replace(before, epoch=int(f["brokerEpoch"]))
    fenced, shutdown = int(f.get("fenced", 0)), int(f.get("inControlledShutdown", 0))
    if fenced:  # 1: fenced, -1: unfenced, 0: no change
        now.fenced = fenced > 0
    if shutdown:
        now.in_controlled_shutdown = shutdown > 0
    _set_liveness(image, now, out, {"fenced": now.fenced, "in_controlled_shutdown": now.in_controlled_shutdown})


def _config(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    name = f["name"]
    value = None if _SECRET_CONFIG.search(name) else f.get("value")
    out.add(T.CONFIG_CHANGED, detail={"resource_type": f["resourceType"], "resource": f["resourceName"],
                                      "name": name, "value": value, "deleted": f.get("value") is None})


def _clear_elr(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    topic = f.get("topicName") or None
    for part in image.partitions.values():
        if (topic is None or part.topic == topic) and (part.elr or part.last_known_elr):
            part.elr, part.last_known_elr = [], []
            part.partition_epoch += 1
            image.partition_events(part, out, replicas_changed=False)


def _transaction(phase: str) -> Any:
    def handler(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
        begun = image.open_transaction
        if phase == "begin" and begun is not None:
            image._unfinished(out, "another transaction began")
        image.open_transaction = out.offset if phase == "begin" else None
        image.transaction_epoch = out.epoch if phase == "begin" else None
        out.add(T.METADATA_TRANSACTION, detail={"phase": phase, "begun_at": begun, "name": f.get("name"),
                                                "reason": f.get("reason")})
    return handler


def _simple(kind: MetadataEventType, keep: tuple[str, ...] = ()) -> Any:
    def handler(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
        out.add(kind, detail={k: f.get(k) for k in keep})
    return handler


_TRANSACTION_RECORDS = frozenset({R.BEGIN_TRANSACTION_RECORD, R.END_TRANSACTION_RECORD, R.ABORT_TRANSACTION_RECORD})


def _ignore(image: MetadataImage, f: dict[str, Any], out: _Events) -> None:
    """Heartbeat-like records (``NoOpRecord``, every half second by default): kept in bronze only."""


_HANDLERS: dict[MetadataRecordType, Any] = {
    R.TOPIC_RECORD: _topic,
    R.PARTITION_RECORD: _partition,
    R.PARTITION_CHANGE_RECORD: _partition_change,
    R.REMOVE_TOPIC_RECORD: _remove_topic,
    R.REGISTER_BROKER_RECORD: _register_broker,
    R.UNREGISTER_BROKER_RECORD: _unregister_broker,
    R.FENCE_BROKER_RECORD: _fence(True),
    R.UNFENCE_BROKER_RECORD: _fence(False),
    R.BROKER_REGISTRATION_CHANGE_RECORD: _registration_change,
    R.CONFIG_RECORD: _config,
    R.CLEAR_ELR_RECORD: _clear_elr,
    R.FEATURE_LEVEL_RECORD: _simple(T.FEATURES_CHANGED, ("name", "featureLevel")),
    R.PRODUCER_IDS_RECORD: _simple(T.PRODUCER_ID_BLOCK, ("brokerId", "nextProducerId")),
    R.ZK_MIGRATION_STATE_RECORD: _simple(T.MIGRATION_STATE, ("zkMigrationState",)),
    R.BEGIN_TRANSACTION_RECORD: _transaction("begin"),
    R.END_TRANSACTION_RECORD: _transaction("end"),
    R.ABORT_TRANSACTION_RECORD: _transaction("abort"),
    R.NO_OP_RECORD: _ignore,
}


def image_to_json(image: MetadataImage) -> dict[str, Any]:
    """The image as plain JSON values (what the streaming query's state store keeps)."""
    return {
        "topics": image.topics,
        "partitions": [vars(p) for p in image.partitions.values()],
        "topic_of": [[k[0], k[1]] for k in image.partitions],
        "brokers": [vars(b) for b in image.brokers.values()],
        "quorum_leader": image.quorum_leader, "quorum_epoch": image.quorum_epoch, "offset": image.offset,
        "log_epoch": image.log_epoch,
        "open_transaction": image.open_transaction, "transaction_epoch": image.transaction_epoch,
    }


def image_from_json(raw: dict[str, Any]) -> MetadataImage:
    partitions = {(str(k[0]), int(k[1])): PartitionImage(**p)
                  for k, p in zip(raw["topic_of"], raw["partitions"], strict=True)}
    return MetadataImage(topics=dict(raw["topics"]), partitions=partitions,
                         brokers={int(b["broker"]): BrokerImage(**b) for b in raw["brokers"]},
                         quorum_leader=raw["quorum_leader"], quorum_epoch=raw["quorum_epoch"], offset=raw["offset"],
                         log_epoch=raw.get("log_epoch", -1 if raw["quorum_epoch"] is None else raw["quorum_epoch"]),
                         open_transaction=raw["open_transaction"],
                         transaction_epoch=raw.get("transaction_epoch"))
