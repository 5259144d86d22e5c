"""A KRaft cluster's key: metadata-log records through the image into the same fold, detectors and outputs as a
ZooKeeper cluster's, whatever the batches."""

from __future__ import annotations

import itertools
import json

import pyarrow as pa

from models.anomalies import AnomalyKind
from models.kraft_image import MetadataImage
from pipelines.bucket_fold import BucketState
from pipelines.cluster_stage import ClusterState
from pipelines.keyed_pipeline import GLOBAL_SCHEMA, META_SEQ
from pipelines.kraft_stage import (
    REWRITE_GAP_SOURCE,
    KraftState,
    current_records,
    kraft_step,
    rewritten_offsets,
    route_kraft_rows,
)
from tests import kraft_history as kh


def fresh() -> KraftState:
    return KraftState(MetadataImage(), BucketState.empty(META_SEQ), ClusterState.empty(GLOBAL_SCHEMA))


def run(log: kh.KraftLog, cuts: list[int]) -> dict[str, list[dict[str, object]]]:
    """Every output table's rows of ``log`` stepped in batches cut at ``cuts``."""
    state = fresh()
    got: dict[str, list[dict[str, object]]] = {}
    bounds = [0, *cuts, log.offset]
    for lo, hi in itertools.pairwise(bounds):
        out, state = kraft_step(log.cluster, state, log.table(lo, hi), META_SEQ, "3.9")
        for name, rows in out.items():
            got.setdefault(name, []).extend(rows.to_pylist())
    return got


def faulty() -> kh.KraftLog:
    log = kh.routine_cluster()
    log.add(kh.partition_change("orders", 0, leader=2, isr=[2, 3]))
    log.add(kh.fence(1, 11))
    log.elect(2)
    log.add(kh.partition_change("orders", 0, leader=-1, isr=[2]))  # offline
    log.add(kh.partition_change("orders", 1, leader=3, isr=[2]))  # a leader outside the ISR
    log.add(kh.remove_topic("orders"))
    return log


def test_a_routine_history_raises_nothing_and_ends_in_its_state() -> None:
    log = kh.routine_cluster()
    log.add(kh.partition_change("orders", 0, isr=[1, 2]))
    log.add(kh.partition_change("orders", 0, isr=[1, 2, 3]))
    got = run(log, [])
    assert got.get("anomalies", []) == []
    state = {(r["topic"], r["partition"]): r for r in got["partition_state"]}
    assert state[("orders", 0)]["isr"] == [1, 2, 3] and state[("orders", 0)]["state"] == "OnlinePartition"
    assert state[("orders", 1)]["leader"] == 2
    terms = got["controller_tenure"]
    assert [(t["controller_id"], t["controller_epoch"]) for t in terms] == [(1, 2)]


def test_faults_raise_their_kinds_at_their_offsets() -> None:
    found = {(a["kind"], a["zxid"]) for a in run(faulty(), [])["anomalies"]}
    assert (AnomalyKind.OFFLINE_PARTITION, 13) in found
    assert (AnomalyKind.LEADER_NOT_IN_ISR, 14) in found


def test_the_outputs_do_not_depend_on_the_batches() -> None:
    def key(rows: list[dict[str, object]]) -> list[str]:
        return sorted(repr(sorted(r.items())) for r in rows)

    whole = run(faulty(), [])
    for cuts in ([5], [3, 9, 14], list(range(1, 18))):
        cut = run(faulty(), cuts)
        for table in ("kraft_metadata_events", "anomalies", "partition_transitions", "replica_transitions"):
            assert key(cut.get(table, [])) == key(whole.get(table, [])), (table, cuts)


def test_a_snapshot_covers_segments_deleted_unread() -> None:
    log = faulty()
    rows = log.table().to_pylist()
    # the log's first 12 records were deleted before they were read; a snapshot at offset 12 holds their image
    snapshot = kh.KraftLog()
    kh.routine_cluster(snapshot)
    snapshot.add(kh.partition_change("orders", 0, leader=2, isr=[2, 3]))
    snapshot.add(kh.fence(1, 11))
    snap_rows = [{**r, "source": "snapshot", "snapshot_id": "00000000000000000012-0000000002"}
                 for r in snapshot.rows if not r["is_control"]]
    table = pa.Table.from_pylist([*snap_rows, *(r for r in rows if r["offset"] >= 12)],
                                 schema=log.table().schema)
    out, _ = kraft_step(log.cluster, fresh(), table, META_SEQ, "3.9")
    events = out["kraft_metadata_events"].to_pylist()
    assert min(e["zxid"] for e in events) == 11  # the snapshot's image, dated at its last offset
    final = {(r["topic"], r["partition"]): r for r in out["partition_state"].to_pylist()}
    assert final == {} or all(r["state"] == "NonExistentPartition" for r in final.values())
    assert {a["kind"] for a in out["anomalies"].to_pylist()} >= {AnomalyKind.OFFLINE_PARTITION}


