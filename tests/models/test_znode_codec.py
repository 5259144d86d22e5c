"""The znode codec on every path and payload version of docs/kafka-metadata.md, malformed payloads and
encode -> decode round trips. Literal payloads are Kafka's own examples (ZkData.scala at the cited tags).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.errors import MalformedZnodeError
from models.events import MetadataEvent, MetadataEventType, ZnodeChange, ZnodeOp
from models.znode_codec import PathKind, classify_path, decode
from simulator.payloads import (
    encode_admin_delete_topic,
    encode_broker_registration,
    encode_cluster_id,
    encode_config,
    encode_config_change,
    encode_controller,
    encode_controller_epoch,
    encode_feature,
    encode_isr_change,
    encode_log_dir_event,
    encode_migration,
    encode_partition_state,
    encode_preferred_replica_election,
    encode_producer_id_block,
    encode_reassignment,
    encode_topic_assignment,
    scala_immutable_order,
    scala_mutable_order,
)

T = MetadataEventType
TS = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def one(path: str, data: bytes | str | None, op: ZnodeOp = ZnodeOp.CREATE, **kw: object) -> MetadataEvent:
    events = many(path, data, op, **kw)
    assert len(events) == 1, events
    return events[0]


def many(
    path: str, data: bytes | str | None, op: ZnodeOp = ZnodeOp.CREATE, **kw: object
) -> list[MetadataEvent]:
    raw = data.encode() if isinstance(data, str) else data
    hint = kw.pop("hint", None)
    change = ZnodeChange(zxid=kw.pop("zxid", 100), path=path, op=op, data=raw, txn_time=TS, **kw)  # type: ignore[arg-type]
    return decode(change, hint)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ classify_path
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/controller", (PathKind.CONTROLLER, None, None, None)),
        ("/controller_epoch", (PathKind.CONTROLLER_EPOCH, None, None, None)),
        ("/brokers/ids/12", (PathKind.BROKER, None, None, 12)),
        ("/brokers/ids/x", (PathKind.OTHER, None, None, None)),
        ("/brokers/seqid", (PathKind.BROKER_SEQID, None, None, None)),
        ("/brokers/topics/orders", (PathKind.TOPIC, "orders", None, None)),
        ("/brokers/topics/orders/partitions", (PathKind.PARTITION, "orders", None, None)),
        ("/brokers/topics/orders/partitions/3", (PathKind.PARTITION, "orders", 3, None)),
        ("/brokers/topics/orders/partitions/3/state", (PathKind.PARTITION_STATE, "orders", 3, None)),
        ("/config/topics/orders", (PathKind.CONFIG, "orders", None, None)),
        ("/config/users/alice/clients/app", (PathKind.CONFIG, None, None, None)),
        ("/config/changes/config_change_0000000007", (PathKind.CONFIG_CHANGE, None, None, None)),
        ("/admin/delete_topics/orders", (PathKind.DELETE_TOPIC, "orders", None, None)),
        ("/admin/reassign_partitions", (PathKind.REASSIGNMENT, None, None, None)),
        ("/admin/preferred_replica_election", (PathKind.PREFERRED_ELECTION, None, None, None)),
        ("/isr_change_notification/isr_change_0000000001", (PathKind.ISR_CHANGE, None, None, None)),
        ("/log_dir_event_notification/log_dir_event_0000000002", (PathKind.LOG_DIR_EVENT, None, None, None)),
        ("/cluster/id", (PathKind.CLUSTER_ID, None, None, None)),
        ("/latest_producer_id_block", (PathKind.PRODUCER_ID_BLOCK, None, None, None)),
        ("/feature", (PathKind.FEATURE, None, None, None)),
        ("/migration", (PathKind.MIGRATION, None, None, None)),
        ("/kafka-acl/Topic/orders", (PathKind.OTHER, None, None, None)),
    ],
)
def test_classify_path(path: str, expected: tuple[object, ...]) -> None:
    assert tuple(classify_path(path)) == expected


def test_classify_path_with_chroot() -> None:
    assert classify_path("/kafka/brokers/ids/3", chroot="/kafka") == (PathKind.BROKER, None, None, 3)
    assert classify_path("/kafka/brokers/ids/3").kind is PathKind.OTHER


# ------------------------------------------------------------------------------- payload versions
def test_controller_v1_and_v2() -> None:
    e = one("/controller", '{"version":1,"brokerid":1,"timestamp":"1506423376977"}')
    assert (e.type, e.controller_id, e.zxid, e.event_time) == (T.CONTROLLER_ELECTED, 1, 100, TS)
    assert e.detail["timestamp_ms"] == 1506423376977 and e.detail["kraft"] is False
    e2 = one("/controller", '{"kraftControllerEpoch":-1,"timestamp":"1","brokerid":7,"version":2}')
    assert (e2.controller_id, e2.detail["payload_version"], e2.detail["kraft"]) == (7, 2, False)
    kraft = one("/controller", '{"version":2,"brokerid":3000,"timestamp":"1","kraftControllerEpoch":4}')
    assert kraft.detail["kraft"] is True and kraft.detail["kraft_controller_epoch"] == 4
    assert one("/controller", None, ZnodeOp.DELETE).type is T.CONTROLLER_RESIGNED


def test_controller_epoch_plain_decimal() -> None:
    e = one("/controller_epoch", "5", ZnodeOp.SET, version=4)
    assert (e.type, e.controller_epoch, e.zk_version) == (T.CONTROLLER_EPOCH_CHANGED, 5, 4)


BROKER_V1 = '{"jmx_port":-1,"timestamp":"1000","host":"h1","version":1,"port":9092}'
BROKER_V2 = '{"jmx_port":-1,"timestamp":"1000","endpoints":["PLAINTEXT://h1:9092"],"host":"h1","version":2,"port":9092}'
BROKER_V3 = (
    '{"jmx_port":-1,"timestamp":"1000","endpoints":["PLAINTEXT://h1:9092"],"rack":"r1","host":"h1",'
    '"version":3,"port":9092}'
)
BROKER_V4 = (
    '{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},"endpoints":'
    '["PLAINTEXT://h1:9092","SSL://h1:9093"],"jmx_port":-1,"host":"h1","timestamp":"1000","port":9092,"version":4}'
)
BROKER_V5 = (
    '{"features":{"f":{"min_version":1,"max_version":3}},"listener_security_protocol_map":{"SSL":"SSL"},'
    '"endpoints":["SSL://h:9093"],"jmx_port":-1,"host":null,"timestamp":"1000","port":-1,"version":5}'
)


@pytest.mark.parametrize(
    ("payload", "version", "extra"),
    [
        (BROKER_V1, 1, {}),
        (BROKER_V2, 2, {"endpoints": ["PLAINTEXT://h1:9092"]}),
        (BROKER_V3, 3, {"rack": "r1"}),
        (BROKER_V4, 4, {"listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}}),
        (BROKER_V5, 5, {"features": {"f": {"min_version": 1, "max_version": 3}}, "host": None, "port": -1}),
    ],
)
def test_broker_registration_versions(payload: str, version: int, extra: dict[str, object]) -> None:
    e = one("/brokers/ids/3", payload, czxid=4242, hint="2.2")
    assert (e.type, e.broker, e.czxid) == (T.BROKER_REGISTERED, 3, 4242)
    assert e.detail["payload_version"] == version and e.detail["broker_epoch"] == 4242
    assert e.detail["timestamp_ms"] == 1000
    for k, v in extra.items():
        assert e.detail[k] == v


def test_broker_epoch_only_from_2_2_and_update_and_delete() -> None:
    assert "broker_epoch" not in one("/brokers/ids/3", BROKER_V4, czxid=9, hint="2.1").detail
    assert one("/brokers/ids/3", BROKER_V4, ZnodeOp.SET).type is T.BROKER_UPDATED
    gone = one("/brokers/ids/3", None, ZnodeOp.DELETE)
    assert (gone.type, gone.broker) == (T.BROKER_DEREGISTERED, 3)


def test_a_2_2_registration_is_the_set_of_its_multi() -> None:
    """2.2+ creates /brokers/ids/N without data and sets the data in the same multi (KAFKA-7165)."""
    assert many("/brokers/ids/3", None, ZnodeOp.CREATE, hint="2.2") == []
    registered = one("/brokers/ids/3", BROKER_V4, ZnodeOp.SET, version=1, hint="2.2")
    assert (registered.type, registered.broker) == (T.BROKER_REGISTERED, 3)
    assert one("/brokers/ids/3", BROKER_V4, ZnodeOp.SET, version=2, hint="2.2").type is T.BROKER_UPDATED
    assert one("/brokers/ids/3", BROKER_V4, ZnodeOp.SET, version=1, hint="2.1").type is T.BROKER_UPDATED


def test_topic_assignment_v1_one_event_per_partition() -> None:
    events = many("/brokers/topics/t", '{"version":1,"partitions":{"1":[2,3,1],"0":[1,2,3]}}')
    assert [(e.type, e.topic, e.partition, e.replicas) for e in events] == [
        (T.PARTITION_ASSIGNED, "t", 0, (1, 2, 3)),
        (T.PARTITION_ASSIGNED, "t", 1, (2, 3, 1)),
    ]
    assert all(e.detail["partition_count"] == 2 for e in events)


def test_topic_assignment_v2_reassignment_and_v3_topic_id() -> None:
    v2 = many(
        "/brokers/topics/t",
        '{"version":2,"partitions":{"0":[4,1,2],"1":[2,3]},"adding_replicas":{"0":[4]},"removing_replicas":{"0":[1]}}',
    )
    assert v2[0].detail["adding_replicas"] == [4] and v2[0].detail["removing_replicas"] == [1]
    assert "adding_replicas" not in v2[1].detail
    v3 = many(
        "/brokers/topics/t",
        '{"removing_replicas":{},"partitions":{"0":[1]},"topic_id":"3mT_Ge3eQjmKz3hsGHnZJg",'
        '"adding_replicas":{},"version":3}',
    )
    assert v3[0].detail["topic_id"] == "3mT_Ge3eQjmKz3hsGHnZJg" and v3[0].detail["payload_version"] == 3
    assert one("/brokers/topics/t", None, ZnodeOp.DELETE).type is T.TOPIC_DELETED


def test_partition_state_hashed_key_order_and_recovery_state() -> None:
    path = "/brokers/topics/t/partitions/0/state"
    e = one(path, '{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}', version=0)
    assert (e.type, e.topic, e.partition) == (T.PARTITION_STATE_WRITTEN, "t", 0)
    assert (e.leader, e.leader_epoch, e.controller_epoch, e.isr, e.zk_version) == (1, 0, 1, (1, 2), 0)
    assert e.detail == {"created": True}
    offline = one(
        path, '{"version":1,"leader":-1,"leader_epoch":6,"controller_epoch":4,"isr":[2]}', ZnodeOp.SET
    )
    assert offline.leader == -1 and offline.detail["created"] is False
    rec = one(
        path,
        '{"version":1,"leader":2,"leader_epoch":7,"controller_epoch":4,"isr":[2],"leader_recovery_state":1}',
    )
    assert rec.detail["leader_recovery_state"] == 1
    assert one(path, None, ZnodeOp.DELETE).type is T.PARTITION_STATE_DELETED


def test_config_and_config_change_v1_v2() -> None:
    e = one("/config/topics/t", '{"version":1,"config":{"retention.ms":"1000"}}', ZnodeOp.SET)
    assert (e.type, e.topic) == (T.CONFIG_CHANGED, "t")
    assert e.detail == {"entity_type": "topics", "entity_name": "t", "config": {"retention.ms": "1000"}}
    v2 = one("/config/changes/config_change_0000000001", '{"version":2,"entity_path":"topics/foo"}')
    assert (v2.topic, v2.detail["entity_type"], v2.detail["entity_name"]) == ("foo", "topics", "foo")
    v1 = one(
        "/config/changes/config_change_0000000002", '{"version":1,"entity_type":"clients","entity_name":"c1"}'
    )
    assert (v1.topic, v1.detail["entity_type"], v1.detail["entity_name"]) == (None, "clients", "c1")
    assert one("/config/topics/t", None, ZnodeOp.DELETE).detail["deleted"] is True


def test_admin_znodes() -> None:
    req = one("/admin/delete_topics/t", b"")
    assert (req.type, req.topic) == (T.TOPIC_DELETION_REQUESTED, "t")
    assert one("/admin/delete_topics/t", None, ZnodeOp.DELETE).type is T.TOPIC_DELETION_COMPLETED
    re_ = many(
        "/admin/reassign_partitions",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]},{"partition":1,"replicas":[3],"topic":"u"}]}',
    )
    assert [(e.type, e.topic, e.partition, e.replicas) for e in re_] == [
        (T.REASSIGNMENT_REQUESTED, "t", 0, (1, 2)),
        (T.REASSIGNMENT_REQUESTED, "u", 1, (3,)),
    ]
    pre = one("/admin/preferred_replica_election", '{"version":1,"partitions":[{"topic":"t","partition":0}]}')
    assert (pre.type, pre.topic, pre.partition) == (T.PREFERRED_ELECTION_REQUESTED, "t", 0)
    assert one("/admin/reassign_partitions", None, ZnodeOp.DELETE).type is T.OTHER


def test_notifications() -> None:
    isr = one(
        "/isr_change_notification/isr_change_0000000000",
        '{"version":1,"partitions":[{"topic":"t","partition":0}]}',
    )
    assert (isr.type, isr.topic, isr.partition) == (T.ISR_CHANGE_NOTIFIED, "t", 0)
    ld = one("/log_dir_event_notification/log_dir_event_0000000000", '{"version":1,"broker":3,"event":1}')
    assert (ld.type, ld.broker, ld.detail["log_dir_failure"]) == (T.LOG_DIR_EVENT, 3, True)


def test_cluster_id_producer_block_feature_migration() -> None:
    cid = one("/cluster/id", '{"version":"1","id":"Zm9vYmFyYmF6cXV4MTIzNA"}')
    assert (cid.type, cid.detail["cluster_id"]) == (T.CLUSTER_ID_SET, "Zm9vYmFyYmF6cXV4MTIzNA")
    pid = one(
        "/latest_producer_id_block",
        '{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}',
        ZnodeOp.SET,
    )
    assert (pid.type, pid.broker, pid.detail) == (
        T.PRODUCER_ID_BLOCK,
        2,
        {"block_start": 1000, "block_end": 1999},
    )
    f1 = one(
        "/feature", '{"version":1,"status":1,"features":{"f":{"min_version_level":1,"max_version_level":2}}}'
    )
    assert (f1.type, f1.detail["status"]) == (T.FEATURES_CHANGED, 1)
    f2 = one("/feature", '{"version":2,"status":1,"features":{"metadata.version":{"max_version_level":7}}}')
    assert f2.detail["payload_version"] == 2
    mig = one(
        "/migration",
        '{"version":0,"kraft_controller_id":3000,"kraft_controller_epoch":1,"kraft_metadata_offset":42,"kraft_metadata_epoch":1}',
    )
    assert (mig.type, mig.controller_id, mig.detail["kraft_metadata_offset"]) == (T.MIGRATION_STATE, 3000, 42)


def test_session_multi_gap_and_unknown() -> None:
    closed = one("", None, ZnodeOp.CLOSE_SESSION, session_id=77)
    assert (closed.type, closed.detail["session_id"]) == (T.SESSION_CLOSED, 77)
    fenced = one("/controller_epoch", None, ZnodeOp.MULTI_FAILED, detail="BADVERSION")
    assert fenced.type is T.CONTROLLER_WRITE_FENCED
    assert one("/brokers/topics/t", None, ZnodeOp.MULTI_FAILED).type is T.OTHER
    gap = one("/", None, ZnodeOp.GAP, detail="reconnect")
    assert (gap.type, gap.detail["reason"]) == (T.COLLECTION_GAP, "reconnect")
    other = one("/kafka-acl/Topic/t", '{"whatever": true}')
    assert other.type is T.OTHER and other.path == "/kafka-acl/Topic/t"
    assert one("/brokers/topics/t/partitions/0", b"").type is T.OTHER


def test_json_key_order_does_not_matter() -> None:
    obj = {"version": 1, "leader": 3, "leader_epoch": 9, "controller_epoch": 2, "isr": [3, 1]}
    path = "/brokers/topics/t/partitions/0/state"
    a = one(path, json.dumps(obj))
    b = one(path, json.dumps(dict(reversed(list(obj.items())))))
    assert a == b


# -------------------------------------------------------------------------------------- malformed
STATE = "/brokers/topics/t/partitions/0/state"


@pytest.mark.parametrize(
    ("path", "data", "reason"),
    [
        (STATE, b'{"version":1,"leader":', "bad JSON"),
        (STATE, b"[1,2]", "must be an object"),
        (STATE, b'{"version":1,"leader":-2,"leader_epoch":0,"controller_epoch":1,"isr":[1]}', "leader -2"),
        (
            STATE,
            b'{"version":1,"leader":"1","leader_epoch":0,"controller_epoch":1,"isr":[1]}',
            "leader must be int",
        ),
        (STATE, b'{"version":1,"leader":1,"leader_epoch":0,"isr":[1]}', "controller_epoch"),
        (STATE, b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[true]}', "isr"),
        (STATE, b'{"version":2,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[1]}', "version 2"),
        (STATE, b"", "empty"),
        (
            STATE,
            b'{"version":1,"leader":1,"leader":2,"leader_epoch":0,"controller_epoch":1,"isr":[1]}',
            "duplicate",
        ),
        (STATE, b'{"version":1,"leader":NaN,"leader_epoch":0,"controller_epoch":1,"isr":[1]}', "NaN"),
        ("/controller_epoch", b"five", "decimal"),
        ("/controller_epoch", b"-3", "decimal"),
        ("/controller", b'{"version":1,"timestamp":"1"}', "brokerid"),
        ("/controller", b'{"version":1,"brokerid":1,"timestamp":"soon"}', "timestamp"),
        ("/controller", b"\xff\xfe{}", "UTF-8"),
        (
            "/brokers/ids/1",
            b'{"version":4,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1"}',
            "endpoints",
        ),
        ("/brokers/ids/1", b'{"host":"h","port":9092}', "version"),
        ("/brokers/topics/t", b'{"version":1,"partitions":{"a":[1]}}', "partition key"),
        ("/brokers/topics/t", b'{"version":1,"partitions":{"0":"1,2"}}', "int_list"),
        ("/brokers/topics/t", b'{"version":1,"partitions":{"0":[1],"2147483648":[1]}}', "partition key"),
        ("/brokers/topics/t", b'{"version":1,"partitions":{"0":[1],"1":[2147483648]}}', "32-bit ints"),
        ("/brokers/topics/t", b'{"version":1,"partitions":{"0":[1],"1":[true]}}', "int_list"),
        ("/brokers/topics/t", b'{"version":1,"partitions":[]}', "partitions must be object"),
        ("/config/changes/config_change_1", b'{"version":2}', "entity_path"),
        (
            "/admin/reassign_partitions",
            b'{"version":1,"partitions":[{"topic":"t","partition":0}]}',
            "replicas",
        ),
        (
            "/admin/preferred_replica_election",
            b'{"version":1,"partitions":[{"topic":1,"partition":0}]}',
            "topic",
        ),
        ("/log_dir_event_notification/log_dir_event_1", b'{"version":1,"broker":"3","event":1}', "broker"),
        ("/cluster/id", b'{"version":"1","id":5}', "id must be str"),
        (
            "/latest_producer_id_block",
            b'{"version":1,"broker":2,"block_start":"x","block_end":"1"}',
            "block_start",
        ),
        (
            "/latest_producer_id_block",
            b'{"version":1,"broker":2,"block_start":"9","block_end":"1"}',
            "block_end",
        ),
        ("/feature", b'{"version":3,"status":1,"features":{}}', "version 3"),
        ("/migration", b'{"version":0,"kraft_controller_id":1}', "kraft_controller_epoch"),
    ],
)
def test_malformed_payloads_raise_with_reason(path: str, data: bytes, reason: str) -> None:
    with pytest.raises(MalformedZnodeError) as err:
        decode(ZnodeChange(zxid=55, path=path, op=ZnodeOp.SET, data=data))
    assert err.value.path == path and err.value.zxid == 55
    assert reason.lower() in err.value.reason.lower(), err.value.reason


# ------------------------------------------------------------------------------ encode exactness
def test_encode_matches_kafkas_bytes() -> None:
    # Kafka's literal examples, byte for byte (hashed key order included)
    assert encode_partition_state(1, 0, 1, [1, 2], "2.0") == (
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
    )
    assert (
        encode_controller(1, 1506423376977, "2.0")
        == b'{"version":1,"brokerid":1,"timestamp":"1506423376977"}'
    )
    assert encode_controller_epoch(5) == b"5"
    assert encode_topic_assignment({0: [1, 2, 3]}, "2.3") == b'{"version":1,"partitions":{"0":[1,2,3]}}'
    assert encode_cluster_id("abc") == b'{"version":"1","id":"abc"}'
    assert encode_config_change("topics", "foo") == b'{"version":2,"entity_path":"topics/foo"}'
    assert encode_log_dir_event(3) == b'{"version":1,"broker":3,"event":1}'
    assert encode_producer_id_block(2, 1000, 1999) == (
        b'{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}'
    )
    assert encode_admin_delete_topic() == b""


def test_encode_versions_follow_kafka_version() -> None:
    assert json.loads(encode_controller(1, 0, "3.3"))["version"] == 1
    assert json.loads(encode_controller(1, 0, "3.4"))["kraftControllerEpoch"] == -1
    assert json.loads(encode_broker_registration(1, "h", 9092, "2.6"))["version"] == 4
    assert json.loads(encode_broker_registration(1, "h", 9092, "2.7"))["version"] == 5
    assert [
        json.loads(encode_topic_assignment({0: [1]}, v))["version"] for v in ("2.3", "2.4", "2.7", "2.8")
    ] == [
        1,
        2,
        2,
        3,
    ]
    assert "leader_recovery_state" not in json.loads(encode_partition_state(1, 0, 1, [1], "3.8", 0))
    with pytest.raises(ValueError):
        encode_partition_state(1, 0, 1, [1], "3.1", leader_recovery_state=1)
    with pytest.raises(ValueError):
        encode_partition_state(-2, 0, 1, [1], "3.8")
    with pytest.raises(ValueError):
        encode_topic_assignment({0: [1, 2]}, "2.3", adding={0: [2]})


def test_scala_map_orders() -> None:
    assert scala_immutable_order(["a", "b", "c", "d"]) == ["a", "b", "c", "d"]  # Map1..Map4 keep order
    assert scala_immutable_order(["version", "leader", "leader_epoch", "controller_epoch", "isr"]) == [
        "controller_epoch",
        "leader",
        "version",
        "leader_epoch",
        "isr",
    ]
    keys = [str(i) for i in range(40)]  # forces two resizes of the mutable table
    order = scala_mutable_order(keys)
    assert sorted(order) == sorted(keys) and order != keys


# ------------------------------------------------------------------------------------ round trips
def _rt(path: str, data: bytes, **kw: object) -> list[MetadataEvent]:
    return decode(ZnodeChange(zxid=9, path=path, op=ZnodeOp.CREATE, data=data, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("version", ["1.1", "3.3", "3.4", "3.8"])
def test_roundtrip_controller(version: str) -> None:
    (e,) = _rt("/controller", encode_controller(4, 1700000000000, version))
    assert (e.controller_id, e.detail["timestamp_ms"]) == (4, 1700000000000)


@pytest.mark.parametrize("payload_version", [1, 2, 3, 4, 5])
def test_roundtrip_broker_every_version(payload_version: int) -> None:
    data = encode_broker_registration(
        7,
        "b7",
        9092,
        "3.8",
        rack="r",
        timestamp_ms=5,
        features={"f": {"min_version": 1, "max_version": 2}},
        payload_version=payload_version,
    )
    (e,) = _rt("/brokers/ids/7", data, czxid=31)
    assert (e.broker, e.detail["payload_version"], e.detail["host"], e.detail["port"]) == (
        7,
        payload_version,
        "b7",
        9092,
    )
    assert ("rack" in e.detail) is (payload_version >= 3)
    assert ("features" in e.detail) is (payload_version >= 5)


@pytest.mark.parametrize("version", ["2.0", "2.4", "2.8", "3.8"])
def test_roundtrip_topic_assignment(version: str) -> None:
    moving = version >= "2.4"
    parts = {p: [p % 3, (p + 1) % 3] for p in range(20)}
    data = encode_topic_assignment(
        parts,
        version,
        adding={0: [2]} if moving else None,
        removing={0: [0]} if moving else None,
        topic_id="tid",
    )
    events = _rt("/brokers/topics/t", data)
    assert {e.partition: list(e.replicas or ()) for e in events} == parts
    assert ("adding_replicas" in events[0].detail) is moving
    assert ("topic_id" in events[0].detail) is (version >= "2.8")


@settings(max_examples=100, deadline=None)
@given(
    leader=st.integers(-1, 1000),
    leader_epoch=st.integers(0, 2**31 - 1),
    controller_epoch=st.integers(0, 2**31 - 1),
    isr=st.lists(st.integers(0, 1000), max_size=6),
    version=st.sampled_from(["1.1", "2.8", "3.2", "3.8"]),
    recovering=st.booleans(),
)
def test_roundtrip_partition_state(
    leader: int, leader_epoch: int, controller_epoch: int, isr: list[int], version: str, recovering: bool
) -> None:
    lrs = 1 if recovering and version >= "3.2" else None
    data = encode_partition_state(leader, leader_epoch, controller_epoch, isr, version, lrs)
    (e,) = _rt("/brokers/topics/t/partitions/2/state", data)
    assert (e.leader, e.leader_epoch, e.controller_epoch, e.isr) == (
        leader,
        leader_epoch,
        controller_epoch,
        tuple(isr),
    )
    assert e.detail.get("leader_recovery_state") == lrs


@settings(max_examples=50, deadline=None)
@given(epoch=st.integers(0, 2**31 - 1))
def test_roundtrip_controller_epoch(epoch: int) -> None:
    (e,) = _rt("/controller_epoch", encode_controller_epoch(epoch))
    assert e.controller_epoch == epoch


def test_roundtrip_admin_and_notifications() -> None:
    (d,) = _rt("/admin/delete_topics/t", encode_admin_delete_topic())
    assert d.type is T.TOPIC_DELETION_REQUESTED
    re_ = _rt("/admin/reassign_partitions", encode_reassignment({("t", 1): [3, 4], ("t", 0): [1]}))
    assert [(e.topic, e.partition, e.replicas) for e in re_] == [("t", 0, (1,)), ("t", 1, (3, 4))]
    pre = _rt("/admin/preferred_replica_election", encode_preferred_replica_election([("t", 0), ("u", 2)]))
    assert [(e.topic, e.partition) for e in pre] == [("t", 0), ("u", 2)]
    isr = _rt("/isr_change_notification/isr_change_0000000003", encode_isr_change([("t", 5)]))
    assert [(e.type, e.topic, e.partition) for e in isr] == [(T.ISR_CHANGE_NOTIFIED, "t", 5)]
    (ld,) = _rt("/log_dir_event_notification/log_dir_event_0000000001", encode_log_dir_event(4))
    assert ld.broker == 4
    (cid,) = _rt("/cluster/id", encode_cluster_id("xyz"))
    assert cid.detail["cluster_id"] == "xyz"
    (pid,) = _rt("/latest_producer_id_block", encode_producer_id_block(1, 0, 999))
    assert pid.detail == {"block_start": 0, "block_end": 999}
    (cfg,) = _rt("/config/brokers/1", encode_config({"a": "b"}))
    assert cfg.detail["config"] == {"a": "b"}
    for pv in (1, 2):
        (cc,) = _rt("/config/changes/config_change_0000000001", encode_config_change("topics", "x", pv))
        assert (cc.topic, cc.detail["payload_version"]) == ("x", pv)
    for v, pv in (("3.2", 1), ("3.3", 2)):
        (fe,) = _rt("/feature", encode_feature({"metadata.version": (1, 7)}, v))
        assert fe.detail["payload_version"] == pv
    (mig,) = _rt("/migration", encode_migration(3000, 2, 100, 1))
    assert mig.detail == {
        "kraft_controller_id": 3000,
        "kraft_controller_epoch": 2,
        "kraft_metadata_offset": 100,
        "kraft_metadata_epoch": 1,
    }
