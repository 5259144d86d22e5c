"""A topic deletion while one replica's broker is down, as a real Kafka 3.9 controller writes it (kafkalab).

The controller takes each live replica offline before deleting it (TopicDeletionManager.onPartitionDeletion ->
OfflineReplica -> removeReplicasFromIsr), one partition-state write per replica: a follower first leaves the
leader in place with a shrunk ISR, the leader leaves leader -1 and the last ISR member kept. The deletion waits
for the stopped broker and finishes once it is back. None of that is an outage or an illegal transition.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from engine.local_run import run_local
from models.anomalies import AnomalyKind
from models.events import MetadataEvent, MetadataEventType
from models.fold import deletion_pending
from models.reference_fold import project_metadata
from models.states import ReplicaState
from pipelines.fold_records import FOLD_INPUT
from pipelines.state_machines import SEED, BucketFolder, GlobalContext
from pipelines.vector_fold import fold_table
from tests.history import History

DOOMED = {0: [1, 2, 3], 1: [2, 3, 1]}
# the controller's writes once the deletion starts, in the order a real 3.9 controller made them (broker 2 down)
TAKEN_OFFLINE = [(1, 3, 2, [3]), (0, -1, 2, [3]), (1, -1, 3, [3]), (0, -1, 3, [3])]  # partition, leader, epoch, isr


def _history(*, deletion: bool) -> History:
    h = History()
    h.broker(1).broker(2).broker(3).controller(3, 1)
    h.topic("doomed", DOOMED)
    h.state("doomed", 0, 1, 0, 1, [1, 2, 3], op="CREATE").state("doomed", 1, 2, 0, 1, [2, 3, 1], op="CREATE")
    # broker 2's controlled shutdown: leadership moves off it, it leaves every ISR, then it deregisters
    h.state("doomed", 1, 3, 1, 1, [3, 1]).state("doomed", 0, 1, 1, 1, [1, 3])
    h.broker(2, op="DELETE")
    if deletion:
        h.add("/admin/delete_topics/doomed", "CREATE")
    for p, leader, epoch, isr in TAKEN_OFFLINE:
        h.state("doomed", p, leader, epoch, 1, isr)
    if deletion:
        h.broker(2)  # back: the deletion resumes and finishes
        for p in DOOMED:
            h.add(f"/brokers/topics/doomed/partitions/{p}/state", "DELETE")
            h.add(f"/brokers/topics/doomed/partitions/{p}", "DELETE")
        h.add("/brokers/topics/doomed/partitions", "DELETE").add("/brokers/topics/doomed", "DELETE")
        h.add("/admin/delete_topics/doomed", "DELETE")
    return h


@pytest.mark.parametrize("batch_rows", [1_000, 12], ids=["one-batch", "request-and-writes-apart"])
def test_deletion_with_a_broker_down_raises_nothing(lake: Any, batch_rows: int) -> None:
    lake.append("znode_events", _history(deletion=True).rows, writer_id="t", batch_seq=1)
    run_local(lake, batch_rows=batch_rows)
    found = [(r["kind"], r["topic"], r["partition"], r["details"]) for r in lake.read_arrow("anomalies").to_pylist()]
    assert found == []
    rt = [r for r in lake.read_arrow("replica_transitions").to_pylist() if r["topic"] == "doomed"]
    assert all(r["legal"] for r in rt)
    assert not [r for r in rt if r["from_state"] == ReplicaState.DELETION_STARTED
                and r["to_state"] == ReplicaState.ONLINE]
    pt = [r for r in lake.read_arrow("partition_transitions").to_pylist() if r["topic"] == "doomed"]
    assert [r["to_state"] for r in sorted(pt, key=lambda r: r["zxid"]) if r["partition"] == 1] == [
        "NewPartition", "OnlinePartition", "OnlinePartition", "OfflinePartition", "NonExistentPartition"]


def test_the_same_writes_without_a_deletion_are_an_outage(lake: Any) -> None:
    lake.append("znode_events", _history(deletion=False).rows, writer_id="t", batch_seq=1)
    run_local(lake)
    offline = sorted(r["partition"] for r in lake.read_arrow("anomalies").to_pylist()
                     if r["kind"] == AnomalyKind.OFFLINE_PARTITION)
    assert offline == [0, 1]


def test_the_model_moves_no_deleting_replica_to_online() -> None:
    T = MetadataEventType
    ev = [*(MetadataEvent(b, T.BROKER_REGISTERED, broker=b) for b in (1, 2, 3)),
          MetadataEvent(4, T.PARTITION_ASSIGNED, topic="d", partition=0, replicas=(1, 2, 3)),
          MetadataEvent(4, T.PARTITION_STATE_WRITTEN, topic="d", partition=0, leader=1, leader_epoch=0,
                        controller_epoch=1, isr=(1, 2, 3)),
          MetadataEvent(4, T.PARTITION_STATE_WRITTEN, topic="d", partition=0, leader=1, leader_epoch=1,
                        controller_epoch=1, isr=(1, 3)),
          MetadataEvent(4, T.BROKER_DEREGISTERED, broker=2),
          MetadataEvent(5, T.TOPIC_DELETION_REQUESTED, topic="d"),
          MetadataEvent(6, T.PARTITION_STATE_WRITTEN, topic="d", partition=0, leader=1, leader_epoch=2,
                        controller_epoch=1, isr=(1,)),
          MetadataEvent(7, T.PARTITION_STATE_WRITTEN, topic="d", partition=0, leader=-1, leader_epoch=3,
                        controller_epoch=1, isr=(1,))]
    for version in ("3.9", "2.8"):  # Offline -> DeletionIneligible is legal from 2.3 on (KAFKA-8237)
        proj = project_metadata(ev, version)
        assert proj.violations == []
        assert [t.to_state for t in proj.partition_transitions if t.zxid >= 6] == []
        assert [t for t in proj.replica_transitions if t.zxid >= 6] == []
        assert proj.replicas[("d", 0, 1)] is ReplicaState.DELETION_STARTED
        assert deletion_pending(proj.views[("d", 0)].replica_states.values())


def test_the_vector_fold_takes_a_deleting_key_row_by_row() -> None:
    """A carried deleting replica (the request was in an earlier increment): the write is flagged, nothing Online."""
    base = {"cluster": "c", "topic": "d", "partition": 0, "_seq": 0, "event_time": None, "broker": None,
            "state": None, "seed_replica_ids": None, "seed_replica_states": None, "replicas": None}
    rows = [{**base, "zxid": 5, "ord": 0, "type": SEED, "event_id": "", "state": "OfflinePartition", "leader": 1,
             "leader_epoch": 1, "controller_epoch": 1, "isr": [1, 3], "replicas": [1, 2, 3],
             "seed_replica_ids": [1, 2, 3],
             "seed_replica_states": ["ReplicaDeletionStarted", "ReplicaDeletionIneligible", "ReplicaDeletionStarted"]},
            {**base, "zxid": 6, "ord": 1, "type": "PARTITION_STATE_WRITTEN", "event_id": "w", "leader": -1,
             "leader_epoch": 2, "controller_epoch": 1, "isr": [3]}]
    ctx = GlobalContext(broker_points={1: ([1], [True]), 3: ([1], [True])})
    got = fold_table(pa.Table.from_pylist(rows, schema=to_arrow_schema(FOLD_INPUT)), ctx).to_pylist()
    expected = list(BucketFolder(ctx).fold([dict(r) for r in rows]))
    assert [r for r in got if r["rec"] in ("pt", "rt")] == []
    writes = [r for r in got if r["rec"] == "w"]
    assert [w["deletion_pending"] for w in writes] == [True]
    assert [w["deletion_pending"] for w in expected if w["rec"] == "w"] == [True]