def test_two_quorum_leaders_in_one_epoch_are_a_split_brain() -> None:
    log = kh.routine_cluster()
    key, value = kh.leader_change(2)
    log._row(value=value, key=key, control=True, base=log.offset, last=log.offset, seconds=1.0)  # epoch unchanged
    log.elect(3)  # a new epoch: a normal election
    found = run(log, [])["anomalies"]
    assert [(a["kind"], a["zxid"]) for a in found] == [(AnomalyKind.SPLIT_BRAIN, 10)]
    assert '"leaders": [1, 2]' in str(found[0]["details"])


def test_a_leader_from_the_eligible_leader_replicas_is_a_clean_election() -> None:
    log = kh.routine_cluster()
    log.add(kh.partition_change("orders", 0, leader=-1, isr=[], elr=[2]))  # 10: the ISR emptied into the ELR
    log.add(kh.partition_change("orders", 0, leader=2, isr=[2], elr=[]))  # 11: ELR member elected: clean
    log.add(kh.partition_change("orders", 1, leader=-1, isr=[], elr=[]))  # 12
    log.add(kh.partition_change("orders", 1, leader=3, isr=[3]))  # 13: from nowhere: unclean
    log.add(kh.partition_change("orders", 0, leader=-1, isr=[], elr=[3]))  # 14
    log.add(kh.partition_change("orders", 0, leader=3, isr=[3], elr=[], recovery=1))  # 15: Kafka marks it unclean
    found = {(a["kind"], a["zxid"]) for a in run(log, [11])["anomalies"]}
    assert (AnomalyKind.UNCLEAN_LEADER_ELECTION, 13) in found
    assert (AnomalyKind.UNCLEAN_LEADER_ELECTION, 11) not in found
    assert (AnomalyKind.UNCLEAN_LEADER_ELECTION, 15) in found


def kinds_at(log: kh.KraftLog, kind: AnomalyKind) -> list[tuple[int, object, object]]:
    return sorted((a["zxid"], a["partition"], a["broker"]) for a in run(log, []).get("anomalies", [])
                  if a["kind"] == kind)


def test_a_fenced_broker_taken_out_of_every_shared_isr_is_routine() -> None:
    log = kh.routine_cluster()
    log.add(kh.fence(3, 13), kh.partition_change("orders", 0, isr=[1, 2]), kh.partition_change("orders", 1, isr=[2, 1]))
    log.add(kh.fence(3, 13, fenced=False))
    assert kinds_at(log, AnomalyKind.FENCED_BROKER_IN_ISR) == []


def test_a_fenced_broker_left_in_an_isr_is_found_when_written_and_when_unfenced() -> None:
    log = kh.routine_cluster()
    log.add(kh.fence(3, 13))  # 10: the ISRs keep broker 3
    log.add(kh.partition_change("orders", 0, leader=2, isr=[1, 2, 3]))  # 11: the controller writes it in again
    log.add(kh.fence(3, 13, fenced=False))  # 12: unfenced: orders-1 kept it all along
    assert kinds_at(log, AnomalyKind.FENCED_BROKER_IN_ISR) == [(11, 0, 3), (12, 0, 3), (12, 1, 3)]


def test_a_metadata_transaction_never_ended_is_found() -> None:
    log = kh.routine_cluster()
    log.add(kh.transaction("begin", "create"), kh.topic("a"))  # 10, 11
    log.add(kh.transaction("end"))  # 12: a finished one
    log.add(kh.transaction("begin"), kh.topic("b"))  # 13, 14
    log.add(kh.transaction("begin"))  # 15: the one begun at 13 never ended
    log.add(kh.transaction("abort", "failover"))  # 16
    log.add(kh.transaction("begin"))  # 17
    log.elect(2)  # 18: a new quorum leader ...
    log.add(kh.topic("c"))  # 19: ... writes without aborting the transaction begun at 17
    found = [a for a in run(log, [14]).get("anomalies", []) if a["kind"] == AnomalyKind.METADATA_TRANSACTION_UNFINISHED]
    assert sorted((a["zxid"], json.loads(str(a["details"]))["begun_at"]) for a in found) == [(15, 13), (19, 17)]


