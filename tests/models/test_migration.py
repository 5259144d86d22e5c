"""ZooKeeper -> KRaft migrations (models/migration.py): phases, views, alignment, hazards and the verdict, on small
histories of both stores written in step as Kafka 3.9's KRaft controller writes them (docs/migration.md)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from models.anomalies import SEVERITY, AnomalyKind
from models.events import ZnodeChange, ZnodeOp
from models.kraft_records import ControlRecord, ControlRecordType, MetadataRecord
from models.kraft_records import MetadataRecordType as R
from models.migration import (
    BlockReason,
    Divergence,
    EntityKind,
    KraftEntry,
    MigrationHistory,
    MigrationPhase,
    MigrationReport,
    PartitionFacts,
    PhaseSignal,
    Store,
    StoreView,
    Unsettled,
    ViewField,
    ZkMigrationState,
    aligned_points,
    check_migration,
    compare,
    finalize_verdict,
    kraft_view,
    phase_timeline,
    zk_entries,
    zk_view,
)
from simulator.payloads import (
    encode_broker_registration,
    encode_config,
    encode_controller,
    encode_controller_epoch,
    encode_migration,
    encode_partition_state,
    encode_topic_assignment,
)

K = AnomalyKind
P = MigrationPhase
KAFKA = "3.9"
START = datetime(2026, 3, 1, tzinfo=UTC)
ORDERS_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
CONTROLLER = 3000  # the KRaft controller's node id
DRIVER = 0xD1  # its ZooKeeper session
DRIVER_AFTER_FAILOVER = 0xD2
ZK_CONTROLLER = 0xB1  # broker 1's session, the ZooKeeper controller before the migration
ADMIN = 0xAD  # an operator's tool writing ZooKeeper directly
BROKERS = (1, 2, 3)
MIGRATION_NEW_KINDS = (K.MIGRATION_STORES_DIVERGED, K.MIGRATION_OUT_OF_BAND_ZK_WRITE, K.MIGRATION_RESYNC_OVERWROTE_ZK,
                       K.MIGRATION_STALE_ZNODE, K.MIGRATION_KRAFT_EPOCH_AHEAD,
                       K.MIGRATION_FINALIZED_BROKER_UNREGISTERED, K.MIGRATION_ROLLED_BACK)


def rec(kind: R, **fields: object) -> MetadataRecord:
    return MetadataRecord(kind, 0, fields)


def partition_record(p: int, replicas: list[int], isr: list[int], leader: int, epoch: int = 0) -> MetadataRecord:
    return rec(R.PARTITION_RECORD, partitionId=p, topicId=ORDERS_ID, replicas=replicas, isr=isr, removingReplicas=[],
               addingReplicas=[], leader=leader, leaderRecoveryState=0, leaderEpoch=epoch, partitionEpoch=0)


def isr_change(p: int, isr: list[int]) -> MetadataRecord:
    return rec(R.PARTITION_CHANGE_RECORD, partitionId=p, topicId=ORDERS_ID, leader=-2, leaderRecoveryState=-1, isr=isr)


def topic_config(name: str, value: str | None, topic: str = "orders") -> MetadataRecord:
    return rec(R.CONFIG_RECORD, resourceType=2, resourceName=topic, name=name, value=value)


def migration_state(state: ZkMigrationState) -> MetadataRecord:
    return rec(R.ZK_MIGRATION_STATE_RECORD, zkMigrationState=int(state))


def register(broker: int, epoch: int, *, migrating: bool) -> MetadataRecord:
    return rec(R.REGISTER_BROKER_RECORD, brokerId=broker, brokerEpoch=epoch, fenced=True,
               isMigratingZkBroker=migrating)


def unfence(broker: int, epoch: int) -> MetadataRecord:
    return rec(R.UNFENCE_BROKER_RECORD, id=broker, epoch=epoch)


class Cluster:
    """Both stores of one cluster, written in step: one second per ZooKeeper transaction or log batch."""

    def __init__(self) -> None:
        self.changes: list[ZnodeChange] = []
        self.records: list[KraftEntry] = []
        self.zxid, self.offset, self.epoch, self.tick = 0x100, 0, 1, 0
        self.migration_offset = -1  # what /migration says
        self.driver = DRIVER
        self.kraft_epoch = 1  # the quorum epoch the controller writes into ZooKeeper

    def _now(self) -> datetime:
        self.tick += 1
        return START + timedelta(seconds=self.tick)

    def zk(self, *writes: tuple[str, ZnodeOp, bytes | None], session: int | None = None) -> int:
        """One ZooKeeper transaction (a multi when several writes); returns its zxid."""
        self.zxid += 1
        at = self._now()
        for path, op, data in writes:
            self.changes.append(ZnodeChange(self.zxid, path, op, data, version=0, czxid=self.zxid,
                                            session_id=self.driver if session is None else session, txn_time=at))
        return self.zxid

    def kraft(self, *records: MetadataRecord | ControlRecord) -> int:
        """One batch of the log; returns its last offset."""
        at = self._now()
        for record in records:
            self.records.append(KraftEntry(self.offset, self.epoch, at, record))
            self.offset += 1
        return self.offset - 1

    def history(self) -> MigrationHistory:
        return MigrationHistory(tuple(zk_entries(self.changes)), tuple(self.records))

    # -- what the KRaft controller writes to ZooKeeper --------------------------------------------------
    def migration_write(self, offset: int | None = None) -> int:
        """A plain set of /migration: after a batch, with the batch's last offset."""
        if offset is not None:
            self.migration_offset = offset
        return self.zk(("/migration", ZnodeOp.SET, self._migration()))

    def _migration(self) -> bytes:
        return encode_migration(CONTROLLER, self.kraft_epoch, self.migration_offset, self.epoch)

    def dual_write(self, *records: MetadataRecord, zk: list[tuple[str, ZnodeOp, bytes | None]]) -> int:
        """A change: to the log first, then to ZooKeeper as multis (each checks /migration, the last sets it with
        the previous offset), then /migration with the batch's offset. Returns that last write's zxid."""
        last = self.kraft(*records)
        for write in zk:
            self.zk(write, ("/migration", ZnodeOp.SET, self._migration()))
        return self.migration_write(last)

    def claim(self, zk_epoch: int, session: int | None = None) -> int:
        """The KRaft controller takes /controller (one multi with /controller_epoch), then rewrites /migration."""
        if session is not None:
            self.driver = session
        zxid = self.zk(("/controller_epoch", ZnodeOp.SET, encode_controller_epoch(zk_epoch)),
                       ("/controller", ZnodeOp.DELETE, None),
                       ("/controller", ZnodeOp.CREATE, encode_controller(CONTROLLER, 0, KAFKA, self.kraft_epoch)))
        self.migration_write()
        return zxid


