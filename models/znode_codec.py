"""Znode payload codec: ZooKeeper change -> typed ``MetadataEvent`` s.

Ground truth is docs/kafka-metadata.md (Kafka's ``core/src/main/scala/kafka/zk/ZkData.scala`` at 1.1.0 … 3.8.0,
``utils/ZkUtils.scala`` at 1.0.0). Decoding never depends on JSON key order. The inverse, the bytes Kafka
writes (Scala map key order included), is the simulator's: ``simulator.payloads``.

The payload field specs are plain data (``PAYLOAD_SPECS``) so the Spark pipeline can mirror decoding
with ``from_json``/``get_json_object``; the decoder itself validates through the same specs.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, NamedTuple

from models.errors import MalformedZnodeError
from models.events import (
    INT32_MAX,
    INT32_MIN,
    MetadataEvent,
    MetadataEventType,
    ZnodeChange,
    ZnodeOp,
    int32_problem,
)
from models.states import parse_kafka_version

log = logging.getLogger(__name__)

T = MetadataEventType


# --------------------------------------------------------------------------------------------- paths
class PathKind(StrEnum):
    """What a znode path is, in Kafka's ZK layout (docs/kafka-metadata.md)."""

    CONTROLLER = "controller"  # /controller (ephemeral)
    CONTROLLER_EPOCH = "controller_epoch"  # /controller_epoch, plain decimal
    BROKER = "broker"  # /brokers/ids/<id> (ephemeral registration)
    BROKER_SEQID = "broker_seqid"  # /brokers/seqid (id generation, empty)
    TOPIC = "topic"  # /brokers/topics/<t> (assignment)
    PARTITION = "partition"  # /brokers/topics/<t>/partitions[/<p>] (empty containers)
    PARTITION_STATE = "partition_state"  # /brokers/topics/<t>/partitions/<p>/state
    CONFIG = "config"  # /config/<entity_type>/<entity_name>
    CONFIG_CHANGE = "config_change"  # /config/changes/config_change_<seq>
    DELETE_TOPIC = "delete_topic"  # /admin/delete_topics/<t>
    REASSIGNMENT = "reassignment"  # /admin/reassign_partitions
    PREFERRED_ELECTION = "preferred_election"  # /admin/preferred_replica_election
    ISR_CHANGE = "isr_change"  # /isr_change_notification/isr_change_<seq>
    LOG_DIR_EVENT = "log_dir_event"  # /log_dir_event_notification/log_dir_event_<seq>
    CLUSTER_ID = "cluster_id"  # /cluster/id
    PRODUCER_ID_BLOCK = "producer_id_block"  # /latest_producer_id_block
    FEATURE = "feature"  # /feature (2.7+)
    MIGRATION = "migration"  # /migration (3.4+)
    OTHER = "other"  # anything zkledger does not model


class PathInfo(NamedTuple):
    kind: PathKind
    topic: str | None = None
    partition: int | None = None
    broker: int | None = None


_NAME = r"([^/]+)"
_PATH_RULES: Final[tuple[tuple[re.Pattern[str], PathKind], ...]] = tuple(
    (re.compile(rx), kind)
    for rx, kind in (
        (r"^/controller$", PathKind.CONTROLLER),
        (r"^/controller_epoch$", PathKind.CONTROLLER_EPOCH),
        (r"^/brokers/ids/(?P<broker>\d+)$", PathKind.BROKER),
        (r"^/brokers/seqid$", PathKind.BROKER_SEQID),
        (rf"^/brokers/topics/(?P<topic>{_NAME[1:-1]})$", PathKind.TOPIC),
        (
            rf"^/brokers/topics/(?P<topic>{_NAME[1:-1]})/partitions(?:/(?P<partition>\d+))?$",
            PathKind.PARTITION,
        ),
        (
            rf"^/brokers/topics/(?P<topic>{_NAME[1:-1]})/partitions/(?P<partition>\d+)/state$",
            PathKind.PARTITION_STATE,
        ),
        (r"^/config/changes/config_change_\d+$", PathKind.CONFIG_CHANGE),
        (r"^/config/(?P<etype>topics|clients|users|brokers|ips)/(?P<ename>.+)$", PathKind.CONFIG),
        (rf"^/admin/delete_topics/(?P<topic>{_NAME[1:-1]})$", PathKind.DELETE_TOPIC),
        (r"^/admin/reassign_partitions$", PathKind.REASSIGNMENT),
        (r"^/admin/preferred_replica_election$", PathKind.PREFERRED_ELECTION),
        (r"^/isr_change_notification/isr_change_\d+$", PathKind.ISR_CHANGE),
        (r"^/log_dir_event_notification/log_dir_event_\d+$", PathKind.LOG_DIR_EVENT),
        (r"^/cluster/id$", PathKind.CLUSTER_ID),
        (r"^/latest_producer_id_block$", PathKind.PRODUCER_ID_BLOCK),
        (r"^/feature$", PathKind.FEATURE),
        (r"^/migration$", PathKind.MIGRATION),
    )
)

