"""zkledger recording a real ZooKeeper -> KRaft migration (KIP-866) of Kafka 3.9 (`kafkalab.migration`).

One migration plays: three ZooKeeper-mode brokers with four topics and some data; a quorum of three KRaft
controllers formatted with ZooKeeper's cluster id, started in migration mode; the brokers rolled into migration
mode until the leader has copied ZooKeeper's metadata and dual-writes; during dual-write a topic created (`fresh`),
one deleted (`doomed`) and a partition reassigned (`moving` 0: [1, 2] -> [2, 3]); the brokers rolled to KRaft mode
(judged: safe to finalize); a plain ZooKeeper client setting a topic's config (judged: reported, not safe); kill -9
of the active controller, whose successor re-syncs ZooKeeper from the log (judged: the re-sync shown, agreeing
again); the controllers restarted without ZooKeeper (finalization). `collect txnlog`, `collect logs` and `collect
kraft` run beside it into one lake; `zkledger migration` and `zkledger state --at` read it (no rebuild, no Spark:
the bronze tables, and the codec for what `decode_quarantine` would hold). About 70 s on two idle cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafkalab.migration import (
    CONTROLLER_FIRST_ID,
    MIGRATION_ZNODE,
    TOPICS_BEFORE,
    MigrationLab,
)
from kafkalab.migration_story import (
    CREATED,
    DELETED,
    MOVED,
    MOVED_TO,
    PLANTED_TOPIC,
    brokers_to_kraft,
    dual_write_actions,
    fail_over_controller,
    judge,
    migration_json,
    migration_zxid,
    plant_config_write,
)
from kafkalab.truth import NO_LEADER, PartitionView
from models.anomalies import AnomalyKind as K
from models.events import Source, ZnodeChange, ZnodeOp
from models.kraft_records import MetadataRecordType, decode_metadata_record
from models.migration import BlockReason, EntityKind, MigrationPhase, Store, ZkMigrationState
from models.tables import CONTROLLER_DECISIONS, KRAFT_RECORDS, QUARANTINE, ZNODE_EVENTS
from pipelines.kraft_stage import current_records
from tests.kafkalab.lab_retry import twice_on_timeout

TABLES = (ZNODE_EVENTS, KRAFT_RECORDS, QUARANTINE, CONTROLLER_DECISIONS)
R = MetadataRecordType


@dataclass
class Migrated:
    lab: MigrationLab
    served: dict[tuple[str, int], PartitionView]  # every broker's answer after finalization
    listed: set[str]  # ListTopics after finalization
    tables: dict[str, list[dict[str, Any]]]
    judged: dict[str, dict[str, Any]]  # `zkledger migration --format json` at each JUDGED point
    planted_zxid: int  # the out-of-band write's zxid
    quiet_at: datetime  # after the clean judgment, before the plant
    epochs_at_clean: tuple[int, int]  # ZooKeeper's own answer then: (/controller's kraftControllerEpoch, /controller_epoch)

    @property
    def events(self) -> list[dict[str, Any]]:
        return sorted(self.tables[ZNODE_EVENTS.name], key=lambda r: r["zxid"])

    @property
    def records(self) -> list[dict[str, Any]]:
        """The metadata log as it stands (a tail Raft rewrote: the newest epoch's records), in offset order."""
        rows = self.tables[KRAFT_RECORDS.name]
        log = current_records(pa.Table.from_pylist(rows)).to_pylist() if rows else []
        return sorted(log, key=lambda r: r["offset"])

    def decoded(self, record_type: R) -> list[tuple[int, dict[str, Any]]]:
        """(offset, fields) of every collected record of `record_type`, in log order."""
        return [(r["offset"], decode_metadata_record(r["value"]).fields) for r in self.records
                if r["record_type"] == record_type.name]

    def migration_writes(self) -> list[dict[str, Any]]:
        return [r for r in self.events if r["path"] == MIGRATION_ZNODE]

    def controller_sessions(self) -> list[int]:
        """The active KRaft controllers' ZooKeeper sessions, in order: those that write /migration naming a
        controller (the first to start creates it naming none; a new leader after the failover)."""
        return list(dict.fromkeys(int(r["session_id"]) for r in self.migration_writes()
                                  if json.loads(r["data"])["kraft_controller_id"] >= 0))


# the points at which `zkledger migration` judges the lake (kafkalab.migration_story): the brokers on KRaft after
# a clean dual-write; after a plain ZooKeeper client changed a topic's config; after the controller was killed and
# restarted (its re-sync of ZooKeeper from the log undoes that change); after finalization
CLEAN, PLANTED, RESYNCED, FINALIZED = "clean", "planted", "resynced", "finalized"


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory, starts_kafka: None, starts_kraft: None,
             takes_minutes: None) -> Iterator[Migrated]:
    """One migration, start to finalization, recorded by the three collectors and judged at each JUDGED point."""
    yield twice_on_timeout(lambda: migrate(tmp_path_factory.mktemp("migration")), "the migration lab")