def state_znode(p: int) -> str:
    return f"/brokers/topics/orders/partitions/{p}/state"


def zookeeper_cluster(c: Cluster) -> None:
    """A ZooKeeper-mode cluster: three brokers, broker 1 controller at epoch 1, topic orders (2 partitions)."""
    for b in BROKERS:
        c.zk((f"/brokers/ids/{b}", ZnodeOp.CREATE, encode_broker_registration(b, f"b{b}", 9092, KAFKA)),
             session=0xB0 + b)
    c.zk(("/controller_epoch", ZnodeOp.CREATE, encode_controller_epoch(1)),
         ("/controller", ZnodeOp.CREATE, encode_controller(1, 0, KAFKA)), session=ZK_CONTROLLER)
    c.zk(("/brokers/topics/orders", ZnodeOp.CREATE,
          encode_topic_assignment({0: [1, 2, 3], 1: [2, 3, 1]}, KAFKA, topic_id=ORDERS_ID)),
         (state_znode(0), ZnodeOp.CREATE, encode_partition_state(1, 0, 1, [1, 2, 3], KAFKA)),
         (state_znode(1), ZnodeOp.CREATE, encode_partition_state(2, 0, 1, [2, 3, 1], KAFKA)),
         ("/config/topics/orders", ZnodeOp.CREATE, encode_config({"retention.ms": "1000"})), session=ZK_CONTROLLER)


def start_quorum(c: Cluster) -> None:
    """KRaft controllers with the migration flag: a quorum leader, PRE_MIGRATION, the driver's empty /migration."""
    c.kraft(ControlRecord(ControlRecordType.LEADER_CHANGE, 0, {"leaderId": CONTROLLER, "voters": []}))
    c.kraft(migration_state(ZkMigrationState.PRE_MIGRATION))
    c.zk(("/migration", ZnodeOp.CREATE, c._migration()))


