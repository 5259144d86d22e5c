"""zkledger against real ZooKeeper-mode Kafka brokers (kafkalab): one cluster per Kafka line plays every
scenario in sequence with the three collectors running and an Admin client recording Kafka's own view; one
rebuild (the pipeline's steps in the test's process, tests/kafkalab/driver.py) then serves every check below,
and the Spark monitor's run over the same history is held to it.

CI plays every scenario on the 3.9 line (the last with ZooKeeper, the one users migrate from); `KAFKA_MATRIX=1
pytest tests/kafkalab` adds 2.8 and 2.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.log_parser import TemplateCensus, census
from engine.monitor import drain_monitor
from kafkalab import verify
from kafkalab.cluster import kafka_line
from kafkalab.runner import LabResult, LabRun
from kafkalab.scenarios import FAULT, ROUTINE, SCENARIOS
from lakehouse import Lake
from models.anomalies import BLIP_SEVERITY, DEFAULT_OFFLINE_BLIP_MS
from models.anomalies import AnomalyKind as K
from models.decisions import LogTemplate
from models.events import Source, ZnodeOp
from models.tables import CONTROLLER_DECISIONS, ZNODE_EVENTS
from simulator.scenarios import run_scenario
from tests.conftest import assert_same_tables
from tests.e2e.conftest import decisions_ahead, early_decisions, feed, time_chunks
from tests.kafkalab.driver import rebuild_in_driver
from tests.znode_facts import check_payload, spec_of

pytestmark = pytest.mark.integration

ALL = list(SCENARIOS)
PLAN = {"3.9": ALL}
if os.environ.get("KAFKA_MATRIX") == "1":  # the older lines (2.1 needs a swapped ZooKeeper client)
    PLAN["2.8"] = ALL
    PLAN["2.1"] = ALL


@pytest.fixture(scope="module", params=list(PLAN))
def lab(request: pytest.FixtureRequest, zk_server: object, tmp_path_factory: pytest.TempPathFactory,
        starts_kafka: None, starts_spark: None, takes_minutes: None) -> Iterator[LabResult]:
    """Every scenario played on real brokers, then rebuilt (tests/kafkalab/driver.py): minutes per line."""
    line = request.param
    run = LabRun(line, tmp_path_factory.mktemp(f"kafka-{line}"), zk_server)  # type: ignore[arg-type]
    with run:
        run.play(PLAN[line])
    yield run.finish(rebuild=rebuild_in_driver)


def phase(res: LabResult, name: str) -> verify.Phase:
    found = [p for p in res.phases if p.name == name]
    assert found, f"scenario {name} was not played on Kafka {res.line}"
    return found[0]


def kinds(res: LabResult, name: str) -> dict[str, str]:
    """Anomaly kind -> severity of what zkledger found during one scenario."""
    return {str(r["kind"]): str(r["severity"]) for r in verify.anomalies_by_phase(res.anomalies, res.phases)[name]}


def test_the_collectors_ran_cleanly_and_the_logs_exist(lab: LabResult) -> None:
    assert lab.collector_codes == {"watch": 0, "txnlog": 0, "logs": 0}
    for broker in sorted(lab.logs_root.glob("broker-*")):
        for name in ("server.log", "controller.log", "state-change.log"):
            assert (broker / name).stat().st_size > 0, f"{broker.name}/{name} is empty"
    sources = {r["source"] for r in lab.tables["znode_events"]}
    assert {"watch", "txnlog"} <= sources
    assert lab.tables["controller_decisions"], "no controller/state-change log line was parsed"


def test_every_controller_and_state_change_line_has_a_template(lab: LabResult) -> None:
    """Issue 18 (4): every record the brokers wrote to controller.log and state-change.log during the scenarios
    (and the shutdown after them) parses into a known template; none that speaks of a partition, a leader, an ISR
    or an epoch is unknown. The count per template is printed (`-s`)."""
    total = TemplateCensus()
    for broker in sorted(lab.logs_root.glob("broker-*")):
        for name in ("controller.log", "state-change.log"):
            total.update(census((broker / name).read_text(encoding="utf-8", errors="replace").splitlines()))
    print(f"\nKafka {lab.line}: {total.records} records, {len(total.unknown)} unknown "
          f"({len(total.unknown_metadata)} naming partition/leader/ISR/epoch)")
    for template, n in sorted(total.counts.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        print(f"  {template!s:<26} {n:6d}")
    assert total.unknown_metadata == [], total.unknown_metadata[:20]
    for seen in (LogTemplate.PARTITION_STATE_CHANGE, LogTemplate.CONTROLLER_ELECTED, LogTemplate.REQUEST_SENT_SUMMARY):
        assert total.counts[seen] > 0, seen


def test_state_at_every_recorded_point_equals_what_kafka_reported(lab: LabResult) -> None:
    check = verify.compare_state(lab.tables["metadata_events"], lab.tables["partition_transitions"], lab.samples,
                                 kafka_line(lab.line))
    assert check.points > 200, "too few settled ground-truth points to mean anything"
    assert check.mismatches == []
    assert check.lagged <= check.points // 20, "Kafka's answers trailed ZooKeeper too often to call them settled"


def test_controller_tenures_match_the_brokers_own_logs(lab: LabResult) -> None:
    logged = verify.logged_elections(lab.logs_root)
    assert logged, "no election in any controller.log"
    assert verify.tenures(lab.tables["controller_tenure"], "zk") == logged


@pytest.mark.parametrize("name", [n for n in ALL if n in ("create", "rolling-restart", "preferred-election",
                                                          "reassignment")])
def test_routine_operations_raise_nothing_serious(lab: LabResult, name: str) -> None:
    ph = phase(lab, name)
    assert ph.kind == ROUTINE
    serious = verify.serious(verify.anomalies_by_phase(lab.anomalies, lab.phases)[name])
    assert serious == [], [(r["kind"], r["topic"], r["partition"], r["details"]) for r in serious]


def test_topic_deletion_with_a_broker_down_raises_nothing_serious(lab: LabResult) -> None:
    """The controller takes each replica offline before deleting it (leader -1 writes): no outage, no illegal step."""
    ph = phase(lab, "deletion")
    assert ph.notes["pending_while_down"], "the deletion did not wait for the stopped broker"
    serious = verify.serious(verify.anomalies_by_phase(lab.anomalies, lab.phases)["deletion"])
    if lab.line == "2.1":
        # Kafka 2.1's own controller logs these as failed (IllegalStateException): its deletion asks the replica
        # state machine for OfflineReplica -> ReplicaDeletionIneligible, which that machine's table forbids (2.8
        # allows it). zkledger reports what the controller logged; the deletion still finishes.
        assert serious and {(r["kind"], r["replica"]) for r in serious} == {(K.ILLEGAL_REPLICA_TRANSITION, ph.notes["down"])}
        assert all(json.loads(r["details"])["from_state"] == "OfflineReplica" for r in serious)
        return
    assert serious == []


def test_topic_deletion_finishes_after_the_broker_returns(lab: LabResult) -> None:
    ph = phase(lab, "deletion")
    assert ph.notes["pending_while_down"]
    deleted = {m["topic"] for m in lab.tables["metadata_events"] if m["type"] == "TOPIC_DELETED"}
    assert {"doomed", "rf1", "unclean"} <= deleted


def test_an_offline_partition_is_found(lab: LabResult) -> None:
    ph = phase(lab, "offline-partition")
    topic, part = ph.notes["partition"].rsplit("-", 1)
    rows = verify.anomalies_by_phase(lab.anomalies, lab.phases)["offline-partition"]
    assert any(r["kind"] == K.OFFLINE_PARTITION and r["topic"] == topic and r["partition"] == int(part)
               for r in rows)


def test_an_offline_partition_ends_as_an_outage_not_a_blip(lab: LabResult) -> None:
    """The only replica down past a second and a broker start: its episode's end is no blip."""
    ph = phase(lab, "offline-partition")
    topic, part = ph.notes["partition"].rsplit("-", 1)
    ends = [r for r in verify.anomalies_by_phase(lab.anomalies, lab.phases)["offline-partition"]
            if r["kind"] == K.OFFLINE_PARTITION and r["ended_zxid"] is not None
            and (r["topic"], r["partition"]) == (topic, int(part))]
    assert len(ends) == 1 and json.loads(ends[0]["details"])["blip"] is False
    assert ends[0]["duration_ms"] > DEFAULT_OFFLINE_BLIP_MS and ends[0]["severity"] == "error"