def test_a_snapshot_ending_inside_the_first_kept_segment_is_taken() -> None:
    # Kafka deletes whole segments: the snapshot that allowed it may end past the first segment it keeps
    whole = faulty()
    snapshot = kh.KraftLog()
    kh.routine_cluster(snapshot)
    snapshot.add(kh.partition_change("orders", 0, leader=2, isr=[2, 3]))
    snapshot.add(kh.fence(1, 11))
    snapshot.add(kh.partition_change("orders", 0, leader=2, isr=[2, 3]))  # stands for offsets 12 and 13
    snapshot.add(kh.partition_change("orders", 0, leader=2, isr=[2, 3]))
    snap_rows = [{**r, "source": "snapshot", "snapshot_id": "00000000000000000014-0000000002"}
                 for r in snapshot.rows if not r["is_control"]]
    kept = [r for r in whole.rows if r["offset"] >= 12]  # the first kept segment starts at 12
    table = pa.Table.from_pylist([*snap_rows, *kept], schema=whole.table().schema)
    out, _ = kraft_step(whole.cluster, fresh(), table, META_SEQ, "3.9")
    assert out["kraft_metadata_events"].num_rows > len(kept)  # the snapshot's image was taken
    expected, _ = kraft_step(whole.cluster, fresh(), whole.table(), META_SEQ, "3.9")

    def final(rows: pa.Table) -> dict[tuple[str, int], tuple[object, ...]]:
        return {(r["topic"], r["partition"]): (r["state"], r["leader"], r["isr"]) for r in rows.to_pylist()}

    assert final(out["partition_state"]) == final(expected["partition_state"])


# ------------------------------------------------------------------------------ a tail Raft truncated
def stepped(batches: list[pa.Table]) -> dict[str, list[dict[str, object]]]:
    """Every output table's rows of ``batches`` stepped one after another."""
    state = fresh()
    got: dict[str, list[dict[str, object]]] = {}
    for batch in batches:
        out, state = kraft_step("kraft", state, batch, META_SEQ, "3.9")
        for name, rows in out.items():
            got.setdefault(name, []).extend(rows.to_pylist())
    return got


def outputs(batches: list[pa.Table]) -> dict[str, list[str]]:
    """``stepped`` with each table's rows sorted, as text."""
    return {name: sorted(repr(sorted(r.items())) for r in rows) for name, rows in stepped(batches).items() if rows}


def rewritten() -> tuple[kh.KraftLog, int]:
    log = kh.routine_cluster()
    return log, kh.rewritten_tail(log)


def test_the_log_as_it_stands_keeps_the_newest_epoch_at_each_offset() -> None:
    log, _ = rewritten()
    stored = log.table()
    assert stored.num_rows == log.offset + 2  # offsets 10 and 11 stored under epochs 2 and 3
    assert rewritten_offsets(stored).to_pylist() == [{"cluster": "kraft", "offset": 10, "newest_epoch": 3},
                                                     {"cluster": "kraft", "offset": 11, "newest_epoch": 3}]
    assert current_records(stored).to_pylist() == log.current().to_pylist()
    snapshot = stored.set_column(stored.schema.get_field_index("source"), "source",
                                 pa.array(["snapshot"] * stored.num_rows))
    assert current_records(snapshot).num_rows == stored.num_rows  # a snapshot's rows are not the log's tail


def test_a_truncated_tail_folds_as_the_log_stands() -> None:
    log, _ = rewritten()
    got = outputs([log.table()])
    assert got == outputs([log.current()])
    state = {(r["topic"], r["partition"]): r for r in run(log, [])["partition_state"]}
    assert state[("orders", 0)]["isr"] == [1, 2, 3] and state[("orders", 0)]["leader"] == 1
    assert state[("orders", 1)]["leader"] == 3  # the topic the truncated tail removed is there


def test_a_rewrite_the_query_knew_of_at_its_start_drops_the_truncated_records_from_an_earlier_batch() -> None:
    log, before = rewritten()
    known = rewritten_offsets(log.table())
    first, later = (route_kraft_rows(t, rewritten=known).drop_columns(["bucket"])
                    for t in (log.table().slice(0, before), log.rows_since(before)))
    assert first.num_rows == before - 2
    clean = log.current()
    assert outputs([first, later]) == outputs([clean.slice(0, first.num_rows), clean.slice(first.num_rows)])


def test_a_rewrite_of_records_already_applied_is_a_collection_gap() -> None:
    """A monitor folded the tail before Raft truncated it: the image cannot take it back, so the newer epoch's
    records there are a gap until a rebuild, at the first of them."""
    log, before = rewritten()
    got = outputs([log.table().slice(0, before), log.rows_since(before)])
    gaps = [a for a in stepped([log.table().slice(0, before), log.rows_since(before)]).get("anomalies", [])
            if a["kind"] == AnomalyKind.COLLECTION_GAP]
    assert [a["zxid"] for a in gaps] == [10]
    detail = json.loads(str(gaps[0]["details"]))["detail"]
    assert json.loads(detail) | {} == {"source": REWRITE_GAP_SOURCE, "offsets": "10..11", "leader_epoch": 3,
                                       "applied_epoch": 2, "reason": json.loads(detail)["reason"]}
    clean = log.current()
    clean_split = outputs([clean.slice(0, before - 2), clean.slice(before - 2)])
    assert got["partition_transitions"] != clean_split["partition_transitions"]  # what it applied stays
