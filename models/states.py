"""Kafka's controller state machines as data.

The tables mirror ``validPreviousStates`` in Kafka's
``core/src/main/scala/kafka/controller/PartitionStateMachine.scala`` and
``ReplicaStateMachine.scala`` (identical at 1.0.0 … 3.8.0 except where marked), kept in
Kafka's shape (target -> valid previous states) so they can be diffed against the Scala.
These tables are the single source of truth for the fold, the batch and streaming
pipelines and the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final, TypeVar


class PartitionState(StrEnum):
    """Partition states, named and coded as Kafka names them (byte code in the docstring)."""

    NEW = "NewPartition"  # 0: assignment loaded, no state znode yet
    ONLINE = "OnlinePartition"  # 1: has a leader
    OFFLINE = "OfflinePartition"  # 2: no live leader
    NON_EXISTENT = "NonExistentPartition"  # 3: never created or deleted


class ReplicaState(StrEnum):
    """Replica states, named as Kafka names them."""

    NEW = "NewReplica"  # 1
    ONLINE = "OnlineReplica"  # 2
    OFFLINE = "OfflineReplica"  # 3
    DELETION_STARTED = "ReplicaDeletionStarted"  # 4
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"  # 5
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"  # 6
    NON_EXISTENT = "NonExistentReplica"  # 7


P = PartitionState
R = ReplicaState

PARTITION_VALID_PREVIOUS: Final[Mapping[PartitionState, frozenset[PartitionState]]] = MappingProxyType(
    {
        P.NEW: frozenset({P.NON_EXISTENT}),
        P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
        P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
        P.NON_EXISTENT: frozenset({P.OFFLINE}),
    }
)

_REPLICA_COMMON: Final[dict[ReplicaState, frozenset[ReplicaState]]] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.DELETION_STARTED: frozenset({R.OFFLINE}),
    R.DELETION_SUCCESSFUL: frozenset({R.DELETION_STARTED}),
    R.NON_EXISTENT: frozenset({R.DELETION_SUCCESSFUL}),
}

# KAFKA-8237 (commit 17c8016, RSM@2.2.0 l440 vs @2.3.0 l433): 2.3 made
# OfflineReplica a valid previous state of ReplicaDeletionIneligible.
REPLICA_VALID_PREVIOUS_BEFORE_2_3: Final[Mapping[ReplicaState, frozenset[ReplicaState]]] = MappingProxyType(
    {**_REPLICA_COMMON, R.DELETION_INELIGIBLE: frozenset({R.DELETION_STARTED})}
)
REPLICA_VALID_PREVIOUS_FROM_2_3: Final[Mapping[ReplicaState, frozenset[ReplicaState]]] = MappingProxyType(
    {**_REPLICA_COMMON, R.DELETION_INELIGIBLE: frozenset({R.OFFLINE, R.DELETION_STARTED})}
)

DEFAULT_KAFKA_VERSION: Final = "3.8"


def parse_kafka_version(version: str) -> tuple[int, int]:
    """'2.3', '2.3.1' or '0.11.0' -> (major, minor). Raises ValueError on anything else."""
    parts = version.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"not a Kafka version: {version!r} (expected e.g. 2.8 or 3.8.0)")
    return int(parts[0]), int(parts[1])


def partition_valid_previous(kafka_version: str = DEFAULT_KAFKA_VERSION) -> Mapping[PartitionState, frozenset[PartitionState]]:
    """The partition table is the same in every supported version."""
    parse_kafka_version(kafka_version)
    return PARTITION_VALID_PREVIOUS


def replica_valid_previous(kafka_version: str = DEFAULT_KAFKA_VERSION) -> Mapping[ReplicaState, frozenset[ReplicaState]]:
    """The replica table for a Kafka version (differs before and after 2.3)."""
    if parse_kafka_version(kafka_version) < (2, 3):
        return REPLICA_VALID_PREVIOUS_BEFORE_2_3
    return REPLICA_VALID_PREVIOUS_FROM_2_3


_S = TypeVar("_S", bound=StrEnum)


def legal_pairs(table: Mapping[_S, frozenset[_S]]) -> frozenset[tuple[str, str]]:
    """All (from_state, to_state) pairs a table allows, as plain strings."""
    return frozenset((str(prev), str(target)) for target, prevs in table.items() for prev in prevs)


def is_legal_partition_step(from_state: str, to_state: str) -> bool:
    return PartitionState(from_state) in PARTITION_VALID_PREVIOUS[PartitionState(to_state)]


def is_legal_replica_step(from_state: str, to_state: str, kafka_version: str = DEFAULT_KAFKA_VERSION) -> bool:
    return ReplicaState(from_state) in replica_valid_previous(kafka_version)[ReplicaState(to_state)]