def brokers_in_migration_mode(c: Cluster) -> None:
    for b in BROKERS:
        c.kraft(register(b, 10 + b, migrating=True), unfence(b, 10 + b))


def load(c: Cluster) -> int:
    """The controller copies ZooKeeper's metadata into the log in one transaction; returns the settled zxid."""
    c.kraft(rec(R.BEGIN_TRANSACTION_RECORD, name="Migrating ZK metadata"),
            rec(R.TOPIC_RECORD, name="orders", topicId=ORDERS_ID),
            partition_record(0, [1, 2, 3], [1, 2, 3], 1), partition_record(1, [2, 3, 1], [2, 3, 1], 2),
            topic_config("retention.ms", "1000"))
    last = c.kraft(migration_state(ZkMigrationState.MIGRATION), rec(R.END_TRANSACTION_RECORD))
    return c.migration_write(last)


def shrink_isr(c: Cluster) -> int:
    return c.dual_write(isr_change(0, [1, 2]),
                        zk=[(state_znode(0), ZnodeOp.SET, encode_partition_state(1, 0, c.kraft_epoch, [1, 2], KAFKA))])


def change_retention(c: Cluster, value: str) -> int:
    return c.dual_write(topic_config("retention.ms", value),
                        zk=[("/config/topics/orders", ZnodeOp.SET, encode_config({"retention.ms": value}))])


def brokers_to_kraft(c: Cluster, brokers: tuple[int, ...] = BROKERS) -> None:
    """Each broker restarted as a KRaft broker: its ZooKeeper registration goes, it registers anew."""
    for b in brokers:
        c.zk((f"/brokers/ids/{b}", ZnodeOp.DELETE, None), session=0xB0 + b)
        c.kraft(register(b, 20 + b, migrating=False), unfence(b, 20 + b))


def loaded() -> Cluster:
    """A migration up to dual-write: the quorum has claimed ZooKeeper and loaded its metadata."""
    c = Cluster()
    zookeeper_cluster(c)
    start_quorum(c)
    brokers_in_migration_mode(c)
    c.claim(zk_epoch=2)
    load(c)
    return c


def migrated(c: Cluster | None = None) -> Cluster:
    """A clean migration up to the last step: every broker a KRaft broker, dual-write still on."""
    c = c or Cluster()
    zookeeper_cluster(c)
    start_quorum(c)
    brokers_in_migration_mode(c)
    c.claim(zk_epoch=2)
    load(c)
    shrink_isr(c)
    brokers_to_kraft(c)
    change_retention(c, "2000")
    return c


def finalize(c: Cluster) -> int:
    return c.kraft(migration_state(ZkMigrationState.POST_MIGRATION))


def kinds(report: MigrationReport) -> list[AnomalyKind]:
    return [f.kind for f in report.findings]


def reasons(report: MigrationReport) -> set[BlockReason]:
    return {b.reason for b in finalize_verdict(report).blockers}


# ------------------------------------------------------------------------------------------------ clean
def test_a_clean_migration_walks_every_phase_in_order() -> None:
    c = migrated()
    finalize(c)
    timeline = phase_timeline(c.history())
    assert [t.phase for t in timeline] == [P.PRE_MIGRATION, P.LOADING, P.DUAL_WRITE, P.KRAFT_BROKERS, P.FINALIZED]
    loading = timeline[1]
    assert (loading.signal, loading.zxid) == (PhaseSignal.CONTROLLER_CLAIMED, aligned_points(c.history())[1].zxid - 1)
    assert timeline[2].signal is PhaseSignal.MIGRATION_STATE_RECORD and timeline[2].offset is not None
    assert timeline[3].signal is PhaseSignal.BROKER_REGISTRATIONS


def test_a_clean_migration_agrees_at_every_settled_point_and_is_safe_to_finalize() -> None:
    report = check_migration(migrated().history())
    assert report.phase is P.KRAFT_BROKERS
    assert len(report.checks) == 3  # after the load, the ISR change, the config change
    assert all(check.divergences == () for check in report.checks)
    assert report.findings == ()
    verdict = finalize_verdict(report)
    assert verdict.safe and verdict.blockers == ()


def test_once_finalized_there_is_nothing_left_to_decide_and_no_broker_was_stranded() -> None:
    c = migrated()
    finalize(c)
    report = check_migration(c.history())
    assert report.phase is P.FINALIZED and report.findings == ()
    assert reasons(report) == {BlockReason.ALREADY_FINALIZED}