def test_a_killed_controllers_partitions_go_leaderless_for_a_blip(lab: LabResult) -> None:
    """kill -9 of the controller: its successor writes leader -1 for the partitions the dead broker led and
    elects new leaders from their ISRs a few zxids later: blips. A partition whose only replica was on the dead
    broker (rf1) waits for it to come back: an outage."""
    ph = phase(lab, "controller-failover")
    rows = verify.anomalies_by_phase(lab.anomalies, lab.phases)["controller-failover"]
    ends = [r for r in rows if r["kind"] == K.OFFLINE_PARTITION and r["ended_zxid"] is not None]
    moved = [r for r in ends if json.loads(r["details"]).get("leader") != ph.notes["old"]]
    assert moved, "the killed controller led no partition that another replica could take over"
    for end in moved:
        assert json.loads(end["details"])["blip"] is True, (end["topic"], end["partition"], end["duration_ms"])
        assert end["severity"] == BLIP_SEVERITY and end["duration_ms"] <= DEFAULT_OFFLINE_BLIP_MS
    for end in ends:
        if end not in moved:  # led again by the returning broker: it was down for seconds
            assert json.loads(end["details"])["blip"] is False, (end["topic"], end["partition"], end["duration_ms"])


def test_a_controller_failover_is_a_new_tenure_with_the_new_controller(lab: LabResult) -> None:
    ph = phase(lab, "controller-failover")
    tenure = sorted((r for r in lab.tables["controller_tenure"] if r["source"] == "zk"),
                    key=lambda r: r["controller_epoch"])
    started = [r for r in tenure if r["start_time"] is not None and ph.start <= r["start_time"] <= ph.end]
    assert [r["controller_id"] for r in started] == [ph.notes["new"]]
    before = [r for r in tenure if r["controller_epoch"] == started[0]["controller_epoch"] - 1]
    assert before and before[0]["controller_id"] == ph.notes["old"]
    assert K.SPLIT_BRAIN not in kinds(lab, "controller-failover")


