"""zkledger against a real Kafka 4.1 KRaft cluster (kafkalab, issue 29 item 5): three combined nodes play every
KRaft scenario once in sequence, with `zkledger collect kraft --follow` on one node's metadata log and an Admin
client recording Kafka's own view (every broker's Metadata, the quorum's leader from DescribeQuorum); one
rebuild (the pipeline's steps in this process, `engine.local_run`) then serves every check below; `zkledger
kafka-lab kraft` runs the same story with `zkledger rebuild`. A few minutes on two cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from kafkalab import verify
from kafkalab.kraft_runner import KRaftLabResult, KRaftLabRun
from kafkalab.kraft_scenarios import EXPECTED, SCENARIOS
from kafkalab.scenarios import FAULT, ROUTINE, Phase
from kafkalab.truth import settled_points
from models.anomalies import DEFAULT_OFFLINE_BLIP_MS
from models.anomalies import AnomalyKind as K
from models.kraft_image import NO_LEADER_CHANGE, RECOVERING
from models.kraft_records import MetadataRecordType, decode_metadata_record
from pipelines.kraft_stage import current_records
from tests.kafkalab.driver import rebuild_in_driver

ALL = list(SCENARIOS)
ROUTINES = ("create", "deletion", "rolling-restart", "preferred-election", "reassignment")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, starts_kraft: None,
        takes_minutes: None) -> Iterator[KRaftLabResult]:
    """Every KRaft scenario played on real nodes, then rebuilt in this process."""
    run = KRaftLabRun(tmp_path_factory.mktemp("kraft-lab"), out=sys.stderr)
    with run:
        run.play(ALL)
    yield run.finish(rebuild=rebuild_in_driver)


def phase(res: KRaftLabResult, name: str) -> Phase:
    found = [p for p in res.phases if p.name == name]
    assert found, f"scenario {name} was not played"
    return found[0]


def rows_of(res: KRaftLabResult, name: str) -> list[dict[str, Any]]:
    return res.by_phase()[name]


def test_the_collector_read_the_whole_log_cleanly(lab: KRaftLabResult) -> None:
    assert lab.collector_code == 0
    records = lab.tables["kraft_records"]
    assert records and not [r for r in records if r["source"] == "gap"]
    assert lab.tables["quarantine"] == []
    offsets = sorted({r["offset"] for r in records if r["source"] == "segment"})  # a rewritten tail: twice
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "a hole in the collected offsets"


def test_state_at_every_settled_sample_equals_what_kafka_reported(lab: KRaftLabResult) -> None:
    check = lab.compare()
    assert check.points > 200, "too few settled ground-truth points to mean anything"
    assert check.mismatches == []
    assert check.lagged <= check.points // 20, "Kafka's answers trailed the metadata log too often to call them settled"
    controller_points = [p for p in settled_points(lab.samples)[0] if p.key is None]
    assert len({p.view for p in controller_points}) >= 2, "the quorum leader was compared before and after a failover"


def test_controller_tenures_are_the_quorum_leaders_the_nodes_logged(lab: KRaftLabResult) -> None:
    logged = lab.logged_elections()
    assert len(logged) >= 2, "no failover in the nodes' controller.log"
    tenures = lab.tenures()
    assert logged <= tenures
    # a node can win a quorum election and lose the next before its controller logs that it became active (seen
    # on a loaded machine, at start-up): a tenure the logs lack must have been ended by a later epoch
    assert all(epoch < max(e for _, e in logged) for _, epoch in tenures - logged)


@pytest.mark.parametrize("name", ROUTINES)
def test_routine_scenarios_raise_nothing_serious(lab: KRaftLabResult, name: str) -> None:
    ph = phase(lab, name)
    assert ph.kind == ROUTINE
    serious = verify.serious(rows_of(lab, name))
    assert serious == [], [(r["kind"], r["topic"], r["partition"], r["details"]) for r in serious]


def test_nothing_serious_between_the_scenarios(lab: KRaftLabResult) -> None:
    """Start-up, and the collected node's restart when it led the quorum before the failover."""
    serious = verify.serious(rows_of(lab, "(outside)"))
    assert serious == [], [(r["kind"], r["topic"], r["details"]) for r in serious]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fault_raises_exactly_its_kinds(lab: KRaftLabResult, name: str) -> None:
    assert phase(lab, name).kind == FAULT
    assert {str(r["kind"]) for r in rows_of(lab, name)} == set(EXPECTED[name])