PATH_PATTERNS: Final[dict[PathKind, str]] = {kind: rx.pattern for rx, kind in _PATH_RULES}
"""Regex per path kind (Java/Spark-compatible named groups aside), for mirroring in Spark SQL."""


def strip_chroot(path: str, chroot: str | None) -> str:
    """Path relative to a Kafka chroot ('/kafka/brokers/ids/1' with chroot '/kafka' -> '/brokers/ids/1')."""
    if not chroot or chroot == "/":
        return path
    root = chroot.rstrip("/")
    if path == root:
        return "/"
    return path[len(root) :] if path.startswith(root + "/") else path


def classify_path(path: str, chroot: str | None = None) -> PathInfo:
    """(kind, topic, partition, broker) of a znode path; unknown paths are ``PathKind.OTHER``."""
    rel = strip_chroot(path, chroot)
    for rx, kind in _PATH_RULES:
        m = rx.match(rel)
        if m is None:
            continue
        groups = m.groupdict()
        topic = groups.get("topic")
        if kind is PathKind.CONFIG and groups.get("etype") == "topics":
            topic = groups.get("ename")
        part = groups.get("partition")
        broker = groups.get("broker")
        return PathInfo(kind, topic, int(part) if part is not None else None, int(broker) if broker else None)
    return PathInfo(PathKind.OTHER)


# --------------------------------------------------------------------------------------- field specs
@dataclass(frozen=True)
class FieldSpec:
    """One JSON key of a payload.

    ``type``: int, int_str (decimal digits; Kafka writes some numbers as JSON strings), str, str_or_null,
    int_list, str_list, object, int_or_str. ``since``: the payload version that introduced the key;
    ``required`` applies from that version on.
    """

    name: str
    type: str
    required: bool = True
    since: int = 1


F = FieldSpec
PAYLOAD_SPECS: Final[dict[PathKind, tuple[FieldSpec, ...]]] = {
    # ControllerZNode (ZkData@1.1.0 l47; @3.4.0 l60-65)
    PathKind.CONTROLLER: (
        F("version", "int"),
        F("brokerid", "int"),
        F("timestamp", "int_str", required=False),
        F("kraftControllerEpoch", "int", required=False, since=2),
    ),
    # BrokerIdZNode (ZkData@3.8.0)
    PathKind.BROKER: (
        F("version", "int"),
        F("host", "str_or_null"),
        F("port", "int"),
        F("jmx_port", "int", required=False),
        F("timestamp", "int_str", required=False),
        F("endpoints", "str_list", since=2),
        F("rack", "str_or_null", required=False, since=3),
        F("listener_security_protocol_map", "object", required=False, since=4),
        F("features", "object", required=False, since=5),
    ),
    # TopicZNode
    PathKind.TOPIC: (
        F("version", "int"),
        F("partitions", "object"),
        F("adding_replicas", "object", required=False, since=2),
        F("removing_replicas", "object", required=False, since=2),
        F("topic_id", "str", required=False, since=3),
    ),
    # TopicPartitionStateZNode (version 1 in every release)
    PathKind.PARTITION_STATE: (
        F("version", "int"),
        F("leader", "int"),
        F("leader_epoch", "int"),
        F("controller_epoch", "int"),
        F("isr", "int_list"),
        F("leader_recovery_state", "int", required=False),
    ),
    PathKind.CONFIG: (F("version", "int"), F("config", "object")),
    PathKind.CONFIG_CHANGE: (
        F("version", "int"),
        F("entity_type", "str", required=False),
        F("entity_name", "str", required=False),
        F("entity_path", "str", required=False, since=2),
    ),
    PathKind.REASSIGNMENT: (F("version", "int"), F("partitions", "list")),
    PathKind.PREFERRED_ELECTION: (F("version", "int"), F("partitions", "list")),
    PathKind.ISR_CHANGE: (F("version", "int"), F("partitions", "list")),
    PathKind.LOG_DIR_EVENT: (F("version", "int"), F("broker", "int"), F("event", "int")),
    PathKind.CLUSTER_ID: (F("version", "int_or_str"), F("id", "str")),
    PathKind.PRODUCER_ID_BLOCK: (
        F("version", "int"),
        F("broker", "int"),
        F("block_start", "int_str"),
        F("block_end", "int_str"),
    ),
    PathKind.FEATURE: (F("version", "int"), F("status", "int"), F("features", "object")),
    PathKind.MIGRATION: (  # version 0, so since=0
        F("version", "int", since=0),
        F("kraft_controller_id", "int", since=0),
        F("kraft_controller_epoch", "int", since=0),
        F("kraft_metadata_offset", "int", since=0),
        F("kraft_metadata_epoch", "int", since=0),
    ),
}