def test_before_the_load_finalizing_is_not_safe() -> None:
    c = Cluster()
    zookeeper_cluster(c)
    start_quorum(c)
    report = check_migration(c.history())
    assert report.phase is P.PRE_MIGRATION
    assert {BlockReason.NOT_LOADED, BlockReason.NOT_VERIFIED, BlockReason.BROKERS_NOT_ON_KRAFT} <= reasons(report)


def test_a_zookeeper_broker_left_keeps_dual_write_and_blocks_finalizing() -> None:
    c = loaded()
    brokers_to_kraft(c, (1, 2))
    change_retention(c, "2000")
    report = check_migration(c.history())
    assert report.phase is P.DUAL_WRITE
    assert dict(report.brokers_not_on_kraft) == {3: "a ZooKeeper broker in migration mode"}
    assert reasons(report) == {BlockReason.BROKERS_NOT_ON_KRAFT}


# ------------------------------------------------------------------------------------------------ alignment
def test_only_writes_of_migration_that_move_the_offset_on_are_settled() -> None:
    c = loaded()
    shrink_isr(c)
    points = aligned_points(c.history())
    assert [p.unsettled for p in points] == [
        Unsettled.NOT_LOADED,  # the driver creates it empty
        Unsettled.NOT_LOADED,  # the claim rewrites it unconditionally
        None,  # the load is done
        Unsettled.WITHIN_BATCH,  # the multi of the ISR change: ZooKeeper already holds part of the next batch
        None,  # the ISR change is written
    ]
    assert points[-1].offset == c.offset - 1 and points[-1].session_id == DRIVER


def test_a_point_beyond_the_collected_log_is_not_settled() -> None:
    c = migrated()
    history = c.history()
    cut = MigrationHistory(history.zk, history.kraft[:-1])  # the config change's record not collected yet
    assert aligned_points(cut)[-1].unsettled is Unsettled.LOG_NOT_COLLECTED
    assert len(check_migration(cut).checks) == 2


def test_views_reuse_the_fold_and_the_image() -> None:
    c = migrated()
    history = c.history()
    settled = [p for p in aligned_points(history) if p.settled]
    zk, kraft = zk_view(history.zk, settled[1].zxid), kraft_view(history.kraft, settled[1].offset)
    assert zk.partitions[("orders", 0)] == PartitionFacts((1, 2, 3), 1, 0, (1, 2)) == kraft.partitions[("orders", 0)]
    assert zk.topics == {"orders": ORDERS_ID} == kraft.topics
    assert zk.topic_configs == {"orders": {"retention.ms": "1000"}} == kraft.topic_configs
    assert zk.brokers == frozenset(BROKERS) == kraft.brokers == kraft.migrating_brokers
    assert compare(zk, kraft) == []


# ------------------------------------------------------------------------------------------------ compare
def view(store: Store, **changes: Any) -> StoreView:
    base = StoreView(store, 0, {"orders": ORDERS_ID}, {("orders", 0): PartitionFacts((1, 2, 3), 1, 4, (1, 2, 3))},
                     frozenset({1, 2, 3}), {"orders": {"retention.ms": "1000"}})
    return replace(base, **changes)


@pytest.mark.parametrize(("zk_changes", "kraft_changes", "expected"), [
    ({"topics": {"orders": ORDERS_ID, "ghost": None}}, {},
     Divergence(EntityKind.TOPIC, "ghost", ViewField.EXISTS, True, False, topic="ghost")),
    ({"topics": {"orders": "BBBBBBBBBBBBBBBBBBBBBQ"}}, {},
     Divergence(EntityKind.TOPIC, "orders", ViewField.TOPIC_ID, "BBBBBBBBBBBBBBBBBBBBBQ", ORDERS_ID, topic="orders")),
    ({"partitions": {("orders", 0): PartitionFacts((1, 2, 3), 2, 4, (1, 2, 3))}}, {},
     Divergence(EntityKind.PARTITION, "orders-0", ViewField.LEADER, 2, 1, topic="orders", partition=0)),
    ({}, {"partitions": {("orders", 0): PartitionFacts((3, 2, 1), 1, 4, (1, 2, 3))}},
     Divergence(EntityKind.PARTITION, "orders-0", ViewField.REPLICAS, (1, 2, 3), (3, 2, 1), topic="orders",
                partition=0)),
    ({}, {"partitions": {}},
     Divergence(EntityKind.PARTITION, "orders-0", ViewField.EXISTS, True, False, topic="orders", partition=0)),
    ({}, {"brokers": frozenset({1, 2})},
     Divergence(EntityKind.BROKER, "3", ViewField.REGISTERED, True, False, broker=3)),
    ({}, {"topic_configs": {"orders": {"retention.ms": "2000"}}},
     Divergence(EntityKind.TOPIC_CONFIG, "orders", "retention.ms", "1000", "2000", topic="orders")),
])
def test_compare_names_each_field_that_differs(zk_changes: dict[str, object], kraft_changes: dict[str, object],
                                               expected: Divergence) -> None:
    assert compare(view(Store.ZOOKEEPER, **zk_changes), view(Store.KRAFT, **kraft_changes)) == [expected]


