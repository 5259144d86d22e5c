"""Kafka log parser and collector: real excerpts, every §4 template, fuzzing, real Delta on disk."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.kafka_logs import collect_logs
from collectors.log_parser import ParsedRecord, parse_lines, split_layout
from models.decisions import TRANSITION_KINDS
from models.decisions import DecisionKind as K

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "logs"
REAL = FIXTURES / "real"  # excerpts of real brokers' logs (public bug reports and projects), as found


def parse_file(name: str) -> tuple[list[ParsedRecord], list[Any]]:
    (path,) = REAL.glob(f"{name}_*.log")
    recs, rejected, _ = parse_lines(path.read_text(encoding="utf-8", errors="replace").splitlines())
    return recs, rejected


def one(line: str) -> ParsedRecord:
    recs, rejected, _ = parse_lines([line])
    assert not rejected and len(recs) == 1, (recs, rejected)
    return recs[0]


def state_line(msg: str, prefix: str = "[Controller id=1 epoch=4] ", level: str = "TRACE") -> str:
    return f"[2020-01-01 00:00:00,000] {level} {prefix}{msg} (state.change.logger)"


# ------------------------------------------------------------------ real excerpts


def test_every_real_file_parses() -> None:
    files = sorted(REAL.glob("*.log"))
    assert len(files) == 10  # eight excerpts from the field, two from the real-broker lab (3.9, 2.8)
    for f in files:
        recs, _rej, _ = parse_lines(f.read_text(encoding="utf-8", errors="replace").splitlines())
        assert recs, f.name
        assert all(r.line_no > 0 and r.message for r in recs)


def test_01_info_lines_both_sides_and_cut_last_line() -> None:
    recs, _ = parse_file("01")
    sent = [r for r in recs if r.kind == K.REQUEST_SENT]
    received = [r for r in recs if r.kind == K.REQUEST_RECEIVED]
    assert len(sent) == 4 and all(r.controller_id == 0 and r.controller_epoch == 1 for r in sent)
    assert len(received) == 1 and received[0].broker_id == 0 and received[0].controller_id == 0
    started = next(r for r in recs if r.kind == K.LEADER_STARTED)
    assert (started.topic, started.partition, started.leader_epoch, started.isr) == ("test", 1, 1, [0])
    last = recs[-1]
    assert last.message.endswith("Sending a stop replica r") and last.kind == K.OTHER and last.logger is None
    assert recs[0].ts == datetime(2020, 3, 26, 11, 38, 33, 75000, tzinfo=UTC)


def test_02_new_to_online_failure_with_empty_assigned_replicas() -> None:
    recs, _ = parse_file("02")
    assert len(recs) == 1  # the stack trace is continuation, never records
    r = recs[0]
    assert r.kind == K.PARTITION_TRANSITION_FAILED and r.success is False
    assert (r.topic, r.partition, r.from_state, r.to_state) == ("__test_rROC3KJfcB", 2, "NewPartition", "OnlinePartition")
    assert (r.controller_id, r.controller_epoch) == (1001, 1)
    assert r.extra["cause"] == "no live replica" and r.extra["assigned_replicas"] == []
    assert "PartitionStateMachine.scala:207" in r.message


def test_02_cause_line_alone_normalises_short_state_names() -> None:
    r = one(state_line("Controller 1001 epoch 1 encountered error during state change of partition t-2 from New to "
                       "Online, assigned replicas are [], live brokers are [Set(1001)]. No assigned replica is alive.",
                       level="ERROR"))
    assert (r.kind, r.from_state, r.to_state, r.success) == (K.PARTITION_TRANSITION_FAILED, "NewPartition",
                                                             "OnlinePartition", False)


def test_04_offline_election_failure_strategy_false() -> None:
    recs, _ = parse_file("04")
    assert len(recs) == 1
    r = recs[0]
    assert (r.kind, r.topic, r.partition) == (K.PARTITION_TRANSITION_FAILED, "__transaction_state", 35)
    assert (r.from_state, r.to_state, r.controller_id, r.controller_epoch) == ("OfflinePartition", "OnlinePartition", 100, 11)
    assert r.extra["strategy"] == "OfflinePartitionLeaderElectionStrategy(false)"


def test_06_election_epoch_1_zk_version_1() -> None:
    recs, _ = parse_file("06")
    elected = [r for r in recs if r.kind == K.CONTROLLER_ELECTED]
    assert len(elected) == 1
    assert (elected[0].controller_id, elected[0].controller_epoch, elected[0].extra["epoch_zk_version"]) == (0, 1, 1)
    assert [r.message.split("] ", 1)[1] for r in recs if r.kind == K.FAILOVER_STEP][:4] == [
        "Registering handlers", "Deleting log dir event notifications", "Deleting isr change notifications",
        "Initializing controller context"]
    assert recs[0].logger == "kafka.controller.ControllerEventManager$ControllerEventThread"


def test_08_pre_1_0_failed_online_to_online() -> None:
    recs, _ = parse_file("08")
    failed = [r for r in recs if r.kind == K.PARTITION_TRANSITION_FAILED]
    assert len(failed) == 1
    r = failed[0]
    assert (r.topic, r.partition, r.from_state, r.to_state) == ("event", 9, "OnlinePartition", "OnlinePartition")
    assert (r.controller_id, r.controller_epoch, r.success) == (0, 3, False)
    assert any(x.kind == K.LEADER_ELECTION_FAILED and x.partition == 9 for x in recs)
    assert not any(x.kind in TRANSITION_KINDS for x in recs)
    assert recs[0].line_no == 7  # the leading orphan stack trace made no record


def test_09_broker_leaves_and_returns() -> None:
    recs, _ = parse_file("09")
    changes = [r for r in recs if r.kind == K.BROKER_CHANGE]
    assert [c.extra["deleted"] for c in changes] == [[1], []]
    assert [c.extra["added"] for c in changes] == [[], [1]]
    assert [r.extra["brokers"] for r in recs if r.kind == K.BROKER_FAILURE] == [[1]]
    assert [r.extra["brokers"] for r in recs if r.kind == K.BROKER_STARTUP] == [[1]]
    assert all(r.controller_id == 3 for r in recs)


def test_10_broker_re_registration() -> None:
    recs, _ = parse_file("10")
    reg = [r for r in recs if r.kind == K.BROKER_REGISTERING]
    assert len(reg) == 1 and reg[0].broker_id == 18 and reg[0].logger == "kafka.zk.KafkaZkClient"


def test_11_nonode_then_epoch_1_dash_layout() -> None:
    recs, _ = parse_file("11")
    kinds = [r.kind for r in recs]
    nonode = kinds.index(K.ZK_ERROR)
    epoch = kinds.index(K.EPOCH_INCREMENTED)
    assert nonode < epoch
    assert recs[nonode].extra == {"zk_error": "NoNode", "path": "/controller_epoch"}
    assert (recs[epoch].controller_id, recs[epoch].controller_epoch) == (0, 1)
    assert recs[kinds.index(K.CONTROLLER_ELECTED)].controller_id == 0
    assert recs[0].ts == datetime(2016, 8, 2, 5, 38, 8, tzinfo=UTC) and recs[0].logger == "KafkaController"


# ------------------------------------------------------------------ §4 templates per version

TEMPLATES: list[tuple[str, str, dict[str, Any]]] = [
    ("0.11 partition", "Controller 1 epoch 3 changed partition [t,0] from OfflinePartition to OnlinePartition with leader 2",
     {"kind": K.PARTITION_TRANSITION, "topic": "t", "partition": 0, "leader": 2, "from_state": "OfflinePartition",
      "controller_epoch": 4}),
    ("1.0 partition", "Changed partition t-0 from OfflinePartition to OnlinePartition with leader 2",
     {"kind": K.PARTITION_TRANSITION, "leader": 2, "to_state": "OnlinePartition"}),
    ("1.0 elected", "Elected leader 2 for Offline partition t-0", {"kind": K.LEADER_ELECTED, "leader": 2}),
    ("1.1 new", "Changed partition t-0 state from NonExistentPartition to NewPartition with assigned replicas 1,2",
     {"kind": K.PARTITION_TRANSITION, "from_state": "NonExistentPartition", "to_state": "NewPartition"}),
    ("1.1 online", "Changed partition my.topic_x-12 from OfflinePartition to OnlinePartition with state "
     "LeaderAndIsr(leader=2, leaderEpoch=5, isr=List(2, 3), zkVersion=9)",
     {"kind": K.PARTITION_TRANSITION, "topic": "my.topic_x", "partition": 12, "leader": 2, "leader_epoch": 5,
      "isr": [2, 3]}),
    ("1.1 offline", "Changed partition t-0 state from OnlinePartition to OfflinePartition",
     {"kind": K.PARTITION_TRANSITION, "to_state": "OfflinePartition", "leader": None}),
    ("3.2 lai", "Changed partition t-0 from NewPartition to OnlinePartition with state LeaderAndIsr(leader=1, "
     "leaderEpoch=0, isr=List(1, 2), leaderRecoveryState=RECOVERED, zkVersion=0)",
     {"kind": K.PARTITION_TRANSITION, "leader": 1, "leader_epoch": 0, "isr": [1, 2]}),
    ("3.3 lai", "Changed partition t-0 from OnlinePartition to OnlinePartition with state LeaderAndIsr(leader=3, "
     "leaderEpoch=7, isr=List(3), leaderRecoveryState=RECOVERED, partitionEpoch=11)",
     {"kind": K.PARTITION_TRANSITION, "leader": 3, "leader_epoch": 7, "isr": [3]}),
    ("3.5 lai", "Changed partition t-0 from OfflinePartition to OnlinePartition with state LeaderAndIsr(leader=2, "
     "leaderEpoch=6, isrWithBrokerEpoch=List(BrokerState(brokerId=2, brokerEpoch=-1), BrokerState(brokerId=4, "
     "brokerEpoch=-1)), leaderRecoveryState=RECOVERED, partitionEpoch=9)",
     {"kind": K.PARTITION_TRANSITION, "leader": 2, "leader_epoch": 6, "isr": [2, 4]}),
    ("replica", "Changed state of replica 2 for partition t-0 from OnlineReplica to OfflineReplica",
     {"kind": K.REPLICA_TRANSITION, "replica": 2, "from_state": "OnlineReplica", "to_state": "OfflineReplica"}),
    ("0.11 replica", "Controller 1 epoch 3 changed state of replica 2 for partition [t,0] from NewReplica to OnlineReplica",
     {"kind": K.REPLICA_TRANSITION, "replica": 2, "topic": "t"}),
    ("2.6 isr removal", "Partition t-0 state changed to (Leader:-1,ISR:2,LeaderEpoch:6,ControllerEpoch:4) after removing "
     "replica 2 from the ISR as part of transition to OfflineReplica",
     {"kind": K.ISR_REMOVAL, "leader": -1, "isr": [2], "leader_epoch": 6, "replica": 2, "to_state": "OfflineReplica"}),
    ("3.2 isr removal", "Partition t-0 state changed to (Leader:3,ISR:3,4,LeaderRecoveryState:RECOVERED,LeaderEpoch:8,"
     "ZkVersion:10,ControllerEpoch:4) after removing replica 2 from the ISR as part of transition to OfflineReplica",
     {"kind": K.ISR_REMOVAL, "leader": 3, "isr": [3, 4], "leader_epoch": 8}),
    ("1.1 failed", "Controller 1 epoch 4 failed to change state for partition t-0 from OfflinePartition to OnlinePartition",
     {"kind": K.PARTITION_TRANSITION_FAILED, "success": False}),
    ("1.0 failed", "Initiated state change for partition t-0 from OnlinePartition to OfflinePartition failed",
     {"kind": K.PARTITION_TRANSITION_FAILED, "success": False}),
    ("1.1 replica failed", "Controller 1 epoch 4 initiated state change of replica 2 for partition t-0 from "
     "ReplicaDeletionSuccessful to ReplicaDeletionIneligible failed",
     {"kind": K.REPLICA_TRANSITION_FAILED, "replica": 2, "to_state": "ReplicaDeletionIneligible"}),
    ("1.0 replica failed", "Initiated state change of replica 2 for partition t-0 from OnlineReplica to NewReplica failed",
     {"kind": K.REPLICA_TRANSITION_FAILED, "replica": 2}),
    ("invalid partition", "java.lang.IllegalStateException: Partition t-0 should be in one of NewPartition,"
     "OnlinePartition,OfflinePartition states before moving to OnlinePartition state. Instead it is in "
     "NonExistentPartition state",
     {"kind": K.INVALID_TRANSITION, "from_state": "NonExistentPartition", "to_state": "OnlinePartition"}),
    ("1.0 invalid", "Partition t-0 should be in the OfflinePartition states before moving to NonExistentPartition state. "
     "Instead it is in OnlinePartition state", {"kind": K.INVALID_TRANSITION, "from_state": "OnlinePartition"}),
    ("invalid replica", "Replica [Topic=t,Partition=0,Replica=2] should be in the OfflineReplica,ReplicaDeletionStarted "
     "states before moving to ReplicaDeletionIneligible state. Instead it is in ReplicaDeletionSuccessful state",
     {"kind": K.INVALID_TRANSITION, "replica": 2, "from_state": "ReplicaDeletionSuccessful"}),
    ("1.0 assert", "assertion failed: Replica [Topic=t,Partition=0,Replica=2] should be in the NonExistentReplica states "
     "before moving to NewReplica state. Instead it is in OnlineReplica state",
     {"kind": K.INVALID_TRANSITION, "replica": 2, "to_state": "NewReplica"}),
    ("zombie partition", "Aborted leader election for partition t-0 since the LeaderAndIsr path was already written by "
     "another controller. This probably means that the current controller 1 went through a soft failure and another "
     "controller was elected with epoch 5.", {"kind": K.ZOMBIE_ABORT, "topic": "t", "success": False}),
    ("zombie replica", "Leader and isr path written by another controller. This probably means the current controller "
     "with epoch 4 went through a soft failure and another controller was elected with epoch 5. Aborting state change "
     "by this controller", {"kind": K.ZOMBIE_ABORT, "controller_epoch": 4}),
    ("1.0-2.5 send", "Sending become-leader LeaderAndIsr request PartitionState(controllerEpoch=4, leader=2, "
     "leaderEpoch=5, isr=2,3, zkVersion=9, replicas=2,3, isNew=false) to broker 2 for partition t-0",
     {"kind": K.REQUEST_SENT, "leader": 2, "leader_epoch": 5, "isr": [2, 3], "partition": 0}),
    ("2.6 stop replica", "Sending StopReplica request for 4 replicas to broker 2", {"kind": K.REQUEST_SENT}),
]


@pytest.mark.parametrize(("name", "msg", "expected"), TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_state_change_templates(name: str, msg: str, expected: dict[str, Any]) -> None:
    r = one(state_line(msg))
    for key, value in expected.items():
        assert getattr(r, key) == value, (name, key, getattr(r, key))
    assert r.controller_id == 1 and r.broker_id == 1


CONTROLLER_TEMPLATES = [
    ("1 successfully elected as the controller", K.CONTROLLER_ELECTED, {"controller_id": 1}),
    ("Incremented epoch to 7", K.EPOCH_INCREMENTED, {"controller_epoch": 7}),
    ("Epoch incremented to 7", K.EPOCH_INCREMENTED, {"controller_epoch": 7}),
    ("Ready to serve as the new controller with epoch 7", K.CONTROLLER_READY, {"controller_epoch": 7}),
    ("Resigned", K.CONTROLLER_RESIGNED, {}),
    ("Forcing the controller to resign", K.CONTROLLER_RESIGNED, {}),
    ("Controller moved to another broker when processing BrokerChange.", K.CONTROLLER_MOVED, {}),
    ("Newly added brokers: 3, deleted brokers: 1, bounced brokers: 2, all live brokers: 2,3", K.BROKER_CHANGE, {}),
    ("Error while electing or becoming controller on broker 1. Trigger controller movement immediately",
     K.ELECTION_ERROR, {"success": False}),
    ("ZK expired; shut down all controller components and try to re-elect", K.ZK_SESSION_EXPIRED, {}),
]


@pytest.mark.parametrize(("msg", "kind", "fields"), CONTROLLER_TEMPLATES, ids=[c[0][:30] for c in CONTROLLER_TEMPLATES])
def test_controller_log_templates(msg: str, kind: K, fields: dict[str, Any]) -> None:
    r = one(f"[2021-05-05 10:00:00,001] INFO [Controller id=1] {msg} (kafka.controller.KafkaController)")
    assert r.kind == kind and r.controller_id == 1
    for key, value in fields.items():
        assert getattr(r, key) == value


def test_broker_change_bounced_field() -> None:
    r = one("[2021-05-05 10:00:00,001] INFO [Controller id=1] Newly added brokers: 3, deleted brokers: 1, "
            "bounced brokers: 2, all live brokers: 2,3 (kafka.controller.KafkaController)")
    assert r.extra == {"added": [3], "deleted": [1], "bounced": [2], "live": [2, 3]}


def test_registered_broker_epoch() -> None:
    r = one("[2021-05-05 10:00:00,001] INFO Registered broker 18 at path /brokers/ids/18 with addresses: "
            "PLAINTEXT://h:9092, czxid (broker epoch): 4294967300 (kafka.zk.KafkaZkClient)")
    assert (r.kind, r.broker_id, r.extra["broker_epoch"]) == (K.BROKER_REGISTERED, 18, 4294967300)


STALE = [
    ("LeaderAndIsr", "Ignoring LeaderAndIsr request from controller 1 with correlation id 7 since its controller epoch 4 "
     "is old. Latest known controller epoch is 5"),
    ("StopReplica", "Ignoring StopReplica request from controller 1 with correlation id 8 since its controller epoch 4 "
     "is old. Latest known controller epoch is 5"),
    ("StopReplica", "StopReplica request from an old controller 1 with epoch 4. Latest known controller epoch is 5"),
    ("UpdateMetadata", "Received UpdateMetadata request with correlation id 9 from an old controller 1 with epoch 4. "
     "Latest known controller epoch is 5"),
]


@pytest.mark.parametrize(("request_name", "msg"), STALE)
def test_stale_controller_warn(request_name: str, msg: str) -> None:
    r = one(state_line(msg, prefix="[Broker id=3] ", level="WARN"))
    assert r.kind == K.STALE_CONTROLLER_REQUEST and r.success is False
    assert (r.broker_id, r.controller_id, r.controller_epoch) == (3, 1, 4)
    assert r.extra["latest_controller_epoch"] == 5 and r.extra["request"] == request_name


def test_failure_cause_on_next_line_sharpens_kind() -> None:
    head = state_line("Controller 1 epoch 4 initiated state change of replica 2 for partition t-0 from "
                      "ReplicaDeletionSuccessful to ReplicaDeletionIneligible failed", level="ERROR")
    cause = ("java.lang.IllegalStateException: Replica [Topic=t,Partition=0,Replica=2] should be in the OfflineReplica,"
             "ReplicaDeletionStarted states before moving to ReplicaDeletionIneligible state. Instead it is in "
             "ReplicaDeletionSuccessful state")
    recs, _, _ = parse_lines([head, cause, "\tat kafka.controller.X(Y.scala:1)"])
    assert len(recs) == 1 and recs[0].kind == K.INVALID_TRANSITION and recs[0].replica == 2
    assert recs[0].message.count("\n") == 2


def test_layout_variants_and_timestamps() -> None:
    h = split_layout("2019-08-12T10:00:00.123+02:00 WARN  kafka.controller.KafkaController:12 - Resigned")
    assert h is not None and h.ts == datetime(2019, 8, 12, 8, 0, 0, 123000, tzinfo=UTC) and h.level == "WARN"
    assert split_layout("[2019-13-12 10:00:00,123] INFO x (a.b)").ts is None  # type: ignore[union-attr]
    assert split_layout("just text") is None


def test_unparseable_warn_error_are_quarantined_and_info_noise_skipped() -> None:
    recs, rejected, stats = parse_lines([
        "2019/08/12 10:00:00 ERROR controller exploded",
        "WARN something odd happened",
        "random info noise without layout",
    ])
    assert recs == []
    assert [r.line_no for r in rejected] == [1, 2]
    assert "ERROR" in rejected[0].reason and "WARN" in rejected[1].reason
    assert stats["noise"] == 1


def test_cut_transition_line_is_other_without_fields() -> None:
    r = one("[2020-01-01 00:00:00,000] TRACE [Controller id=1 epoch=4] Changed partition t-0 from OfflinePartition to "
            "OnlinePartition with state LeaderAndIsr(leader=2, leaderEpoch=5, isr=List(2, 3), zkVersion=9)")
    assert r.kind == K.OTHER and r.topic is None and r.leader is None and r.to_state is None


# ------------------------------------------------------------------ fuzzing

_TRANSITION_LINES = [state_line(msg) for _n, msg, exp in TEMPLATES if exp["kind"] in TRANSITION_KINDS] + [
    state_line("Controller 1 epoch 4 failed to change state for partition t-0 from OfflinePartition to OnlinePartition",
               level="ERROR")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_TRANSITION_LINES), st.data())
def test_truncated_real_lines_never_become_transitions(line: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(line) - 1))
    recs, _, _ = parse_lines([line[:cut]])
    assert all(r.kind not in TRANSITION_KINDS for r in recs)
    assert all(r.success is None for r in recs)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=8))
def test_random_text_never_crashes(lines: list[str]) -> None:
    recs, rejected, _ = parse_lines(lines)
    assert len(recs) + len(rejected) <= len(lines)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(["[2020-01-01 00:00:00,000] ERROR ", "2020-01-01 00:00:00 INFO x - ", ""]))
def test_random_bytes_never_crash(blob: bytes, head: str) -> None:
    text = head + blob.decode("utf-8", errors="replace")
    recs, _, _ = parse_lines(text.split("\n"))
    assert all(r.kind not in TRANSITION_KINDS for r in recs)


# ------------------------------------------------------------------ collector on real Delta tables


def _rows(lake: Any, table: str) -> list[dict[str, Any]]:
    return lake.read_arrow(table).to_pylist() if lake.exists(table) else []


def _write(path: Path, lines: list[str], mode: str = "w") -> None:
    with open(path, mode, encoding="utf-8") as fh:
        fh.writelines(line + "\n" for line in lines)


def test_collect_real_dir_idempotent(lake: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "broker-7"
    logs.mkdir(parents=True)
    real = sorted(REAL.glob("*.log"))
    for f in real:
        (logs / f.name).write_bytes(f.read_bytes())
    (logs / "junk.log").write_text("2019/08/12 ERROR no layout here\n", encoding="utf-8")
    parsed = sum(len(parse_lines(f.read_text(encoding="utf-8", errors="replace").splitlines())[0]) for f in real)
    first = collect_logs(lake, tmp_path / "logs")
    rows = _rows(lake, "controller_decisions")
    assert first["files"] == len(real) + 1 and first["records"] == len(rows) == parsed
    assert {r["broker_id"] for r in rows} == {7}  # the directory name wins
    assert len({r["event_id"] for r in rows}) == len(rows)
    quarantine = _rows(lake, "quarantine")
    assert len(quarantine) == 1 and quarantine[0]["ref"].endswith("junk.log:1") and quarantine[0]["source"] == "logs"
    second = collect_logs(lake, tmp_path / "logs")
    assert second["records"] == 0
    assert len(_rows(lake, "controller_decisions")) == parsed and len(_rows(lake, "quarantine")) == 1


def test_numbers_past_32_bits_are_quarantined_and_the_file_goes_on(lake: Any, tmp_path: Path) -> None:
    # such a line used to fail the commit (the int columns refuse it), and every restart on it after
    log = tmp_path / "state-change.log"
    _write(log, [state_line("Changed state of replica 1 for partition t-0 from NewReplica to OnlineReplica"),
                 state_line("Changed state of replica 99999999999 for partition t-0 from NewReplica to OnlineReplica"),
                 state_line("Changed partition t-99999999999 from NewPartition to OnlinePartition with state "
                            "LeaderAndIsr(leader=2, leaderEpoch=5, isr=List(2, 3), zkVersion=9)"),
                 state_line("Changed state of replica 2 for partition t-0 from NewReplica to OnlineReplica")])
    summary = collect_logs(lake, log)
    assert summary["records"] == 2
    assert sorted(r["replica"] for r in _rows(lake, "controller_decisions")) == [1, 2]
    quarantine = sorted(_rows(lake, "quarantine"), key=lambda r: r["ref"])
    assert [q["ref"].rsplit(":", 1)[1] for q in quarantine] == ["2", "3"]
    assert "replica 99999999999 is outside Kafka's 32-bit range" in quarantine[0]["reason"]
    assert "partition 99999999999" in quarantine[1]["reason"] and "t-99999999999" in quarantine[1]["raw"]


def test_collect_resumes_and_keeps_open_record(lake: Any, tmp_path: Path) -> None:
    log = tmp_path / "state-change.log"
    head = state_line("Controller 1 epoch 4 failed to change state for partition t-0 from OfflinePartition to "
                      "OnlinePartition", level="ERROR")
    _write(log, [state_line("Changed partition t-0 state from OnlinePartition to OfflinePartition"), head])
    collect_logs(lake, log)
    # an unterminated run: the failure was flushed at end of file; later lines continue the file
    _write(log, [state_line("Changed state of replica 2 for partition t-0 from OnlineReplica to OfflineReplica")], "a")
    summary = collect_logs(lake, log)
    rows = sorted(_rows(lake, "controller_decisions"), key=lambda r: r["line_no"])
    assert summary["records"] == 1
    assert [r["kind"] for r in rows] == ["PARTITION_TRANSITION", "PARTITION_TRANSITION_FAILED", "REPLICA_TRANSITION"]
    assert rows[0]["broker_id"] == 1 and rows[0]["ts"] == datetime(2020, 1, 1, tzinfo=UTC)


def test_follow_survives_rotation(lake: Any, tmp_path: Path) -> None:
    log = tmp_path / "controller.log"
    _write(log, [state_line(f"Changed state of replica {i} for partition t-0 from NewReplica to OnlineReplica")
                 for i in range(3)])
    stop = threading.Event()
    seen: list[int] = []

    def progress(lines: int) -> None:
        seen.append(lines)
        if len(seen) == 2:  # first pass read the file: rotate it (rename + new file), then add to the old one
            with open(log, "a", encoding="utf-8") as old:
                os.rename(log, tmp_path / "controller.log.1")
                old.write(state_line("Changed state of replica 9 for partition t-0 from NewReplica to OnlineReplica") + "\n")
            _write(log, [state_line("Changed partition t-0 state from OnlinePartition to OfflinePartition")])
        if len(seen) == 5:
            stop.set()

    summary = collect_logs(lake, tmp_path, follow=True, progress=progress, stop_event=stop, poll_interval=0.05)
    rows = _rows(lake, "controller_decisions")
    assert summary["rotations"] == 1
    assert sorted(r["replica"] for r in rows if r["kind"] == "REPLICA_TRANSITION") == [0, 1, 2, 9]
    assert [r["kind"] for r in rows].count("PARTITION_TRANSITION") == 1
    assert len({r["event_id"] for r in rows}) == len(rows) == 5
    # a later plain run over the directory adds nothing for the new file
    again = collect_logs(lake, log)
    assert again["records"] == 0


def test_zombie_fixture_signals(lake: Any, tmp_path: Path) -> None:
    """Synthetic ≤2.0 zombie story (no public excerpt exists): soft-failure abort, stale WARNs, a cut line."""
    summary = collect_logs(lake, FIXTURES / "zombie")
    rows = sorted(_rows(lake, "controller_decisions"), key=lambda r: r["line_no"])
    assert [r["kind"] for r in rows] == ["PARTITION_TRANSITION", "ZOMBIE_ABORT", "STALE_CONTROLLER_REQUEST",
                                         "STALE_CONTROLLER_REQUEST", "OTHER"]
    assert rows[0]["isr"] == [2, 3] and rows[0]["leader_epoch"] == 5 and rows[0]["controller_epoch"] == 4
    assert rows[1]["from_state"] == "OfflinePartition" and rows[1]["success"] is False
    assert [(r["controller_id"], r["controller_epoch"]) for r in rows[2:4]] == [(1, 4), (1, 4)]
    assert all(r["broker_id"] == 2 for r in rows)  # from the broker-2/ directory
    assert rows[4]["topic"] is None and rows[4]["leader"] is None  # the cut line invents nothing
    (q,) = _rows(lake, "quarantine")
    assert q["ref"].endswith("state-change.log:7") and summary["quarantined"] == 1


_CRASHING_RUN = """
import sys
import collectors.kafka_logs as k
from lakehouse import Lake
k.BATCH_LINES = 5
k.collect_logs(Lake(sys.argv[1], cluster="test"), sys.argv[2])
"""


def test_real_crash_between_quarantine_and_decisions_commit(lake: Any, tmp_path: Path) -> None:
    import subprocess
    import sys

    log = tmp_path / "state-change.log"
    lines = [state_line(f"Changed state of replica {i} for partition t-0 from NewReplica to OnlineReplica")
             for i in range(20)]
    lines[1] = "WARN lost its layout"  # quarantined in the first batch (lines 1..4)
    _write(log, lines)
    env = {**os.environ, "ZKLEDGER_LAKE_CRASH": "after_commit:4"}  # SIGKILL right after the quarantine commit
    crashed = subprocess.run([sys.executable, "-c", _CRASHING_RUN, str(tmp_path / "lake"), str(log)], env=env,
                             cwd=Path(__file__).resolve().parents[2], capture_output=True, check=False)
    assert crashed.returncode != 0
    assert len(_rows(lake, "quarantine")) == 1 and _rows(lake, "controller_decisions") == []
    summary = collect_logs(lake, log)
    rows = _rows(lake, "controller_decisions")
    assert summary["records"] == len(rows) == 19 and summary["quarantined"] == 0
    assert sorted(r["replica"] for r in rows) == [i for i in range(20) if i != 1]
    assert len(_rows(lake, "quarantine")) == 1


def test_a_log_truncated_in_place_is_refused_not_misread(lake: Any, tmp_path: Path) -> None:
    from collectors.kafka_logs import TruncatedLogError

    log = tmp_path / "state-change.log"
    _write(log, [state_line(f"Changed state of replica {i} for partition t-0 from NewReplica to OnlineReplica")
                 for i in range(5)])
    collect_logs(lake, log)
    _write(log, [state_line("Changed state of replica 9 for partition t-0 from NewReplica to OnlineReplica")])
    with pytest.raises(TruncatedLogError, match="copytruncate"):  # same inode, fewer lines than collected
        collect_logs(lake, log)
    assert sorted(r["replica"] for r in _rows(lake, "controller_decisions")) == [0, 1, 2, 3, 4]


def test_a_log_truncated_while_followed_is_refused(lake: Any, tmp_path: Path) -> None:
    from collectors.kafka_logs import TruncatedLogError

    log = tmp_path / "state-change.log"
    _write(log, [state_line(f"Changed state of replica {i} for partition t-0 from NewReplica to OnlineReplica")
                 for i in range(5)])
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            collect_logs(lake, log, follow=True, poll_interval=0.05, stop_event=threading.Event())
        except TruncatedLogError as exc:
            errors.append(exc)

    worker = threading.Thread(target=follow, daemon=True)
    worker.start()
    deadline = time.monotonic() + 30
    while len(_rows(lake, "controller_decisions")) < 4 and time.monotonic() < deadline:  # the 5th may stay open
        time.sleep(0.05)
    with open(log, "r+b") as fh:  # what logrotate's copytruncate does after copying
        fh.truncate(0)
    worker.join(timeout=30)
    assert not worker.is_alive() and len(errors) == 1 and "shrank" in str(errors[0])
