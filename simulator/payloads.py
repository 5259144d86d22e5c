"""Znode payload bytes exactly as Kafka of a given version writes them (the inverse of ``models.znode_codec``).

Only the simulator writes payloads; the pipeline decodes them with ``models.znode_codec``. Key order matters
for byte equality with a real broker, so the Scala map iteration orders are reproduced here.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from models.states import parse_kafka_version
from models.znode_codec import LEADER_DURING_DELETE, LEADER_NONE


def topic_id(seed: int, topic: int) -> str:
    """A deterministic Kafka Uuid string (22 chars of URL-safe base64, no padding) per seed and topic index."""
    digest = hashlib.md5(f"offline-sim:{seed}:{topic}".encode(), usedforsecurity=False).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def cluster_id(seed: int) -> str:
    """A deterministic cluster id per seed, in Kafka's form (a Uuid string, as /cluster/id holds)."""
    digest = hashlib.md5(f"sim-cluster:{seed}".encode(), usedforsecurity=False).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


# ------------------------------------------------------------------------------------- encoders
# Kafka serialises Scala maps with Jackson: compact separators, UTF-8, the map's own iteration order.
# - immutable Map with <= 4 entries (Map1..Map4): insertion order;
# - immutable Map with > 4 entries (HashTrieMap / CHAMP): ascending improved-hash bits, 5 at a time;
# - mutable.HashMap (Scala 2.12 HashTable): descending bucket index, newest entry first in a bucket.
# Kafka's own partition state example, {"controller_epoch":1,"leader":1,"version":1,
# "leader_epoch":0,"isr":[1,2]}, is exactly the immutable order computed below.

_MASK32: Final = 0xFFFFFFFF


def _java_string_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):  # BMP keys only in Kafka payloads
        h = (31 * h + ord(ch)) & _MASK32
    return h


def _improve(h: int) -> int:
    """scala.collection.Hashing.improve (immutable HashMap, 2.12 and 2.13)."""
    h = (h + (~(h << 9) & _MASK32)) & _MASK32
    h ^= h >> 14
    h = (h + (h << 4)) & _MASK32
    return h ^ (h >> 10)


def scala_immutable_order(keys: Sequence[str]) -> list[str]:
    """Iteration order of ``Map(k1 -> .., k2 -> .., ...)`` as Kafka builds it (Scala immutable map)."""
    if len(keys) <= 4:
        return list(keys)
    return sorted(keys, key=lambda k: [(_improve(_java_string_hash(k)) >> s) & 31 for s in range(0, 32, 5)])


def _byteswap32(v: int) -> int:
    hc = (v * 0x9E3775CD) & _MASK32
    hc = int.from_bytes(hc.to_bytes(4, "big"), "little")
    return (hc * 0x9E3775CD) & _MASK32


def _mutable_index(key: str, table_len: int) -> int:
    # scala.collection.mutable.HashTable.index (2.12): rotate byteswap32(hash) by the table-size seed
    bits = table_len.bit_length() - 1
    rot = bin(table_len - 1).count("1")
    i = _byteswap32(_java_string_hash(key))
    r = ((i >> rot) | (i << (32 - rot))) & _MASK32
    return r >> (32 - bits)


def scala_mutable_order(keys: Sequence[str]) -> list[str]:
    """Iteration order of a Scala 2.12 ``mutable.HashMap`` filled with ``keys`` in this order."""
    table: list[list[str]] = [[] for _ in range(16)]
    size = 0
    for key in keys:
        table[_mutable_index(key, len(table))].insert(0, key)  # addEntry prepends to the bucket
        size += 1
        if size > len(table) * 3 // 4:  # load factor 0.75: resize, re-inserting from the last bucket down
            new: list[list[str]] = [[] for _ in range(len(table) * 2)]
            for bucket in reversed(table):
                for k in bucket:
                    new[_mutable_index(k, len(new))].insert(0, k)
            table = new
    return [k for bucket in reversed(table) for k in bucket]


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _ordered(pairs: Sequence[tuple[str, object]], mutable: bool) -> dict[str, object]:
    values = dict(pairs)
    keys = [k for k, _ in pairs]
    order = scala_mutable_order(keys) if mutable else scala_immutable_order(keys)
    return {k: values[k] for k in order}


def _bytes(obj: Mapping[str, object]) -> bytes:
    return _dumps(obj).encode("utf-8")


def _v(kafka_version: str) -> tuple[int, int]:
    return parse_kafka_version(kafka_version)


def controller_payload_version(kafka_version: str) -> int:
    """/controller: v1 for 1.x-3.3, v2 from 3.4 (adds kraftControllerEpoch, commit 47c5b00)."""
    return 2 if _v(kafka_version) >= (3, 4) else 1


