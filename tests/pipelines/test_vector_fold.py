"""The vectorised fold (pipelines.vector_fold) emits exactly what the row-at-a-time BucketFolder emits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.fold import PARTITION_STATES_BY_CODE, REPLICA_STATES_BY_CODE
from models.ids import event_id, metadata_event_id, step_id
from pipelines.arrow_ids import event_ids, metadata_event_ids, step_ids
from pipelines.fold_records import FOLD_ARROW_SCHEMA
from pipelines.state_machines import SEED, BucketFolder, GlobalContext
from pipelines.vector_fold import fold_table, segmented_compose

ROW_SCHEMA = pa.schema([
    ("cluster", pa.string()), ("topic", pa.string()), ("partition", pa.int32()), ("zxid", pa.int64()),
    ("_seq", pa.int32()), ("ord", pa.int32()), ("event_time", pa.timestamp("us", tz="UTC")),
    ("type", pa.string()), ("leader", pa.int32()), ("leader_epoch", pa.int32()), ("controller_epoch", pa.int32()),
    ("isr", pa.list_(pa.int32())), ("replicas", pa.list_(pa.int32())), ("event_id", pa.string()),
    ("state", pa.string()), ("seed_replica_ids", pa.list_(pa.int32())), ("seed_replica_states", pa.list_(pa.string())),
    ("broker", pa.int32()),
])
T0 = datetime(2026, 1, 1, tzinfo=UTC)
brokers = st.integers(0, 4)
replica_list = st.lists(brokers, max_size=4)


@st.composite
def key_rows(draw: Any, topic: str, partition: int, zxids: list[int], deletions: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    base = {"cluster": "c", "topic": topic, "partition": partition, "_seq": 0, "state": None,
            "seed_replica_ids": None, "seed_replica_states": None, "leader": None, "leader_epoch": None,
            "controller_epoch": None, "isr": None, "replicas": None, "broker": None}
    if draw(st.booleans()):
        reps = sorted(set(draw(replica_list)))
        rows.append({**base, "zxid": draw(st.integers(0, 5)), "ord": 0, "type": SEED, "event_id": "",
                     "event_time": draw(st.sampled_from([None, T0])),
                     "state": str(draw(st.sampled_from(PARTITION_STATES_BY_CODE))),
                     "leader": draw(st.none() | st.integers(-1, 4)), "leader_epoch": draw(st.none() | st.integers(0, 3)),
                     "controller_epoch": draw(st.none() | st.integers(0, 3)), "isr": draw(st.none() | replica_list),
                     "replicas": draw(st.none() | replica_list), "seed_replica_ids": reps,
                     "seed_replica_states": [str(draw(st.sampled_from(REPLICA_STATES_BY_CODE))) for _ in reps]})
    for i in range(draw(st.integers(0, 9))):
        zxid = zxids.pop(0)
        kinds = ["PARTITION_ASSIGNED", "PARTITION_STATE_WRITTEN", "PARTITION_STATE_WRITTEN", "PARTITION_STATE_WRITTEN"]
        kind = draw(st.sampled_from(kinds + ["CONTROLLER_ELECTED", "BROKER_REGISTERED", "BROKER_DEREGISTERED"]
                                    + ["PARTITION_STATE_DELETED", "TOPIC_DELETION_REQUESTED"] * deletions))
        row = {**base, "zxid": zxid, "ord": 1, "type": kind, "event_id": f"e{zxid}",
               "event_time": draw(st.sampled_from([None, T0 + timedelta(seconds=zxid)]))}
        if kind == "PARTITION_ASSIGNED":
            row["replicas"] = draw(replica_list)
        elif kind == "PARTITION_STATE_WRITTEN":
            row.update(leader=draw(st.integers(-1, 4)), leader_epoch=draw(st.integers(0, 3)),
                       controller_epoch=draw(st.integers(0, 3)), isr=draw(replica_list))
        elif kind.startswith("BROKER"):
            row["broker"] = draw(brokers)
        rows.append(row)
        del i
    return rows


@st.composite
def histories(draw: Any, deletions: bool = True) -> tuple[list[dict[str, Any]], GlobalContext]:
    zxids = list(range(10, 400))
    rows: list[dict[str, Any]] = []
    for k in range(draw(st.integers(1, 4))):
        rows += draw(key_rows(f"t{k % 2}", k, zxids, deletions))
    epochs = sorted(set(draw(st.lists(st.integers(0, 120), max_size=3))))
    ctx = GlobalContext(epoch_zxids=epochs, epoch_values=list(range(1, len(epochs) + 1)))
    for b in draw(st.lists(brokers, max_size=3, unique=True)):
        points = sorted(set(draw(st.lists(st.integers(0, 120), min_size=1, max_size=3))))
        ctx.broker_points[b] = (points, [draw(st.booleans()) for _ in points])
    rows.sort(key=lambda r: (r["topic"], r["partition"], r["ord"], r["zxid"], r["_seq"], r["event_id"]))
    return rows, ctx


def _canon(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    def norm(v: Any) -> str:
        return repr(v.timestamp() if isinstance(v, datetime) else v)

    names = FOLD_ARROW_SCHEMA.names
    return sorted(tuple(norm(r.get(n)) for n in names) for r in records)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans().flatmap(histories), st.sampled_from(["2.2", "3.8"]))
def test_vector_fold_equals_row_fold(history: tuple[list[dict[str, Any]], GlobalContext], version: str) -> None:
    """With deletions some keys take the row-fold fallback; without, every key takes the numpy scan. The
    versions differ in the replica table (KAFKA-8237) and the re-seed (KAFKA-3143)."""
    rows, ctx = history
    expected = [{k: v for k, v in r.items() if k != "src_event_id"} for r in BucketFolder(ctx, version).fold(
        [dict(r) for r in rows])]
    got = fold_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), ctx, version).to_pylist()
    assert _canon(got) == _canon(expected)
    step_ids_seen = [r["event_id"] for r in got if r["rec"] in ("pt", "rt")]
    assert len(step_ids_seen) == len(set(step_ids_seen))


def test_fast_path_is_taken_and_counts_match_a_known_history() -> None:
    """Assign -> elect -> ISR shrink -> re-elect: the exact records (no deletion, so no row-fold fallback)."""
    mk = {"cluster": "c", "topic": "t", "partition": 0, "_seq": 0, "ord": 1, "state": None, "seed_replica_ids": None,
          "seed_replica_states": None, "leader": None, "leader_epoch": None, "controller_epoch": None, "isr": None,
          "replicas": None, "event_time": None}
    rows = [
        {**mk, "zxid": 1, "type": "PARTITION_ASSIGNED", "event_id": "a", "replicas": [1, 2]},
        {**mk, "zxid": 2, "type": "PARTITION_STATE_WRITTEN", "event_id": "b", "leader": 1, "leader_epoch": 0,
         "controller_epoch": 1, "isr": [1, 2]},
        {**mk, "zxid": 3, "type": "PARTITION_STATE_WRITTEN", "event_id": "c", "leader": 1, "leader_epoch": 0,
         "controller_epoch": 1, "isr": [1]},
        {**mk, "zxid": 4, "type": "PARTITION_STATE_WRITTEN", "event_id": "d", "leader": 2, "leader_epoch": 1,
         "controller_epoch": 1, "isr": [2]},
    ]
    out = fold_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), GlobalContext()).to_pylist()
    pt = [(r["zxid"], r["from_state"], r["to_state"], r["legal"]) for r in out if r["rec"] == "pt"]
    assert sorted(pt) == [(1, "NonExistentPartition", "NewPartition", True),
                          (2, "NewPartition", "OnlinePartition", True),
                          (4, "OnlinePartition", "OnlinePartition", True)]
    rt = sorted((r["zxid"], r["replica"], r["to_state"]) for r in out if r["rec"] == "rt")
    assert rt == [(1, 1, "NewReplica"), (1, 2, "NewReplica"), (2, 1, "OnlineReplica"), (2, 2, "OnlineReplica"),
                  (3, 2, "OfflineReplica"), (4, 1, "OfflineReplica"), (4, 2, "OnlineReplica")]
    # step ids number the steps of each source row, partition step first
    ids = {(r["zxid"], r["replica"]): r["event_id"] for r in out if r["rec"] in ("pt", "rt")}
    assert ids[(4, None)] == step_id("d", 0, "pt", 0) == "d/0/pt0"
    assert ids[(4, 2)] == step_id("d", 0, "rt", 1) and ids[(4, 1)] == step_id("d", 0, "rt", 2)
    ps = [r for r in out if r["rec"] == "ps"]
    assert [(r["state"], r["leader"], r["isr"], r["as_of_zxid"]) for r in ps] == [("OnlinePartition", 2, [2], 4)]


def test_event_ids_match_the_model() -> None:
    cols = (pa.array(["a", None]), "pt", pa.array([1, 22], pa.int64()))
    assert event_ids(*cols).to_pylist() == [event_id("a", "pt", 1), event_id(None, "pt", 22)]
    got = step_ids(pa.array(["e1", "e2"]), pa.array([0, 7], pa.int32()), "rt", np.array([3, 0]))
    assert got.to_pylist() == [step_id("e1", 0, "rt", 3), step_id("e2", 7, "rt", 0)]


@settings(max_examples=200, deadline=None)
# up to 4 states: random maps on 5 can generate all 3,125 of them (11 s to close; the real machines close in tens)
@given(st.integers(2, 4).flatmap(lambda k: st.tuples(
    st.lists(st.lists(st.integers(0, k - 1), min_size=k, max_size=k), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=40))))
def test_segmented_compose_equals_applying_each_map_in_turn(case: tuple[list[list[int]], list[tuple[int, bool]]]) -> None:
    generators, rows = case
    k = len(generators[0])
    funcs = np.array([generators[g % len(generators)] for g, _ in rows], np.int8)
    boundary = np.array([True] + [new for _, new in rows[1:]])
    starts = np.maximum.accumulate(np.where(boundary, np.arange(len(rows)), 0))
    prefix = segmented_compose(funcs, starts)
    for state in range(k):  # every start state, applied row by row and restarted at each segment
        current = state
        for i, f in enumerate(funcs):
            current = int(f[state if boundary[i] else current])
            assert prefix[i, state] == current


def test_segmented_compose_restarts_at_each_segment() -> None:
    swap = np.array([1, 0], np.int8)
    funcs = np.tile(swap, (5, 1))
    starts = np.array([0, 0, 0, 3, 3])
    prefix = segmented_compose(funcs, starts)
    assert prefix[:, 0].tolist() == [1, 0, 1, 1, 0]


def test_metadata_event_ids_match_the_model() -> None:
    cluster, zxid = pa.array(["c", "c", "d"]), pa.array([5, 6, 5], pa.int64())
    path, op = pa.array(["/a", None, "/a"]), pa.array(["SET", "SET", "SET"])
    got = metadata_event_ids(cluster, zxid, path, op, pa.array([0, 2, 0], pa.int32())).to_pylist()
    assert got == [metadata_event_id("c", 5, "/a", "SET", 0), metadata_event_id("c", 6, None, "SET", 2),
                   metadata_event_id("d", 5, "/a", "SET", 0)]
    assert len(set(got)) == 3


def test_metadata_event_ids_stay_those_of_the_model_across_batches_and_a_full_cache(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines import arrow_ids

    monkeypatch.setattr(arrow_ids, "_ZNODE_HASHES", arrow_ids._ZnodeHashes())
    monkeypatch.setattr(arrow_ids._ZnodeHashes, "LIMIT", 5)
    for batch in ([f"/p{i}" for i in range(3)], [f"/p{i}" for i in range(1, 5)], [f"/q{i}" for i in range(4)],
                  ["/p0", "/q3"]):  # known, partly known, past the limit (the cache starts over), known again
        n = len(batch)
        got = metadata_event_ids(pa.array(["c"] * n), pa.array(range(n), pa.int64()), pa.array(batch),
                                 pa.array(["SET"] * n)).to_pylist()
        assert got == [metadata_event_id("c", i, p, "SET", 0) for i, p in enumerate(batch)]