def test_compare_takes_the_isr_as_a_set_and_skips_what_the_log_withholds_and_kraft_only_brokers() -> None:
    zk = view(Store.ZOOKEEPER, partitions={("orders", 0): PartitionFacts((1, 2, 3), 1, 4, (3, 1, 2))},
              topic_configs={"orders": {"retention.ms": "1000", "ssl.key.password": "x"}})
    kraft = view(Store.KRAFT, brokers=frozenset({1, 2, 3, 4}), withheld_configs={"orders": frozenset({"ssl.key.password"})})
    assert compare(zk, kraft) == []


def test_a_missing_topic_is_one_divergence_not_one_per_partition_and_config() -> None:
    zk = view(Store.ZOOKEEPER)
    kraft = view(Store.KRAFT, topics={}, partitions={}, topic_configs={})
    assert [d.identity for d in compare(zk, kraft)] == [(EntityKind.TOPIC, "orders", ViewField.EXISTS)]


# ------------------------------------------------------------------------------------------------ divergence in history
def diverge_partition(c: Cluster) -> None:
    """The controller's write of an ISR change lands with another ISR (a bug, or a lost write)."""
    c.dual_write(isr_change(1, [2, 3]),
                 zk=[(state_znode(1), ZnodeOp.SET, encode_partition_state(2, 0, c.kraft_epoch, [2, 3, 1], KAFKA))])


def diverge_topic(c: Cluster) -> None:
    c.dual_write(isr_change(1, [2, 3]),
                 zk=[(state_znode(1), ZnodeOp.SET, encode_partition_state(2, 0, c.kraft_epoch, [2, 3], KAFKA)),
                     ("/brokers/topics/ghost", ZnodeOp.CREATE, encode_topic_assignment({0: [1]}, KAFKA))])


def diverge_config(c: Cluster) -> None:
    c.dual_write(topic_config("cleanup.policy", "compact"),
                 zk=[("/config/topics/orders", ZnodeOp.SET, encode_config({"retention.ms": "1000"}))])


def diverge_broker(c: Cluster) -> None:
    """Broker 4 registers in ZooKeeper only, and stays so for two settled points."""
    c.zk(("/brokers/ids/4", ZnodeOp.CREATE, encode_broker_registration(4, "b4", 9092, KAFKA)), session=0xB4)
    shrink_isr(c)
    change_retention(c, "3000")


@pytest.mark.parametrize(("diverge", "entity", "key", "field"), [
    (diverge_partition, EntityKind.PARTITION, "orders-1", ViewField.ISR),
    (diverge_topic, EntityKind.TOPIC, "ghost", ViewField.EXISTS),
    (diverge_config, EntityKind.TOPIC_CONFIG, "orders", "cleanup.policy"),
    (diverge_broker, EntityKind.BROKER, "4", ViewField.REGISTERED),
])
def test_a_divergence_in_each_entity_kind_is_found_where_it_starts(
        diverge: object, entity: EntityKind, key: str, field: str) -> None:
    c = loaded()
    shrink_isr(c)  # past the load's full sync: a write the log did not make there would be a re-sync's
    assert callable(diverge)
    diverge(c)
    report = check_migration(c.history())
    diverged = [f for f in report.findings if f.kind is K.MIGRATION_STORES_DIVERGED]
    assert [(f.details["entity"], f.details["key"], f.details["field"]) for f in diverged] == [(entity, key, field)]
    assert diverged[0].zxid == report.checks[-1].point.zxid  # a broker's: the second point in a row
    assert kinds(report) == [K.MIGRATION_STORES_DIVERGED]  # the controller wrote it: not out of band
    assert BlockReason.STORES_DIVERGED in reasons(report)