def broker_payload_version(kafka_version: str) -> int:
    """/brokers/ids/<id>: v4 for IBP 0.10.0-2.6, v5 from IBP 2.7-IV0."""
    return 5 if _v(kafka_version) >= (2, 7) else 4


def topic_payload_version(kafka_version: str) -> int:
    """/brokers/topics/<t>: v1 up to 2.3, v2 for 2.4-2.7, v3 from 2.8."""
    v = _v(kafka_version)
    return 3 if v >= (2, 8) else 2 if v >= (2, 4) else 1


def encode_controller(
    broker_id: int, timestamp_ms: int, kafka_version: str, kraft_controller_epoch: int = -1
) -> bytes:
    """Payload of /controller (ControllerZNode.encode)."""
    pairs: list[tuple[str, object]] = [
        ("version", controller_payload_version(kafka_version)),
        ("brokerid", broker_id),
        ("timestamp", str(timestamp_ms)),
    ]
    if pairs[0][1] == 2:
        pairs.append(("kraftControllerEpoch", kraft_controller_epoch))
    return _bytes(_ordered(pairs, mutable=False))


def encode_controller_epoch(epoch: int) -> bytes:
    """Payload of /controller_epoch: the plain decimal string (ControllerEpochZNode.encode)."""
    if epoch < 0:
        raise ValueError(f"controller epoch must be >= 0, got {epoch}")
    return str(epoch).encode("ascii")


def encode_broker_registration(
    broker_id: int,
    host: str,
    port: int,
    kafka_version: str,
    rack: str | None = None,
    timestamp_ms: int = 0,
    *,
    jmx_port: int = -1,
    features: Mapping[str, Mapping[str, int]] | None = None,
    payload_version: int | None = None,
) -> bytes:
    """Payload of /brokers/ids/<broker_id> (BrokerIdZNode.encode), one PLAINTEXT listener.

    ``broker_id`` is in the path, not the payload; it is accepted so callers state what they register.
    ``payload_version`` overrides the version Kafka ``kafka_version`` would pick (tests of v1-v3).
    """
    if broker_id < 0:
        raise ValueError(f"broker id must be >= 0, got {broker_id}")
    version = payload_version or broker_payload_version(kafka_version)
    pairs: list[tuple[str, object]] = [
        ("version", version),
        ("host", host),
        ("port", port),
    ]
    if version >= 2:
        pairs.append(("endpoints", [f"PLAINTEXT://{host}:{port}"]))
    pairs += [("jmx_port", jmx_port), ("timestamp", str(timestamp_ms))]
    if rack is not None and version >= 3:
        pairs.append(("rack", rack))
    if version >= 4:
        pairs.append(("listener_security_protocol_map", {"PLAINTEXT": "PLAINTEXT"}))
    if version >= 5:
        feats = {
            name: {"min_version": r["min_version"], "max_version": r["max_version"]}
            for name, r in (features or {}).items()
        }
        pairs.append(("features", feats))
    return _bytes(_ordered(pairs, mutable=True))


def _replica_json(assignment: Mapping[int, Sequence[int]], mutable: bool = True) -> dict[str, object]:
    # 2.4+ fills mutable maps; 1.1-2.3 maps the (immutable) assignment
    pairs = [(str(p), list(r)) for p, r in sorted(assignment.items())]
    return _ordered(pairs, mutable=mutable)


def encode_topic_assignment(
    partitions: Mapping[int, Sequence[int]],
    kafka_version: str,
    adding: Mapping[int, Sequence[int]] | None = None,
    removing: Mapping[int, Sequence[int]] | None = None,
    topic_id: str | None = None,
) -> bytes:
    """Payload of /brokers/topics/<t> (TopicZNode.encode): v1 (≤2.3), v2 (2.4-2.7), v3 (2.8+, topic_id).

    During a reassignment ``partitions[p]`` must already be the full set (target ++ origin).distinct.
    """
    version = topic_payload_version(kafka_version)
    if version == 1 and (adding or removing):
        raise ValueError("adding/removing replicas exist only from Kafka 2.4 (topic znode v2)")
    pairs: list[tuple[str, object]] = [
        ("version", version),
        ("partitions", _replica_json(partitions, version >= 2)),
    ]
    if version >= 2:
        pairs.append(("adding_replicas", _replica_json(adding or {})))
        pairs.append(("removing_replicas", _replica_json(removing or {})))
    if version >= 3 and topic_id is not None:
        pairs.append(("topic_id", topic_id))
    return _bytes(_ordered(pairs, mutable=version >= 2))