PAYLOAD_VERSIONS: Final[dict[PathKind, frozenset[int]]] = {
    PathKind.CONTROLLER: frozenset({1, 2}),
    PathKind.BROKER: frozenset({1, 2, 3, 4, 5}),
    PathKind.TOPIC: frozenset({1, 2, 3}),
    PathKind.PARTITION_STATE: frozenset({1}),
    PathKind.CONFIG: frozenset({1}),
    PathKind.CONFIG_CHANGE: frozenset({1, 2}),
    PathKind.REASSIGNMENT: frozenset({1}),
    PathKind.PREFERRED_ELECTION: frozenset({1}),
    PathKind.ISR_CHANGE: frozenset({1}),
    PathKind.LOG_DIR_EVENT: frozenset({1}),
    PathKind.CLUSTER_ID: frozenset({1}),
    PathKind.PRODUCER_ID_BLOCK: frozenset({1}),
    PathKind.FEATURE: frozenset({1, 2}),
    PathKind.MIGRATION: frozenset({0}),
}

LEADER_NONE: Final = -1  # no leader: the partition is offline
LEADER_DURING_DELETE: Final = -2  # only inside UpdateMetadata requests, never in ZK (CCM@3.8.0 l477)


class _Bad(Exception):
    """Internal: a reason a payload is malformed (turned into MalformedZnodeError with path and zxid)."""


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_str(v: object, name: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    raise _Bad(f"{name} must be a decimal number, got {v!r}")


def _check_type(name: str, type_: str, v: object) -> object:
    ok: bool
    if type_ == "int":
        ok = _is_int(v)
    elif type_ == "int_str":
        return _int_str(v, name)
    elif type_ == "str":
        ok = isinstance(v, str)
    elif type_ == "str_or_null":
        ok = v is None or isinstance(v, str)
    elif type_ == "int_or_str":
        ok = _is_int(v) or isinstance(v, str)
    elif type_ == "int_list":
        ok = isinstance(v, list) and all(_is_int(x) for x in v)
    elif type_ == "str_list":
        ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
    elif type_ == "object":
        ok = isinstance(v, dict)
    elif type_ == "list":
        ok = isinstance(v, list)
    else:  # pragma: no cover - spec typo
        raise AssertionError(f"unknown field type {type_}")
    if not ok:
        raise _Bad(f"{name} must be {type_}, got {type(v).__name__} {v!r}")
    return v


def _validate(kind: PathKind, obj: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``obj`` against PAYLOAD_SPECS[kind]; return the typed fields present (int_str -> int)."""
    specs = PAYLOAD_SPECS[kind]
    version = obj.get("version")
    if version is None:
        raise _Bad("missing required key 'version'")
    vnum = _payload_version(kind, version)
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.name not in obj:
            if spec.required and vnum >= spec.since:
                raise _Bad(f"missing required key {spec.name!r} (payload version {vnum})")
            continue
        out[spec.name] = _check_type(spec.name, spec.type, obj[spec.name])
    out["version"] = vnum
    return out


def _payload_version(kind: PathKind, version: object) -> int:
    if kind is PathKind.CLUSTER_ID and isinstance(version, str) and version.isdigit():
        vnum = int(version)  # /cluster/id writes "version":"1" (a string)
    elif _is_int(version):
        vnum = int(version)  # type: ignore[call-overload]
    else:
        raise _Bad(f"version must be an int, got {version!r}")
    if vnum not in PAYLOAD_VERSIONS[kind]:
        raise _Bad(f"unsupported {kind} payload version {vnum}")
    return vnum


def _reject_constant(name: str) -> object:
    raise _Bad(f"non-standard JSON constant {name}")


def _dict_no_dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Bad("duplicate JSON key")
    return out


def _text(data: bytes | None) -> str:
    if data is None or len(data) == 0:
        raise _Bad("empty payload")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Bad(f"payload is not UTF-8: {e}") from e


def _json_object(data: bytes | None) -> dict[str, Any]:
    text = _text(data)
    try:
        obj = json.loads(text, object_pairs_hook=_dict_no_dupes, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise _Bad(f"bad JSON: {e.msg} at {e.pos}") from e
    except RecursionError:
        raise _Bad("bad JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise _Bad(f"JSON payload must be an object, got {type(obj).__name__}")
    return obj


# ---------------------------------------------------------------------------------------- decoders
@dataclass(frozen=True)
class _Ctx:
    change: ZnodeChange
    info: PathInfo
    kafka_version: tuple[int, int] | None
    rel_path: str  # the path below Kafka's chroot

    def event(self, type_: MetadataEventType, **fields: Any) -> MetadataEvent:
        c = self.change
        base: dict[str, Any] = {
            "zxid": c.zxid,
            "type": type_,
            "event_time": c.txn_time,
            "topic": self.info.topic,
            "partition": self.info.partition,
            "broker": self.info.broker,
            "zk_version": c.version,
            "czxid": c.czxid,
            "path": c.path,
        }
        base.update(fields)
        return MetadataEvent(**base)


def _op_name(ctx: _Ctx) -> str:
    return str(ctx.change.op)


def _decode_controller(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.CONTROLLER_RESIGNED)]
    f = _validate(PathKind.CONTROLLER, _json_object(ctx.change.data))
    kraft_epoch = f.get("kraftControllerEpoch", -1)
    detail: dict[str, object] = {"payload_version": f["version"], "kraft_controller_epoch": kraft_epoch}
    if "timestamp" in f:
        detail["timestamp_ms"] = f["timestamp"]
    # a KRaft controller registering during migration writes kraftControllerEpoch >= 0 (3.4+)
    detail["kraft"] = kraft_epoch != -1
    return [ctx.event(T.CONTROLLER_ELECTED, controller_id=f["brokerid"], detail=detail)]


def _decode_controller_epoch(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.OTHER, detail={"deleted": True})]
    text = _text(ctx.change.data).strip()
    if not re.fullmatch(r"\d+", text):
        raise _Bad(f"controller epoch must be a non-negative decimal, got {text[:40]!r}")
    return [ctx.event(T.CONTROLLER_EPOCH_CHANGED, controller_epoch=int(text))]


def _decode_broker(ctx: _Ctx) -> list[MetadataEvent]:
    op = ctx.change.op
    if op is ZnodeOp.DELETE:
        return [ctx.event(T.BROKER_DEREGISTERED)]
    if op is ZnodeOp.CREATE and not ctx.change.data and _checked_ephemeral(ctx):
        return []  # the empty create of a 2.2+ registration: its data comes with the set in the same multi
    f = _validate(PathKind.BROKER, _json_object(ctx.change.data))
    detail: dict[str, object] = {"payload_version": f["version"]}
    for key in (
        "host",
        "port",
        "jmx_port",
        "endpoints",
        "rack",
        "listener_security_protocol_map",
        "features",
    ):
        if key in f:
            detail[key] = f[key]
    if "timestamp" in f:
        detail["timestamp_ms"] = f["timestamp"]
    # KIP-380 (2.2+): the registration znode's czxid is the broker epoch
    if ctx.change.czxid is not None and (ctx.kafka_version is None or ctx.kafka_version >= (2, 2)):
        detail["broker_epoch"] = ctx.change.czxid
    # 2.2+ registers in one multi: create with no data, then set the data at version 0 (KAFKA-7165), so the
    # registration reaches the transaction log as the set that makes version 1
    first_set = op is ZnodeOp.SET and ctx.change.version == 1 and _checked_ephemeral(ctx)
    type_ = T.BROKER_UPDATED if op is ZnodeOp.SET and not first_set else T.BROKER_REGISTERED
    return [ctx.event(type_, detail=detail)]


def _checked_ephemeral(ctx: _Ctx) -> bool:
    """Whether this Kafka registers brokers as a create without data and a set (2.2+; unknown version: yes)."""
    return ctx.kafka_version is None or ctx.kafka_version >= (2, 2)


_DECIMAL = re.compile(r"\d+")


def _replica_map(name: str, raw: Mapping[str, Any]) -> dict[int, tuple[int, ...]]:
    # a topic of thousands of partitions: check the whole map at once; anything odd takes the loop below,
    # which names the first bad entry
    keys, lists = list(raw), list(raw.values())
    if all(k.isdecimal() for k in keys) and all(type(r) is list for r in lists):
        numbers = [int(k) for k in keys]
        flat = [b for r in lists for b in r]
        if (not numbers or max(numbers) <= INT32_MAX) and all(type(b) is int for b in flat) and (
                not flat or (INT32_MIN <= min(flat) and max(flat) <= INT32_MAX)):
            return dict(zip(numbers, map(tuple, lists), strict=True))
    return _replica_map_checked(name, raw)


def _replica_map_checked(name: str, raw: Mapping[str, Any]) -> dict[int, tuple[int, ...]]:
    out: dict[int, tuple[int, ...]] = {}
    for key, replicas in raw.items():
        if not _DECIMAL.fullmatch(key) or int(key) > INT32_MAX:
            raise _Bad(f"{name}: partition key must be a non-negative 32-bit integer string, got {key!r}")
        # JSON yields exact lists and ints (or bools): the exact-type test is the common, cheap case
        if type(replicas) is not list or not all(type(r) is int for r in replicas):
            _check_type(f"{name}[{key}]", "int_list", replicas)
        if replicas and not (INT32_MIN <= min(replicas) and max(replicas) <= INT32_MAX):
            raise _Bad(f"{name}[{key}]: broker ids are 32-bit ints in Kafka, got {replicas!r}")
        out[int(key)] = tuple(replicas)
    return out


@dataclass(frozen=True)
class TopicAssignment:
    """The validated fields of one topic assignment payload (``/brokers/topics/T``)."""

    partitions: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]]
    removing: dict[int, tuple[int, ...]]
    common: dict[str, object]  # the detail every partition's PARTITION_ASSIGNED event carries

    def partition_detail(self, partition: int) -> dict[str, object]:
        """The ``detail`` of one partition's PARTITION_ASSIGNED event."""
        detail = dict(self.common)
        if partition in self.adding:
            detail["adding_replicas"] = list(self.adding[partition])
        if partition in self.removing:
            detail["removing_replicas"] = list(self.removing[partition])
        return detail


def topic_assignment(data: bytes | None) -> TopicAssignment:
    """Validate a topic assignment payload; depends on the bytes only.

    Raises:
        ValueError: the payload is not something Kafka writes (the reason is the message).
    """
    try:
        return _topic_assignment(data)
    except _Bad as e:
        raise ValueError(str(e)) from None


def _topic_assignment(data: bytes | None) -> TopicAssignment:
    f = _validate(PathKind.TOPIC, _json_object(data))
    partitions = _replica_map("partitions", f["partitions"])
    adding = _replica_map("adding_replicas", f.get("adding_replicas", {}))
    removing = _replica_map("removing_replicas", f.get("removing_replicas", {}))
    common: dict[str, object] = {"payload_version": f["version"], "partition_count": len(partitions)}
    if "topic_id" in f:
        common["topic_id"] = f["topic_id"]
    return TopicAssignment(partitions, adding, removing, common)


def _decode_topic(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.TOPIC_DELETED)]
    a = _topic_assignment(ctx.change.data)
    if not a.partitions:  # keep the observation even though Kafka never writes an empty assignment
        return [ctx.event(T.PARTITION_ASSIGNED, detail=a.common)]
    return [ctx.event(T.PARTITION_ASSIGNED, partition=p, replicas=a.partitions[p], detail=a.partition_detail(p))
            for p in sorted(a.partitions)]


@dataclass(frozen=True)
class PartitionStatePayload:
    """The validated fields of one partition state payload (what every state write of these bytes means)."""

    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: tuple[int, ...]
    leader_recovery_state: int | None


def partition_state_payload(data: bytes | None) -> PartitionStatePayload:
    """Validate a ``.../partitions/P/state`` payload; depends on the bytes only, so callers may cache it.

    Raises:
        ValueError: the payload is not something Kafka writes (the reason is the message).
    """
    try:
        f = _validate(PathKind.PARTITION_STATE, _json_object(data))
    except _Bad as e:
        raise ValueError(str(e)) from None
    leader = f["leader"]
    if leader == LEADER_DURING_DELETE:
        raise ValueError("leader -2 (LeaderDuringDelete) is never written to ZooKeeper")
    if leader < LEADER_NONE:
        raise ValueError(f"leader must be a broker id or -1, got {leader}")
    if f["leader_epoch"] < 0 or f["controller_epoch"] < 0:
        raise ValueError("leader_epoch and controller_epoch must be >= 0")
    ints = [leader, f["leader_epoch"], f["controller_epoch"], *f["isr"]]
    if any(not INT32_MIN <= v <= INT32_MAX for v in ints):
        raise ValueError("broker ids and epochs are 32-bit ints in Kafka")
    return PartitionStatePayload(leader, f["leader_epoch"], f["controller_epoch"], tuple(f["isr"]),
                                 f.get("leader_recovery_state"))


def partition_state_detail(payload: PartitionStatePayload, created: bool) -> dict[str, object]:
    """The ``detail`` of a PARTITION_STATE_WRITTEN event."""
    detail: dict[str, object] = {"created": created}
    if payload.leader_recovery_state is not None:
        detail["leader_recovery_state"] = payload.leader_recovery_state
    return detail


def _decode_partition_state(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.PARTITION_STATE_DELETED)]
    try:
        p = partition_state_payload(ctx.change.data)
    except ValueError as e:
        raise _Bad(str(e)) from None
    return [
        ctx.event(
            T.PARTITION_STATE_WRITTEN,
            leader=p.leader,
            leader_epoch=p.leader_epoch,
            controller_epoch=p.controller_epoch,
            isr=p.isr,
            detail=partition_state_detail(p, ctx.change.op is ZnodeOp.CREATE),
        )
    ]


