"""`rebuild` (the driver runner, as the Spark query composes the same steps) on a lake holding one cluster's
ZooKeeper history and its KRaft metadata log, as a migration's collectors leave it: the derived tables hold the
ZooKeeper history once (the log is `zkledger migration`'s to read), and what the KRaft controller writes into
ZooKeeper during dual-write is not judged by ZooKeeper's controller epoch and registrations."""

from __future__ import annotations

from collections import Counter
from typing import Any

from engine.local_run import run_local
from models.anomalies import AnomalyKind as K
from models.events import ZnodeOp
from models.tables import ANOMALIES, PARTITION_STATE
from simulator.payloads import encode_partition_state
from tests.services.test_report_migration import KAFKA, migration, state_znode


def test_a_migrating_clusters_derived_tables_hold_its_zookeeper_history_once(lake: Any) -> None:
    m = migration()
    # during dual-write, with every broker a KRaft broker (no /brokers/ids): the controller moves a leadership,
    # writing the KRaft controller epoch (1), below the /controller_epoch its claim set (2)
    m.zk((state_znode(1), ZnodeOp.SET, encode_partition_state(3, 1, 1, [3, 1], KAFKA)))
    m.write(lake)
    run_local(lake)
    states = lake.read_arrow(PARTITION_STATE.name).to_pylist()
    assert Counter((r["topic"], r["partition"]) for r in states) == {("orders", 0): 1, ("orders", 1): 1}
    assert {(r["partition"], r["leader"], r["leader_epoch"]) for r in states} == {(0, 1, 0), (1, 3, 1)}
    kinds = {r["kind"] for r in lake.read_arrow(ANOMALIES.name).to_pylist()}
    assert not kinds & {K.ZOMBIE_CONTROLLER_WRITE, K.LEADER_NOT_LIVE, K.SPLIT_BRAIN}, kinds