def migrate(base: Path) -> Migrated:
    # three controllers: kill -9 of the active one fails over to another
    lab = MigrationLab(base, controllers_size=3, out=sys.stderr)
    judged: dict[str, dict[str, Any]] = {}
    with lab:
        brokers_to_kraft(lab, dual_write_actions)
        judged[CLEAN] = judge(lab)
        epochs_at_clean = controller_epochs(lab)
        quiet_at = datetime.now(UTC)  # the brokers on KRaft, every ISR full, both stores collected
        planted = plant_config_write(lab)  # an operator's script, not Kafka: the next re-sync undoes it
        judged[PLANTED] = judge(lab, settled_after_zxid=planted)
        fail_over_controller(lab)  # the next leader has synced ZooKeeper from the log when it dual-writes again
        judged[RESYNCED] = judge(lab, settled_after_zxid=migration_zxid(lab))
        lab.finalize()
        served = lab.view()
        admin = lab.admin()
        try:
            listed = set(admin.list_topics())
        finally:
            admin.close()
    judged[FINALIZED] = migration_json(lab.lake_root, lab.cluster_name)
    return Migrated(lab, served, listed, read_tables(lab.lake_root, lab.cluster_name), judged, planted, quiet_at,
                    epochs_at_clean)


def controller_epochs(lab: MigrationLab) -> tuple[int, int]:
    """The KRaft controller epoch in `/controller` and ZooKeeper's `/controller_epoch`, read from ZooKeeper."""
    with lab.kazoo() as zk:
        controller, _ = zk.get("/controller")
        epoch, _ = zk.get("/controller_epoch")
    return int(json.loads(controller)["kraftControllerEpoch"]), int(epoch)


def read_tables(lake_root: Path, cluster: str) -> dict[str, list[dict[str, Any]]]:
    from lakehouse import Lake

    lake = Lake(lake_root, cluster=cluster)
    return {t.name: (lake.read_arrow(t.name).to_pylist() if lake.exists(t.name) else []) for t in TABLES}


def test_the_collectors_read_everything_and_quarantined_nothing(migrated: Migrated) -> None:
    assert migrated.lab.collector_codes == {"txnlog": 0, "logs": 0, "kraft": 0}
    assert migrated.tables[QUARANTINE.name] == []
    offsets = [r["offset"] for r in migrated.records]
    assert offsets and offsets == list(range(offsets[0], offsets[0] + len(offsets))), "a hole in the KRaft log"
    assert {r["source"] for r in migrated.records} == {"segment"}
    controller_logs = {r["source_file"] for r in migrated.tables[CONTROLLER_DECISIONS.name]
                       if f"controller-{CONTROLLER_FIRST_ID}" in r["source_file"]}
    assert controller_logs, "collect logs read nothing of the KRaft controller's logs"


def test_every_collected_znode_change_decodes(migrated: Migrated) -> None:
    """What a rebuild would put in decode_quarantine: the codec's MalformedZnodeError, per bronze row."""
    from models.errors import MalformedZnodeError
    from models.znode_codec import decode

    undecodable = []
    for row in migrated.events:
        change = ZnodeChange(zxid=row["zxid"], path=row["path"], op=ZnodeOp(row["op"]), data=row["data"],
                             version=row["version"], czxid=row["czxid"], mzxid=row["mzxid"], pzxid=row["pzxid"],
                             ephemeral_owner=row["ephemeral_owner"], session_id=row["session_id"],
                             txn_time=row["txn_time"], detail=row["detail"])
        try:
            decode(change, "3.9")
        except MalformedZnodeError as e:
            undecodable.append((row["zxid"], row["path"], str(e)))
    assert undecodable == []


