"""One key bucket's fold for the streaming query: the bucket's carried state and its micro-batch rows in, the
fold's records and the bucket's next state out (Arrow only; no Spark, no lake).

A bucket is a fixed set of (topic, partition) keys of one cluster (a stable hash of the key, modulo the
cluster's bucket count, ``BucketLayout``). It receives its own keys' events and EVERY event of its cluster that
has no partition but may change one: the controller-wide ones (elections, broker (de)registrations, epoch
changes) and topic-level deletions (requests). So each bucket replays the cluster's controller timeline itself
when such events arrive (``pipelines.controller.replay``) and carries what the replay gave, fans the
cluster-wide events out over the keys it knows (``pipelines.fanout``, the same rule as the batch rule: keys
carried or seen before the event's zxid), and folds its rows with the same vectorised kernel
(``pipelines.keyed_fold.fold_local`` -> ``pipelines.vector_fold``). Nothing about other buckets is needed: the
fold is per key, and what is shared (the timeline) every bucket derives from the same events.

The carried state is Arrow tables (``BucketState``), serialised as Arrow IPC bytes: Spark keeps them in its
state store (one value per part of a bucket's state) and checkpoints them.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.spark_schema import spark_arrow_schema
from models.tables import (
    ANOMALIES,
    CONTROLLER_TENURE,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
)
from pipelines import detectors as D
from pipelines.controller import GLOBAL_TYPES, ZOMBIE_WRITE_COLUMNS, Timeline, replay, zk_split_brain
from pipelines.detectors import ZK_WRITE_SCHEMA
from pipelines.fanout import TOPIC_LEVEL_TYPES, fanned_events, fanout_rows, touched_by_fanout
from pipelines.fold_records import FoldRecord
from pipelines.keyed_fold import _key_codes, fold_local
from pipelines.state_machines import CONTEXT_POINTS, PARTITION_TYPES, GlobalContext

FOLDED_TYPES = tuple(dict.fromkeys((*PARTITION_TYPES, *GLOBAL_TYPES)))
"""The metadata event types the fold reads (every other decoded row is of no use to it)."""
BROADCAST_TYPES = tuple(dict.fromkeys((*GLOBAL_TYPES, *TOPIC_LEVEL_TYPES)))
"""Types sent to every bucket of their cluster when they carry no partition (cluster-wide or topic-level)."""
BUCKET_COLUMN = "bucket"
CLUSTER_STAGE = -1
"""The bucket number of a cluster's stage: the cluster-wide work (timeline, controller terms, decisions not
about one partition, collection gaps) of the streaming query, one key per cluster."""
TXNLOG_COLUMN = "_txnlog"
"""On a decoded event: it comes from a transaction-log row (the lossless source) rather than a watch's read."""
TXNLOG_RANGE = pa.schema([pa.field("lo", pa.int64()), pa.field("hi", pa.int64())])
"""The lowest and highest zxid the transaction-log collector has delivered (0 rows: none yet, or 1)."""
GLOBAL_COLUMNS = ("cluster", "zxid", "_seq", "path", "event_id", "type", "event_time", "broker", "controller_id",
                  "controller_epoch", "detail")
"""The columns of a cluster-wide event each bucket keeps for its timeline replay."""


