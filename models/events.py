"""Typed facts: the znode change a collector observed, and the metadata event decoded from it.

Field names follow the source system: ZooKeeper names (czxid, mzxid, ephemeral_owner) for
ZooKeeper things and Kafka names (leader, leader_epoch, isr, controller_epoch) for Kafka
things. ``MetadataEvent`` fields equal the ``metadata_events`` columns (models.tables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1


def int32_problem(values: Mapping[str, int | Sequence[int] | None]) -> str | None:
    """Why one of these ids or epochs (a number or a list of broker ids) cannot be Kafka's, if one cannot:
    they are Java ints there, and int columns in the tables."""
    for name, value in values.items():
        if isinstance(value, int):
            if not INT32_MIN <= value <= INT32_MAX:
                return f"{name} {value} is outside Kafka's 32-bit range"
        elif value and not (INT32_MIN <= min(value) and max(value) <= INT32_MAX):
            return f"{name} {list(value)} has a broker id outside Kafka's 32-bit range"
    return None


class ZnodeOp(StrEnum):
    """What happened to a znode (the ``op`` column of ``znode_events``)."""

    CREATE = "CREATE"
    SET = "SET"
    DELETE = "DELETE"
    CREATE_SESSION = "CREATE_SESSION"
    CLOSE_SESSION = "CLOSE_SESSION"  # ephemeral znodes of that session are gone (txnlog)
    MULTI_FAILED = "MULTI_FAILED"  # a multi whose check failed; path = the failed check's path
    GAP = "GAP"  # the collector knows it missed changes (reconnect, expiry); path = subtree root


class Source(StrEnum):
    """Which collector observed a znode change (the ``source`` column of ``znode_events``)."""

    WATCH = "watch"
    RESYNC = "resync"
    TXNLOG = "txnlog"


class KraftRecordSource(StrEnum):
    """Where a ``kraft_records`` row was read (its ``source`` column)."""

    SEGMENT = "segment"  # a metadata log segment
    SNAPSHOT = "snapshot"  # a .checkpoint snapshot
    GAP = "gap"  # offsets deleted before the collector read them (the snapshot covering them is named)


class TenureSource(StrEnum):
    """Where a controller tenure was read from (the ``source`` column of ``controller_tenure``)."""

    ZK = "zk"  # /controller and /controller_epoch
    LOGS = "logs"  # the brokers' controller.log lines


@dataclass(frozen=True)
class ZnodeChange:
    """One observed change of one znode, as a collector saw it (a ``znode_events`` row)."""

    zxid: int
    path: str
    op: ZnodeOp
    data: bytes | None = None
    version: int | None = None
    czxid: int | None = None
    mzxid: int | None = None
    pzxid: int | None = None
    ephemeral_owner: int | None = None
    session_id: int | None = None
    txn_time: datetime | None = None
    detail: str | None = None


class MetadataEventType(StrEnum):
    """Typed metadata changes (the ``type`` column of ``metadata_events``)."""

    CONTROLLER_ELECTED = "CONTROLLER_ELECTED"  # /controller created or set: controller_id
    CONTROLLER_RESIGNED = "CONTROLLER_RESIGNED"  # /controller deleted (resign or session end)
    CONTROLLER_EPOCH_CHANGED = "CONTROLLER_EPOCH_CHANGED"  # /controller_epoch: controller_epoch, zk_version
    BROKER_REGISTERED = "BROKER_REGISTERED"  # /brokers/ids/N created; czxid is the broker epoch (2.2+)
    BROKER_UPDATED = "BROKER_UPDATED"  # /brokers/ids/N set (listeners changed)
    BROKER_DEREGISTERED = "BROKER_DEREGISTERED"  # /brokers/ids/N deleted
    PARTITION_ASSIGNED = "PARTITION_ASSIGNED"  # /brokers/topics/T created/set: one event per partition: replicas
    TOPIC_DELETED = "TOPIC_DELETED"  # /brokers/topics/T deleted
    TOPIC_CREATED = "TOPIC_CREATED"  # KRaft's TopicRecord (ZooKeeper shows a topic by its PARTITION_ASSIGNED rows)
    METADATA_TRANSACTION = "METADATA_TRANSACTION"  # KRaft's Begin/End/AbortTransactionRecord: detail.phase
    PARTITION_STATE_WRITTEN = "PARTITION_STATE_WRITTEN"  # .../partitions/P/state created or set
    PARTITION_STATE_DELETED = "PARTITION_STATE_DELETED"
    TOPIC_DELETION_REQUESTED = "TOPIC_DELETION_REQUESTED"  # /admin/delete_topics/T created
    TOPIC_DELETION_COMPLETED = "TOPIC_DELETION_COMPLETED"  # /admin/delete_topics/T deleted
    REASSIGNMENT_REQUESTED = "REASSIGNMENT_REQUESTED"  # /admin/reassign_partitions: one per partition
    PREFERRED_ELECTION_REQUESTED = "PREFERRED_ELECTION_REQUESTED"
    ISR_CHANGE_NOTIFIED = "ISR_CHANGE_NOTIFIED"
    LOG_DIR_EVENT = "LOG_DIR_EVENT"
    CONFIG_CHANGED = "CONFIG_CHANGED"
    CLUSTER_ID_SET = "CLUSTER_ID_SET"
    PRODUCER_ID_BLOCK = "PRODUCER_ID_BLOCK"
    FEATURES_CHANGED = "FEATURES_CHANGED"
    MIGRATION_STATE = "MIGRATION_STATE"
    CONTROLLER_WRITE_FENCED = "CONTROLLER_WRITE_FENCED"  # MULTI_FAILED on /controller_epoch check
    SESSION_CLOSED = "SESSION_CLOSED"
    COLLECTION_GAP = "COLLECTION_GAP"
    OTHER = "OTHER"  # a path zkledger does not model (kept, not quarantined)


@dataclass(frozen=True)
class MetadataEvent:
    """One typed metadata change; fields equal the ``metadata_events`` columns (less cluster, event_id)."""

    zxid: int
    type: MetadataEventType
    event_time: datetime | None = None
    topic: str | None = None
    partition: int | None = None
    broker: int | None = None
    controller_id: int | None = None
    controller_epoch: int | None = None
    leader: int | None = None
    leader_epoch: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    zk_version: int | None = None
    czxid: int | None = None
    path: str | None = None
    detail: dict[str, object] = field(default_factory=dict)