def test_the_zombie_attempt_leaves_what_really_happened(lab: LabResult) -> None:
    """SIGSTOP past the session timeout: another broker takes over; on SIGCONT the old controller learns its
    session expired and resigns. A write fenced by the controller-epoch check fails its first op (the check) with
    BADVERSION; real brokers also fail multis routinely (NONODE while creating parents, NODEEXISTS for the loser
    of an election race), and those are no fencing."""
    ph = phase(lab, "zombie-controller")
    found = kinds(lab, "zombie-controller")
    tenure = [r for r in lab.tables["controller_tenure"] if r["source"] == "zk" and r["start_time"] is not None
              and ph.start <= r["start_time"] <= ph.end]
    assert [r["controller_id"] for r in tenure] == [ph.notes["new"]]
    fenced = [z for z in lab.tables["znode_events"] if z["op"] == "MULTI_FAILED" and z["source"] == "txnlog"
              and ph.start <= z["txn_time"] <= ph.end and "BADVERSION" in (z["detail"] or "")
              and "failed_op=0 " in (z["detail"] or "")]
    assert (K.FENCED_CONTROLLER_WRITE in found) == bool(fenced)
    assert K.CONTROLLER_EPOCH_REGRESSION not in found
    # whether the old controller still acts after SIGCONT depends on timing: a request it had queued reaches a
    # broker that knows the new epoch and is refused (seen on 2.8). Then, and only then, two controllers acted
    # at once.
    acted = {K.STALE_CONTROLLER_REQUEST, K.ZOMBIE_CONTROLLER_WRITE, K.FENCED_CONTROLLER_WRITE} & found.keys()
    assert (K.SPLIT_BRAIN in found) == bool(acted)
    for row in verify.anomalies_by_phase(lab.anomalies, lab.phases)["zombie-controller"]:
        if row["kind"] == K.SPLIT_BRAIN:
            details = json.loads(row["details"])
            assert (details["controller_id"], details["other_id"]) == (ph.notes["old"], ph.notes["new"])


def test_an_unclean_election_is_found(lab: LabResult) -> None:
    ph = phase(lab, "unclean-election")
    assert ph.kind == FAULT
    rows = verify.anomalies_by_phase(lab.anomalies, lab.phases)["unclean-election"]
    unclean = [r for r in rows if r["kind"] == K.UNCLEAN_LEADER_ELECTION and r["topic"] == "unclean"]
    assert unclean, [(r["kind"], r["topic"]) for r in rows]
    assert json.loads(unclean[0]["details"])["leader"] == ph.notes["follower"]
    assert any(r["kind"] == K.OFFLINE_PARTITION and r["topic"] == "unclean" for r in rows)


