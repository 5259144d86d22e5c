"""The KRaft metadata image: what each record means in zkledger's model (pure Python, no bytes)."""

from __future__ import annotations

import json

from models.events import MetadataEvent
from models.events import MetadataEventType as T
from models.kraft_image import MetadataImage, image_from_json, image_to_json
from models.kraft_records import ControlRecord, ControlRecordType, MetadataRecord
from models.kraft_records import MetadataRecordType as R

TID = "AAAAAAAAAAAAAAAAAAAAAQ"


def rec(kind: R, **fields: object) -> MetadataRecord:
    return MetadataRecord(kind, 0, fields)


def part(p: int, replicas: list[int], isr: list[int], leader: int, epoch: int = 0) -> MetadataRecord:
    return rec(R.PARTITION_RECORD, partitionId=p, topicId=TID, replicas=replicas, isr=isr, removingReplicas=[],
               addingReplicas=[], leader=leader, leaderRecoveryState=0, leaderEpoch=epoch, partitionEpoch=0)


def change(p: int, **fields: object) -> MetadataRecord:
    base: dict[str, object] = {"partitionId": p, "topicId": TID, "leader": -2, "leaderRecoveryState": -1}
    return MetadataRecord(R.PARTITION_CHANGE_RECORD, 0, {**base, **fields})


def kinds(events: list[MetadataEvent]) -> list[str]:
    return [str(e.type) for e in events]


def cluster() -> MetadataImage:
    image = MetadataImage()
    image.apply_control(ControlRecord(ControlRecordType.LEADER_CHANGE, 0, {"leaderId": 1, "voters": []}), 0, 1, None)
    for b in (1, 2, 3):
        image.apply(rec(R.REGISTER_BROKER_RECORD, brokerId=b, brokerEpoch=10 + b, fenced=True), b, 1, None)
        image.apply(rec(R.UNFENCE_BROKER_RECORD, id=b, epoch=10 + b), 3 + b, 1, None)
    image.apply(rec(R.TOPIC_RECORD, name="orders", topicId=TID), 7, 1, None)
    image.apply(part(0, [1, 2, 3], [1, 2, 3], 1), 8, 1, None)
    return image


def test_a_leader_change_is_an_election_in_the_quorum_epoch() -> None:
    image = MetadataImage()
    events = image.apply_control(ControlRecord(ControlRecordType.LEADER_CHANGE, 0, {"leaderId": 2, "voters": []}),
                                 40, 7, None)
    assert kinds(events) == [T.CONTROLLER_EPOCH_CHANGED, T.CONTROLLER_ELECTED]
    assert (events[1].controller_id, events[1].controller_epoch, events[1].zxid) == (2, 7, 40)


def test_a_broker_is_live_only_once_unfenced() -> None:
    image = MetadataImage()
    assert image.apply(rec(R.REGISTER_BROKER_RECORD, brokerId=1, brokerEpoch=5, fenced=True), 1, 1, None) == []
    up = image.apply(rec(R.UNFENCE_BROKER_RECORD, id=1, epoch=5), 2, 1, None)
    assert kinds(up) == [T.BROKER_REGISTERED] and up[0].czxid == 5
    shutdown = image.apply(rec(R.BROKER_REGISTRATION_CHANGE_RECORD, brokerId=1, brokerEpoch=5, fenced=0,
                               inControlledShutdown=1), 3, 1, None)
    assert kinds(shutdown) == [T.BROKER_DEREGISTERED]
    assert image.apply(rec(R.FENCE_BROKER_RECORD, id=1, epoch=5), 4, 1, None) == []  # not live already


def test_a_partition_change_is_a_write_of_its_whole_state() -> None:
    image = cluster()
    shrink = image.apply(change(0, isr=[1, 2]), 9, 1, None)
    assert kinds(shrink) == [T.PARTITION_STATE_WRITTEN]
    assert (shrink[0].leader, shrink[0].leader_epoch, shrink[0].isr, shrink[0].replicas) == (1, 0, (1, 2), (1, 2, 3))
    assert shrink[0].detail["partition_epoch"] == 1
    moved = image.apply(change(0, leader=2, isr=[2]), 10, 2, None)
    assert (moved[0].leader, moved[0].leader_epoch, moved[0].controller_epoch) == (2, 1, 2)
    assert moved[0].detail["partition_epoch"] == 2


def test_a_reassignment_shows_its_target_and_new_replicas() -> None:
    image = cluster()
    events = image.apply(change(0, replicas=[1, 2, 3, 4], addingReplicas=[4], removingReplicas=[1]), 9, 1, None)
    assert kinds(events) == [T.REASSIGNMENT_REQUESTED, T.PARTITION_ASSIGNED, T.PARTITION_STATE_WRITTEN]
    assert events[0].replicas == (2, 3, 4)


def test_a_removed_topic_is_deleted_with_its_partitions() -> None:
    image = cluster()
    events = image.apply(rec(R.REMOVE_TOPIC_RECORD, topicId=TID), 9, 1, None)
    assert kinds(events) == [T.TOPIC_DELETION_REQUESTED, T.PARTITION_STATE_DELETED, T.TOPIC_DELETED,
                             T.TOPIC_DELETION_COMPLETED]
    assert {e.topic for e in events} == {"orders"} and image.partitions == {}


def test_secret_config_values_stay_in_the_log() -> None:
    image = MetadataImage()
    (secret,) = image.apply(rec(R.CONFIG_RECORD, resourceType=4, resourceName="1",
                                name="listener.name.sasl.plain.sasl.jaas.config", value="password=hunter2"), 1, 1, None)
    (plain,) = image.apply(rec(R.CONFIG_RECORD, resourceType=2, resourceName="orders", name="retention.ms",
                               value="1000"), 2, 1, None)
    assert secret.detail["value"] is None and "hunter2" not in json.dumps(secret.detail)
    assert plain.detail["value"] == "1000"


def test_a_snapshot_fills_a_hole_with_the_differences_only() -> None:
    image = cluster()
    snapshot = [rec(R.REGISTER_BROKER_RECORD, brokerId=b, brokerEpoch=10 + b, fenced=b == 3) for b in (1, 2, 3)]
    snapshot += [rec(R.TOPIC_RECORD, name="orders", topicId=TID), part(0, [1, 2, 3], [1, 2], 2, epoch=4)]
    events = image.rebase(snapshot, 500, 3, None)
    assert kinds(events) == [T.PARTITION_STATE_WRITTEN, T.BROKER_DEREGISTERED]
    assert {e.zxid for e in events} == {499}
    assert (events[0].leader, events[1].broker) == (2, 3)


def test_the_image_survives_its_json_form() -> None:
    image = cluster()
    again = image_from_json(json.loads(json.dumps(image_to_json(image))))
    assert again == image
    assert again.apply(change(0, isr=[1]), 9, 1, None) == image.apply(change(0, isr=[1]), 9, 1, None)


def test_an_image_stored_before_it_kept_its_log_epoch_takes_the_quorum_s() -> None:
    image = cluster()
    stored = image_to_json(image)
    del stored["log_epoch"]
    assert image.log_epoch >= 0 and image_from_json(stored).log_epoch == image.quorum_epoch