@dataclass(frozen=True)
class BucketLayout:
    """How many buckets each cluster's partitions spread over, fixed for a checkpoint's life (the state is keyed
    by bucket). A key costs the same fixed work per micro-batch whatever it holds, so a cluster gets about one
    bucket per ``PARTITIONS_PER_BUCKET`` partitions it had when the checkpoint began (``sized``), at most
    ``default``; a cluster not seen then gets ``default``."""

    default: int
    clusters: Mapping[str, int] = field(default_factory=dict)
    keys: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """A cluster's key number of each of its buckets (``keys[c][i]``: bucket i's), for the clusters listed
    (``engine.key_placement.place``); any other cluster's bucket i is key i."""

    def __post_init__(self) -> None:
        if self.default < 1 or any(n < 1 for n in self.clusters.values()):
            raise ValueError(f"bucket counts must be at least 1: {self.default}, {dict(self.clusters)}")
        for cluster, keys in self.keys.items():
            if len(keys) != self.of(cluster) or len(set(keys)) != len(keys) or min(keys) < 0:
                raise ValueError(f"cluster {cluster!r} needs {self.of(cluster)} distinct key numbers of at least 0, "
                                 f"got {list(keys)}")

    @classmethod
    def sized(cls, default: int, partitions: Mapping[str, int]) -> BucketLayout:
        """``partitions``: each cluster's partition count."""
        return cls(default, {c: min(default, max(1, math.ceil(n / PARTITIONS_PER_BUCKET))) for c, n in partitions.items()})

    def of(self, cluster: str) -> int:
        return self.clusters.get(cluster, self.default)

    def counts(self, cluster: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Each row's cluster's bucket count."""
        if not self.clusters:
            return np.full(len(cluster), self.default, np.int64)
        names, at = _names_of(cluster)
        counts: np.ndarray = np.array([self.of(c) for c in names], np.int64)[at]
        return counts

    def key_of(self, cluster: pa.Array | pa.ChunkedArray, bucket: np.ndarray) -> np.ndarray:
        """Each row's key number, from its cluster and its bucket (``range`` of the cluster's count)."""
        if not self.keys or len(bucket) == 0:
            return bucket
        names, at = _names_of(cluster)
        numbers = [np.asarray(self.keys.get(c, range(self.of(c))), np.int64) for c in names]
        starts = np.cumsum([0, *(len(n) for n in numbers[:-1])])
        placed: np.ndarray = np.concatenate(numbers)[starts[at] + bucket]
        return placed

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"default": self.default, "clusters": dict(sorted(self.clusters.items()))}
        if self.keys:
            doc["keys"] = {c: list(k) for c, k in sorted(self.keys.items())}
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BucketLayout:
        return cls(int(doc["default"]), {str(c): int(n) for c, n in (doc.get("clusters") or {}).items()},
                   {str(c): tuple(int(k) for k in keys) for c, keys in (doc.get("keys") or {}).items()})


def _names_of(cluster: pa.Array | pa.ChunkedArray) -> tuple[list[str], np.ndarray]:
    """The distinct cluster names, and each row's index among them."""
    names = pc.unique(cluster)
    return names.to_pylist(), pc.index_in(cluster, names).to_numpy(zero_copy_only=False)


PARTITIONS_PER_BUCKET = 6_250
"""Partitions per bucket when a cluster's bucket count is sized (200,000 partitions fill 32 buckets)."""
Buckets = int | BucketLayout
"""A bucket count for every cluster, or a layout per cluster."""


def layout(buckets: Buckets) -> BucketLayout:
    """``buckets`` as a layout (one count: every cluster's)."""
    return buckets if isinstance(buckets, BucketLayout) else BucketLayout(buckets)


def bucket_of(topic: pa.Array | pa.ChunkedArray, partition: pa.Array | pa.ChunkedArray,
              buckets: int | np.ndarray) -> np.ndarray:
    """Each (topic, partition)'s bucket in ``range(buckets)`` (``buckets``: one count, or each row's): the same in
    every process and run (CRC-32 of the topic, computed once per distinct topic, mixed with the partition
    number)."""
    topics = pc.unique(topic)
    crc = np.array([zlib.crc32((t or "").encode()) for t in topics.to_pylist()], np.uint64)
    topic_crc = crc[pc.index_in(topic, topics).to_numpy(zero_copy_only=False)]
    part = pc.fill_null(partition, 0).to_numpy(zero_copy_only=False).astype(np.uint64)
    mixed: np.ndarray = (topic_crc ^ ((part * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF))) % np.asarray(
        buckets).astype(np.uint64)
    return mixed.astype(np.int32)


def _keyed_buckets(rows: pa.Table, buckets: Buckets) -> pa.Array:
    """Each row's bucket key, by its (cluster, topic, partition)."""
    placed = layout(buckets)
    bucket = bucket_of(rows["topic"], rows["partition"], placed.counts(rows["cluster"]))
    return pa.array(placed.key_of(rows["cluster"], bucket).astype(np.int32))


def _copies(rows: pa.Table, buckets: Buckets) -> pa.Table:
    """``rows`` copied to every bucket of their cluster, with a ``bucket`` column (the bucket's key)."""
    placed = layout(buckets)
    counts = placed.counts(rows["cluster"])
    starts = np.cumsum(counts) - counts
    copies = rows.take(pa.array(np.repeat(np.arange(rows.num_rows), counts), pa.int64()))
    numbers = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)
    return copies.append_column(BUCKET_COLUMN, pa.array(placed.key_of(copies["cluster"], numbers).astype(np.int32)))