def _decode_config(ctx: _Ctx) -> list[MetadataEvent]:
    m = re.match(r"^/config/([^/]+)/(.+)$", ctx.rel_path)
    etype, ename = (m.group(1), m.group(2)) if m else (None, None)
    detail: dict[str, object] = {"entity_type": etype, "entity_name": ename}
    if ctx.change.op is ZnodeOp.DELETE:
        detail["deleted"] = True
        return [ctx.event(T.CONFIG_CHANGED, detail=detail)]
    f = _validate(PathKind.CONFIG, _json_object(ctx.change.data))
    detail["config"] = f["config"]
    return [ctx.event(T.CONFIG_CHANGED, detail=detail)]


def _decode_config_change(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:  # old notifications are purged by brokers: housekeeping
        return [ctx.event(T.OTHER, detail={"notification_purged": "config_change"})]
    f = _validate(PathKind.CONFIG_CHANGE, _json_object(ctx.change.data))
    detail: dict[str, object] = {"notification": True, "payload_version": f["version"]}
    if f["version"] >= 2:
        if "entity_path" not in f:
            raise _Bad("missing required key 'entity_path' (payload version 2)")
        etype, _, ename = str(f["entity_path"]).partition("/")
    else:
        if "entity_type" not in f or "entity_name" not in f:
            raise _Bad("config change v1 needs entity_type and entity_name")
        etype, ename = f["entity_type"], f["entity_name"]
    detail.update(entity_type=etype, entity_name=ename)
    topic = ename if etype == "topics" else None
    return [ctx.event(T.CONFIG_CHANGED, topic=topic, detail=detail)]


def _partition_refs(raw: list[Any], with_replicas: bool) -> list[tuple[str, int, tuple[int, ...] | None]]:
    out: list[tuple[str, int, tuple[int, ...] | None]] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _Bad(f"partitions[{i}] must be an object")
        topic = item.get("topic")
        part = item.get("partition")
        if not isinstance(topic, str) or not isinstance(part, int) or isinstance(part, bool):
            raise _Bad(f"partitions[{i}] needs a string topic and an int partition")
        replicas: tuple[int, ...] | None = None
        if with_replicas:
            if "replicas" not in item:
                raise _Bad(f"partitions[{i}] is missing 'replicas'")
            _check_type(f"partitions[{i}].replicas", "int_list", item["replicas"])
            replicas = tuple(item["replicas"])
        out.append((topic, part, replicas))
    return out


def _partition_list_events(
    ctx: _Ctx, kind: PathKind, type_: MetadataEventType, with_replicas: bool
) -> list[MetadataEvent]:
    f = _validate(kind, _json_object(ctx.change.data))
    refs = _partition_refs(f["partitions"], with_replicas)
    if not refs:  # the controller shrinks a reassignment to an empty list: keep the observation
        return [ctx.event(type_, detail={"partition_count": 0})]
    return [
        ctx.event(type_, topic=t, partition=p, replicas=r, detail={"partition_count": len(refs)})
        for t, p, r in refs
    ]


def _decode_reassignment(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:  # the controller deletes it when every move completed
        return [ctx.event(T.OTHER, detail={"completed": "reassignment"})]
    return _partition_list_events(ctx, PathKind.REASSIGNMENT, T.REASSIGNMENT_REQUESTED, with_replicas=True)


def _decode_preferred(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.OTHER, detail={"completed": "preferred_replica_election"})]
    return _partition_list_events(
        ctx, PathKind.PREFERRED_ELECTION, T.PREFERRED_ELECTION_REQUESTED, with_replicas=False
    )


def _decode_isr_change(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:  # consumed by the controller
        return [ctx.event(T.OTHER, detail={"notification_consumed": "isr_change"})]
    return _partition_list_events(ctx, PathKind.ISR_CHANGE, T.ISR_CHANGE_NOTIFIED, with_replicas=False)


def _decode_log_dir_event(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.OTHER, detail={"notification_consumed": "log_dir_event"})]
    f = _validate(PathKind.LOG_DIR_EVENT, _json_object(ctx.change.data))
    detail = {"event": f["event"], "log_dir_failure": f["event"] == 1}
    return [ctx.event(T.LOG_DIR_EVENT, broker=f["broker"], detail=detail)]


def _decode_cluster_id(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.OTHER, detail={"deleted": True})]
    f = _validate(PathKind.CLUSTER_ID, _json_object(ctx.change.data))
    return [ctx.event(T.CLUSTER_ID_SET, detail={"cluster_id": f["id"]})]


