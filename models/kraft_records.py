"""Decoder for the records of KRaft's metadata log (``__cluster_metadata-0``): metadata and control records.

A metadata record's value is an unsigned-varint frame version (1), an unsigned-varint api key, an
unsigned-varint schema version, then the message in Kafka's flexible-version encoding (compact strings,
bytes and arrays, a tagged-field section after every struct). The schemas below were transcribed by hand
from Kafka's ``metadata/src/main/resources/common/metadata/*.json`` and
``clients/src/main/resources/common/message/{LeaderChangeMessage,Snapshot*,KRaftVersion,Voters}*.json``;
they cover every record type and version Kafka 3.3 to 4.1 writes (plus ``UnregisterControllerRecord``).

``MetadataRecord.fields`` mirrors the ``data`` object ``kafka-dump-log --cluster-metadata-decoder`` prints:
Kafka's camelCase field names, UUIDs in Kafka's base64url form, arrays as lists, structs as dicts, null as
None. Differences from dump-log's JSON (``dump_log_data`` removes both):

* a tagged field whose value is its default is present here with the default; dump-log omits it;
* ``bytes`` fields are Python ``bytes``; dump-log prints them base64-encoded.

Fields that do not exist in the record's version are absent, as in dump-log. Unknown tagged fields (tags
this table does not know for the version) are skipped, as Kafka's readers skip them.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from models.errors import MetadataModelError

__all__ = [
    "ControlRecord",
    "ControlRecordType",
    "KraftDecodeError",
    "MetadataRecord",
    "MetadataRecordType",
    "decode_control_record",
    "decode_metadata_record",
    "dump_log_data",
    "known_versions",
]


class KraftDecodeError(MetadataModelError):
    """A record value (or control key/value) this decoder cannot read; ``reason`` says why, in one line."""

    def __init__(self, reason: str) -> None:
        reason = " ".join(reason.split())  # one line, whatever went in
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self) -> tuple[type[KraftDecodeError], tuple[str]]:
        return (KraftDecodeError, (self.reason,))


class MetadataRecordType(IntEnum):
    """Kafka's metadata record api keys, named as Kafka's ``MetadataRecordType`` (and dump-log's ``type``)."""

    REGISTER_BROKER_RECORD = 0
    UNREGISTER_BROKER_RECORD = 1
    TOPIC_RECORD = 2
    PARTITION_RECORD = 3
    CONFIG_RECORD = 4
    PARTITION_CHANGE_RECORD = 5
    FENCE_BROKER_RECORD = 7
    UNFENCE_BROKER_RECORD = 8
    REMOVE_TOPIC_RECORD = 9
    DELEGATION_TOKEN_RECORD = 10
    USER_SCRAM_CREDENTIAL_RECORD = 11
    FEATURE_LEVEL_RECORD = 12
    CLIENT_QUOTA_RECORD = 14
    PRODUCER_IDS_RECORD = 15
    BROKER_REGISTRATION_CHANGE_RECORD = 17
    ACCESS_CONTROL_ENTRY_RECORD = 18
    REMOVE_ACCESS_CONTROL_ENTRY_RECORD = 19
    NO_OP_RECORD = 20
    ZK_MIGRATION_STATE_RECORD = 21
    REMOVE_USER_SCRAM_CREDENTIAL_RECORD = 22
    BEGIN_TRANSACTION_RECORD = 23
    END_TRANSACTION_RECORD = 24
    ABORT_TRANSACTION_RECORD = 25
    REMOVE_DELEGATION_TOKEN_RECORD = 26
    REGISTER_CONTROLLER_RECORD = 27
    CLEAR_ELR_RECORD = 28
    UNREGISTER_CONTROLLER_RECORD = 29

    @property
    def schema_name(self) -> str:
        """Kafka's message name, e.g. ``TopicRecord``."""
        return _METADATA_SCHEMAS[self.value][0]


class ControlRecordType(IntEnum):
    """The ``type`` in a control record's key (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True)
class MetadataRecord:
    """One decoded metadata record: its type, schema version and fields (see the module docstring)."""

    record_type: MetadataRecordType
    version: int
    fields: dict[str, Any]


@dataclass(frozen=True)
class ControlRecord:
    """One decoded control record.

    ``version`` is the schema version the value was read with: the value's own leading ``Version`` field for
    the KRaft control records, the marker version for ABORT/COMMIT (whose fields are ``version`` and
    ``coordinatorEpoch``).
    """

    record_type: ControlRecordType
    version: int
    fields: dict[str, Any]


# ---------------------------------------------------------------------------------------------------------
# Schema table. Each field: (camelCase name, kind, first version, nullable, tag or None, default of a tagged
# field, child fields for struct kinds). Kinds: int8 int16 int32 int64 uint16 float64 bool uuid string bytes,
# "[]<scalar>" for arrays of scalars, "[]" for an array of structs and "{}" for a single struct.
# In every schema used here nullableVersions and taggedVersions equal the field's versions, and every
# version is flexible, so a first version and two flags describe a field completely.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str
    since: int = 0
    nullable: bool = False
    tag: int | None = None
    default: Any = None
    children: tuple[_Field, ...] = ()


def _f(
    name: str,
    kind: str,
    since: int = 0,
    *,
    nullable: bool = False,
    tag: int | None = None,
    default: Any = None,
    children: tuple[_Field, ...] = (),
) -> _Field:
    return _Field(name, kind, since, nullable, tag, default, children)


_NO_LEADER_CHANGE: Final = -2  # PartitionChangeRecord.leader: "the leader didn't change"

_ENDPOINT_FIELDS = (_f("name", "string"), _f("host", "string"), _f("port", "uint16"), _f("securityProtocol", "int16"))
_FEATURE_RANGE_FIELDS = (
    _f("name", "string"),
    _f("minSupportedVersion", "int16"),
    _f("maxSupportedVersion", "int16"),
)

# api key -> (schema name, highest version, fields)
_METADATA_SCHEMAS: Final[dict[int, tuple[str, int, tuple[_Field, ...]]]] = {
    0: ("RegisterBrokerRecord", 3, (
        _f("brokerId", "int32"),
        _f("isMigratingZkBroker", "bool", 2),
        _f("incarnationId", "uuid"),
        _f("brokerEpoch", "int64"),
        _f("endPoints", "[]", children=_ENDPOINT_FIELDS),
        _f("features", "[]", children=_FEATURE_RANGE_FIELDS),
        _f("rack", "string", nullable=True),
        _f("fenced", "bool"),
        _f("inControlledShutdown", "bool", 1),
        _f("logDirs", "[]uuid", 3, tag=0, default=[]),
    )),
    1: ("UnregisterBrokerRecord", 0, (_f("brokerId", "int32"), _f("brokerEpoch", "int64"))),
    2: ("TopicRecord", 0, (_f("name", "string"), _f("topicId", "uuid"))),
    3: ("PartitionRecord", 2, (
        _f("partitionId", "int32"),
        _f("topicId", "uuid"),
        _f("replicas", "[]int32"),
        _f("isr", "[]int32"),
        _f("removingReplicas", "[]int32"),
        _f("addingReplicas", "[]int32"),
        _f("leader", "int32"),
        _f("leaderRecoveryState", "int8", tag=0, default=0),
        _f("leaderEpoch", "int32"),
        _f("partitionEpoch", "int32"),
        _f("directories", "[]uuid", 1),
        _f("eligibleLeaderReplicas", "[]int32", 2, nullable=True, tag=1),
        _f("lastKnownElr", "[]int32", 2, nullable=True, tag=2),
    )),
    4: ("ConfigRecord", 0, (
        _f("resourceType", "int8"),
        _f("resourceName", "string"),
        _f("name", "string"),
        _f("value", "string", nullable=True),
    )),
    5: ("PartitionChangeRecord", 2, (
        _f("partitionId", "int32"),
        _f("topicId", "uuid"),
        _f("isr", "[]int32", nullable=True, tag=0),
        _f("leader", "int32", tag=1, default=_NO_LEADER_CHANGE),
        _f("replicas", "[]int32", nullable=True, tag=2),
        _f("removingReplicas", "[]int32", nullable=True, tag=3),
        _f("addingReplicas", "[]int32", nullable=True, tag=4),
        _f("leaderRecoveryState", "int8", tag=5, default=-1),
        _f("directories", "[]uuid", 1, nullable=True, tag=8),
        _f("eligibleLeaderReplicas", "[]int32", 2, nullable=True, tag=6),
        _f("lastKnownElr", "[]int32", 2, nullable=True, tag=7),
    )),
    7: ("FenceBrokerRecord", 0, (_f("id", "int32"), _f("epoch", "int64"))),
    8: ("UnfenceBrokerRecord", 0, (_f("id", "int32"), _f("epoch", "int64"))),
    9: ("RemoveTopicRecord", 0, (_f("topicId", "uuid"),)),
    10: ("DelegationTokenRecord", 0, (
        _f("owner", "string"),
        _f("requester", "string"),
        _f("renewers", "[]string"),
        _f("issueTimestamp", "int64"),
        _f("maxTimestamp", "int64"),
        _f("expirationTimestamp", "int64"),
        _f("tokenId", "string"),
    )),
    11: ("UserScramCredentialRecord", 0, (
        _f("name", "string"),
        _f("mechanism", "int8"),
        _f("salt", "bytes"),
        _f("storedKey", "bytes"),
        _f("serverKey", "bytes"),
        _f("iterations", "int32"),
    )),
    12: ("FeatureLevelRecord", 0, (_f("name", "string"), _f("featureLevel", "int16"))),
    14: ("ClientQuotaRecord", 0, (
        _f("entity", "[]", children=(_f("entityType", "string"), _f("entityName", "string", nullable=True))),
        _f("key", "string"),
        _f("value", "float64"),
        _f("remove", "bool"),
    )),
    15: ("ProducerIdsRecord", 0, (_f("brokerId", "int32"), _f("brokerEpoch", "int64"), _f("nextProducerId", "int64"))),
    17: ("BrokerRegistrationChangeRecord", 2, (
        _f("brokerId", "int32"),
        _f("brokerEpoch", "int64"),
        _f("fenced", "int8", tag=0, default=0),
        _f("inControlledShutdown", "int8", 1, tag=1, default=0),
        _f("logDirs", "[]uuid", 2, tag=2, default=[]),
    )),
    18: ("AccessControlEntryRecord", 0, (
        _f("id", "uuid"),
        _f("resourceType", "int8"),
        _f("resourceName", "string"),
        _f("patternType", "int8"),
        _f("principal", "string"),
        _f("host", "string"),
        _f("operation", "int8"),
        _f("permissionType", "int8"),
    )),
    19: ("RemoveAccessControlEntryRecord", 0, (_f("id", "uuid"),)),
    20: ("NoOpRecord", 0, ()),
    21: ("ZkMigrationStateRecord", 0, (_f("zkMigrationState", "int8"),)),
    22: ("RemoveUserScramCredentialRecord", 0, (_f("name", "string"), _f("mechanism", "int8"))),
    23: ("BeginTransactionRecord", 0, (_f("name", "string", nullable=True, tag=0),)),
    24: ("EndTransactionRecord", 0, ()),
    25: ("AbortTransactionRecord", 0, (_f("reason", "string", nullable=True, tag=0),)),
    26: ("RemoveDelegationTokenRecord", 0, (_f("tokenId", "string"),)),
    27: ("RegisterControllerRecord", 0, (
        _f("controllerId", "int32"),
        _f("incarnationId", "uuid"),
        _f("zkMigrationReady", "bool"),
        _f("endPoints", "[]", children=_ENDPOINT_FIELDS),
        _f("features", "[]", children=_FEATURE_RANGE_FIELDS),
    )),
    28: ("ClearElrRecord", 0, (_f("topicName", "string"),)),
    29: ("UnregisterControllerRecord", 0, (_f("controllerId", "int32"),)),
}

_VOTER_FIELDS = (_f("voterId", "int32"), _f("voterDirectoryId", "uuid", 1))

# control record type -> (schema name, highest version, fields); ABORT/COMMIT are decoded apart (not flexible)
_CONTROL_SCHEMAS: Final[dict[int, tuple[str, int, tuple[_Field, ...]]]] = {
    2: ("LeaderChangeMessage", 1, (
        _f("version", "int16"),
        _f("leaderId", "int32"),
        _f("voters", "[]", children=_VOTER_FIELDS),
        _f("grantingVoters", "[]", children=_VOTER_FIELDS),
    )),
    3: ("SnapshotHeaderRecord", 0, (_f("version", "int16"), _f("lastContainedLogTimestamp", "int64"))),
    4: ("SnapshotFooterRecord", 0, (_f("version", "int16"),)),
    5: ("KRaftVersionRecord", 0, (_f("version", "int16"), _f("kRaftVersion", "int16"))),
    6: ("VotersRecord", 0, (
        _f("version", "int16"),
        _f("voters", "[]", children=(
            _f("voterId", "int32"),
            _f("voterDirectoryId", "uuid"),
            _f("endpoints", "[]", children=(_f("name", "string"), _f("host", "string"), _f("port", "uint16"))),
            _f("kRaftVersionFeature", "{}", children=(
                _f("minSupportedVersion", "int16"),
                _f("maxSupportedVersion", "int16"),
            )),
        )),
    )),
}


# ---------------------------------------------------------------------------------------------------------
# Primitive readers: (buffer, position) -> (value, next position). They raise _Truncated with the position
# of the value that runs past the end, or _Invalid for bytes Kafka could not have written.
# ---------------------------------------------------------------------------------------------------------


class _Truncated(Exception):
    def __init__(self, pos: int) -> None:
        self.pos = pos


class _Invalid(Exception):
    pass


_Reader = Callable[[bytes, int], tuple[Any, int]]
_StructReader = Callable[[bytes, int], tuple[dict[str, Any], int]]


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        b = buf[pos]
    except IndexError:
        raise _Truncated(pos) from None
    if b < 0x80:  # nearly every length and count fits in one byte
        return b, pos + 1
    start = pos
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise _Truncated(start) from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise _Invalid(f"unsigned varint at byte {start} is longer than 5 bytes")


def _fixed(fmt: str) -> _Reader:
    unpack_from = struct.Struct(fmt).unpack_from
    size = struct.calcsize(fmt)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos)[0], pos + size
        except struct.error:
            raise _Truncated(pos) from None

    return read


_SCALAR_READERS: Final[dict[str, _Reader]] = {
    "int8": _fixed(">b"),
    "int16": _fixed(">h"),
    "int32": _fixed(">i"),
    "int64": _fixed(">q"),
    "uint16": _fixed(">H"),
    "float64": _fixed(">d"),
    "bool": _fixed(">?"),
}


def _uuid_text(raw: bytes) -> str:
    # Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes without the "==" padding
    return base64.urlsafe_b64encode(raw)[:22].decode("ascii")


def _read_uuid(buf: bytes, pos: int) -> tuple[str, int]:
    end = pos + 16
    if end > len(buf):
        raise _Truncated(pos)
    return _uuid_text(buf[pos:end]), end


_MAX_STRING_LENGTH: Final = 0x7FFF  # Kafka rejects longer strings (a short length in the classic encoding)


def _string_reader(name: str, nullable: bool) -> _Reader:
    def read(buf: bytes, pos: int) -> tuple[str | None, int]:
        n, start = _uvarint(buf, pos)
        if n == 0:
            if nullable:
                return None, start
            raise _Invalid(f"non-nullable field {name} is null")
        end = start + n - 1
        if n - 1 > _MAX_STRING_LENGTH:
            raise _Invalid(f"field {name} has string length {n - 1}")
        if end > len(buf):
            raise _Truncated(pos)
        try:
            return buf[start:end].decode("utf-8"), end
        except UnicodeDecodeError:
            raise _Invalid(f"field {name} is not valid UTF-8") from None

    return read


def _bytes_reader(name: str, nullable: bool) -> _Reader:
    def read(buf: bytes, pos: int) -> tuple[bytes | None, int]:
        n, start = _uvarint(buf, pos)
        if n == 0:
            if nullable:
                return None, start
            raise _Invalid(f"non-nullable field {name} is null")
        end = start + n - 1
        if end > len(buf):
            raise _Truncated(pos)
        return buf[start:end], end

    return read


def _array_count(buf: bytes, pos: int, name: str, nullable: bool, min_item_size: int) -> tuple[int | None, int]:
    """Read a compact array's length; None for a null array. Refuses counts the remaining bytes cannot hold."""
    n, start = _uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, start
        raise _Invalid(f"non-nullable field {name} is null")
    count = n - 1
    if start + count * min_item_size > len(buf):
        raise _Truncated(pos)
    return count, start


def _int32_array_reader(name: str, nullable: bool) -> _Reader:
    def read(buf: bytes, pos: int) -> tuple[list[int] | None, int]:
        count, start = _array_count(buf, pos, name, nullable, 4)
        if count is None:
            return None, start
        # one unpack for the whole array: replica lists are the bulk of a partition record
        return list(struct.unpack_from(f">{count}i", buf, start)), start + 4 * count

    return read


def _list_reader(name: str, nullable: bool, item: _Reader, min_item_size: int) -> _Reader:
    def read(buf: bytes, pos: int) -> tuple[list[Any] | None, int]:
        count, p = _array_count(buf, pos, name, nullable, min_item_size)
        if count is None:
            return None, p
        out = []
        for _ in range(count):
            value, p = item(buf, p)
            out.append(value)
        return out, p

    return read


_EMPTY_LIST: Final = object()  # template marker: a fresh [] is made per record so records share no lists


def _read_tagged_section(
    buf: bytes, pos: int, tagged: Mapping[int, tuple[str, _Reader]], out: dict[str, Any]
) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise _Truncated(pos)
        known = tagged.get(tag)
        if known is not None:
            name, reader = known
            value, after = reader(buf, pos)
            if after != end:
                raise _Invalid(f"tagged field {name} (tag {tag}) declares {size} bytes but holds {after - pos}")
            out[name] = value
        pos = end
    return pos


def _compile_struct(fields: tuple[_Field, ...], version: int) -> _StructReader:
    """A reader for one struct at one version: its untagged fields in order, then its tagged section."""
    present = [f for f in fields if version >= f.since]
    untagged = tuple((f.name, _compile_field(f, version)) for f in present if f.tag is None)
    tagged = {f.tag: (f.name, _compile_field(f, version)) for f in present if f.tag is not None}
    # the template fixes the key order (declaration order, as dump-log prints) and the tagged defaults
    template: dict[str, Any] = {}
    fresh_lists: list[str] = []
    for f in present:
        if f.tag is None:
            template[f.name] = None
        elif f.default == []:
            template[f.name] = _EMPTY_LIST
            fresh_lists.append(f.name)
        else:
            template[f.name] = f.default
    list_defaults = tuple(fresh_lists)

    if not tagged:

        def read_plain(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
            out = template.copy()
            for name, reader in untagged:
                out[name], pos = reader(buf, pos)
            return out, _read_tagged_section(buf, pos, tagged, out)

        return read_plain

    def read(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        out = template.copy()
        for name, reader in untagged:
            out[name], pos = reader(buf, pos)
        pos = _read_tagged_section(buf, pos, tagged, out)
        for name in list_defaults:
            if out[name] is _EMPTY_LIST:
                out[name] = []
        return out, pos

    return read


def _compile_field(field: _Field, version: int) -> _Reader:
    kind = field.kind
    if kind in _SCALAR_READERS:
        return _SCALAR_READERS[kind]
    if kind == "uuid":
        return _read_uuid
    if kind == "string":
        return _string_reader(field.name, field.nullable)
    if kind == "bytes":
        return _bytes_reader(field.name, field.nullable)
    if kind == "[]int32":
        return _int32_array_reader(field.name, field.nullable)
    if kind == "[]uuid":
        return _list_reader(field.name, field.nullable, _read_uuid, 16)
    if kind == "[]string":
        return _list_reader(field.name, field.nullable, _string_reader(field.name, False), 1)
    if kind == "[]":
        return _list_reader(field.name, field.nullable, _compile_struct(field.children, version), 1)
    if kind == "{}":
        return _compile_struct(field.children, version)
    raise ValueError(f"schema table: unknown kind {kind!r} for {field.name}")


def _tagged_defaults(fields: tuple[_Field, ...], version: int) -> dict[str, Any]:
    return {f.name: f.default for f in fields if f.tag is not None and version >= f.since}


# compiled once at import: (api key, version) -> struct reader, and the tagged defaults dump-log leaves out
_METADATA_READERS: Final[dict[tuple[int, int], _StructReader]] = {
    (key, v): _compile_struct(fields, v)
    for key, (_, top, fields) in _METADATA_SCHEMAS.items()
    for v in range(top + 1)
}
_METADATA_TAGGED_DEFAULTS: Final[dict[tuple[int, int], dict[str, Any]]] = {
    (key, v): _tagged_defaults(fields, v)
    for key, (_, top, fields) in _METADATA_SCHEMAS.items()
    for v in range(top + 1)
}
_CONTROL_READERS: Final[dict[tuple[int, int], _StructReader]] = {
    (key, v): _compile_struct(fields, v)
    for key, (_, top, fields) in _CONTROL_SCHEMAS.items()
    for v in range(top + 1)
}
_RECORD_TYPES: Final[dict[int, MetadataRecordType]] = {t.value: t for t in MetadataRecordType}
_METADATA_FRAME_VERSION: Final = 1


def known_versions() -> dict[MetadataRecordType, range]:
    """The schema versions this module decodes, per metadata record type."""
    return {_RECORD_TYPES[key]: range(top + 1) for key, (_, top, _fields) in _METADATA_SCHEMAS.items()}


def decode_metadata_record(value: bytes) -> MetadataRecord:
    """Decode one metadata record value (the frame header and the message); raise ``KraftDecodeError``."""
    buf = value if type(value) is bytes else bytes(value)
    try:
        frame_version, pos = _uvarint(buf, 0)
        api_key, pos = _uvarint(buf, pos)
        version, pos = _uvarint(buf, pos)
    except _Truncated as exc:
        raise KraftDecodeError(f"record header truncated at byte {exc.pos}") from None
    except _Invalid as exc:
        raise KraftDecodeError(f"record header: {exc}") from None
    if frame_version != _METADATA_FRAME_VERSION:
        if frame_version == 0:
            raise KraftDecodeError("frame version 0 (the KRaft preview of Kafka 2.8) is not supported")
        raise KraftDecodeError(f"unknown frame version {frame_version}")
    reader = _METADATA_READERS.get((api_key, version))
    if reader is None:
        schema = _METADATA_SCHEMAS.get(api_key)
        if schema is None:
            raise KraftDecodeError(f"unknown record type {api_key}")
        raise KraftDecodeError(f"{schema[0]} v{version}: unknown version (known: v0-v{schema[1]})")
    try:
        fields, end = reader(buf, pos)
    except _Truncated as exc:
        raise KraftDecodeError(f"{_METADATA_SCHEMAS[api_key][0]} v{version}: truncated at byte {exc.pos}") from None
    except _Invalid as exc:
        raise KraftDecodeError(f"{_METADATA_SCHEMAS[api_key][0]} v{version}: {exc}") from None
    if end != len(buf):
        raise KraftDecodeError(
            f"{_METADATA_SCHEMAS[api_key][0]} v{version}: trailing bytes ({len(buf) - end} after byte {end})"
        )
    return MetadataRecord(_RECORD_TYPES[api_key], version, fields)


_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


def decode_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Decode a control batch's record from its key (int16 key version, int16 type) and value."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise KraftDecodeError(f"control record key has {0 if key is None else len(key)} bytes, needs 4")
    key_version, type_id = _CONTROL_KEY.unpack_from(key, 0)
    if key_version < 0:
        raise KraftDecodeError(f"control record key version {key_version} is negative")
    try:
        record_type = ControlRecordType(type_id)
    except ValueError:
        raise KraftDecodeError(f"unknown control record type {type_id}") from None
    buf = b"" if value is None else (value if type(value) is bytes else bytes(value))
    if record_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        # EndTransactionMarker: int16 version, int32 coordinator epoch; later versions only append fields
        if len(buf) < _END_TXN_MARKER.size:
            raise KraftDecodeError(f"{record_type.name} marker: truncated at byte {len(buf)}")
        marker_version, coordinator_epoch = _END_TXN_MARKER.unpack_from(buf, 0)
        if marker_version < 0:
            raise KraftDecodeError(f"{record_type.name} marker: negative version {marker_version}")
        if marker_version == 0 and len(buf) != _END_TXN_MARKER.size:
            raise KraftDecodeError(f"{record_type.name} marker v0: trailing bytes")
        return ControlRecord(record_type, marker_version, {"version": marker_version, "coordinatorEpoch": coordinator_epoch})
    name, top, _fields = _CONTROL_SCHEMAS[record_type.value]
    if len(buf) < 2:
        raise KraftDecodeError(f"{name}: truncated at byte 0")
    # every KRaft control message starts with its own int16 Version; it selects the layout
    (version,) = struct.unpack_from(">h", buf, 0)
    reader = _CONTROL_READERS.get((record_type.value, version))
    if reader is None:
        raise KraftDecodeError(f"{name} v{version}: unknown version (known: v0-v{top})")
    try:
        fields, end = reader(buf, 0)
    except _Truncated as exc:
        raise KraftDecodeError(f"{name} v{version}: truncated at byte {exc.pos}") from None
    except _Invalid as exc:
        raise KraftDecodeError(f"{name} v{version}: {exc}") from None
    if end != len(buf):
        raise KraftDecodeError(f"{name} v{version}: trailing bytes ({len(buf) - end} after byte {end})")
    return ControlRecord(record_type, version, fields)


def _json_ready(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    return value


def dump_log_data(record: MetadataRecord) -> dict[str, Any]:
    """``record.fields`` as dump-log's ``data`` object: tagged fields at their default left out, bytes as base64."""
    defaults = _METADATA_TAGGED_DEFAULTS[(record.record_type.value, record.version)]
    return {
        name: _json_ready(value)
        for name, value in record.fields.items()
        if not (name in defaults and value == defaults[name])
    }


# ---------------------------------------------------------------------------------------------------------
# Checking without decoding. The collector stores a record's type and version and needs to know whether the
# decoder will read it (an unreadable record is quarantined at collection). A check walks the bytes as the
# readers above do, from the same schema table, without building any field (several times cheaper: no dicts,
# no UUID text); a record it fails goes to the decoder for the verdict and the reason.
# ---------------------------------------------------------------------------------------------------------

# frame version 1, api key, version: one byte each below 128 -> (type name, version)
_FRAME_HEADERS: dict[bytes, tuple[str, int]] = {
    bytes((1, rt.value, v)): (rt.name, v) for rt, versions in known_versions().items() for v in versions
    if rt.value < 0x80 and v < 0x80
}


class _Unreadable(Exception):
    pass


# Bytes of the fixed-size kinds of models.kraft_records' schema table.
_FIXED_SIZES: dict[str, int] = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "float64": 8,
                                "bool": 1, "uuid": 16}
_Skip = Callable[[bytes, int], int]


def _skip_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result, shift, pos = b & 0x7F, 7, pos + 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise _Unreadable


def _fixed_skip(size: int) -> _Skip:
    def skip(buf: bytes, pos: int) -> int:
        pos += size
        if pos > len(buf):
            raise _Unreadable
        return pos

    return skip


def _array_skip(nullable: bool, min_item: int, item: _Skip | None) -> _Skip:
    """A compact array; ``item`` None: items of ``min_item`` bytes each."""
    def skip(buf: bytes, pos: int) -> int:
        n, pos = _skip_uvarint(buf, pos)
        if n == 0:
            if nullable:
                return pos
            raise _Unreadable
        count = n - 1
        if pos + count * min_item > len(buf):
            raise _Unreadable
        if item is None:
            return pos + count * min_item
        for _ in range(count):
            pos = item(buf, pos)
        return pos

    return skip


def _string_skip(nullable: bool, text: bool) -> _Skip:
    def skip(buf: bytes, pos: int) -> int:
        n, pos = _skip_uvarint(buf, pos)
        if n == 0:
            if nullable:
                return pos
            raise _Unreadable
        end = pos + n - 1
        if end > len(buf) or (text and n - 1 > _MAX_STRING_LENGTH):
            raise _Unreadable
        if text:
            buf[pos:end].decode("utf-8")  # UnicodeDecodeError: not valid
        return end

    return skip


def _field_skip(f: Any, version: int) -> _Skip:
    kind = f.kind
    if kind in _FIXED_SIZES:
        return _fixed_skip(_FIXED_SIZES[kind])
    if kind in ("string", "bytes"):
        return _string_skip(f.nullable, kind == "string")
    if kind == "[]int32":
        return _array_skip(f.nullable, 4, None)
    if kind == "[]uuid":
        return _array_skip(f.nullable, 16, None)
    if kind == "[]string":
        return _array_skip(f.nullable, 1, _string_skip(False, True))
    if kind == "[]":
        return _array_skip(f.nullable, 1, _struct_skip(f.children, version))
    if kind == "{}":
        return _struct_skip(f.children, version)
    raise ValueError(f"unknown field kind {kind!r}")


def _struct_skip(fields: Sequence[Any], version: int) -> _Skip:
    present = [f for f in fields if version >= f.since]
    steps: list[int | _Skip] = []  # runs of fixed-size fields merged into one byte count
    for f in present:
        if f.tag is not None:
            continue
        size = _FIXED_SIZES.get(f.kind)
        if size is None:
            steps.append(_field_skip(f, version))
        elif steps and isinstance(steps[-1], int):
            steps[-1] += size
        else:
            steps.append(size)
    tagged = {f.tag: _field_skip(f, version) for f in present if f.tag is not None}

    def skip(buf: bytes, pos: int) -> int:
        size = len(buf)
        for step in steps:
            if isinstance(step, int):
                pos += step
                if pos > size:
                    raise _Unreadable
            else:
                pos = step(buf, pos)
        count = buf[pos]
        if count < 0x80:
            pos += 1
        else:
            count, pos = _skip_uvarint(buf, pos)
        for _ in range(count):
            tag, length = buf[pos], buf[pos + 1]
            if tag < 0x80 and length < 0x80:  # one byte each: nearly always
                pos += 2
            else:
                tag, pos = _skip_uvarint(buf, pos)
                length, pos = _skip_uvarint(buf, pos)
            end = pos + length
            if end > size:
                raise _Unreadable
            known = tagged.get(tag)
            if known is not None and known(buf, pos) != end:
                raise _Unreadable
            pos = end
        return pos

    return skip


def _message_checks() -> dict[bytes, _Skip]:
    """A structural check per record type and version, from the decoder's own schema table: it walks the bytes
    as ``decode_metadata_record`` does and fails where it would, without building the fields (several times
    cheaper: no dicts, no UUID text). A record it fails goes to the decoder itself, for the verdict and the
    reason."""
    return {bytes((1, key, v)): _struct_skip(fields, v) for key, (_, top, fields) in _METADATA_SCHEMAS.items()
            for v in range(top + 1) if key < 0x80 and v < 0x80}


_MESSAGE_CHECKS = _message_checks()


def readable_metadata_record(value: bytes) -> tuple[str, int] | None:
    """(type name, version) of a metadata record ``decode_metadata_record`` reads, by a check of its bytes that
    builds no field; None when it may not read it (ask the decoder for the reason)."""
    header = value[:3]
    known = _FRAME_HEADERS.get(header)
    if known is None:
        return None
    try:
        return known if _MESSAGE_CHECKS[header](value, 3) == len(value) else None
    except (_Unreadable, IndexError, UnicodeDecodeError):
        return None