def test_a_broker_divergence_at_one_point_only_is_not_reported() -> None:
    c = loaded()
    c.zk(("/brokers/ids/4", ZnodeOp.CREATE, encode_broker_registration(4, "b4", 9092, KAFKA)), session=0xB4)
    shrink_isr(c)
    c.kraft(register(4, 14, migrating=True))  # the quorum learns of it before the next point
    change_retention(c, "3000")
    report = check_migration(c.history())
    assert [len(ch.divergences) for ch in report.checks] == [0, 1, 0]
    assert report.findings == ()


# ------------------------------------------------------------------------------------------------ hazards
def out_of_band_retention(c: Cluster) -> int:
    return c.zk(("/config/topics/orders", ZnodeOp.SET, encode_config({"retention.ms": "5"})), session=ADMIN)


def test_a_zookeeper_write_by_another_session_during_dual_write_is_out_of_band() -> None:
    c = loaded()
    zxid = out_of_band_retention(c)
    report = check_migration(c.history())
    found = [f for f in report.findings if f.kind is K.MIGRATION_OUT_OF_BAND_ZK_WRITE]
    assert [(f.zxid, f.details["path"], f.details["session_id"]) for f in found] == [
        (zxid, "/config/topics/orders", ADMIN)]
    assert found[0].topic == "orders" and found[0].severity == "error"
    assert BlockReason.UNJUDGED_ZK_WRITES in reasons(report)  # no settled point after it yet
    shrink_isr(c)
    report = check_migration(c.history())
    assert BlockReason.UNJUDGED_ZK_WRITES not in reasons(report)
    assert BlockReason.STORES_DIVERGED in reasons(report)  # the next settled point shows it
    assert K.MIGRATION_STORES_DIVERGED in kinds(report)


def test_the_same_write_before_the_kraft_controller_claims_zookeeper_is_not_out_of_band() -> None:
    c = Cluster()
    zookeeper_cluster(c)
    out_of_band_retention(c)
    start_quorum(c)
    report = check_migration(c.history())
    assert K.MIGRATION_OUT_OF_BAND_ZK_WRITE not in kinds(report)


def failover(c: Cluster, zk_epoch: int) -> int:
    """A new quorum leader: LeaderChange, its claim of ZooKeeper from a new session, the full re-sync that puts
    ZooKeeper's retention back to the log's, and the next batch."""
    c.epoch += 1
    c.kraft_epoch += 1
    c.kraft(ControlRecord(ControlRecordType.LEADER_CHANGE, 0, {"leaderId": CONTROLLER, "voters": []}))
    c.claim(zk_epoch, session=DRIVER_AFTER_FAILOVER)
    resync = c.zk(("/config/topics/orders", ZnodeOp.SET, encode_config({"retention.ms": "1000"})),
                  ("/migration", ZnodeOp.SET, c._migration()))
    shrink_isr(c)
    return resync


def test_a_full_resync_after_a_failover_that_undoes_an_out_of_band_write_is_reported() -> None:
    c = loaded()
    out_of_band_retention(c)
    resync = failover(c, zk_epoch=3)
    report = check_migration(c.history())
    found = [f for f in report.findings if f.kind is K.MIGRATION_RESYNC_OVERWROTE_ZK]
    assert len(found) == 1 and found[0].zxid == resync
    assert found[0].details["changed"] == ["/config/topics/orders"] and found[0].details["after"] == "failover"
    assert found[0].details["deleted"] == [] and found[0].severity == "warning"
    assert all(not ch.divergences for ch in report.checks)  # ZooKeeper holds the log's again


def test_a_failover_whose_resync_writes_only_what_the_log_changed_is_not_reported() -> None:
    c = loaded()
    c.epoch += 1
    c.kraft(ControlRecord(ControlRecordType.LEADER_CHANGE, 0, {"leaderId": CONTROLLER, "voters": []}))
    c.claim(zk_epoch=3, session=DRIVER_AFTER_FAILOVER)
    change_retention(c, "2000")
    report = check_migration(c.history())
    assert report.findings == ()
    assert [t.phase for t in report.timeline] == [P.PRE_MIGRATION, P.LOADING, P.DUAL_WRITE]


