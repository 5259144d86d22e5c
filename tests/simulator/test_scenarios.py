"""The simulator against a real ZooKeeper: end states, payload formats, fencing per version, reproducibility."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from simulator.scenarios import list_scenarios, run_scenario

pytestmark = pytest.mark.integration


def _client(hosts: str) -> KazooClient:
    c = KazooClient(hosts=hosts, timeout=15)
    c.start(timeout=15)
    return c


def _state(c: KazooClient, topic: str, p: int) -> dict[str, object]:
    return json.loads(c.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])


@pytest.mark.parametrize("name", [n for n in list_scenarios() if n != "failover-storm"])
@pytest.mark.parametrize("version", ["2.0", "3.8"])
def test_every_scenario_leaves_declared_end_state(zk_hosts: str, tmp_path: Path, name: str, version: str) -> None:
    result = run_scenario(name, zk_hosts, version, tmp_path / "logs", seed=7)
    last = list(result.state_at.values())[-1]
    c = _client(zk_hosts)
    try:
        # run_scenario closes every broker session at the end, so ephemerals are gone by now.
        assert c.get_children("/brokers/ids") == []
        assert int(c.get("/controller_epoch")[0]) == last.controller_epoch
        for key, want in last.partitions.items():
            topic, part = key.rsplit("-", 1)
            got = _state(c, topic, int(part))
            assert (got["leader"], got["leader_epoch"], got["isr"]) == (want["leader"], want["leader_epoch"], want["isr"])
            if got["leader"] >= 0:
                assert got["leader"] in got["isr"]
        assert result.log_files, "controller/state-change logs were written"
    finally:
        c.stop()
        c.close()


@pytest.mark.parametrize("version", ["1.1", "2.0", "2.4", "2.8", "3.8"])
def test_startup_payload_formats(zk_hosts: str, version: str) -> None:
    result = run_scenario("startup", zk_hosts, version, None, seed=1)
    by_path = {w.path: w.data for w in result.znode_writes if w.op in ("CREATE", "SET")}
    ctl = json.loads(by_path["/controller"])
    assert ctl["version"] == (2 if version == "3.8" else 1) and isinstance(ctl["timestamp"], str)
    topic = json.loads(by_path["/brokers/topics/orders"])
    assert topic["version"] == {"1.1": 1, "2.0": 1, "2.4": 2, "2.8": 3, "3.8": 3}[version]
    broker = json.loads(by_path["/brokers/ids/1"])
    assert broker["version"] == (5 if version in ("2.8", "3.8") else 4)
    state = json.loads(by_path["/brokers/topics/orders/partitions/0/state"])
    assert set(state) == {"controller_epoch", "leader", "version", "leader_epoch", "isr"}
    epoch = int(by_path["/controller_epoch"])
    assert epoch == 1
    # 2.1+: one multi, epoch znode created with 0 then set (version 1); <=2.0 created with 1 (version 0).
    ops = [w.op for w in result.znode_writes if w.path == "/controller_epoch"]
    assert ops == (["CREATE", "SET"] if version >= "2.1" else ["CREATE"])


def test_zombie_write_lands_before_2_1(zk_hosts: str, tmp_path: Path) -> None:
    result = run_scenario("zombie-controller", zk_hosts, "2.0", tmp_path, seed=3)
    c = _client(zk_hosts)
    try:
        part = next(e["partition"] for e in result.expected_anomalies if e["kind"] == "ZOMBIE_CONTROLLER_WRITE")
        state = _state(c, "orders", part)
        epoch = int(c.get("/controller_epoch")[0])
    finally:
        c.stop()
        c.close()
    assert state["controller_epoch"] < epoch  # the stale epoch landed with a leader change
    assert state == json.loads([w.data for w in result.znode_writes if w.path.endswith(f"orders/partitions/{part}/state")][-1])
    assert not any(w.op == "MULTI_FAILED" for w in result.znode_writes)
    kinds = {e["kind"] for e in result.expected_anomalies}
    assert kinds == {"ZOMBIE_CONTROLLER_WRITE", "SPLIT_BRAIN", "STALE_CONTROLLER_REQUEST"}
    assert _stale_warning(result.log_files)


@pytest.mark.parametrize("version", ["2.4", "3.8"])
def test_zombie_write_is_fenced_from_2_1(zk_hosts: str, tmp_path: Path, version: str) -> None:
    result = run_scenario("zombie-controller", zk_hosts, version, tmp_path, seed=3)
    c = _client(zk_hosts)
    try:
        states = [_state(c, "orders", p) for p in range(3)]
        epoch = int(c.get("/controller_epoch")[0])
    finally:
        c.stop()
        c.close()
    # Every state znode keeps the successor's (or the original) data: no write at the zombie's epoch 1 moved a leader.
    after = result.state_at["after-zombie"].partitions
    assert all(s["controller_epoch"] in (1, epoch) for s in states)
    assert [(s["leader"], s["leader_epoch"]) for s in states] == [(after[f"orders-{p}"]["leader"], after[f"orders-{p}"]["leader_epoch"]) for p in range(3)]
    assert any(w.op == "MULTI_FAILED" and w.path == "/controller_epoch" for w in result.znode_writes)
    assert {e["kind"] for e in result.expected_anomalies} == {"FENCED_CONTROLLER_WRITE", "STALE_CONTROLLER_REQUEST", "SPLIT_BRAIN"}
    assert _stale_warning(result.log_files)
    controller_logs = "".join(f.read_text() for f in result.log_files if f.name == "controller.log")
    assert "Controller moved to another broker when processing ReplicaLeaderElection." in controller_logs


def _stale_warning(files: list[Path]) -> bool:
    text = "".join(f.read_text() for f in files if f.name == "state-change.log")
    return "WARN [Broker id=" in text and "since its controller epoch 1 is old. Latest known controller epoch is 2" in text


def test_seeded_runs_are_reproducible(zk_hosts: str, tmp_path: Path) -> None:
    a = run_scenario("broker-crash", zk_hosts + "/a", "2.8", tmp_path / "a", seed=11) if _mk(zk_hosts, "/a") else None
    b = run_scenario("broker-crash", zk_hosts + "/b", "2.8", tmp_path / "b", seed=11) if _mk(zk_hosts, "/b") else None
    assert a is not None and b is not None
    assert a.znode_writes == b.znode_writes
    assert [f.read_text() for f in a.log_files] == [f.read_text() for f in b.log_files]


def _mk(hosts: str, path: str) -> bool:
    c = _client(hosts)
    try:
        c.create(path)
    finally:
        c.stop()
        c.close()
    return True


def test_log_lines_follow_version_templates(zk_hosts: str, tmp_path: Path) -> None:
    result = run_scenario("broker-crash", zk_hosts, "2.0", tmp_path, seed=5)
    text = "".join(f.read_text() for f in result.log_files)
    assert " INFO [Controller id=" in text and "successfully elected as the controller (kafka.controller.KafkaController)" in text
    assert "Epoch incremented to 1 (kafka.controller.KafkaController)" in text
    assert "Changed partition orders-0 state from NonExistentPartition to NewPartition with assigned replicas" in text
    assert "Sending become-leader LeaderAndIsr request" in text  # per-partition TRACE before 2.6


def test_illegal_transition_is_logged_and_skipped(zk_hosts: str, tmp_path: Path) -> None:
    result = run_scenario("illegal-transition", zk_hosts, "3.8", tmp_path, seed=2)
    text = "".join(f.read_text() for f in result.log_files if f.name == "state-change.log")
    assert "failed to change state for partition orders-1 from OnlinePartition to NonExistentPartition" in text
    assert "Partition orders-1 should be in one of OfflinePartition states before moving to NonExistentPartition state" in text


def test_unclean_election_marks_recovering_on_3_2(zk_hosts: str) -> None:
    result = run_scenario("unclean-election", zk_hosts, "3.8", None, seed=4)
    offline = result.state_at["offline"].partitions["logs-0"]
    assert offline["leader"] == -1 and len(offline["isr"]) == 1
    final = json.loads([w.data for w in result.znode_writes if w.path.endswith("logs/partitions/0/state")][-1])
    assert final["leader"] not in offline["isr"] and final.get("leader_recovery_state") == 1


def test_isr_writes_by_leader_before_2_7_and_by_controller_after(zk_hosts: str) -> None:
    for version, sub in (("2.4", "/v24"), ("2.8", "/v28")):
        _mk(zk_hosts, sub)
        result = run_scenario("isr-shrink-expand", zk_hosts + sub, version, None, seed=9)
        shrunk = result.state_at["shrunk"].partitions["orders-0"]
        started = result.state_at["started"].partitions["orders-0"]
        assert shrunk["leader_epoch"] == started["leader_epoch"] and len(shrunk["isr"]) == len(started["isr"]) - 1
        notes = [w for w in result.znode_writes if w.path.startswith("/isr_change_notification/isr_change_")]
        assert bool(notes) == (version == "2.4")


def test_topic_deletion_removes_znodes(zk_hosts: str) -> None:
    run_scenario("topic-deletion", zk_hosts, "3.8", None, seed=1)
    c = _client(zk_hosts)
    try:
        assert sorted(c.get_children("/brokers/topics")) == ["orders"]
        assert c.get_children("/admin/delete_topics") == []
    finally:
        c.stop()
        c.close()


def test_small_failover_storm(zk_hosts: str) -> None:
    result = run_scenario("failover-storm", zk_hosts, "3.8", None, seed=1, brokers=3, partitions=200)
    final = result.state_at["after-storm"]
    assert final.controller_epoch == 4 and len(final.partitions) == 200
    assert all(p["leader"] in p["isr"] for p in final.partitions.values())


@pytest.mark.parametrize("version", ["1.0", "4.0", "4.1"])
def test_versions_without_a_zookeeper_mode_cluster_to_imitate_are_refused(zk_hosts: str, version: str) -> None:
    with pytest.raises(ValueError, match=r"1\.1 \.\. 3\.9"):
        run_scenario("startup", zk_hosts, version, None, 1)