def test_the_migration_znode_carries_the_controllers_kraft_offsets(migrated: Migrated) -> None:
    writes = migrated.migration_writes()
    assert {r["source"] for r in writes} == {str(Source.TXNLOG)}
    assert writes[0]["op"] == ZnodeOp.CREATE and all(r["op"] == ZnodeOp.SET for r in writes[1:])
    assert [r["version"] for r in writes] == list(range(len(writes))), "a /migration write is missing"
    payloads = [json.loads(r["data"]) for r in writes]
    assert payloads[0]["kraft_controller_id"] == -1  # created when the controller starts, before it leads
    first = next(p["kraft_controller_id"] for p in payloads if p["kraft_controller_id"] >= 0)
    assert first >= CONTROLLER_FIRST_ID
    claimed = [p for p in payloads if p["kraft_controller_id"] == first]  # until the failover
    offsets = [p["kraft_metadata_offset"] for p in claimed if p["kraft_metadata_offset"] >= 0]
    assert len(offsets) > 3 and offsets == sorted(offsets), "the offsets in /migration go back"
    # /migration names offsets the controller's log really holds (up to its last dual-write)
    collected = {r["offset"] for r in migrated.records}
    assert set(offsets) <= collected


def test_the_kraft_log_holds_the_migration_states_in_order(migrated: Migrated) -> None:
    states = [(off, ZkMigrationState(f["zkMigrationState"])) for off, f in
              migrated.decoded(R.ZK_MIGRATION_STATE_RECORD)]
    assert [s for _, s in states] == [ZkMigrationState.PRE_MIGRATION, ZkMigrationState.MIGRATION,
                                      ZkMigrationState.POST_MIGRATION]
    # MIGRATION closes the transaction that holds what was read from ZooKeeper
    begins = {off: f["name"] for off, f in migrated.decoded(R.BEGIN_TRANSACTION_RECORD)}
    ends = [off for off, _ in migrated.decoded(R.END_TRANSACTION_RECORD)]
    begin = max(off for off, name in begins.items() if name == "ZK Migration")
    end = min(off for off in ends if off > begin)
    assert begin < states[1][0] < end


def test_the_kraft_log_holds_the_topics_from_zookeeper_and_from_dual_write(migrated: Migrated) -> None:
    topics = migrated.decoded(R.TOPIC_RECORD)
    begin = max(off for off, f in migrated.decoded(R.BEGIN_TRANSACTION_RECORD) if f["name"] == "ZK Migration")
    migrated_state = next(off for off, f in migrated.decoded(R.ZK_MIGRATION_STATE_RECORD)
                          if f["zkMigrationState"] == ZkMigrationState.MIGRATION)
    loaded = {f["name"] for off, f in topics if begin < off < migrated_state}
    assert loaded == set(TOPICS_BEFORE)
    created = [off for off, f in topics if f["name"] == CREATED]
    assert len(created) == 1 and created[0] > migrated_state
    doomed_id = next(f["topicId"] for _, f in topics if f["name"] == DELETED)
    assert [f["topicId"] for _, f in migrated.decoded(R.REMOVE_TOPIC_RECORD)] == [doomed_id]


def test_dual_writes_reach_zookeeper_through_the_controllers_session(migrated: Migrated) -> None:
    session = migrated.controller_sessions()[0]
    brokers = {r["session_id"] for r in migrated.events
               if r["op"] == ZnodeOp.CREATE and r["path"].startswith("/brokers/ids/")}
    assert session not in brokers
    by_path = {(r["op"], r["path"]): r for r in migrated.events}
    created = by_path[(ZnodeOp.CREATE, f"/brokers/topics/{CREATED}")]
    deleted = by_path[(ZnodeOp.DELETE, f"/brokers/topics/{DELETED}")]
    assert created["session_id"] == deleted["session_id"] == session
    moved = [r for r in migrated.events if r["op"] == ZnodeOp.SET and r["path"] == f"/brokers/topics/{MOVED}"]
    # the reassignment's writes, and the restarted controller's re-sync rewriting the topic
    assert moved and moved[0]["session_id"] == session
    assert {r["session_id"] for r in moved} <= set(migrated.controller_sessions())
    assert json.loads(moved[-1]["data"])["partitions"]["0"] == MOVED_TO


