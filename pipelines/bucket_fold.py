"""One key bucket's fold for the streaming query: the bucket's carried state and its micro-batch rows in, the
fold's records and the bucket's next state out (Arrow only; no Spark, no lake).

A bucket is a fixed set of (topic, partition) keys of one cluster (a stable hash of the key, modulo the bucket
count). It receives its own keys' events and EVERY event of its cluster that has no partition but may change
one: the controller-wide ones (elections, broker (de)registrations, epoch changes) and topic-level deletions
(requests). So each bucket replays the cluster's controller timeline itself (``pipelines.controller.replay``,
few rows), fans the cluster-wide events out over the keys it knows (``pipelines.fanout``, the same rule as the
in-process engine: keys carried or seen before the event's zxid), and folds its rows with the same vectorised
kernel (``pipelines.keyed_fold.fold_local`` -> ``pipelines.vector_fold``). Nothing about other buckets is
needed: the fold is per key, and what is shared (the timeline) every bucket derives from the same events.

The carried state is three Arrow tables (``BucketState``), serialised as Arrow IPC bytes: Spark keeps them in
its state store (one value per bucket) and checkpoints them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.spark_schema import spark_arrow_schema
from models.tables import PARTITION_STATE, REPLICA_STATE
from pipelines.controller import GLOBAL_TYPES, replay
from pipelines.fanout import TOPIC_LEVEL_TYPES, fanned_events, fanout_rows, touched_by_fanout
from pipelines.fold_records import FoldRecord
from pipelines.keyed_fold import _key_codes, fold_local
from pipelines.state_machines import PARTITION_TYPES, GlobalContext

FOLDED_TYPES = tuple(dict.fromkeys((*PARTITION_TYPES, *GLOBAL_TYPES)))
"""The metadata event types the fold reads (every other decoded row is of no use to it)."""
BROADCAST_TYPES = tuple(dict.fromkeys((*GLOBAL_TYPES, *TOPIC_LEVEL_TYPES)))
"""Types sent to every bucket of their cluster when they carry no partition (cluster-wide or topic-level)."""
BUCKET_COLUMN = "bucket"
GLOBAL_COLUMNS = ("cluster", "zxid", "_seq", "path", "event_id", "type", "event_time", "broker", "controller_id",
                  "controller_epoch", "detail")
"""The columns of a cluster-wide event each bucket keeps for its timeline replay."""


def bucket_of(topic: pa.Array | pa.ChunkedArray, partition: pa.Array | pa.ChunkedArray, buckets: int) -> np.ndarray:
    """Each (topic, partition)'s bucket in ``range(buckets)``: the same in every process and run (CRC-32 of the
    topic, computed once per distinct topic, mixed with the partition number)."""
    topics = pc.unique(topic)
    crc = np.array([zlib.crc32((t or "").encode()) for t in topics.to_pylist()], np.uint64)
    topic_crc = crc[pc.index_in(topic, topics).to_numpy(zero_copy_only=False)]
    part = pc.fill_null(partition, 0).to_numpy(zero_copy_only=False).astype(np.uint64)
    mixed: np.ndarray = (topic_crc ^ ((part * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF))) % np.uint64(buckets)
    return mixed.astype(np.int32)


def route(meta: pa.Table, buckets: int) -> pa.Table:
    """``meta`` with a ``bucket`` column: an event with a partition once, in its key's bucket; a partition-less
    cluster-wide or topic-level event (BROADCAST_TYPES) once per bucket of its cluster (few rows)."""
    broadcast = pc.fill_null(pc.and_(pc.is_in(meta["type"], pa.array(BROADCAST_TYPES)),
                                     pc.is_null(meta["partition"])), False)
    own = meta.filter(pc.invert(broadcast))
    own = own.append_column(BUCKET_COLUMN, pa.array(bucket_of(own["topic"], own["partition"], buckets), pa.int32()))
    every = meta.filter(broadcast)
    if every.num_rows == 0:
        return own
    copies = every.take(pa.array(np.repeat(np.arange(every.num_rows), buckets), pa.int64()))
    copies = copies.append_column(BUCKET_COLUMN, pa.array(np.tile(np.arange(buckets, dtype=np.int32), every.num_rows)))
    return pa.concat_tables([own, copies])


@dataclass
class BucketState:
    """What a bucket carries between micro-batches: its keys' partition and replica state rows (the lake's
    ``partition_state``/``replica_state`` schemas) and its cluster's timeline events so far."""

    partition_state: pa.Table
    replica_state: pa.Table
    global_events: pa.Table

    @classmethod
    def empty(cls, meta_schema: pa.Schema) -> BucketState:
        return cls(spark_arrow_schema(PARTITION_STATE).empty_table(), spark_arrow_schema(REPLICA_STATE).empty_table(),
                   _global_schema(meta_schema).empty_table())

    def to_bytes(self) -> tuple[bytes, bytes, bytes]:
        return _ipc(self.partition_state), _ipc(self.replica_state), _ipc(self.global_events)

    @classmethod
    def from_bytes(cls, blobs: tuple[bytes, bytes, bytes]) -> BucketState:
        ps, rs, gl = (pa.ipc.open_stream(pa.BufferReader(b)).read_all() for b in blobs)
        return cls(ps, rs, gl)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _global_schema(meta_schema: pa.Schema) -> pa.Schema:
    return pa.schema([meta_schema.field(c) for c in GLOBAL_COLUMNS])