def route(meta: pa.Table, buckets: Buckets) -> pa.Table:
    """``meta`` with a ``bucket`` column, each event where the streaming query needs it.

    An event with a partition: once, in its key's bucket (folded there if of a FOLDED_TYPES type). One without:
    once to its cluster's stage (``CLUSTER_STAGE``, which replays the timeline), and for the fold: a cluster-wide
    or topic-level one (BROADCAST_TYPES) to every bucket, another folded one to the bucket of its topic.
    """
    has_partition = pc.is_valid(meta["partition"])
    own = meta.filter(has_partition)
    own = own.append_column(BUCKET_COLUMN, _keyed_buckets(own, buckets))
    partless = meta.filter(pc.invert(has_partition))
    parts = [own, at_stage(partless)]
    broadcast = pc.is_in(partless["type"], pa.array(BROADCAST_TYPES))
    every = partless.filter(broadcast)
    if every.num_rows:
        parts.append(_copies(every, buckets))
    topic_level = partless.filter(pc.and_(pc.invert(broadcast), pc.is_in(partless["type"], pa.array(FOLDED_TYPES))))
    if topic_level.num_rows:
        parts.append(topic_level.append_column(BUCKET_COLUMN, _keyed_buckets(topic_level, buckets)))
    return pa.concat_tables(parts)


def to_every_bucket(rows: pa.Table, buckets: Buckets) -> pa.Table:
    """``rows`` (one or a few per cluster) copied to every bucket of their cluster, with a ``bucket`` column."""
    return _copies(rows, buckets)


def widened_range(carried: pa.Table, batch: pa.Table | None) -> pa.Table:
    """The carried TXNLOG_RANGE widened by a batch's ranges (rows of TXNLOG_RANGE from its tasks)."""
    if batch is None or batch.num_rows == 0:
        return carried
    both = pa.concat_tables([carried, batch.select(TXNLOG_RANGE.names).cast(TXNLOG_RANGE)])
    return pa.table({"lo": [pc.min(both["lo"]).as_py()], "hi": [pc.max(both["hi"]).as_py()]}, TXNLOG_RANGE)


def range_bounds(txnlog: pa.Table) -> tuple[int | None, int | None]:
    """A TXNLOG_RANGE as (lo, hi), (None, None) when empty."""
    return (None, None) if txnlog.num_rows == 0 else (txnlog["lo"][0].as_py(), txnlog["hi"][0].as_py())


def in_range(zxids: pa.ChunkedArray, txnlog: pa.Table) -> pa.ChunkedArray | None:
    """Per zxid: inside the TXNLOG_RANGE ``txnlog`` (a null zxid is not); None when the range is empty."""
    lo, hi = range_bounds(txnlog)
    if lo is None or hi is None:
        return None
    return pc.fill_null(pc.and_(pc.greater_equal(zxids, lo), pc.less_equal(zxids, hi)), False)


def not_superseded(events: pa.Table, txnlog: pa.Table) -> pa.Table:
    """``events`` less those a watch or resync read at a zxid the transaction log has delivered: the log holds
    that change losslessly (a watch sees a multi's create and set as one create, under another event id), and
    its own rows of it are kept wherever they arrive."""
    inside = in_range(events["zxid"], txnlog)
    if inside is None or events.num_rows == 0:
        return events
    drop = pc.fill_null(pc.and_(pc.invert(events[TXNLOG_COLUMN]), inside), False)
    return events if not pc.any(drop).as_py() else events.filter(pc.invert(drop))


def at_stage(rows: pa.Table) -> pa.Table:
    """``rows`` with a ``bucket`` column sending each to its cluster's stage."""
    return rows.append_column(BUCKET_COLUMN, pa.array(np.full(rows.num_rows, CLUSTER_STAGE, np.int32)))


def route_decisions(decisions: pa.Table, buckets: Buckets) -> pa.Table:
    """``decisions`` with a ``bucket`` column: every row to its cluster's stage (the controller terms and
    resignations read them all), and a row about one partition also to that partition's bucket (checked there
    against the writes ZooKeeper held)."""
    keyed = decisions.filter(pc.and_(pc.is_valid(decisions["topic"]), pc.is_valid(decisions["partition"])))
    own = keyed.append_column(BUCKET_COLUMN, _keyed_buckets(keyed, buckets))
    return pa.concat_tables([own, at_stage(decisions)])


