"""models.kraft_records: metadata and control records against hand-assembled bytes."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from models.errors import MetadataModelError
from models.kraft_records import (
    ControlRecordType,
    KraftDecodeError,
    MetadataRecordType,
    decode_control_record,
    decode_metadata_record,
    dump_log_data,
    known_versions,
)
from tests.kraft_bytes import (
    boolean,
    carray,
    cbytes,
    control_key,
    cstring,
    f64,
    i8,
    i16,
    i32,
    i64,
    metadata_value,
    tagged,
    u16,
    uuid_bytes,
    uuids,
)

# bytes 00 01 .. 0f in Kafka's Uuid text form (base64url, no padding), worked out by hand
SEQ_UUID_RAW = bytes(range(16))
SEQ_UUID = "AAECAwQFBgcICQoLDA0ODw"
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
ONES_UUID = "_____________________w"  # 16 x 0xff: 21 sextets of 63 ('_') then 0b110000 ('w')


# ---- hand-assembled vectors --------------------------------------------------------------------------------


def test_topic_record_v0_from_raw_bytes() -> None:
    value = bytes.fromhex("010200" "04666f6f") + SEQ_UUID_RAW + b"\x00"
    rec = decode_metadata_record(value)
    assert rec.record_type is MetadataRecordType.TOPIC_RECORD
    assert rec.record_type.schema_name == "TopicRecord"
    assert rec.version == 0
    assert rec.fields == {"name": "foo", "topicId": SEQ_UUID}


def test_uuid_text_uses_the_url_safe_alphabet() -> None:
    value = bytes.fromhex("010900") + b"\xff" * 16 + b"\x00"
    assert decode_metadata_record(value).fields == {"topicId": ONES_UUID}
    value = bytes.fromhex("010900") + b"\x00" * 16 + b"\x00"
    assert decode_metadata_record(value).fields == {"topicId": ZERO_UUID}


def test_partition_record_v1_with_tagged_leader_recovery_state() -> None:
    value = (
        bytes.fromhex("010301")
        + bytes.fromhex("00000002")  # partitionId
        + SEQ_UUID_RAW  # topicId
        + bytes.fromhex("04" "00000001" "00000002" "00000003")  # replicas [1,2,3]
        + bytes.fromhex("03" "00000001" "00000002")  # isr [1,2]
        + bytes.fromhex("01")  # removingReplicas []
        + bytes.fromhex("01")  # addingReplicas []
        + bytes.fromhex("00000001")  # leader
        + bytes.fromhex("00000007")  # leaderEpoch
        + bytes.fromhex("00000009")  # partitionEpoch
        + bytes.fromhex("04") + b"\x00" * 16 + b"\xff" * 16 + SEQ_UUID_RAW  # directories
        + bytes.fromhex("01" "00" "01" "01")  # one tagged field: tag 0, size 1, value 1
    )
    rec = decode_metadata_record(value)
    assert rec.record_type is MetadataRecordType.PARTITION_RECORD
    assert rec.version == 1
    assert rec.fields == {
        "partitionId": 2,
        "topicId": SEQ_UUID,
        "replicas": [1, 2, 3],
        "isr": [1, 2],
        "removingReplicas": [],
        "addingReplicas": [],
        "leader": 1,
        "leaderRecoveryState": 1,
        "leaderEpoch": 7,
        "partitionEpoch": 9,
        "directories": [ZERO_UUID, ONES_UUID, SEQ_UUID],
    }
    # key order follows the schema's declaration order, as dump-log prints it
    assert list(rec.fields)[6:9] == ["leader", "leaderRecoveryState", "leaderEpoch"]


def test_partition_record_v0_tagged_default_when_absent() -> None:
    value = (
        bytes.fromhex("010300" "00000000") + SEQ_UUID_RAW
        + bytes.fromhex("02" "00000004" "02" "00000004" "01" "01" "00000004" "00000000" "00000000" "00")
    )
    fields = decode_metadata_record(value).fields
    assert fields["leaderRecoveryState"] == 0
    assert "directories" not in fields and "eligibleLeaderReplicas" not in fields


def test_partition_change_record_v2_with_elr_tagged_fields() -> None:
    value = (
        bytes.fromhex("010502" "00000000") + SEQ_UUID_RAW
        + bytes.fromhex("03")  # three tagged fields
        + bytes.fromhex("01" "04" "00000002")  # tag 1 leader = 2
        + bytes.fromhex("06" "09" "03" "00000003" "00000004")  # tag 6 eligibleLeaderReplicas = [3, 4]
        + bytes.fromhex("07" "01" "01")  # tag 7 lastKnownElr = []
    )
    rec = decode_metadata_record(value)
    assert rec.record_type is MetadataRecordType.PARTITION_CHANGE_RECORD
    assert rec.fields == {
        "partitionId": 0,
        "topicId": SEQ_UUID,
        "isr": None,
        "leader": 2,
        "replicas": None,
        "removingReplicas": None,
        "addingReplicas": None,
        "leaderRecoveryState": -1,
        "directories": None,
        "eligibleLeaderReplicas": [3, 4],
        "lastKnownElr": [],
    }
    # dump-log leaves out tagged fields at their default
    assert dump_log_data(rec) == {
        "partitionId": 0,
        "topicId": SEQ_UUID,
        "leader": 2,
        "eligibleLeaderReplicas": [3, 4],
        "lastKnownElr": [],
    }


def test_partition_change_record_v0_isr_only_and_leader_default() -> None:
    value = bytes.fromhex("010500" "00000003") + SEQ_UUID_RAW + bytes.fromhex("01" "00" "09" "03" "00000001" "00000002")
    fields = decode_metadata_record(value).fields
    assert fields["isr"] == [1, 2]
    assert fields["leader"] == -2  # "unchanged"
    assert fields["leaderRecoveryState"] == -1
    assert "directories" not in fields and "lastKnownElr" not in fields


def test_fence_broker_record_from_raw_bytes() -> None:
    value = bytes.fromhex("010700" "00000005" "000000000000000a" "00")
    rec = decode_metadata_record(value)
    assert rec.record_type is MetadataRecordType.FENCE_BROKER_RECORD
    assert rec.fields == {"id": 5, "epoch": 10}


def _register_broker_body(version: int) -> bytes:
    body = i32(1)
    if version >= 2:
        body += boolean(True)
    body += uuid_bytes(SEQ_UUID) + i64(42)
    body += carray([cstring("PLAINTEXT") + cstring("localhost") + u16(65000) + i16(0) + tagged()])
    body += carray([cstring("metadata.version") + i16(1) + i16(21) + tagged()])
    body += cstring(None) + boolean(True)
    if version >= 1:
        body += boolean(False)
    return body + (tagged({0: uuids([ONES_UUID])}) if version >= 3 else tagged())


def test_register_broker_record_v3() -> None:
    rec = decode_metadata_record(metadata_value(0, 3, _register_broker_body(3)))
    assert rec.record_type is MetadataRecordType.REGISTER_BROKER_RECORD
    assert rec.fields == {
        "brokerId": 1,
        "isMigratingZkBroker": True,
        "incarnationId": SEQ_UUID,
        "brokerEpoch": 42,
        "endPoints": [{"name": "PLAINTEXT", "host": "localhost", "port": 65000, "securityProtocol": 0}],
        "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": 21}],
        "rack": None,
        "fenced": True,
        "inControlledShutdown": False,
        "logDirs": [ONES_UUID],
    }


def test_register_broker_record_v0_has_only_v0_fields() -> None:
    fields = decode_metadata_record(metadata_value(0, 0, _register_broker_body(0))).fields
    assert set(fields) == {"brokerId", "incarnationId", "brokerEpoch", "endPoints", "features", "rack", "fenced"}


def test_tagged_empty_list_defaults_are_not_shared_between_records() -> None:
    body = i32(1) + i64(2) + tagged()
    first = decode_metadata_record(metadata_value(17, 2, body))
    second = decode_metadata_record(metadata_value(17, 2, body))
    assert first.fields == {"brokerId": 1, "brokerEpoch": 2, "fenced": 0, "inControlledShutdown": 0, "logDirs": []}
    first.fields["logDirs"].append("x")
    assert second.fields["logDirs"] == []


def test_unknown_tagged_fields_are_skipped() -> None:
    value = metadata_value(2, 0, cstring("t") + uuid_bytes(SEQ_UUID) + tagged({5: b"xyz", 9: b""}))
    assert decode_metadata_record(value).fields == {"name": "t", "topicId": SEQ_UUID}


def test_multi_byte_varints_in_lengths() -> None:
    name = "t" * 200  # length + 1 = 201 needs a two-byte varint: c9 01
    value = metadata_value(2, 0, cstring(name) + uuid_bytes(SEQ_UUID) + tagged())
    assert value[3:5] == bytes.fromhex("c901")
    assert decode_metadata_record(value).fields["name"] == name


# ---- every record type ----------------------------------------------------------------------------------------

EP = {"name": "CONTROLLER", "host": "c1", "port": 9093, "securityProtocol": 1}
EP_BYTES = cstring("CONTROLLER") + cstring("c1") + u16(9093) + i16(1) + tagged()
FEAT = {"name": "kraft.version", "minSupportedVersion": 0, "maxSupportedVersion": 1}
FEAT_BYTES = cstring("kraft.version") + i16(0) + i16(1) + tagged()

CASES: list[tuple[int, int, bytes, dict[str, Any]]] = [
    (1, 0, i32(3) + i64(99) + tagged(), {"brokerId": 3, "brokerEpoch": 99}),
    (4, 0, i8(2) + cstring("orders") + cstring("retention.ms") + cstring(None) + tagged(),
     {"resourceType": 2, "resourceName": "orders", "name": "retention.ms", "value": None}),
    (4, 0, i8(4) + cstring("") + cstring("min.insync.replicas") + cstring("2") + tagged(),
     {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas", "value": "2"}),
    (5, 1, i32(1) + uuid_bytes(SEQ_UUID) + tagged({8: uuids([ZERO_UUID])}),
     {"partitionId": 1, "topicId": SEQ_UUID, "isr": None, "leader": -2, "replicas": None, "removingReplicas": None,
      "addingReplicas": None, "leaderRecoveryState": -1, "directories": [ZERO_UUID]}),
    (8, 0, i32(6) + i64(12) + tagged(), {"id": 6, "epoch": 12}),
    (10, 0, cstring("User:alice") + cstring("User:bob") + carray([cstring("User:carol")]) + i64(1) + i64(2) + i64(3)
     + cstring("tok") + tagged(),
     {"owner": "User:alice", "requester": "User:bob", "renewers": ["User:carol"], "issueTimestamp": 1,
      "maxTimestamp": 2, "expirationTimestamp": 3, "tokenId": "tok"}),
    (11, 0, cstring("alice") + i8(1) + cbytes(b"salt") + cbytes(b"\x00\x01") + cbytes(b"") + i32(4096) + tagged(),
     {"name": "alice", "mechanism": 1, "salt": b"salt", "storedKey": b"\x00\x01", "serverKey": b"",
      "iterations": 4096}),
    (12, 0, cstring("metadata.version") + i16(21) + tagged(), {"name": "metadata.version", "featureLevel": 21}),
    (14, 0, carray([cstring("user") + cstring(None) + tagged(), cstring("client-id") + cstring("app") + tagged()])
     + cstring("producer_byte_rate") + f64(1024.5) + boolean(False) + tagged(),
     {"entity": [{"entityType": "user", "entityName": None}, {"entityType": "client-id", "entityName": "app"}],
      "key": "producer_byte_rate", "value": 1024.5, "remove": False}),
    (15, 0, i32(1) + i64(7) + i64(5000) + tagged(), {"brokerId": 1, "brokerEpoch": 7, "nextProducerId": 5000}),
    (17, 0, i32(2) + i64(8) + tagged({0: i8(1)}), {"brokerId": 2, "brokerEpoch": 8, "fenced": 1}),
    (17, 1, i32(2) + i64(8) + tagged({0: i8(-1), 1: i8(1)}),
     {"brokerId": 2, "brokerEpoch": 8, "fenced": -1, "inControlledShutdown": 1}),
    (18, 0, uuid_bytes(SEQ_UUID) + i8(2) + cstring("orders") + i8(3) + cstring("User:alice") + cstring("*") + i8(3)
     + i8(3) + tagged(),
     {"id": SEQ_UUID, "resourceType": 2, "resourceName": "orders", "patternType": 3, "principal": "User:alice",
      "host": "*", "operation": 3, "permissionType": 3}),
    (19, 0, uuid_bytes(SEQ_UUID) + tagged(), {"id": SEQ_UUID}),
    (20, 0, tagged(), {}),
    (21, 0, i8(1) + tagged(), {"zkMigrationState": 1}),
    (22, 0, cstring("alice") + i8(2) + tagged(), {"name": "alice", "mechanism": 2}),
    (23, 0, tagged({0: cstring("bootstrap")}), {"name": "bootstrap"}),
    (23, 0, tagged(), {"name": None}),
    (24, 0, tagged(), {}),
    (25, 0, tagged({0: cstring("controller failover")}), {"reason": "controller failover"}),
    (26, 0, cstring("tok") + tagged(), {"tokenId": "tok"}),
    (27, 0, i32(3000) + uuid_bytes(SEQ_UUID) + boolean(True) + carray([EP_BYTES]) + carray([FEAT_BYTES]) + tagged(),
     {"controllerId": 3000, "incarnationId": SEQ_UUID, "zkMigrationReady": True, "endPoints": [EP],
      "features": [FEAT]}),
    (28, 0, cstring("") + tagged(), {"topicName": ""}),
    (29, 0, i32(3001) + tagged(), {"controllerId": 3001}),
]


@pytest.mark.parametrize(("api_key", "version", "body", "expected"), CASES)
def test_record_types(api_key: int, version: int, body: bytes, expected: dict[str, Any]) -> None:
    rec = decode_metadata_record(metadata_value(api_key, version, body))
    assert rec.record_type == api_key
    assert rec.version == version
    assert rec.fields == expected


def test_known_versions_cover_kafka_3_3_to_4_1() -> None:
    t = MetadataRecordType
    expected_top = {
        t.REGISTER_BROKER_RECORD: 3, t.PARTITION_RECORD: 2, t.PARTITION_CHANGE_RECORD: 2,
        t.BROKER_REGISTRATION_CHANGE_RECORD: 2,
    }
    versions = known_versions()
    assert set(versions) == set(MetadataRecordType)
    assert len(versions) == 27
    for record_type, supported in versions.items():
        assert supported == range(expected_top.get(record_type, 0) + 1), record_type
    assert MetadataRecordType.ZK_MIGRATION_STATE_RECORD.value == 21
    assert MetadataRecordType.CLEAR_ELR_RECORD.schema_name == "ClearElrRecord"


def test_dump_log_data_encodes_bytes_as_base64() -> None:
    body = cstring("alice") + i8(1) + cbytes(b"salt") + cbytes(b"\x00\x01") + cbytes(b"") + i32(4096) + tagged()
    data = dump_log_data(decode_metadata_record(metadata_value(11, 0, body)))
    assert data["salt"] == "c2FsdA==" and data["storedKey"] == "AAE=" and data["serverKey"] == ""


# ---- errors ------------------------------------------------------------------------------------------------------


def _reason(value: bytes) -> str:
    with pytest.raises(KraftDecodeError) as info:
        decode_metadata_record(value)
    assert "\n" not in str(info.value)
    return info.value.reason


TOPIC = bytes.fromhex("010200" "04666f6f") + SEQ_UUID_RAW + b"\x00"


def test_unknown_record_type() -> None:
    assert _reason(metadata_value(99, 0, tagged())) == "unknown record type 99"
    assert _reason(metadata_value(6, 0, tagged())) == "unknown record type 6"  # the 3.3 AccessControlRecord


def test_unknown_version() -> None:
    assert _reason(metadata_value(2, 1, b"")).startswith("TopicRecord v1: unknown version")
    assert _reason(metadata_value(3, 3, b"")).startswith("PartitionRecord v3: unknown version")


def test_truncated_payload_names_the_byte() -> None:
    assert _reason(TOPIC[:10]) == "TopicRecord v0: truncated at byte 7"  # the uuid starts at byte 7
    assert _reason(TOPIC[:5]) == "TopicRecord v0: truncated at byte 3"  # the name's 3 bytes do not fit
    assert _reason(TOPIC[:-1]) == "TopicRecord v0: truncated at byte 23"  # the tagged-field count
    assert _reason(b"") == "record header truncated at byte 0"
    assert _reason(b"\x01\x02") == "record header truncated at byte 2"


def test_trailing_bytes() -> None:
    assert "trailing bytes" in _reason(TOPIC + b"\x00")


def test_frame_versions_other_than_1() -> None:
    assert "frame version 0" in _reason(b"\x00" + TOPIC[1:])
    assert _reason(b"\x02" + TOPIC[1:]) == "unknown frame version 2"


def test_null_in_non_nullable_string() -> None:
    assert "name is null" in _reason(metadata_value(2, 0, cstring(None) + uuid_bytes(SEQ_UUID) + tagged()))


def test_tagged_field_with_wrong_size() -> None:
    value = metadata_value(5, 0, i32(0) + uuid_bytes(SEQ_UUID) + bytes.fromhex("01" "01" "02" "00000001"))
    assert "tag 1" in _reason(value)


def test_varint_longer_than_five_bytes() -> None:
    assert "longer than 5 bytes" in _reason(bytes.fromhex("0102") + b"\xff" * 6)


def test_invalid_utf8() -> None:
    assert "UTF-8" in _reason(metadata_value(2, 0, bytes.fromhex("03c328") + uuid_bytes(SEQ_UUID) + tagged()))


def test_huge_array_count_is_truncation_not_allocation() -> None:
    value = metadata_value(10, 0, cstring("a") + cstring("b") + bytes.fromhex("ffffffff0f"))
    assert "truncated" in _reason(value)


def test_error_is_a_model_error_and_pickles() -> None:
    with pytest.raises(MetadataModelError) as info:
        decode_metadata_record(metadata_value(99, 0, b""))
    copy = pickle.loads(pickle.dumps(info.value))
    assert isinstance(copy, KraftDecodeError) and copy.reason == "unknown record type 99"


# ---- control records -------------------------------------------------------------------------------------------


def test_leader_change_v0_from_raw_bytes() -> None:
    value = bytes.fromhex("0000" "00000001" "03" "0000000100" "0000000200" "02" "0000000100" "00")
    rec = decode_control_record(bytes.fromhex("00000002"), value)
    assert rec.record_type is ControlRecordType.LEADER_CHANGE
    assert rec.version == 0
    assert rec.fields == {
        "version": 0,
        "leaderId": 1,
        "voters": [{"voterId": 1}, {"voterId": 2}],
        "grantingVoters": [{"voterId": 1}],
    }


def test_leader_change_v1_has_voter_directory_ids() -> None:
    value = i16(1) + i32(2) + carray([i32(2) + uuid_bytes(SEQ_UUID) + tagged()]) + carray([]) + tagged()
    rec = decode_control_record(control_key(2), value)
    assert rec.version == 1
    assert rec.fields["voters"] == [{"voterId": 2, "voterDirectoryId": SEQ_UUID}]
    assert rec.fields["grantingVoters"] == []


def test_snapshot_header_footer_and_kraft_version() -> None:
    header = decode_control_record(control_key(3), i16(0) + i64(1_700_000_000_123) + tagged())
    assert header.record_type is ControlRecordType.SNAPSHOT_HEADER
    assert header.fields == {"version": 0, "lastContainedLogTimestamp": 1_700_000_000_123}
    footer = decode_control_record(control_key(4), i16(0) + tagged())
    assert footer.fields == {"version": 0}
    kraft = decode_control_record(control_key(5), i16(0) + i16(1) + tagged())
    assert kraft.record_type is ControlRecordType.KRAFT_VERSION
    assert kraft.fields == {"version": 0, "kRaftVersion": 1}


def test_voters_record() -> None:
    voter = (
        i32(1) + uuid_bytes(SEQ_UUID)
        + carray([cstring("CONTROLLER") + cstring("c1") + u16(9093) + tagged()])
        + i16(0) + i16(1) + tagged()  # kRaftVersionFeature: a struct, with its own tagged section
        + tagged()
    )
    rec = decode_control_record(control_key(6), i16(0) + carray([voter]) + tagged())
    assert rec.record_type is ControlRecordType.KRAFT_VOTERS
    assert rec.fields == {
        "version": 0,
        "voters": [{
            "voterId": 1,
            "voterDirectoryId": SEQ_UUID,
            "endpoints": [{"name": "CONTROLLER", "host": "c1", "port": 9093}],
            "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1},
        }],
    }


def test_transaction_markers() -> None:
    abort = decode_control_record(control_key(0), i16(0) + i32(5))
    assert abort.record_type is ControlRecordType.ABORT
    assert abort.fields == {"version": 0, "coordinatorEpoch": 5}
    commit = decode_control_record(control_key(1), i16(0) + i32(7))
    assert commit.record_type is ControlRecordType.COMMIT and commit.fields["coordinatorEpoch"] == 7


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (control_key(9), i16(0), "unknown control record type 9"),
        (b"\x00\x00\x00", i16(0), "control record key has 3 bytes, needs 4"),
        (None, i16(0), "control record key has 0 bytes, needs 4"),
        (control_key(2, key_version=-1), i16(0), "control record key version -1 is negative"),
        (control_key(2), i16(5) + i32(1), "LeaderChangeMessage v5: unknown version (known: v0-v1)"),
        # the voters array (byte 6) promises one voter and nothing follows
        (control_key(2), i16(0) + i32(1) + b"\x02", "LeaderChangeMessage v0: truncated at byte 6"),
        (control_key(2), i16(0) + i32(1) + b"\x02\x00\x00", "LeaderChangeMessage v0: truncated at byte 7"),
        (control_key(4), i16(0) + tagged() + b"\x00", "SnapshotFooterRecord v0: trailing bytes (1 after byte 3)"),
        (control_key(3), b"\x00", "SnapshotHeaderRecord: truncated at byte 0"),
        (control_key(1), i16(0), "COMMIT marker: truncated at byte 2"),
    ],
)
def test_control_record_errors(key: bytes | None, value: bytes, reason: str) -> None:
    with pytest.raises(KraftDecodeError) as info:
        decode_control_record(key, value)
    assert info.value.reason == reason