def bucket_timeline(state: BucketState, rows: pa.Table) -> tuple[GlobalContext, pa.Table]:
    """The cluster's timeline context after this batch, and the timeline events to carry (deduplicated by id)."""
    batch = rows.filter(pc.is_in(rows["type"], pa.array(GLOBAL_TYPES))).select(list(GLOBAL_COLUMNS))
    events = pa.concat_tables([state.global_events, batch.cast(state.global_events.schema)])
    if batch.num_rows:
        _, first = np.unique(events["event_id"].to_numpy(zero_copy_only=False), return_index=True)
        events = events.take(pa.array(np.sort(first), pa.int64()))
    if events.num_rows == 0:
        return GlobalContext(), events
    cluster = events["cluster"][0].as_py()
    return replay(cluster, events.to_pylist()).ctx, events


def touched_seeds(ps: pa.Table, rs: pa.Table, meta: pa.Table, ctx: GlobalContext) -> tuple[pa.Table, pa.Table]:
    """The carried rows of the keys this batch touches: its own keys and those its fanned events reach."""
    if ps.num_rows == 0 and rs.num_rows == 0:
        return ps, rs
    keyed = meta.filter(pc.and_(pc.is_in(meta["type"], pa.array(PARTITION_TYPES)), pc.is_valid(meta["partition"])))
    keyed_keys, ps_keys, rs_keys = _key_codes(keyed, ps, rs)
    touched = pc.or_(pc.is_in(ps_keys, pc.unique(keyed_keys)), touched_by_fanout(fanned_events(meta), ps, ctx))
    return ps.filter(touched), rs.filter(pc.is_in(rs_keys, pc.unique(ps_keys.filter(touched))))


def merged_state(carried: pa.Table, new: pa.Table) -> pa.Table:
    """The carried rows of untouched keys, then the fold's rows for the keys it touched (all their rows)."""
    target = carried.schema
    new = new.select(target.names).cast(target)
    if carried.num_rows == 0:
        return new
    carried_keys, new_keys = _key_codes(carried, new)
    kept = carried.filter(pc.invert(pc.is_in(carried_keys, pc.unique(new_keys))))
    return pa.concat_tables([kept, new]).combine_chunks()


def fold_bucket(state: BucketState, rows: pa.Table, kafka_version: str) -> tuple[dict[str, pa.Table], BucketState]:
    """(the fold's records by kind, ``vector_fold.FOLD_RECORDS``; the bucket's next state) for one micro-batch.

    ``rows``: decoded metadata events (``metadata_events`` columns and ``_seq``) of this bucket's keys and the
    broadcast ones of its cluster, in any order (the fold orders its rows).
    """
    ctx, global_events = bucket_timeline(state, rows)
    seeds = touched_seeds(state.partition_state, state.replica_state, rows, ctx)
    fanned = fanout_rows(rows, seeds[0], ctx)
    fold = fold_local(rows, fanned, seeds, ctx, kafka_version)
    # a key's rows in the fold's output replace all its carried rows (as the in-process engine merges)
    ps = merged_state(state.partition_state, fold[FoldRecord.PARTITION_STATE])
    rs = merged_state(state.replica_state, fold[FoldRecord.REPLICA_STATE])
    return fold, BucketState(ps, rs, global_events)