def _decode_producer_id_block(ctx: _Ctx) -> list[MetadataEvent]:
    data = ctx.change.data
    if ctx.change.op is ZnodeOp.DELETE or not data:  # created empty before the first block is taken
        return [ctx.event(T.PRODUCER_ID_BLOCK, detail={"empty": True})]
    f = _validate(PathKind.PRODUCER_ID_BLOCK, _json_object(data))
    if f["block_end"] < f["block_start"]:
        raise _Bad(f"block_end {f['block_end']} < block_start {f['block_start']}")
    detail = {"block_start": f["block_start"], "block_end": f["block_end"]}
    return [ctx.event(T.PRODUCER_ID_BLOCK, broker=f["broker"], detail=detail)]


def _decode_feature(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.OTHER, detail={"deleted": True})]
    f = _validate(PathKind.FEATURE, _json_object(ctx.change.data))
    detail = {"payload_version": f["version"], "status": f["status"], "features": f["features"]}
    return [ctx.event(T.FEATURES_CHANGED, detail=detail)]


def _decode_migration(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.OTHER, detail={"deleted": True})]
    f = _validate(PathKind.MIGRATION, _json_object(ctx.change.data))
    detail = {k: v for k, v in f.items() if k != "version"}
    return [ctx.event(T.MIGRATION_STATE, controller_id=f["kraft_controller_id"], detail=detail)]