@dataclass
class BucketState:
    """What a bucket carries between micro-batches: its keys' partition and replica state rows (the lake's
    ``partition_state``/``replica_state`` schemas), its cluster's timeline events so far and what their replay
    gave (``bucket_timeline``), and the (leader, leader epoch) pairs its keys' partition states have held, the
    newest ``detectors.ZK_WRITES_KEPT_EPOCHS`` per key (``detectors.distinct_writes``: what logged decisions are
    checked against)."""

    partition_state: pa.Table
    replica_state: pa.Table
    global_events: pa.Table
    zk_writes: pa.Table
    recent_ids: pa.Table  # RECENT_IDS: the newest metadata event ids this key has written
    pending_decisions: pa.Table  # detectors.PENDING_DECISIONS: its keys' decisions not settled yet
    zk_time: pa.Table  # ZK_TIME less the cluster: the latest ZooKeeper event time of its cluster (0 or 1 row)
    txnlog: pa.Table  # TXNLOG_RANGE of its cluster
    open_episodes: pa.Table  # detectors.OPEN_EPISODES: its keys' episodes started and not ended yet
    context: pa.Table  # CONTEXT_POINTS: the replayed timeline's GlobalContext
    tenure: pa.Table  # controller_tenure rows: the replayed timeline's ZooKeeper controller terms

    @classmethod
    def empty(cls, meta_schema: pa.Schema) -> BucketState:
        return cls(spark_arrow_schema(PARTITION_STATE).empty_table(), spark_arrow_schema(REPLICA_STATE).empty_table(),
                   _global_schema(meta_schema).empty_table(), ZK_WRITE_SCHEMA.empty_table(), RECENT_IDS.empty_table(),
                   D.PENDING_DECISIONS.empty_table(), _ZK_TIME_STATE.empty_table(), TXNLOG_RANGE.empty_table(),
                   D.OPEN_EPISODES.empty_table(), CONTEXT_POINTS.empty_table(), _TENURE.empty_table())


_TENURE = spark_arrow_schema(CONTROLLER_TENURE)


ZK_TIME = pa.schema([pa.field("cluster", pa.string()), pa.field("zk_time", pa.int64())])
"""One row per cluster: the latest ZooKeeper event time (microseconds) of a task's decoded events."""
_ZK_TIME_STATE = pa.schema([ZK_TIME.field("zk_time")])


def zk_times(meta: pa.Table, buckets: Buckets) -> pa.Table:
    """``meta``'s latest ZooKeeper event time per cluster, with a ``bucket`` column sending it to every bucket of
    the cluster: a bucket settles its decisions (``detectors.settle_decisions``) by the whole cluster's
    ZooKeeper history, not only by its own keys' writes."""
    timed = pa.table({"cluster": meta["cluster"], "zk_time": D.micros(meta["event_time"])}).filter(
        pc.is_valid(pc.field("zk_time")))
    top = timed.group_by("cluster").aggregate([("zk_time", "max")])
    return to_every_bucket(pa.table({"cluster": top["cluster"], "zk_time": top["zk_time_max"]}, schema=ZK_TIME), buckets)


RECENT_IDS = pa.schema([pa.field("zxid", pa.int64()), pa.field("event_id", pa.string())])
RECENT_IDS_PER_KEY = 100_000
"""How many of its newest watch and resync event ids a key remembers while no transaction log covers them: both
collectors deliver one change within seconds, so its second copy is found here however the micro-batches cut
them."""


