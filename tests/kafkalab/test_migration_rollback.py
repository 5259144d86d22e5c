"""zkledger recording Kafka 3.9's documented rollback of a ZooKeeper -> KRaft migration after the brokers moved
(`kafkalab.migration`), and the next attempt it sets up to fail.

Two ZooKeeper-mode brokers with two topics; one KRaft controller in migration mode; the brokers rolled into
migration mode until the controller dual-writes, then to KRaft mode. Then the revert Kafka 3.9's ops.html gives for
"Migrating brokers to KRaft" (`MigrationLab.rollback`): the brokers rolled back to ZooKeeper mode with the migration
flag, the controller deprovisioned (stopped, its data deleted), ``/controller`` deleted with a plain ZooKeeper client
until a broker is elected, the brokers rolled to plain ZooKeeper mode; ``/migration`` stays, as that revert leaves
it. Last, a second attempt (`MigrationLab.start_next_attempt`): the controller formatted anew, the brokers rolled
into migration mode until it claims ``/controller``; it takes the old ``/migration`` offset for a done load and
skips it (KAFKA-17146). `zkledger migration --format json` judges the lake after the rollback and at the end.
About 60 s for the file on two idle cores (five rolls of two brokers), up to two minutes on shared cores.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafkalab.migration import (
    CONTROLLER_FIRST_ID,
    CONTROLLER_ZNODE,
    MIGRATION_ZNODE,
    STALE_IMAGE_LOG,
    MigrationLab,
)
from kafkalab.migration_story import brokers_to_kraft, judge_when, migration_json
from kafkalab.truth import NO_LEADER, PartitionView
from models.anomalies import AnomalyKind as K
from models.migration import BlockReason, MigrationPhase, PhaseSignal
from tests.kafkalab.lab_retry import twice_on_timeout

P = MigrationPhase
TOPICS: dict[str, dict[str, Any]] = {
    "orders": {"num_partitions": 3, "replication_factor": 2},
    "payments": {"num_partitions": 2, "replication_factor": 2},
}
"""Few and small: the rolls, not the data, are what this story is about."""
BROKERS = 2
"""Each of the story's five rolls restarts every broker: two are the fewest that still hand leadership over."""
ROLLED_BACK, SECOND_ATTEMPT = "rolled_back", "second_attempt"


@dataclass
class RolledBack:
    lab: MigrationLab
    elected: int  # the broker elected controller in ZooKeeper by the rollback
    left: dict[str, Any]  # /migration once rolled back
    served: dict[tuple[str, int], PartitionView]  # every broker's answer once rolled back
    began: str  # the second attempt's controller: the server.log line that tells how it began
    claim: dict[str, Any]  # /controller once the second attempt's controller claimed it
    judged: dict[str, dict[str, Any]]  # `zkledger migration --format json` after the rollback and at the end


@pytest.fixture(scope="module")
def rolled_back(tmp_path_factory: pytest.TempPathFactory, starts_kafka: None, starts_kraft: None,
                takes_minutes: None) -> Iterator[RolledBack]:
    """A migration up to the brokers on KRaft, Kafka's revert, a second attempt; judged after each."""
    yield twice_on_timeout(lambda: roll_back(tmp_path_factory.mktemp("rollback")), "the rollback lab")


def roll_back(base: Path) -> RolledBack:
    lab = MigrationLab(base, brokers_size=BROKERS, out=sys.stderr, topics=TOPICS, produce_count=20)
    judged: dict[str, dict[str, Any]] = {}
    with lab:
        brokers_to_kraft(lab)
        elected = lab.rollback()
        left = lab.zk_json(MIGRATION_ZNODE) or {}
        served = lab.view()
        judged[ROLLED_BACK] = judge_when(lab, lambda out: out["phase"] == P.ZOOKEEPER, "the rollback")
        began = lab.start_next_attempt()
        claim = lab.zk_json(CONTROLLER_ZNODE) or {}
    judged[SECOND_ATTEMPT] = migration_json(lab.lake_root, lab.cluster_name)
    return RolledBack(lab, elected, left, served, began, claim, judged)