def test_a_dual_write_batch_ends_with_a_migration_write_and_is_then_acknowledged(migrated: Migrated) -> None:
    """Each znode of a KRaft change is its own multi; the batch's last one also sets /migration, still to the
    offset ZooKeeper reflected before the batch; a /migration write of its own then moves it to the batch's end."""
    session = migrated.controller_sessions()[0]
    writes = {r["zxid"]: json.loads(r["data"])["kraft_metadata_offset"] for r in migrated.migration_writes()}
    topic_znodes = sorted({r["zxid"] for r in migrated.events if r["session_id"] == session and r["op"] == ZnodeOp.CREATE
                           and r["path"].startswith((f"/brokers/topics/{CREATED}", f"/config/topics/{CREATED}"))})
    assert len(topic_znodes) >= 2 + 2 * 2, "topic, config, partitions and each partition and its state"
    assert [z for z in topic_znodes if z in writes] == [topic_znodes[-1]], "not only the batch's last multi"
    created = next(r for r in migrated.records if r["record_type"] == R.TOPIC_RECORD.name
                   and decode_metadata_record(r["value"]).fields["name"] == CREATED)
    assert writes[topic_znodes[-1]] < created["offset"]
    after = min(z for z in writes if z > topic_znodes[-1])
    assert writes[after] == created["batch_last_offset"]


def test_the_finalized_cluster_still_serves_the_topics(migrated: Migrated) -> None:
    expected = (set(TOPICS_BEFORE) - {DELETED}) | {CREATED}
    assert expected <= migrated.listed and DELETED not in migrated.listed
    assert {t for t, _ in migrated.served} == expected
    assert all(v.leader != NO_LEADER for v in migrated.served.values())
    assert migrated.served[(MOVED, 0)].replicas == tuple(MOVED_TO)


# -- `zkledger migration` at each point --------------------------------------------------------------------------
def kinds(judged: dict[str, Any]) -> set[str]:
    return {f["kind"] for f in judged["findings"]}


def test_a_clean_dual_write_is_safe_to_finalize(migrated: Migrated) -> None:
    clean = migrated.judged[CLEAN]
    assert clean["phase"] == MigrationPhase.KRAFT_BROKERS
    assert clean["settled_points"] >= 3 and clean["divergences"] == []
    assert clean["brokers_not_on_kraft"] == {}
    # the quorum's epoch counts its own elections, /controller_epoch one per claim: when the quorum's is the higher,
    # a rollback would strand partitions (KAFKA-20488), a warning that does not block finalizing; nothing else fires
    kraft_epoch, zk_epoch = migrated.epochs_at_clean
    ahead = [f["details"] for f in clean["findings"] if f["kind"] == K.MIGRATION_KRAFT_EPOCH_AHEAD]
    assert {f["kind"] for f in clean["findings"]} <= {K.MIGRATION_KRAFT_EPOCH_AHEAD}
    if kraft_epoch > zk_epoch:
        assert {"kraft_controller_epoch": kraft_epoch, "zk_controller_epoch": zk_epoch} in ahead
    else:
        assert ahead == []
    assert clean["verdict"] == {"safe": True, "phase": MigrationPhase.KRAFT_BROKERS, "blockers": []}
    phases = [c["phase"] for c in clean["timeline"]]
    assert phases == [MigrationPhase.PRE_MIGRATION, MigrationPhase.LOADING, MigrationPhase.DUAL_WRITE,
                      MigrationPhase.KRAFT_BROKERS]