def _decode_delete_topic(ctx: _Ctx) -> list[MetadataEvent]:
    if ctx.change.op is ZnodeOp.DELETE:
        return [ctx.event(T.TOPIC_DELETION_COMPLETED)]
    return [ctx.event(T.TOPIC_DELETION_REQUESTED)]


def _decode_other(ctx: _Ctx) -> list[MetadataEvent]:
    return [ctx.event(T.OTHER, detail={"op": _op_name(ctx), "kind": str(ctx.info.kind)})]


_DECODERS: Final[dict[PathKind, Callable[[_Ctx], list[MetadataEvent]]]] = {
    PathKind.CONTROLLER: _decode_controller,
    PathKind.CONTROLLER_EPOCH: _decode_controller_epoch,
    PathKind.BROKER: _decode_broker,
    PathKind.TOPIC: _decode_topic,
    PathKind.PARTITION_STATE: _decode_partition_state,
    PathKind.CONFIG: _decode_config,
    PathKind.CONFIG_CHANGE: _decode_config_change,
    PathKind.DELETE_TOPIC: _decode_delete_topic,
    PathKind.REASSIGNMENT: _decode_reassignment,
    PathKind.PREFERRED_ELECTION: _decode_preferred,
    PathKind.ISR_CHANGE: _decode_isr_change,
    PathKind.LOG_DIR_EVENT: _decode_log_dir_event,
    PathKind.CLUSTER_ID: _decode_cluster_id,
    PathKind.PRODUCER_ID_BLOCK: _decode_producer_id_block,
    PathKind.FEATURE: _decode_feature,
    PathKind.MIGRATION: _decode_migration,
}