def kinds(judged: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in judged["findings"]]


def test_the_collectors_read_everything(rolled_back: RolledBack) -> None:
    # `collect kraft` stopped when the controller was deprovisioned, the others at the end
    assert rolled_back.lab.collector_codes == {"kraft": 0, "txnlog": 0, "logs": 0}


def test_the_revert_leaves_a_zookeeper_cluster_serving_and_migration_in_place(rolled_back: RolledBack) -> None:
    assert rolled_back.elected in rolled_back.lab.cluster.brokers
    assert {t for t, _ in rolled_back.served} == set(TOPICS)
    assert all(v.leader != NO_LEADER and set(v.isr) == set(v.replicas) for v in rolled_back.served.values())
    # that row of Kafka's docs deletes /controller, not /migration: the first attempt's offset is still there
    assert rolled_back.left["kraft_controller_id"] == CONTROLLER_FIRST_ID
    assert rolled_back.left["kraft_metadata_offset"] > 0


def test_the_timeline_goes_back_to_zookeeper_after_the_brokers_moved(rolled_back: RolledBack) -> None:
    timeline = rolled_back.judged[ROLLED_BACK]["timeline"]
    # the revert's first roll brings the brokers back as ZooKeeper brokers in migration mode: dual-write again
    assert [c["phase"] for c in timeline] == [P.PRE_MIGRATION, P.LOADING, P.DUAL_WRITE, P.KRAFT_BROKERS,
                                              P.DUAL_WRITE, P.ZOOKEEPER]
    assert timeline[-1]["signal"] == PhaseSignal.ZK_CONTROLLER_ELECTED and timeline[-1]["zxid"] is not None


def test_the_rollback_after_the_brokers_moved_is_reported(rolled_back: RolledBack) -> None:
    judged = rolled_back.judged[ROLLED_BACK]
    assert kinds(judged) == [K.MIGRATION_ROLLED_BACK]
    (found,) = judged["findings"]
    assert found["severity"] == "warning" and found["broker"] == rolled_back.elected
    assert found["zxid"] == judged["timeline"][-1]["zxid"]
    assert found["details"] == {"from_phase": P.DUAL_WRITE, "brokers_had_moved": True, "kraft_brokers": [],
                                "migration_offset": rolled_back.left["kraft_metadata_offset"]}
    assert judged["divergences"] == []
    assert judged["verdict"]["phase"] == P.ZOOKEEPER
    assert [b["reason"] for b in judged["verdict"]["blockers"]] == [BlockReason.ROLLED_BACK]


def test_the_next_attempt_skips_the_load_on_the_left_migration_znode(rolled_back: RolledBack) -> None:
    """KAFKA-17146 on real brokers: the new controller claims ZooKeeper, takes /migration's offset for a done load,
    and waits for its empty log to reach that offset; zkledger says so from ZooKeeper's history alone."""
    assert rolled_back.began == STALE_IMAGE_LOG
    assert rolled_back.claim["brokerid"] == CONTROLLER_FIRST_ID and rolled_back.claim["kraftControllerEpoch"] >= 0
    second = rolled_back.judged[SECOND_ATTEMPT]
    assert kinds(second) == [K.MIGRATION_ROLLED_BACK, K.MIGRATION_STALE_ZNODE]
    stale = second["findings"][-1]
    assert stale["severity"] == "critical"
    assert stale["details"]["kraft_metadata_offset"] == rolled_back.left["kraft_metadata_offset"]
    assert stale["details"]["rolled_back_since_written"] is True
    assert second["timeline"][-1]["signal"] == PhaseSignal.CONTROLLER_CLAIMED
    assert stale["zxid"] == second["timeline"][-1]["zxid"]
    assert BlockReason.STALE_MIGRATION_ZNODE in {b["reason"] for b in second["verdict"]["blockers"]}