def test_a_plain_clients_config_write_during_dual_write_is_reported_and_blocks_finalizing(migrated: Migrated) -> None:
    planted = migrated.judged[PLANTED]
    path = f"/config/topics/{PLANTED_TOPIC}"
    out_of_band = [f for f in planted["findings"] if f["kind"] == K.MIGRATION_OUT_OF_BAND_ZK_WRITE]
    assert [(f["zxid"], f["details"]["path"]) for f in out_of_band] == [(migrated.planted_zxid, path)]
    diverged = [d for point in planted["divergences"] for d in point["divergences"]]
    assert {(d["entity"], d["key"], d["field"], d["zk_value"], d["kraft_value"]) for d in diverged} == {
        (EntityKind.TOPIC_CONFIG, PLANTED_TOPIC, "retention.ms", "1234567", None)}
    assert not planted["verdict"]["safe"]
    assert {b["reason"] for b in planted["verdict"]["blockers"]} >= {BlockReason.STORES_DIVERGED}


def test_the_restarted_controllers_resync_undoes_the_write_and_is_shown(migrated: Migrated) -> None:
    resynced = migrated.judged[RESYNCED]
    resyncs = [f for f in resynced["findings"] if f["kind"] == K.MIGRATION_RESYNC_OVERWROTE_ZK]
    assert resyncs, kinds(resynced)
    assert any(f"/config/topics/{PLANTED_TOPIC}" in json.dumps(f["details"]) for f in resyncs)
    assert resynced["divergences"][-1]["zxid"] < resynced["last_settled"]["zxid"], "still diverged at the end"
    serious = {f["kind"] for f in resynced["findings"] if f["severity"] in ("error", "critical")}
    assert serious == {K.MIGRATION_OUT_OF_BAND_ZK_WRITE, K.MIGRATION_STORES_DIVERGED}


def test_finalized_with_every_broker_on_kraft(migrated: Migrated) -> None:
    final = migrated.judged[FINALIZED]
    assert final["phase"] == MigrationPhase.FINALIZED
    assert K.MIGRATION_FINALIZED_BROKER_UNREGISTERED not in kinds(final)
    assert [b["reason"] for b in final["verdict"]["blockers"]] == [BlockReason.ALREADY_FINALIZED]


def state_json(migrated: Migrated, at: datetime) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", str(migrated.lab.lake_root), "--cluster",
                           migrated.lab.cluster_name, "state", "--at", at.isoformat(), "--format", "json"],
                          capture_output=True, text=True, timeout=120, check=True)
    return dict(json.loads(done.stdout.splitlines()[0]))


def test_state_at_answers_from_zookeeper_then_both_stores_then_kraft(migrated: Migrated) -> None:
    starts = {c["phase"]: datetime.fromisoformat(c["at"]) for c in migrated.judged[FINALIZED]["timeline"]}
    # when the controllers were started: the brokers in ZooKeeper mode, every ISR full
    controllers = next(st for st in migrated.lab.steps if st.name == "controllers")
    before = state_json(migrated, datetime.fromtimestamp(controllers.start, UTC))
    assert datetime.fromisoformat(before["at"]) < starts[MigrationPhase.PRE_MIGRATION]
    assert before["phase"] == MigrationPhase.ZOOKEEPER and set(before["stores"]) == {Store.ZOOKEEPER}
    assert {p["topic"] for p in before["stores"][Store.ZOOKEEPER]["partitions"]} == set(TOPICS_BEFORE)
    assert before["stores"][Store.ZOOKEEPER]["brokers"] == [1, 2, 3]
    # the brokers on KRaft, before the plant: both stores, holding the same partitions
    during = state_json(migrated, migrated.quiet_at)
    assert during["phase"] == MigrationPhase.KRAFT_BROKERS and set(during["stores"]) == {Store.ZOOKEEPER, Store.KRAFT}
    held = {store: [{**p, "isr": sorted(p["isr"])} for p in during["stores"][store]["partitions"]]
            for store in (Store.ZOOKEEPER, Store.KRAFT)}
    assert held[Store.ZOOKEEPER] == held[Store.KRAFT] and len(held[Store.KRAFT]) >= 7
    assert during["stores"][Store.KRAFT]["brokers"] == [1, 2, 3]
    after = state_json(migrated, starts[MigrationPhase.FINALIZED] + timedelta(seconds=1))
    assert after["phase"] == MigrationPhase.FINALIZED and set(after["stores"]) == {Store.KRAFT}
    final = {(p["topic"], p["partition"]): tuple(p["replicas"]) for p in after["stores"][Store.KRAFT]["partitions"]}
    assert final == {key: view.replicas for key, view in migrated.served.items()}