def test_the_killed_replica_of_an_rf1_partition_takes_it_offline_until_it_returns(lab: KRaftLabResult) -> None:
    ph = phase(lab, "offline-partition")
    topic, part = ph.notes["partition"].rsplit("-", 1)
    rows = rows_of(lab, "offline-partition")
    offline = [r for r in rows if r["kind"] == K.OFFLINE_PARTITION]
    assert {(r["topic"], r["partition"]) for r in offline} == {(topic, int(part))}
    ends = [r for r in offline if r["ended_zxid"] is not None]
    assert len(ends) == 1 and json.loads(ends[0]["details"])["blip"] is False
    assert ends[0]["duration_ms"] > DEFAULT_OFFLINE_BLIP_MS and ends[0]["severity"] == "error"
    # back from a crash, the only replica is elected from the last known ELR: Kafka's own unclean election
    unclean = [r for r in rows if r["kind"] == K.UNCLEAN_LEADER_ELECTION]
    assert [(r["topic"], r["partition"], json.loads(r["details"])["leader"]) for r in unclean] == [
        (topic, int(part), ph.notes["broker"])]


def test_a_killed_active_controller_is_followed_by_a_new_quorum_leader_and_no_split(lab: KRaftLabResult) -> None:
    ph = phase(lab, "controller-failover")
    assert ph.end is not None
    tenure = sorted(lab.tables["controller_tenure"], key=lambda r: r["controller_epoch"])
    started = [r for r in tenure if r["start_time"] is not None and ph.start <= r["start_time"] <= ph.end]
    assert [(r["controller_id"], r["controller_epoch"]) for r in started] == [(ph.notes["new"], ph.notes["new_epoch"])]
    before = [r for r in tenure if r["controller_epoch"] < started[0]["controller_epoch"]]
    assert before and before[-1]["controller_id"] == ph.notes["old"]
    assert ph.notes["new_epoch"] > ph.notes["old_epoch"]
    kinds = {str(r["kind"]) for r in lab.anomalies}
    assert K.SPLIT_BRAIN not in kinds and K.NO_ACTIVE_CONTROLLER not in kinds
    assert K.CONTROLLER_EPOCH_REGRESSION not in kinds and K.LEADER_EPOCH_REGRESSION not in kinds
    # the killed node's RF 1 partition had no other replica: offline until the node returned
    rows = rows_of(lab, "controller-failover")
    assert {r["topic"] for r in rows if r["kind"] in (K.OFFLINE_PARTITION, K.UNCLEAN_LEADER_ELECTION)} == {"rf1"}


def test_the_out_of_sync_follower_elected_is_an_unclean_election(lab: KRaftLabResult) -> None:
    ph = phase(lab, "unclean-election")
    rows = rows_of(lab, "unclean-election")
    unclean = [r for r in rows if r["kind"] == K.UNCLEAN_LEADER_ELECTION and r["topic"] == "unclean"]
    assert [r["partition"] for r in unclean] == [0]
    details = json.loads(unclean[0]["details"])
    assert details["leader"] == ph.notes["follower"] and details["prev_isr"] == [ph.notes["leader"]]
    # the follower was alive when the leader was fenced: the topic never went offline, only RF 1 partitions did
    assert {r["topic"] for r in rows if r["kind"] == K.OFFLINE_PARTITION} == {"rf1"}


def log_as_it_stands(res: KRaftLabResult) -> list[dict[str, Any]]:
    """The collected records less those Raft truncated (a tail rewritten at a newer epoch)."""
    rows = res.tables["kraft_records"]
    return current_records(pa.Table.from_pylist(rows)).to_pylist() if rows else []


