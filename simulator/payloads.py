"""Znode payload bytes exactly as Kafka of a given version writes them (kafka-zk-metadata.md §1).

The project's codec (`models.znode_codec`) is preferred when it is importable; the private encoders below
are the fallback and the reference for the offline generator's templated fast path. Kafka serialises Scala
Maps with more than four keys as HashMaps, so key order follows Kafka's hashed order, not insertion order
(ZkData@3.8.0 `TopicPartitionStateZNode.encode`); readers must not rely on it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from models.states import parse_kafka_version

log = logging.getLogger(__name__)


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _v(kafka_version: str) -> tuple[int, int]:
    return parse_kafka_version(kafka_version)


def _encode_partition_state(
    leader: int,
    leader_epoch: int,
    controller_epoch: int,
    isr: Sequence[int],
    kafka_version: str,
    leader_recovery_state: int | None = None,
) -> bytes:
    # Hashed key order of Kafka's 5-key Map, as seen in real znodes.
    obj: dict[str, Any] = {
        "controller_epoch": controller_epoch,
        "leader": leader,
        "version": 1,
        "leader_epoch": leader_epoch,
        "isr": list(isr),
    }
    # KIP-704 (3.2+): present only while the partition is RECOVERING (1).
    if leader_recovery_state == 1 and _v(kafka_version) >= (3, 2):
        obj["leader_recovery_state"] = 1
    return _dumps(obj)


def _encode_controller(broker_id: int, timestamp_ms: int, kafka_version: str) -> bytes:
    obj: dict[str, Any] = {"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)}
    if _v(kafka_version) >= (3, 4):  # v2 (commit 47c5b00)
        obj = {"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms), "kraftControllerEpoch": -1}
    return _dumps(obj)


def _encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def _encode_broker_registration(
    broker_id: int,
    host: str,
    port: int,
    kafka_version: str,
    rack: str | None = None,
    timestamp_ms: int = 0,
) -> bytes:
    v5 = _v(kafka_version) >= (2, 7)  # IBP >= 2.7-IV0 writes v5 (features)
    obj: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "endpoints": [f"PLAINTEXT://{host}:{port}"],
        "jmx_port": -1,
        "port": port,
        "host": host,
        "version": 5 if v5 else 4,
        "timestamp": str(timestamp_ms),
    }
    if not v5:
        del obj["features"]
    if rack is not None:
        obj["rack"] = rack
    return _dumps(obj)


def _encode_topic_assignment(
    partitions: Mapping[int, Sequence[int]],
    kafka_version: str,
    adding: Mapping[int, Sequence[int]] | None = None,
    removing: Mapping[int, Sequence[int]] | None = None,
    topic_id: str | None = None,
) -> bytes:
    v = _v(kafka_version)
    parts = {str(p): list(r) for p, r in sorted(partitions.items())}
    if v < (2, 4):
        return _dumps({"version": 1, "partitions": parts})
    obj: dict[str, Any] = {"version": 2}
    if v >= (2, 8) and topic_id is not None:
        obj = {"version": 3, "topic_id": topic_id}
    obj["partitions"] = parts
    obj["adding_replicas"] = {str(p): list(r) for p, r in sorted((adding or {}).items())}
    obj["removing_replicas"] = {str(p): list(r) for p, r in sorted((removing or {}).items())}
    return _dumps(obj)


def _pick(name: str, fallback: Callable[..., bytes]) -> Callable[..., bytes]:
    """The shared codec's encoder when it exists (one source of truth), else the private one."""
    try:
        from models import znode_codec
    except ImportError:
        return fallback
    fn = getattr(znode_codec, name, None)
    return fn if callable(fn) else fallback


encode_partition_state = _pick("encode_partition_state", _encode_partition_state)
encode_controller = _pick("encode_controller", _encode_controller)
encode_controller_epoch = _pick("encode_controller_epoch", _encode_controller_epoch)
encode_broker_registration = _pick("encode_broker_registration", _encode_broker_registration)
encode_topic_assignment = _pick("encode_topic_assignment", _encode_topic_assignment)