def encode_partition_state(
    leader: int,
    leader_epoch: int,
    controller_epoch: int,
    isr: Sequence[int],
    kafka_version: str,
    leader_recovery_state: int | None = None,
) -> bytes:
    """Payload of .../partitions/<p>/state (TopicPartitionStateZNode.encode), version 1 in every release.

    ``leader_recovery_state`` is written only when RECOVERING (1), from 3.2 (KIP-704).
    """
    if leader == LEADER_DURING_DELETE or leader < LEADER_NONE:
        raise ValueError(f"leader {leader} is never written to ZooKeeper")
    pairs: list[tuple[str, object]] = [
        ("version", 1),
        ("leader", leader),
        ("leader_epoch", leader_epoch),
        ("controller_epoch", controller_epoch),
        ("isr", list(isr)),
    ]
    if leader_recovery_state is not None and leader_recovery_state != 0:
        if _v(kafka_version) < (3, 2):
            raise ValueError("leader_recovery_state exists only from Kafka 3.2")
        pairs.append(("leader_recovery_state", leader_recovery_state))
    return _bytes(_ordered(pairs, mutable=False))


def encode_admin_delete_topic() -> bytes:
    """Payload of /admin/delete_topics/<t>: empty."""
    return b""


def _partition_list(items: Iterable[Mapping[str, object]]) -> bytes:
    return _bytes({"version": 1, "partitions": [dict(i) for i in items]})


def encode_reassignment(moves: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    """Payload of /admin/reassign_partitions: {(topic, partition): target replicas}."""
    return _partition_list(
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(moves.items())
    )


def encode_preferred_replica_election(partitions: Iterable[tuple[str, int]]) -> bytes:
    """Payload of /admin/preferred_replica_election."""
    return _partition_list({"topic": t, "partition": p} for t, p in partitions)


def encode_isr_change(partitions: Iterable[tuple[str, int]]) -> bytes:
    """Payload of /isr_change_notification/isr_change_<seq> (leaders on IBP <2.7-IV2)."""
    return _partition_list({"topic": t, "partition": p} for t, p in partitions)


def encode_log_dir_event(broker_id: int, event: int = 1) -> bytes:
    """Payload of /log_dir_event_notification/log_dir_event_<seq> (1 = LogDirFailure)."""
    return _bytes({"version": 1, "broker": broker_id, "event": event})


def encode_cluster_id(cluster_id: str) -> bytes:
    """Payload of /cluster/id; ``version`` is a string here."""
    return _bytes({"version": "1", "id": cluster_id})


def encode_producer_id_block(broker_id: int, block_start: int, block_end: int) -> bytes:
    """Payload of /latest_producer_id_block (inclusive bounds written as strings)."""
    return _bytes(
        {"version": 1, "broker": broker_id, "block_start": str(block_start), "block_end": str(block_end)}
    )


def encode_config(config: Mapping[str, str]) -> bytes:
    """Payload of /config/<entity_type>/<name>."""
    return _bytes({"version": 1, "config": dict(config)})


def encode_config_change(entity_type: str, entity_name: str, payload_version: int = 2) -> bytes:
    """Payload of /config/changes/config_change_<seq>: v2 entity_path, v1 entity_type + entity_name."""
    if payload_version == 1:
        return _bytes({"version": 1, "entity_type": entity_type, "entity_name": entity_name})
    return _bytes({"version": 2, "entity_path": f"{entity_type}/{entity_name}"})


def encode_feature(features: Mapping[str, tuple[int, int]], kafka_version: str, status: int = 1) -> bytes:
    """Payload of /feature (2.7+): v1 {min,max}_version_level, v2 (IBP ≥3.3) max only."""
    v2 = _v(kafka_version) >= (3, 3)
    feats = {
        name: ({"max_version_level": hi} if v2 else {"min_version_level": lo, "max_version_level": hi})
        for name, (lo, hi) in features.items()
    }
    return _bytes({"version": 2 if v2 else 1, "status": status, "features": feats})


def encode_migration(
    kraft_controller_id: int,
    kraft_controller_epoch: int,
    kraft_metadata_offset: int,
    kraft_metadata_epoch: int,
) -> bytes:
    """Payload of /migration (3.4+, KIP-866), version 0."""
    pairs: list[tuple[str, object]] = [
        ("version", 0),
        ("kraft_controller_id", kraft_controller_id),
        ("kraft_controller_epoch", kraft_controller_epoch),
        ("kraft_metadata_offset", kraft_metadata_offset),
        ("kraft_metadata_epoch", kraft_metadata_epoch),
    ]
    return _bytes(_ordered(pairs, mutable=False))