def kafkas_unclean_elections(res: KRaftLabResult) -> set[tuple[int, str, int]]:
    """(offset, topic, partition) of every record that elected a leader from outside the partition's ISR and
    eligible leader replicas (KIP-966), read from the raw records. Kafka marks such an election by setting the
    leader recovery state to RECOVERING, but writes the field only when it changes: a partition still RECOVERING
    from an earlier unclean election is not marked again."""
    found: set[tuple[int, str, int]] = set()
    names: dict[str, str] = {}
    parts: dict[tuple[str, int], dict[str, Any]] = {}
    rows = sorted((r for r in log_as_it_stands(res) if r["source"] == "segment" and not r["is_control"]),
                  key=lambda r: r["offset"])
    for row in rows:
        record = decode_metadata_record(row["value"])
        f = record.fields
        if record.record_type == MetadataRecordType.TOPIC_RECORD:
            names[f["topicId"]] = f["name"]
        elif record.record_type == MetadataRecordType.PARTITION_RECORD:
            parts[(names[f["topicId"]], f["partitionId"])] = {
                "leader": f["leader"], "isr": f["isr"], "elr": f.get("eligibleLeaderReplicas") or []}
        elif record.record_type == MetadataRecordType.PARTITION_CHANGE_RECORD:
            key = (names[f["topicId"]], f["partitionId"])
            before = parts[key]
            leader = f["leader"]
            if leader not in (NO_LEADER_CHANGE, -1, before["leader"]):
                marked = f.get("leaderRecoveryState") == RECOVERING
                if marked or leader not in before["isr"] + before["elr"]:
                    found.add((row["offset"], *key))
            parts[key] = {"leader": before["leader"] if leader == NO_LEADER_CHANGE else leader,
                          "isr": before["isr"] if f.get("isr") is None else f["isr"],
                          "elr": (before["elr"] if f.get("eligibleLeaderReplicas") is None
                                  else f["eligibleLeaderReplicas"])}
    return found


def kafkas_recovering_marks(res: KRaftLabResult) -> int:
    """How many records set a partition's leader recovery state to RECOVERING."""
    return sum(1 for r in log_as_it_stands(res)
               if r["record_type"] == MetadataRecordType.PARTITION_CHANGE_RECORD.name and not r["is_control"]
               and decode_metadata_record(r["value"]).fields.get("leaderRecoveryState") == RECOVERING)


def reported_unclean(res: KRaftLabResult) -> set[tuple[int, str, int]]:
    return {(r["zxid"], r["topic"], r["partition"]) for r in res.anomalies if r["kind"] == K.UNCLEAN_LEADER_ELECTION}


def test_every_election_from_outside_the_isr_and_elr_is_reported(lab: KRaftLabResult) -> None:
    marked = kafkas_unclean_elections(lab)
    assert kafkas_recovering_marks(lab) >= 3, "the faults should have made Kafka elect uncleanly at least three times"
    assert marked <= reported_unclean(lab)


def test_no_election_from_the_isr_or_elr_is_reported_unclean(lab: KRaftLabResult) -> None:
    assert reported_unclean(lab) - kafkas_unclean_elections(lab) == set()


def test_topics_deleted_with_a_broker_down_are_gone_at_once(lab: KRaftLabResult) -> None:
    ph = phase(lab, "deletion")
    assert ph.notes["deleted_while_down"]
    deleted = {m["topic"] for m in lab.tables["metadata_events"] if m["type"] == "TOPIC_DELETED"}
    assert deleted == {"doomed", "rf1", "unclean"}


def test_the_reassignment_is_seen_as_one(lab: KRaftLabResult) -> None:
    ph = phase(lab, "reassignment")
    requested = [m for m in lab.tables["metadata_events"] if m["type"] == "REASSIGNMENT_REQUESTED"]
    assert [(m["topic"], m["partition"], m["replicas"]) for m in requested] == [("moving", 0, ph.notes["to"])]


def test_state_at_cli_answers_for_a_recorded_point(lab: KRaftLabResult) -> None:
    """`zkledger state --at T` (the user's command) against Kafka's answer at one settled point."""
    points, _ = settled_points(lab.samples)
    pt = next(p for p in reversed(points) if p.key is not None and p.key[0] == "rf3")
    assert pt.key is not None
    out = subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", str(lab.lake_root), "--cluster",
                          lab.cluster_name, "state", "--at", pt.at.isoformat(), "--topic", "rf3", "--format", "json"],
                         capture_output=True, text=True, timeout=300, check=True)
    st = json.loads(out.stdout.splitlines()[0])
    mine = next(p for p in st["partitions"] if p["partition"] == pt.key[1])
    assert verify._as_view(mine) == pt.view
    assert st["controller_id"] == next(p.view for p in points if p.key is None and p.at == pt.at)
