"""The metadata -> state-machine inference (models/fold.py) and the reference fold (models/reference_fold.py)."""

from __future__ import annotations

import pytest

from models.errors import OutOfOrderEventError
from models.events import MetadataEvent, MetadataEventType, ZnodeChange, ZnodeOp
from models.fold import Cause, PartitionFold, PartitionView
from models.reference_fold import project_metadata, reseed_after_failover
from models.states import PartitionState as P
from models.states import ReplicaState as R
from models.znode_codec import decode
from simulator.payloads import encode_partition_state

T = MetadataEventType


def ev(zxid: int, type_: T, **kw: object) -> MetadataEvent:
    return MetadataEvent(zxid=zxid, type=type_, **kw)  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------- inference
FOLD = PartitionFold("3.8")


def steps(view: PartitionView, event: MetadataEvent, live: set[int], fold: PartitionFold = FOLD) -> list[tuple[object, ...]]:
    """(replica or None, to_state, legal) of each step ``event`` causes on ``view``."""
    return [(s.replica, s.to_state, s.legal) for s in fold.apply(view, event, live)[1]]


def test_partition_rules() -> None:
    live = {1, 2}
    assigned = ev(1, T.PARTITION_ASSIGNED, topic="t", partition=0, replicas=(1, 2))
    assert steps(PartitionView(), assigned, live) == [(None, P.NEW, True), (1, R.NEW, True), (2, R.NEW, True)]
    on = PartitionView(state=P.ONLINE, replicas=(1, 2), leader=1, leader_epoch=0, isr=(1, 2),
                       replica_states={1: R.ONLINE, 2: R.ONLINE})
    assert steps(on, assigned, live) == []  # the same assignment again: nothing
    new = PartitionView(state=P.NEW, replicas=(1, 2), replica_states={1: R.NEW, 2: R.NEW})
    online = ev(2, T.PARTITION_STATE_WRITTEN, leader=1, leader_epoch=0, isr=(1, 2))
    assert steps(new, online, live) == [(None, P.ONLINE, True), (1, R.ONLINE, True), (2, R.ONLINE, True)]
    offline = ev(3, T.PARTITION_STATE_WRITTEN, leader=-1, leader_epoch=1, isr=(1,))
    assert steps(new, offline, live)[0] == (None, P.OFFLINE, True)
    isr_only = ev(4, T.PARTITION_STATE_WRITTEN, leader=1, leader_epoch=0, isr=(1,))
    assert steps(on, isr_only, live) == []  # leader-originated shrink of a live follower: no step at all
    assert steps(on, ev(5, T.TOPIC_DELETION_REQUESTED, topic="t"), live)[0] == (None, P.OFFLINE, True)
    deleted = [s for s in steps(on, ev(6, T.TOPIC_DELETED, topic="t"), live) if s[0] is None]
    assert deleted == [(None, P.OFFLINE, True), (None, P.NON_EXISTENT, True)]
    assert steps(PartitionView(), ev(7, T.TOPIC_DELETED, topic="t"), live) == []
    # a state write for a partition never assigned: Kafka would not get there (NonExistent -> Online is illegal)
    assert steps(PartitionView(), online, live)[0] == (None, P.ONLINE, False)