def test_state_at_cli_answers_for_a_recorded_point(lab: LabResult) -> None:
    """`zkledger state --at T` (the user's command) against Kafka's answer at one settled point."""
    points, _ = verify.settled_points(lab.samples)
    pt = next(p for p in points if p.key is not None and p.key[0] == "rf3")
    out = subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", str(lab.lake_root), "--cluster",
                          lab.cluster_name, "state", "--at", pt.at.isoformat(), "--topic", "rf3", "--format", "json"],
                         capture_output=True, text=True, timeout=300, check=True)
    st = json.loads(out.stdout.splitlines()[0])
    mine = next(p for p in st["partitions"] if p["partition"] == pt.key[1])
    assert verify._as_view(mine) == pt.view


def test_the_older_jar_sets_are_pinned() -> None:
    root = Path(__file__).resolve().parents[2] / "jvm"
    for line in ("kafka-3.9", "kafka-2.8", "kafka-2.1"):
        sums = (root / line / "sha256sums").read_text().split()
        assert any(name.startswith(("kafka_2.13-", "kafka_2.12-")) for name in sums[1::2]), line


LAB_CHROOT = "/"  # the lab's chroot itself, created by the harness, not by a broker
WRITES = (ZnodeOp.CREATE, ZnodeOp.SET)


def test_the_brokers_write_what_the_znode_facts_say(lab: LabResult) -> None:
    """Issue 18 (5): the facts the simulator is held to (tests/data/kafka/<line>/znodes.json: paths, JSON keys,
    payload versions) are what these real brokers wrote, every create and set of the whole run."""
    writes = [r for r in lab.tables["znode_events"] if r["op"] in WRITES and r["path"] != LAB_CHROOT]
    assert len(writes) > 50
    problems = sorted({p for r in writes for p in check_payload(lab.line, r["path"], r["data"], r["op"])})
    assert problems == []


def _cluster_level(line: str, path: str) -> str | None:
    """The facts' pattern of a cluster-wide znode (None for a topic's or a sequential notification's)."""
    spec = spec_of(line, path)
    pattern = spec["path"] if spec else path
    return None if "{topic}" in pattern or "{seq}" in pattern else pattern


def test_the_simulator_starts_a_cluster_as_the_real_brokers_did(lab: LabResult, zk_hosts: str, tmp_path: Path) -> None:
    """Issue 18 (5): a new cluster's first writes, before any topic, are the same znodes with the same ops in the
    simulator as on the real brokers of the line (the transaction log's record of the lab's start-up)."""
    first = lab.phases[0].start
    real = {(_cluster_level(lab.line, r["path"]), str(r["op"])) for r in lab.tables["znode_events"]
            if r["op"] in WRITES and r["path"] != LAB_CHROOT and r["source"] == Source.TXNLOG and r["txn_time"] < first}
    simulated: set[tuple[str | None, str]] = set()
    for w in run_scenario("startup", zk_hosts, lab.line, tmp_path / "logs", seed=1).znode_writes:
        pattern = _cluster_level(lab.line, w.path)
        if pattern is None:
            break  # the scenario's first topic: start-up is over
        if w.op in WRITES:
            simulated.add((pattern, w.op))
    assert ("/controller", "CREATE") in real and ("/brokers/ids/{id}", "CREATE") in real
    assert real == simulated


@pytest.mark.spark
def test_the_monitor_with_the_logs_ahead_of_zookeeper_ends_with_the_rebuilds_tables(
        lab: LabResult, spark: Any, tmp_path: Path) -> None:
    """The real brokers' history in 3 time chunks, each chunk's log decisions a chunk before its znode rows
    (the log collector ahead of ZooKeeper's), a bronze commit per table and chunk; `monitor --available-now`
    taking one commit per table and micro-batch (4 buckets; the lab's rebuild used 32): every derived table
    ends as the lab's rebuild wrote it."""
    rebuilt = Lake(lab.lake_root, cluster=lab.cluster_name)
    history = {t: rebuilt.read_arrow(t) for t in (ZNODE_EVENTS.name, CONTROLLER_DECISIONS.name)}
    lake = Lake(tmp_path / "lake", cluster=lab.cluster_name)
    steps = decisions_ahead(time_chunks(history, 3))
    assert early_decisions(steps)  # some decisions really arrive before their writes
    for seq, chunk in enumerate(steps, start=1):
        feed(lake, chunk, seq)
    batches = drain_monitor(spark, lake, str(tmp_path / "checkpoint"), buckets=4, max_files_per_trigger=1)
    assert batches >= len(steps)  # the chunks in micro-batches of their own, in order
    assert_same_tables(lake, rebuilt)