def first_seen(events: pa.Table, recent: pa.Table, txnlog: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(``events`` less the copies of one change: a second row of an id in the batch, or an id ``recent`` holds;
    ``recent`` with the kept ids of reads (watch, resync) outside the log's range ``txnlog`` (TXNLOG_RANGE, this
    batch's included), its newest RECENT_IDS_PER_KEY by zxid).

    The transaction log's events are not remembered: the log delivers each zxid once (one collector per data dir,
    idempotent commits), and a read of a zxid inside the log's range is dropped before this (``not_superseded``);
    a read that came first is remembered, so the log's later copy is dropped here. Once the range covers a
    remembered read, the log has delivered that zxid and a later read of it is dropped by the range: the id is
    forgotten, so with the log collecting, what a key remembers is bounded by the log's lag, not by the count."""
    if events.num_rows == 0:
        return events, recent
    ids = events["event_id"].to_numpy(zero_copy_only=False)
    _, first = np.unique(ids, return_index=True)
    keep = np.zeros(events.num_rows, bool)
    keep[first] = True
    if recent.num_rows:
        keep &= ~pc.is_in(events["event_id"], recent["event_id"]).to_numpy(zero_copy_only=False)
    kept = events if keep.all() else events.filter(pa.array(keep))
    remembered = kept.filter(pc.invert(kept[TXNLOG_COLUMN]))
    seen = pa.concat_tables([recent, remembered.select(RECENT_IDS.names).cast(RECENT_IDS)])
    covered = in_range(seen["zxid"], txnlog)
    if covered is not None and pc.any(covered).as_py():
        seen = seen.filter(pc.invert(covered))
    if seen.num_rows > RECENT_IDS_PER_KEY:
        seen = seen.take(pc.sort_indices(seen, sort_keys=[("zxid", "descending")])[:RECENT_IDS_PER_KEY])
    return kept, seen


def ipc_bytes(table: pa.Table) -> bytes:
    """A table as one Arrow IPC stream (lz4): how the streaming query's state and packed rows hold tables."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def ipc_table(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.BufferReader(blob)).read_all()


def _global_schema(meta_schema: pa.Schema) -> pa.Schema:
    return pa.schema([meta_schema.field(c) for c in GLOBAL_COLUMNS])


def bucket_timeline(state: BucketState, rows: pa.Table) -> tuple[Timeline, BucketState]:
    """The cluster's timeline after this batch (its context and ZooKeeper controller terms) and the state
    carrying it. The carried timeline events (deduplicated by id) are replayed only when the batch brings some
    (elections, broker changes: rare), or when a state from before the replay was carried holds events but not
    their context; any other batch reads the carried replay back, and leaves those parts as they were."""
    batch = rows.filter(pc.is_in(rows["type"], pa.array(GLOBAL_TYPES))).select(list(GLOBAL_COLUMNS))
    carried = state.global_events
    if batch.num_rows == 0 and (state.context.num_rows or carried.num_rows == 0):
        return Timeline(GlobalContext.from_table(state.context), tenure=state.tenure.to_pylist()), state
    events = pa.concat_tables([carried, batch.cast(carried.schema)])
    _, first = np.unique(events["event_id"].to_numpy(zero_copy_only=False), return_index=True)
    events = events.take(pa.array(np.sort(first), pa.int64()))
    timeline = replay(events["cluster"][0].as_py(), events.to_pylist())
    return timeline, replace(state, global_events=events, context=timeline.ctx.to_table(),
                             tenure=pa.Table.from_pylist(timeline.tenure, _TENURE))


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


def fold_bucket(state: BucketState, rows: pa.Table,
                kafka_version: str) -> tuple[dict[str, pa.Table], BucketState, Timeline]:
    """(the fold's records by kind, ``vector_fold.FOLD_RECORDS``; the bucket's next state; its cluster's timeline)
    for one micro-batch.

    ``rows``: decoded metadata events (``metadata_events`` columns and ``_seq``) of this bucket's keys and the
    broadcast ones of its cluster, in any order (the fold orders its rows).
    """
    timeline, state = bucket_timeline(state, rows)
    ctx = timeline.ctx
    seeds = touched_seeds(state.partition_state, state.replica_state, rows, ctx)
    fanned = fanout_rows(rows, seeds[0], ctx)
    fold = fold_local(rows, fanned, seeds, ctx, kafka_version)
    # a key's rows in the fold's output replace all its carried rows
    ps = merged_state(state.partition_state, fold[FoldRecord.PARTITION_STATE])
    rs = merged_state(state.replica_state, fold[FoldRecord.REPLICA_STATE])
    zk = D.advanced_writes(state.zk_writes, fold[FoldRecord.WRITE])
    return fold, replace(state, partition_state=ps, replica_state=rs, zk_writes=zk), timeline


def bucket_step(cluster: str, state: BucketState, events: pa.Table, decisions: pa.Table | None,
                kafka_version: str, zk_time: pa.Table | None = None, txnlog: pa.Table | None = None,
                offline_blip: timedelta = D.DEFAULT_OFFLINE_BLIP) -> tuple[dict[str, pa.Table], BucketState]:
    """One bucket's micro-batch in the streaming query: (its rows of each output table by table name, its next
    state).

    ``events``: the bucket's routed events (``route``: ``_seq`` and ``_txnlog`` besides ``metadata_events``'
    columns); ``decisions``: its logged decisions about its keys (``route_decisions``), or None; ``zk_time``:
    its cluster's latest ZooKeeper event times this batch (``zk_times``), or None; ``txnlog``: the transaction
    log's delivered ranges this batch (TXNLOG_RANGE rows), or None; ``offline_blip``: an OFFLINE_PARTITION
    that ends within it is a blip (``detectors.offline_end_details``). Out: the
    transitions, its whole state when the fold changed it, and the anomalies its keys show
    (illegal transitions, the state writes' checks, a zombie write's split brain, the decisions' checks).
    """
    txn = widened_range(state.txnlog, txnlog)
    events, recent = first_seen(not_superseded(events, txn), state.recent_ids, txn)
    state = replace(state, recent_ids=recent, txnlog=txn)
    folded = events.filter(pc.is_in(events["type"], pa.array(FOLDED_TYPES))).drop_columns([TXNLOG_COLUMN])
    out: dict[str, pa.Table] = {}
    found: list[pa.Table] = []
    if folded.num_rows:
        fold, state, timeline = fold_bucket(state, folded, kafka_version)
        pt = fold[FoldRecord.PARTITION_TRANSITION].select(list(PARTITION_TRANSITIONS.column_names))
        rt = fold[FoldRecord.REPLICA_TRANSITION].select(list(REPLICA_TRANSITIONS.column_names))
        writes = fold[FoldRecord.WRITE]
        zombies = writes.filter(D.zombie_write_mask(writes)).select(list(ZOMBIE_WRITE_COLUMNS)).to_pylist()
        split = zk_split_brain(cluster, zombies, timeline.tenure) if zombies else []
        episodes, still_open = D.write_episodes(writes, pt, state.open_episodes, offline_blip)
        if still_open.num_rows or state.open_episodes.num_rows:  # else no part to rewrite
            state = replace(state, open_episodes=still_open)
        found += [D.detect_illegal_transitions(pt, rt), D.write_anomalies(writes), episodes, D.anomaly_rows(split)]
        out.update({PARTITION_TRANSITIONS.name: pt, REPLICA_TRANSITIONS.name: rt})
        if fold[FoldRecord.PARTITION_STATE].num_rows or fold[FoldRecord.REPLICA_STATE].num_rows:
            # the bucket's whole state: the sink replaces the bucket's rows with it (no MERGE)
            out.update({PARTITION_STATE.name: state.partition_state.select(list(PARTITION_STATE.column_names)),
                        REPLICA_STATE.name: state.replica_state.select(list(REPLICA_STATE.column_names))})
    latest = advanced_clock(state.zk_time, zk_time)
    logged = decisions if decisions is not None else D.PENDING_DECISIONS.empty_table()
    settled, pending = D.settle_decisions(state.pending_decisions, logged, latest)
    if settled.num_rows:
        found.append(D.detect_decision_zk_divergence(settled, state.zk_writes))
    if logged.num_rows:
        found.append(D.decision_anomalies(logged, kafka_version))
    state = replace(state, pending_decisions=pending, zk_time=clock_table(latest))
    out[ANOMALIES.name] = D.concat(found)
    return out, state


def advanced_clock(carried: pa.Table, received: pa.Table | None) -> int | None:
    """A bucket's clock after a batch: the latest of its carried ZooKeeper time and the ``zk_times`` it received."""
    seen = [t.as_py() for t in (*carried["zk_time"], *(received["zk_time"] if received is not None else ()))]
    return max((t for t in seen if t is not None), default=None)


def clock_table(latest: int | None) -> pa.Table:
    """The ``zk_time`` part of a BucketState holding ``latest`` (none: empty)."""
    return pa.table({"zk_time": pa.array([] if latest is None else [latest], pa.int64())})


TICK_STATE = ("pending_decisions", "zk_time", "txnlog")
"""The BucketState parts ``bucket_tick`` reads: all it needs of a bucket whose batch holds only ticks."""


def bucket_tick(carried: dict[str, pa.Table], zk_time: pa.Table | None,
                txnlog: pa.Table | None) -> dict[str, pa.Table] | None:
    """A bucket's batch that holds only ticks: its cluster's clock (``zk_times``) and the transaction log's range,
    which every batch with ZooKeeper events sends every bucket. Returns the parts of ``TICK_STATE`` it changes
    (``carried``: those parts), or None when a decision is waiting and ``bucket_step`` must run. With nothing
    waiting, ``bucket_step`` would only move these two parts and write no rows; here the bucket's keys, writes
    and ids are never loaded."""
    if carried["pending_decisions"].num_rows:
        return None
    changed: dict[str, pa.Table] = {}
    before = advanced_clock(carried["zk_time"], None)
    latest = advanced_clock(carried["zk_time"], zk_time)
    if latest != before:
        changed["zk_time"] = clock_table(latest)
    txn = widened_range(carried["txnlog"], txnlog)
    if not txn.equals(carried["txnlog"]):
        changed["txnlog"] = txn
    return changed