def test_a_migration_znode_left_by_an_earlier_attempt_is_stale() -> None:
    c = Cluster()
    zookeeper_cluster(c)
    c.zk(("/migration", ZnodeOp.CREATE, encode_migration(CONTROLLER, 4, 812, 4)), session=0xEE)  # rolled back
    c.kraft(ControlRecord(ControlRecordType.LEADER_CHANGE, 0, {"leaderId": CONTROLLER, "voters": []}))
    c.kraft(migration_state(ZkMigrationState.PRE_MIGRATION))
    brokers_in_migration_mode(c)
    claim = c.zk(("/controller_epoch", ZnodeOp.SET, encode_controller_epoch(2)),
                 ("/controller", ZnodeOp.DELETE, None),
                 ("/controller", ZnodeOp.CREATE, encode_controller(CONTROLLER, 0, KAFKA, 1)))
    report = check_migration(c.history())
    found = [f for f in report.findings if f.kind is K.MIGRATION_STALE_ZNODE]
    assert [(f.zxid, f.details["kraft_metadata_offset"]) for f in found] == [(claim, 812)]
    assert found[0].severity == "critical"
    assert BlockReason.STALE_MIGRATION_ZNODE in reasons(report)


def test_a_new_attempt_after_a_rollback_that_kept_migration_is_stale_from_zookeeper_alone() -> None:
    c = Cluster()
    zookeeper_cluster(c)
    c.claim(zk_epoch=2)
    c.migration_write(40)  # the first attempt loaded up to offset 40
    c.zk(("/controller", ZnodeOp.DELETE, None), session=ADMIN)  # rolled back: /migration left in place
    c.zk(("/controller_epoch", ZnodeOp.SET, encode_controller_epoch(3)),
         ("/controller", ZnodeOp.CREATE, encode_controller(2, 0, KAFKA)), session=0xB2)
    first_only = check_migration(c.history())
    assert K.MIGRATION_STALE_ZNODE not in kinds(first_only)
    again = c.claim(zk_epoch=4, session=DRIVER_AFTER_FAILOVER)
    found = [f for f in check_migration(c.history()).findings if f.kind is K.MIGRATION_STALE_ZNODE]
    assert [(f.zxid, f.details["rolled_back_since_written"]) for f in found] == [(again, True)]


def test_a_failover_claim_of_a_loaded_migration_is_not_stale() -> None:
    c = loaded()
    failover(c, zk_epoch=3)
    assert K.MIGRATION_STALE_ZNODE not in kinds(check_migration(c.history()))


def test_a_kraft_epoch_above_the_zookeeper_controller_epoch_is_a_rollback_hazard() -> None:
    c = Cluster()
    c.kraft_epoch = 5
    history = migrated(c).history()
    claim = next(e.zxid for e in history.zk if e.change.path == "/controller" and e.change.session_id == DRIVER)
    report = check_migration(history)
    found = [f for f in report.findings if f.kind is K.MIGRATION_KRAFT_EPOCH_AHEAD]
    assert [(f.zxid, f.details) for f in found] == [(claim, {"kraft_controller_epoch": 5, "zk_controller_epoch": 2})]
    assert found[0].severity == "warning"
    assert finalize_verdict(report).safe  # a rollback hazard: finalizing ends it


def test_finalizing_while_a_broker_is_still_a_zookeeper_broker_strands_it() -> None:
    c = loaded()
    brokers_to_kraft(c, (1, 2))
    offset = finalize(c)
    report = check_migration(c.history())
    found = [f for f in report.findings if f.kind is K.MIGRATION_FINALIZED_BROKER_UNREGISTERED]
    assert [(f.broker, f.offset, f.details["why"]) for f in found] == [
        (3, offset, "a ZooKeeper broker in migration mode")]
    assert found[0].severity == "critical"


def test_finalizing_while_a_zookeeper_broker_never_registered_with_the_quorum_strands_it() -> None:
    c = migrated()
    c.zk(("/brokers/ids/4", ZnodeOp.CREATE, encode_broker_registration(4, "b4", 9092, KAFKA)), session=0xB4)
    assert finalize_verdict(check_migration(c.history())).blockers[0].reason is BlockReason.BROKERS_NOT_ON_KRAFT
    finalize(c)
    found = [f for f in check_migration(c.history()).findings if f.kind is K.MIGRATION_FINALIZED_BROKER_UNREGISTERED]
    assert [(f.broker, f.details["why"]) for f in found] == [(4, "not registered with the quorum")]


