"""The log-template census (docs/log-templates.md): each template in its versions' wordings, the census API,
KAFKA-2729's stale zkVersion through the real pipeline, and zero unknown metadata lines in the fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collectors.kafka_logs import collect_logs
from collectors.log_parser import census, classify_line, mentions_metadata, parse_lines
from models.decisions import NOT_TEMPLATES, LogTemplate
from models.decisions import DecisionKind as K

T = LogTemplate
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"

STATE = "state.change.logger"
CTRL = "kafka.controller.KafkaController"
PART = "kafka.cluster.Partition"

# (Kafka line, logger, message after the layout, template, kind, fields the record must carry)
CASES: list[tuple[str, str, str, LogTemplate, K, dict[str, Any]]] = [
    # KAFKA-2729, ≤2.2 with brackets and the 0.8-1.0 "Partition [t,p] on broker N: " ident; 2.4-2.7 without
    ("0.10", PART, "Partition [orders,0] on broker 1: Cached zkVersion [14] not equal to that in zookeeper, skip "
     "updating ISR", T.STALE_ZK_VERSION, K.STALE_ZK_VERSION,
     {"topic": "orders", "partition": 0, "broker_id": 1, "success": False, "zk_version": 14}),
    ("1.1", PART, "[Partition orders-2 broker=3] Cached zkVersion [7] not equal to that in zookeeper, skip updating "
     "ISR", T.STALE_ZK_VERSION, K.STALE_ZK_VERSION, {"topic": "orders", "partition": 2, "broker_id": 3, "zk_version": 7}),
    ("2.4", PART, "[Partition orders-2 broker=3] Cached zkVersion 7 not equal to that in zookeeper, skip updating ISR",
     T.STALE_ZK_VERSION, K.STALE_ZK_VERSION, {"topic": "orders", "partition": 2, "broker_id": 3, "zk_version": 7}),
    # the ISR path on the leader
    ("0.8", PART, "Partition [t,0] on broker 2: Shrinking ISR for partition [t,0] from 2,1,3 to 2", T.ISR_SHRINK,
     K.ISR_CHANGE, {"topic": "t", "partition": 0, "isr": [2], "prev_isr": [2, 1, 3]}),
    ("3.9", PART, "[Partition t-0 broker=2] Shrinking ISR from 2,1 to 2. Leader: (highWatermark: 5, endOffset: 9). "
     "Out of sync replicas: (brokerId: 1, endOffset: 5, lastCaughtUpTimeMs: 17).", T.ISR_SHRINK, K.ISR_CHANGE,
     {"topic": "t", "partition": 0, "isr": [2], "broker_id": 2}),
    ("2.7", PART, "[Partition t-0 broker=2] Expanding ISR from 2 to 2,1", T.ISR_EXPAND, K.ISR_CHANGE, {"isr": [2, 1]}),
    ("0.10", PART, "Partition [t,0] on broker 2: ISR updated to [2,1] and zkVersion updated to [9]", T.ISR_UPDATED,
     K.ISR_CHANGE, {"isr": [2, 1], "zk_version": 9}),
    ("3.9", PART, "[Partition t-0 broker=2] ISR updated to 2,1  and version updated to 9", T.ISR_UPDATED, K.ISR_CHANGE,
     {"isr": [2, 1], "zk_version": 9}),
    ("3.9", PART, "[Partition t-0 broker=2] ISR updated to 2 (under-min-isr) and version updated to 10", T.ISR_UPDATED,
     K.ISR_CHANGE, {"isr": [2], "zk_version": 10}),
    # old-format leader elections: the new leader and ISR are named
    ("0.8", "kafka.controller.OfflinePartitionLeaderSelector", '[OfflinePartitionLeaderSelector]: Selected new leader '
     'and ISR {"leader":3,"leader_epoch":7,"isr":[3,1]} for offline partition [t,0]', T.SELECTED_LEADER_AND_ISR,
     K.LEADER_ELECTED, {"topic": "t", "partition": 0, "leader": 3, "leader_epoch": 7, "isr": [3, 1], "success": True}),
    ("1.0", "kafka.controller.OfflinePartitionLeaderSelector", '[OfflinePartitionLeaderSelector]: Selected new leader '
     'and ISR {"leader":3,"leader_epoch":7,"isr":[3]} for offline partition t-0', T.SELECTED_LEADER_AND_ISR,
     K.LEADER_ELECTED, {"topic": "t", "partition": 0, "leader": 3, "isr": [3]}),
    ("0.8", CTRL, '[Controller 1]: New leader and ISR for partition [t,0] is {"leader":-1,"leader_epoch":8,"isr":[2]}',
     T.NEW_LEADER_AND_ISR, K.ISR_REMOVAL, {"controller_id": 1, "leader": -1, "leader_epoch": 8, "isr": [2]}),
    ("0.8", "kafka.controller.OfflinePartitionLeaderSelector", "[OfflinePartitionLeaderSelector]: No broker in ISR is "
     "alive for [t,0]. Elect leader 3 from live brokers 3. There's potential data loss.", T.UNCLEAN_LEADER_CHOSEN,
     K.UNCLEAN_LEADER_CHOSEN, {"leader": 3, "live": [3]}),
    ("0.8", STATE, "Controller 1 epoch 4 elected leader 3 for Offline partition [t,0]", T.LEADER_ELECTED_OFFLINE,
     K.LEADER_ELECTED, {"controller_id": 1, "controller_epoch": 4, "leader": 3}),
    ("1.0", STATE, "[Controller id=1 epoch=4] Elected leader 3 for Offline partition t-0", T.LEADER_ELECTED_OFFLINE,
     K.LEADER_ELECTED, {"controller_id": 1, "controller_epoch": 4, "leader": 3}),
    ("0.8", CTRL, "[Controller 1]: Partition [t,0] completed preferred replica leader election. New leader is 2",
     T.PREFERRED_LEADER_ELECTED, K.LEADER_ELECTED, {"leader": 2, "topic": "t"}),
    ("3.9", CTRL, "[Controller id=1] Partition t-0 failed to complete preferred replica leader election to 2. Leader "
     "is still 3", T.PREFERRED_LEADER_NOT_ELECTED, K.OTHER, {"leader": 3, "preferred": 2}),
    ("3.9", CTRL, "[Controller id=1] Updated leader epoch for partition t-0 to 6, zkVersion=11", T.LEADER_EPOCH_BUMPED,
     K.LEADER_EPOCH_BUMPED, {"leader_epoch": 6, "zk_version": 11}),
    ("0.8", CTRL, "[Controller 1]: Updated leader epoch for partition [t,0] to 6", T.LEADER_EPOCH_BUMPED,
     K.LEADER_EPOCH_BUMPED, {"leader_epoch": 6}),
    ("3.9", CTRL, "[Controller id=1] Starting replica leader election (PREFERRED) for partitions t-0 triggered by "
     "AutoTriggered", T.LEADER_ELECTION_STEP, K.OTHER, {}),
    ("3.9", CTRL, "[Controller id=1] Processing automatic preferred replica leader election", T.LEADER_ELECTION_STEP,
     K.OTHER, {}),
    # old controller/broker request wordings
    ("0.9", STATE, "Controller 1 epoch 2 sending become-leader LeaderAndIsr request (Leader:1,ISR:1,2,LeaderEpoch:3,"
     "ControllerEpoch:2) to broker 1 for partition [t,0]", T.REQUEST_SENT, K.REQUEST_SENT,
     {"leader": 1, "isr": [1, 2], "leader_epoch": 3, "controller_epoch": 2}),
    ("0.10", STATE, "Controller 1 epoch 2 sending UpdateMetadata request (Leader:1,ISR:1,LeaderEpoch:3,ControllerEpoch:2)"
     " to brokers Set(1, 2) for partition t-0", T.REQUEST_SENT, K.REQUEST_SENT, {"leader": 1, "topic": "t"}),
    ("0.10", STATE, "Broker 2 received LeaderAndIsr request PartitionState(controllerEpoch=2, leader=1, leaderEpoch=3, "
     "isr=[1, 2], zkVersion=4, replicas=[1, 2]) correlation id 5 from controller 1 epoch 2 for partition [t,0]",
     T.REQUEST_RECEIVED, K.REQUEST_RECEIVED, {"broker_id": 2, "controller_id": 1, "leader": 1, "isr": [1, 2]}),
    ("0.10", STATE, "Broker 2 received stop replica request from an old controller epoch 3. Latest known controller "
     "epoch is 4", T.STALE_CONTROLLER_EPOCH, K.STALE_CONTROLLER_REQUEST,
     {"broker_id": 2, "controller_epoch": 3, "latest_controller_epoch": 4}),
    ("1.1", STATE, "[Broker id=2] Handling LeaderAndIsr request correlationId 5 from controller 1 epoch 2 starting the "
     "become-follower transition for partition t-0 with leader 1", T.BROKER_TRANSITION_STEP, K.OTHER,
     {"topic": "t", "controller_id": 1, "controller_epoch": 2}),
    ("3.9", STATE, "[Broker id=2] Follower t-0 starts at leader epoch 3 from offset 0 with partition epoch 4 and high "
     "watermark 0. Current leader is 1. Previous leader Some(2) and previous leader epoch was 2.", T.FOLLOWER_STARTS,
     K.OTHER, {"leader_epoch": 3, "leader": 1}),
    ("3.9", STATE, "[Broker id=1] Leader t-0 with topic id Some(AbCdEf) starts at leader epoch 3 from offset 0 with "
     "partition epoch 4, high watermark 0, ISR [1,2], adding replicas [] and removing replicas [] . Previous leader "
     "epoch was 2.", T.LEADER_STARTS, K.LEADER_STARTED, {"leader": 1, "leader_epoch": 3, "isr": [1, 2]}),
    ("1.1", PART, "[Partition t-0 broker=1] t-0 starts at Leader Epoch 3 from offset 42. Previous Leader Epoch was: 2",
     T.LEADER_STARTS, K.LEADER_STARTED, {"leader": 1, "leader_epoch": 3}),
    ("3.9", STATE, "[Broker id=2] Add 1 partitions and deleted 0 partitions from metadata cache in response to "
     "UpdateMetadata request sent by controller 1 epoch 2 with correlation id 6", T.METADATA_CACHE_UPDATE, K.OTHER,
     {"controller_id": 1, "controller_epoch": 2}),
    ("3.9", STATE, "[Controller id=1 epoch=2] Sending StopReplica request (delete = false) for 1 replicas to broker 2",
     T.REQUEST_SENT_SUMMARY, K.REQUEST_SENT, {}),
    ("2.6", CTRL, "[Controller id=1] Mark replicas t-0 on broker 2 as offline", T.MARK_REPLICAS_OFFLINE, K.OTHER, {}),
    ("3.9", CTRL, "[Controller id=1] Ready to serve as the new controller with epoch 3", T.CONTROLLER_READY,
     K.CONTROLLER_READY, {"controller_epoch": 3}),
    ("0.8", CTRL, "[Controller 1]: Broker 1 is ready to serve as the new controller with epoch 3", T.CONTROLLER_READY,
     K.CONTROLLER_READY, {"controller_epoch": 3}),
    ("2.7", CTRL, "[Controller id=1] Failed to update ISR to 1,2 for partition t-0, bad ZK version.",
     T.ISR_UPDATE_BY_CONTROLLER, K.OTHER, {"topic": "t", "partition": 0}),
    ("0.8", CTRL, "[Controller 1]: Retaining last ISR 2 of partition [t,0] since unclean leader election is disabled",
     T.RETAINING_LAST_ISR, K.OTHER, {"replica": 2}),
    ("3.9", "kafka.controller.RequestSendThread", "[RequestSendThread controllerId=1] Controller 1 connected to "
     "localhost:9093 (id: 2 rack: null) for sending state change requests", T.CHANNEL_STEP, K.OTHER, {}),
    ("3.9", "kafka.controller.TopicDeletionManager", "[Topic Deletion Manager 1] Deletion of topic t successfully "
     "completed", T.TOPIC_DELETION_STEP, K.OTHER, {"controller_id": 1}),
    # real 3.9.1 / 2.8.2 brokers (kafkalab): DEBUG lines of controller.log and the Scala 2.13 set spelling
    ("3.9", STATE, "[Controller id=1 epoch=3] Sending UpdateMetadata request to brokers HashSet(1, 2, 3) for 4 "
     "partitions", T.REQUEST_SENT_SUMMARY, K.REQUEST_SENT, {"controller_id": 1, "controller_epoch": 3}),
    ("3.9", CTRL, "[Controller id=1] Updating ISRs for partitions: Set(rf3-1, rf3-2).", T.ISR_UPDATE_BY_CONTROLLER,
     K.OTHER, {"controller_id": 1}),
    ("3.9", CTRL, "[Controller id=1] ISR for partition rf3-0 updated to LeaderAndIsr(leader=1, leaderEpoch=4, "
     "isrWithBrokerEpoch=List(BrokerState(brokerId=1, brokerEpoch=-1), BrokerState(brokerId=3, brokerEpoch=-1)), "
     "leaderRecoveryState=RECOVERED, partitionEpoch=7).", T.ISR_UPDATE_BY_CONTROLLER, K.OTHER,
     {"topic": "rf3", "partition": 0, "leader": 1, "leader_epoch": 4, "isr": [1, 3]}),
    ("2.8", CTRL, "[Controller id=1] ISR for partition rf3-2 updated to [1,3,2] and zkVersion updated to [7]",
     T.ISR_UPDATE_BY_CONTROLLER, K.OTHER, {"topic": "rf3", "partition": 2, "isr": [1, 3, 2], "zk_version": 7}),
    ("3.9", CTRL, "[Controller id=3] Updating assignment of partition moving-0 from ReplicaAssignment(replicas=1,2, "
     "addingReplicas=, removingReplicas=) to ReplicaAssignment(replicas=2,3,1, addingReplicas=3, removingReplicas=1)",
     T.REASSIGNMENT_STEP, K.OTHER, {"topic": "moving", "partition": 0}),
    ("3.9", CTRL, "[Controller id=3] Updating leader epoch for partition moving-0", T.REASSIGNMENT_STEP, K.OTHER,
     {"topic": "moving", "partition": 0}),
    ("3.9", CTRL, "[Controller id=3] Waiting for any successful result for election type (PREFERRED) by "
     "AdminClientTriggered for partitions: Map(rf3-1 -> Right(1))", T.LEADER_ELECTION_STEP, K.OTHER, {}),
    ("3.9", CTRL, "[Controller id=1] Delete topics listener fired for topics unclean,rf1 to be deleted",
     T.TOPIC_DELETION_STEP, K.OTHER, {"controller_id": 1}),
    ("3.9", CTRL, "[Controller id=1] Delete topic callback invoked on StopReplica response received from broker 3: "
     "request error = NONE, partition errors = Map(unclean-0 -> NONE)", T.TOPIC_DELETION_STEP, K.OTHER, {}),
    ("3.9", "kafka.controller.TopicDeletionManager", "[Topic Deletion Manager 1] Deletion successfully completed for "
     "replicas [Topic=doomed,Partition=1,Replica=3],[Topic=doomed,Partition=0,Replica=3]", T.TOPIC_DELETION_STEP,
     K.OTHER, {}),
    # real 2.1.1 brokers (kafkalab, KAFKA_MATRIX=1): the deletion manager's older wordings, the StopReplica batch
    ("2.1", "kafka.controller.TopicDeletionManager", "[Topic Deletion Manager 1], Deletion for replicas 2,3 for "
     "partition doomed-0,doomed-1 of topic doomed in progress", T.TOPIC_DELETION_STEP, K.OTHER, {"controller_id": 1}),
    ("2.1", "kafka.controller.TopicDeletionManager", "[Topic Deletion Manager 1], Partition deletion callback for "
     "doomed-0,doomed-1", T.TOPIC_DELETION_STEP, K.OTHER, {"controller_id": 1}),
    ("2.1", "kafka.controller.TopicDeletionManager", "[Topic Deletion Manager 1], Topic deletion callback for doomed",
     T.TOPIC_DELETION_STEP, K.OTHER, {"controller_id": 1}),
    ("2.1", "kafka.controller.TopicDeletionManager", "[Topic Deletion Manager 1], Not retrying deletion of topic "
     "doomed at this time since it is marked ineligible for deletion", T.TOPIC_DELETION_STEP, K.OTHER, {}),
    ("2.1", "kafka.controller.ControllerBrokerRequestBatch", "The stop replica request (delete = false) sent to "
     "broker 2 is [Topic=rf1,Partition=0,Replica=2],[Topic=rf3,Partition=1,Replica=2]", T.REQUEST_SENT_SUMMARY,
     K.OTHER, {}),
    ("2.1", "kafka.controller.ControllerBrokerRequestBatch", "The stop replica request (delete = true) sent to broker 2 "
     "is", T.REQUEST_SENT_SUMMARY, K.OTHER, {}),
    ("2.1", CTRL, "[Controller id=1] Sending MetadataRequest to Brokers: Vector(1, 2, 3) for TopicPartitions: "
     "ArrayBuffer(rf3-0)", T.REQUEST_SENT_SUMMARY, K.OTHER, {"controller_id": 1}),
    ("2.1", CTRL, "[Controller id=1] Delete topic callback invoked for StopReplicaResponse(responses={doomed-0=NONE}, "
     "error=NONE)", T.TOPIC_DELETION_STEP, K.OTHER, {"controller_id": 1}),
    ("3.9", "kafka.controller.TopicDeletionManager", "[Topic Deletion Manager 1] Dead Replicas ([Topic=doomed,"
     "Partition=1,Replica=2],[Topic=doomed,Partition=0,Replica=2]) found for topic doomed", T.TOPIC_DELETION_STEP,
     K.OTHER, {}),
    ("3.9", "kafka.controller.TopicDeletionManager", "[Topic Deletion Manager 1] Retrying deletion of topics doomed "
     "since replicas [Topic=doomed,Partition=0,Replica=2] were not successfully deleted", T.TOPIC_DELETION_STEP,
     K.OTHER, {}),
    ("3.9", CTRL, "[Controller id=1] Broker 3 has been elected as the controller, so stopping the election process.",
     T.CONTROLLER_LIFECYCLE, K.OTHER, {}),
    ("3.9", CTRL, "[Controller id=1] Broker 2 was elected as controller instead of broker 1", T.CONTROLLER_LIFECYCLE,
     K.OTHER, {}),
    ("3.9", CTRL, "[Controller id=1] Unregister BrokerModifications handler for Set(1, 2, 3)", T.CONTROLLER_LIFECYCLE,
     K.OTHER, {}),
    ("3.9", CTRL, "[Controller id=1] Live brokers: 1,2", T.CONTROLLER_LIFECYCLE, K.OTHER, {}),
    ("3.9", CTRL, "[Controller id=1] Acquired new producerId block ProducerIdsBlock(assignedBrokerId=2, "
     "firstProducerId=2000, size=1000) by writing to Zk with path version 3", T.CONTROLLER_LIFECYCLE, K.OTHER, {}),
    ("3.9", "kafka.controller.RequestSendThread", "[RequestSendThread controllerId=1] Controller 1's connection to "
     "broker 127.0.0.1:58229 (id: 3 rack: null) was unsuccessful", T.CHANNEL_STEP, K.OTHER, {}),
    ("3.9", "kafka.controller.RequestSendThread", "[RequestSendThread controllerId=1] shutdownInitiated latch count "
     "reached zero. Shutdown called.", T.CHANNEL_STEP, K.OTHER, {}),
]


def _line(logger: str, msg: str, level: str = "INFO") -> str:
    return f"[2020-01-01 00:00:00,000] {level} {msg} ({logger})"


@pytest.mark.parametrize(("version", "logger", "msg", "template", "kind", "fields"), CASES,
                         ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_template(version: str, logger: str, msg: str, template: LogTemplate, kind: K, fields: dict[str, Any]) -> None:
    line = _line(logger, msg)
    assert classify_line(line) is template
    recs, rejected, _ = parse_lines([line])
    assert not rejected and len(recs) == 1
    rec = recs[0]
    assert (rec.template, rec.kind) == (template, kind)
    for name, want in fields.items():
        got = getattr(rec, name) if hasattr(rec, name) else rec.extra.get(name)
        assert got == want, (name, got, want)


def test_classify_line_outside_templates() -> None:
    assert classify_line("\tat kafka.controller.KafkaController.elect(KafkaController.scala:1)") is T.CONTINUATION
    assert classify_line("[2020-01-01 00:00:00,000] INFO [Controller id=1 epoch=2] Changed partition t-0 fr") is T.CUT
    assert classify_line(_line(CTRL, "[Controller id=1] something Kafka never wrote")) is T.UNKNOWN
    assert mentions_metadata("Partition t-0 did a thing") and mentions_metadata("leaderEpoch=3")
    assert not mentions_metadata("Starting the controller scheduler")


def test_census_counts_per_template_and_lists_unknown_metadata_lines() -> None:
    lines = [
        _line(PART, "[Partition t-0 broker=1] Cached zkVersion 3 not equal to that in zookeeper, skip updating ISR"),
        _line(PART, "[Partition t-0 broker=1] Cached zkVersion 3 not equal to that in zookeeper, skip updating ISR"),
        _line(CTRL, "[Controller id=1] Resigned"),
        _line(CTRL, "[Controller id=1] Bumped the leader of partition t-0 for fun"),  # unknown, names a partition
        _line(CTRL, "[Controller id=1] Tidied the desk"),  # unknown, names nothing
        "java.lang.IllegalStateException: boom",
        "",
    ]
    c = census(lines)
    assert c.counts[T.STALE_ZK_VERSION] == 2 and c.counts[T.CONTROLLER_RESIGNED] == 1
    assert c.counts[T.UNKNOWN] == 2 and c.counts[T.CONTINUATION] == 1
    assert c.records == 5 and c.known_share() == pytest.approx(3 / 5)
    assert [n for n, _ in c.unknown_metadata] == [4]


def test_every_fixture_line_has_a_template_or_names_no_metadata() -> None:
    """The repo's real excerpts and composed logs: no unknown line speaks of a partition, leader, ISR or epoch."""
    files = sorted(p for p in LOGS.rglob("*.log") if p.is_file())
    assert len(files) >= 10
    total = census([])
    for f in files:
        total.update(census(f.read_text(encoding="utf-8", errors="replace").splitlines()))
    assert total.unknown_metadata == []
    assert sum(n for t, n in total.counts.items() if t not in NOT_TEMPLATES) >= 50