def test_replica_rules() -> None:
    view = PartitionView(state=P.ONLINE, replicas=(1, 2, 3), leader=1, leader_epoch=3, isr=(1, 2, 3),
                         replica_states={1: R.ONLINE, 2: R.ONLINE, 3: R.ONLINE})
    # the leader drops 2 and 3 (same leader_epoch): only 3, whose broker is gone, goes Offline
    shrink = ev(5, T.PARTITION_STATE_WRITTEN, leader=1, leader_epoch=3, isr=(1,))
    assert steps(view, shrink, {1, 2}) == [(3, R.OFFLINE, True)]
    # the controller takes 2 out (leader_epoch bumped: a controlled shutdown): Offline though alive
    assert steps(view, ev(5, T.PARTITION_STATE_WRITTEN, leader=1, leader_epoch=4, isr=(1, 3)), {1, 2, 3}) == [
        (None, P.ONLINE, True), (2, R.OFFLINE, True)]
    assert steps(view, ev(6, T.BROKER_DEREGISTERED, broker=2), {1, 3}) == [(2, R.OFFLINE, True)]
    assert steps(view, ev(6, T.BROKER_DEREGISTERED, broker=9), {1, 2, 3}) == []  # not a replica here
    back = PartitionView(state=P.ONLINE, replicas=(1, 2), replica_states={1: R.ONLINE, 2: R.OFFLINE})
    assert steps(back, ev(7, T.BROKER_REGISTERED, broker=2), {1, 2}) == [(2, R.ONLINE, True)]
    # reassignment done: replica 3 dropped, 4 added
    moved = ev(8, T.PARTITION_ASSIGNED, replicas=(1, 2, 4))
    assert steps(view, moved, {1, 2, 3, 4}) == [(4, R.NEW, True), (3, R.OFFLINE, True), (3, R.DELETION_STARTED, True),
                                                (3, R.DELETION_SUCCESSFUL, True), (3, R.NON_EXISTENT, True)]
    # deletion start: live replicas Offline -> Started, the dead one's Offline -> Ineligible (legal on 2.3+ only)
    requested = ev(9, T.TOPIC_DELETION_REQUESTED, topic="t")
    del_view = PartitionView(state=P.ONLINE, replicas=(1, 2), replica_states={1: R.ONLINE, 2: R.OFFLINE})
    assert steps(del_view, requested, {1}) == [(None, P.OFFLINE, True), (1, R.OFFLINE, True),
                                               (1, R.DELETION_STARTED, True), (2, R.DELETION_INELIGIBLE, True)]
    assert steps(del_view, requested, {1}, PartitionFold("2.2"))[-1] == (2, R.DELETION_INELIGIBLE, False)


def test_reseed_after_failover_follows_kafka() -> None:
    views = {
        ("t", 0): PartitionView(state=P.ONLINE, replicas=(1, 2), leader=1),
        ("t", 1): PartitionView(state=P.ONLINE, replicas=(2, 3), leader=3),  # leader dead
        ("t", 2): PartitionView(state=P.NEW, replicas=(1,), leader=None),  # no state znode
        ("gone", 0): PartitionView(state=P.NON_EXISTENT),
    }
    seed = reseed_after_failover(views, {1, 2}, "2.2")
    assert seed.partitions == {("t", 0): P.ONLINE, ("t", 1): P.OFFLINE, ("t", 2): P.NEW}
    assert seed.replicas[("t", 1, 3)] is R.DELETION_INELIGIBLE and seed.replicas[("t", 0, 2)] is R.ONLINE
    # 2.3+ (KAFKA-3143) moves the replica on the dead broker on to OfflineReplica
    assert reseed_after_failover(views, {1, 2}, "2.3").replicas[("t", 1, 3)] is R.OFFLINE
    # what changed is a legal FAILOVER_RESEED step; an unchanged state is no step
    after, reseed_steps = FOLD.reseed(views[("t", 1)], {1, 2})
    assert after.state is P.OFFLINE
    assert [(s.replica, s.to_state, s.legal, s.cause) for s in reseed_steps] == [
        (None, P.OFFLINE, True, Cause.FAILOVER_RESEED), (2, R.ONLINE, True, Cause.FAILOVER_RESEED),
        (3, R.DELETION_INELIGIBLE, True, Cause.FAILOVER_RESEED), (3, R.OFFLINE, True, Cause.FAILOVER_OFFLINE)]