def _decode_session_op(change: ZnodeChange, info: PathInfo) -> list[MetadataEvent] | None:
    """Non-znode ops: session close, failed multi, collection gap (None when ``change`` is a znode op)."""
    ctx = _Ctx(change, info, None, change.path)
    if change.op is ZnodeOp.CLOSE_SESSION:
        return [ctx.event(T.SESSION_CLOSED, detail={"session_id": change.session_id})]
    if change.op is ZnodeOp.CREATE_SESSION:
        return [ctx.event(T.OTHER, detail={"op": "CREATE_SESSION", "session_id": change.session_id})]
    if change.op is ZnodeOp.MULTI_FAILED:
        # 2.1+ fencing: every controller write is multi(check /controller_epoch version, op) (KZC@3.8.0 l1969)
        fenced = info.kind is PathKind.CONTROLLER_EPOCH
        type_ = T.CONTROLLER_WRITE_FENCED if fenced else T.OTHER
        return [ctx.event(type_, detail={"failed_check": change.path, "detail": change.detail})]
    if change.op is ZnodeOp.GAP:
        return [ctx.event(T.COLLECTION_GAP, detail={"reason": change.detail})]
    return None


def decode(
    change: ZnodeChange, kafka_version_hint: str | None = None, chroot: str | None = None
) -> list[MetadataEvent]:
    """Typed metadata events of one znode change (docs/kafka-metadata.md).

    Args:
        change: the observed change (a ``znode_events`` row).
        kafka_version_hint: the cluster's Kafka version if known ('2.1', '3.8.0'); only refines ``detail``
            (e.g. czxid is the broker epoch from 2.2).
        chroot: Kafka's ZooKeeper chroot, stripped from ``change.path`` before classifying.

    Returns:
        One event for most changes; one per partition for topic assignments and admin partition lists.
        Unknown paths yield one ``OTHER`` event (kept, not an error).

    Raises:
        MalformedZnodeError: the payload is not something Kafka writes (bad JSON, wrong type, missing key,
            leader -2, non-numeric epoch, non-UTF-8, unsupported payload version).
    """
    info = classify_path(change.path, chroot)
    try:
        session = _decode_session_op(change, info)
        if session is not None:
            return session
        version = parse_kafka_version(kafka_version_hint) if kafka_version_hint else None
        ctx = _Ctx(change, info, version, strip_chroot(change.path, chroot))
        events = _DECODERS.get(info.kind, _decode_other)(ctx)
        for event in events:
            problem = int32_problem({name: getattr(event, name) for name in _INT32_FIELDS})
            if problem is not None:
                raise _Bad(problem)
        return events
    except _Bad as e:
        raise MalformedZnodeError(change.path, change.zxid, str(e)) from None


_INT32_FIELDS: Final = ("partition", "broker", "controller_id", "controller_epoch", "leader", "leader_epoch",
                        "zk_version", "isr", "replicas")