def test_every_template_is_exercised_here() -> None:
    covered = {c[3] for c in CASES}
    untested_here = {T.PARTITION_STATE_CHANGE, T.REPLICA_STATE_CHANGE, T.PARTITION_CHANGE_FAILED,
                     T.REPLICA_CHANGE_FAILED, T.NO_LIVE_ASSIGNED_REPLICA, T.INVALID_PREVIOUS_STATE, T.ZOMBIE_ABORT,
                     T.ISR_REMOVAL, T.LEADER_ELECTION_STARTED, T.LEADER_ELECTION_ERROR, T.CONTROLLER_ELECTED,
                     T.EPOCH_INCREMENTED, T.CONTROLLER_RESIGNED, T.CONTROLLER_MOVED, T.FAILOVER_STEP,
                     T.CONTROLLER_ELECTION_ERROR, T.BROKER_CHANGE, T.BROKER_FAILURE, T.BROKER_STARTUP,
                     T.BROKER_REGISTERING, T.BROKER_REGISTERED, T.ZK_SESSION_EXPIRED, T.ZK_ERROR}  # test_kafka_logs.py
    catalogue_only = {T.REASSIGNMENT_REQUEST, T.REASSIGNMENT_STEP, T.TOPIC_CHANGE, T.TOPIC_DELETION_STEP,
                      T.STATE_MACHINE_STEP, T.STATE_CHANGE_ERROR, T.CONTROLLER_LIFECYCLE, T.RESPONSE_RECEIVED,
                      T.BROKER_IGNORED_REQUEST}
    for template, msg in (
        (T.REASSIGNMENT_REQUEST, "[Controller id=1 epoch=2] Sent LeaderAndIsr request LeaderIsrAndControllerEpoch("
         "LeaderAndIsr(leader=1, leaderEpoch=3, isr=List(1, 2), zkVersion=4),2) with new replica assignment "
         "ReplicaAssignment(replicas=1,2, addingReplicas=, removingReplicas=) to leader 1 for partition being "
         "reassigned t-0"),
        (T.REASSIGNMENT_STEP, "[Controller id=1] Leader 1 for partition t-0 being reassigned, is already in the new "
         "list of replicas 1,2 and is alive"),
        (T.TOPIC_CHANGE, "[Controller id=1] New topics: [Set(t)], deleted topics: [HashSet()], new partition replica "
         "assignment [Set(TopicIdReplicaAssignment(t,Some(x),Map(t-0 -> ReplicaAssignment(replicas=1, "
         "addingReplicas=, removingReplicas=))))]"),
        (T.TOPIC_DELETION_STEP, "[Controller id=1] List of topics to be deleted: "),
        (T.STATE_MACHINE_STEP, "[Controller id=1] Triggering online partition state changes"),
        (T.STATE_CHANGE_ERROR, "[Controller id=1] Error while moving some partitions to OnlinePartition state"),
        (T.CONTROLLER_LIFECYCLE, "[Controller id=1] Controller startup complete"),
        (T.RESPONSE_RECEIVED, "[Controller id=1 epoch=2] Received error NOT_CONTROLLER in UpdateMetadata response "
         "UpdateMetadataResponseData(errorCode=41) from broker 2"),
        (T.BROKER_IGNORED_REQUEST, "[Broker id=2] Ignoring LeaderAndIsr request from controller 1 with correlation id 5 "
         "epoch 2 for partition t-0 since its associated leader epoch 3 matches the current leader epoch"),
    ):
        assert classify_line(_line(CTRL, msg)) is template, msg
    assert covered | untested_here | catalogue_only == set(LogTemplate) - NOT_TEMPLATES - {T.UNKNOWN}


# --- KAFKA-2729 through collection and the rebuild ----------------------------------------------------------


def test_stale_zk_version_is_an_anomaly_of_its_own(lake: Any) -> None:
    from engine.local_run import run_local
    from tests.history import clean_history

    lake.append("znode_events", clean_history().rows, writer_id="t", batch_seq=1)
    collect_logs(lake, LOGS / "kafka-2729")
    run_local(lake)
    found = [r for r in lake.read_arrow("anomalies").to_pylist() if r["kind"] == "STALE_ZK_VERSION_ISR_UPDATE"]
    got = sorted((r["topic"], r["partition"], r["broker"], r["severity"]) for r in found)
    assert got == [("orders", 0, 1, "warning"), ("orders", 0, 1, "warning"), ("payments", 3, 1, "warning")]
    assert all(json.loads(r["details"])["kind"] == "STALE_ZK_VERSION" for r in found)
    assert {r["kind"] for r in lake.read_arrow("anomalies").to_pylist()} == {"STALE_ZK_VERSION_ISR_UPDATE"}