# ------------------------------------------------------------------------------ metadata fold
def _story() -> list[MetadataEvent]:
    state = "/brokers/topics/t/partitions/0/state"
    changes = [
        ZnodeChange(1, "/brokers/ids/1", ZnodeOp.CREATE, b'{"version":4,"host":"h","port":1,"endpoints":[]}'),
        ZnodeChange(2, "/brokers/ids/2", ZnodeOp.CREATE, b'{"version":4,"host":"h","port":2,"endpoints":[]}'),
        ZnodeChange(3, "/brokers/topics/t", ZnodeOp.CREATE, b'{"version":1,"partitions":{"0":[1,2]}}'),
        ZnodeChange(4, state, ZnodeOp.CREATE, encode_partition_state(1, 0, 1, [1, 2], "2.2")),
        ZnodeChange(5, "/brokers/ids/2", ZnodeOp.DELETE),
        ZnodeChange(6, state, ZnodeOp.SET, encode_partition_state(1, 1, 1, [1], "2.2")),
        ZnodeChange(7, "/admin/delete_topics/t", ZnodeOp.CREATE, b""),
        ZnodeChange(8, state, ZnodeOp.DELETE),
        ZnodeChange(9, "/brokers/topics/t", ZnodeOp.DELETE),
        ZnodeChange(10, "/admin/delete_topics/t", ZnodeOp.DELETE),
    ]
    return [e for c in changes for e in decode(c)]


def test_project_metadata_topic_lifecycle_and_kafka_8237() -> None:
    on_22 = project_metadata(_story(), "2.2")
    on_23 = project_metadata(_story(), "2.3")
    for proj in (on_22, on_23):
        assert proj.partitions[("t", 0)] is P.NON_EXISTENT
        assert proj.replicas == {("t", 0, 1): R.NON_EXISTENT, ("t", 0, 2): R.NON_EXISTENT}
        assert [(t.from_state, t.to_state) for t in proj.partition_transitions] == [
            ("NonExistentPartition", "NewPartition"),
            ("NewPartition", "OnlinePartition"),
            ("OnlinePartition", "OnlinePartition"),
            ("OnlinePartition", "OfflinePartition"),
            ("OfflinePartition", "NonExistentPartition"),
        ]
    # the dead replica's Offline -> DeletionIneligible move is illegal before 2.3 only (KAFKA-8237)
    assert [(v.zxid, v.from_state, v.to_state) for v in on_22.violations] == [
        (7, "OfflineReplica", "ReplicaDeletionIneligible")
    ]
    assert on_23.violations == []


def test_project_metadata_failover_reseeds() -> None:
    events = [
        ev(1, T.BROKER_REGISTERED, broker=1),
        ev(2, T.PARTITION_ASSIGNED, topic="t", partition=0, replicas=(1, 2)),
        ev(3, T.PARTITION_STATE_WRITTEN, topic="t", partition=0, leader=1, leader_epoch=0, isr=(1,)),
        ev(4, T.CONTROLLER_ELECTED, controller_id=1),
    ]
    proj = project_metadata(events, "2.2")
    assert proj.replicas[("t", 0, 2)] is R.DELETION_INELIGIBLE  # broker 2 never registered
    assert [(t.zxid, t.to_state, t.legal, t.cause) for t in proj.replica_transitions if t.zxid == 4] == [
        (4, "ReplicaDeletionIneligible", True, "failover reseed")]  # Kafka logs nothing; zkledger records it
    proj23 = project_metadata(events, "2.3")  # 2.3+ (KAFKA-3143) then moves it to OfflineReplica
    assert proj23.replicas[("t", 0, 2)] is R.OFFLINE
    assert [(t.zxid, t.to_state, t.cause) for t in proj23.replica_transitions if t.zxid == 4] == [
        (4, "ReplicaDeletionIneligible", "failover reseed"), (4, "OfflineReplica", Cause.FAILOVER_OFFLINE)]
    # a history that began without /brokers/ids says nothing about liveness: no re-seed
    blind = project_metadata(events[1:], "2.3")
    assert all(t.zxid < 4 for t in blind.replica_transitions + blind.partition_transitions)


def test_project_metadata_rejects_unsorted() -> None:
    with pytest.raises(OutOfOrderEventError):
        project_metadata([ev(5, T.BROKER_REGISTERED, broker=1), ev(4, T.BROKER_REGISTERED, broker=2)])