def test_a_rollback_to_a_zookeeper_controller_ends_the_migration_phases() -> None:
    c = loaded()
    c.zk(("/controller", ZnodeOp.DELETE, None), session=ADMIN)
    c.zk(("/controller_epoch", ZnodeOp.SET, encode_controller_epoch(3)),
         ("/controller", ZnodeOp.CREATE, encode_controller(2, 0, KAFKA)), session=0xB2)
    out_of_band_retention(c)  # ZooKeeper mode again: the admin may write
    report = check_migration(c.history())
    assert report.phase is P.ZOOKEEPER and report.timeline[-1].zxid is not None
    assert K.MIGRATION_OUT_OF_BAND_ZK_WRITE not in kinds(report)


def roll_back(c: Cluster, *, elected: int = 2, zk_epoch: int = 3) -> int:
    """Kafka's revert: the quorum gone, /controller deleted with a plain client, a broker elected; /migration left
    in place. Returns the election's zxid."""
    c.zk(("/controller", ZnodeOp.DELETE, None), session=ADMIN)
    return c.zk(("/controller_epoch", ZnodeOp.SET, encode_controller_epoch(zk_epoch)),
                ("/controller", ZnodeOp.CREATE, encode_controller(elected, 0, KAFKA)), session=0xB0 + elected)


def test_a_rollback_after_the_brokers_moved_is_reported_with_what_it_left_behind() -> None:
    c = migrated()
    brokers_in_migration_mode(c)  # the revert's first roll: back to ZooKeeper brokers with the migration flag
    election = roll_back(c)
    report = check_migration(c.history())
    found = [f for f in report.findings if f.kind is K.MIGRATION_ROLLED_BACK]
    assert [(f.zxid, f.broker, f.severity) for f in found] == [(election, 2, "warning")]
    assert found[0].details == {"from_phase": "dual_write", "brokers_had_moved": True, "kraft_brokers": [],
                                "migration_offset": c.migration_offset}
    assert report.phase is P.ZOOKEEPER
    assert reasons(report) == {BlockReason.ROLLED_BACK}  # not "not loaded", and no broker left to move


def test_a_rollback_that_skipped_the_first_roll_names_the_stranded_kraft_brokers() -> None:
    c = migrated()
    roll_back(c)
    (found,) = [f for f in check_migration(c.history()).findings if f.kind is K.MIGRATION_ROLLED_BACK]
    assert found.details["from_phase"] == "kraft_brokers" and found.details["kraft_brokers"] == list(BROKERS)


def test_a_rollback_before_the_brokers_moved_that_removed_migration_leaves_no_offset() -> None:
    c = loaded()
    c.zk(("/migration", ZnodeOp.DELETE, None), session=ADMIN)  # the docs' get /migration, rmr /migration
    roll_back(c)
    (found,) = [f for f in check_migration(c.history()).findings if f.kind is K.MIGRATION_ROLLED_BACK]
    assert found.details == {"from_phase": "dual_write", "brokers_had_moved": False, "kraft_brokers": [],
                             "migration_offset": None}
    c.claim(zk_epoch=4, session=DRIVER_AFTER_FAILOVER)  # a new attempt on a clean /migration
    assert K.MIGRATION_STALE_ZNODE not in kinds(check_migration(c.history()))


def test_a_zookeeper_election_without_a_kraft_claim_is_no_rollback() -> None:
    c = Cluster()
    zookeeper_cluster(c)
    roll_back(c)  # an ordinary ZooKeeper-mode failover
    assert check_migration(c.history()).findings == ()


def test_a_collection_gap_while_the_kraft_controller_holds_zookeeper_blocks_finalizing() -> None:
    c = migrated()
    c.zk(("/brokers", ZnodeOp.GAP, None), session=None)
    shrink_isr(c)
    assert BlockReason.ZK_HISTORY_INCOMPLETE in reasons(check_migration(c.history()))


def test_every_migration_kind_has_a_severity_and_a_documented_entry() -> None:
    from pathlib import Path

    invariants = (Path(__file__).resolve().parents[2] / "docs" / "invariants.md").read_text(encoding="utf-8")
    for kind in MIGRATION_NEW_KINDS:
        assert SEVERITY[kind] in {"info", "warning", "error", "critical"}
        assert f"`{kind}`" in invariants, kind
