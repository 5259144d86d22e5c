"""Offline mode: a large synthetic partition-state history written straight into bronze `znode_events`.

A Kafka 2.8 cluster (`KAFKA_VERSION`): one topic per 1,000 partitions, each partition on 3 consecutive brokers of
`brokers` (a ring, like Kafka's rack-unaware assignment). The history opens with what a real cluster holds before
the first state write (broker registrations, the 2.1+ controller election, one `/brokers/topics/<t>` assignment
CREATE per topic, with topic_id); then `events` partition-state writes: a partition's first is the controller's
CREATE (leader = first replica, ISR = all replicas, leader epoch 0), each later one a SET that either elects the
next replica of the current ISR (leader epoch +1, 30%) or shrinks/expands the ISR (AlterIsr: same leader and
epoch, 70%). Every `FAILOVER_EVERY` state events the controller resigns and the next broker wins the election
(`/controller` DELETE + CREATE, `/controller_epoch` +1), and later writes carry the new epoch. zxids are strictly
increasing; the preamble and failover rows are extra, `events` counts partition-state writes only. Decoded and
folded (models.fold.project_metadata) the history has no illegal transition and breaks no invariant of docs/invariants.md.

Speed (10M events in well under a minute on 2 cores): the per-partition state is numpy, every string column is
built by pyarrow compute kernels (no per-row Python formatting), and the only per-row Python left is the sha1 of
`models.ids.event_id`, which runs in a process pool (hashlib holds the GIL for short inputs) one batch ahead of
the column building, while a writer thread commits the previous batch to Delta (delta-rs releases the GIL).
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import queue
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from itertools import pairwise
from multiprocessing.pool import AsyncResult, Pool
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.tables import ZNODE_EVENTS
from simulator.payloads import topic_id

if TYPE_CHECKING:
    from lakehouse import Lake
    from services.progress import Progress

log = logging.getLogger(__name__)

PARTITIONS_PER_TOPIC = 1000
ZXID_BASE = 0x100000000  # epoch 1 of the ZooKeeper ensemble
ID_LEN = 24  # hex chars kept by models.ids.event_id
SOURCE = "txnlog"
POOL_MIN_EVENTS = 200_000  # below this a process pool costs more than it saves
_SEP = "\x1f"  # models.ids.event_id joins its parts with U+001F
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_OPS = pa.array(["SET", "CREATE"])  # indexed by is_create
KAFKA_VERSION = "2.8"  # payload formats: topic znode v3 (topic_id), broker v5, AlterIsr ISR writes (2.7+)
REPLICATION = 3
FAILOVER_EVERY = 1_000_000  # partition-state events between two controller failovers
FAILOVER_ROWS = 3  # /controller DELETE, /controller CREATE, /controller_epoch SET (one zxid each)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_US = int(T0.timestamp() * 1_000_000)


def replication_factor(brokers: int) -> int:
    return min(REPLICATION, brokers)


def state_zxids(idx: np.ndarray, failover_every: int = FAILOVER_EVERY) -> np.ndarray:
    """zxid of the idx-th state event: contiguous, leaving FAILOVER_ROWS zxids before each failover's first event."""
    zxids: np.ndarray = ZXID_BASE + idx + FAILOVER_ROWS * (idx // failover_every)
    return zxids


@lru_cache(maxsize=4)
def partition_paths(partitions: int) -> pa.StringArray:
    """The state znode path of every partition index (built once, then gathered with `take`)."""
    return pa.array([f"/brokers/topics/t{p // PARTITIONS_PER_TOPIC:05d}/partitions/{p % PARTITIONS_PER_TOPIC}/state"
                     for p in range(partitions)], pa.string())


def state_payload_array(leader: np.ndarray, leader_epoch: np.ndarray, controller_epoch: np.ndarray,
                        isr: pa.Array | Sequence[str]) -> pa.BinaryArray:
    """Vectorised `encode_partition_state(leader, le, ce, isr)` bytes (no leader_recovery_state)."""
    isr_arr = isr if isinstance(isr, pa.Array) else pa.array(list(isr), pa.string())

    def txt(a: np.ndarray) -> pa.Array:
        return pc.cast(pa.array(np.asarray(a, dtype=np.int64)), pa.string())

    joined = pc.binary_join_element_wise(
        '{"controller_epoch":', txt(controller_epoch), ',"leader":', txt(leader),
        ',"version":1,"leader_epoch":', txt(leader_epoch), ',"isr":[', isr_arr, "]}", "")
    return pc.cast(joined, pa.binary())


def fast_state_payloads(leader: np.ndarray, leader_epoch: np.ndarray, controller_epoch: np.ndarray,
                        isr: Sequence[str]) -> list[bytes]:
    """Same bytes as encode_partition_state(leader, le, ce, isr), as a list (the generator uses the array form)."""
    return [b for b in state_payload_array(leader, leader_epoch, controller_epoch, isr).to_pylist() if b is not None]


def id_messages(cluster: str, zxid: np.ndarray, paths: pa.Array, ops: pa.Array) -> pa.BinaryArray:
    """The exact bytes `models.ids.event_id(cluster, "txnlog", zxid, path, op)` hashes, one per row."""
    zx = pc.cast(pa.array(np.asarray(zxid, dtype=np.int64)), pa.string())
    joined = pc.binary_join_element_wise(f"{cluster}{_SEP}{SOURCE}", zx, paths, ops, _SEP)
    return pc.cast(joined, pa.binary())


def sha1_prefixes(messages: pa.BinaryArray) -> bytes:
    """The first 12 bytes of sha1 of every message, concatenated (the tight loop: no hexdigest, no str)."""
    sha1 = hashlib.sha1
    full = b"".join([sha1(m).digest() for m in messages.to_pylist() if m is not None])
    return np.frombuffer(full, dtype=np.uint8).reshape(-1, 20)[:, : ID_LEN // 2].tobytes()


def hex_ids(prefixes: bytes) -> pa.StringArray:
    """12-byte digest prefixes -> the 24-char lowercase hex ids, as one Arrow string array (vectorised)."""
    raw = np.frombuffer(prefixes, dtype=np.uint8).reshape(-1, ID_LEN // 2)
    n = raw.shape[0]
    out = np.empty((n, ID_LEN), dtype=np.uint8)
    out[:, 0::2] = _HEX[raw >> 4]
    out[:, 1::2] = _HEX[raw & 15]
    offsets = np.arange(0, ID_LEN * (n + 1), ID_LEN, dtype=np.int32)
    arr = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out.tobytes())])
    assert isinstance(arr, pa.StringArray)
    return arr


def _hash_chunk(cluster: str, partitions: int, zxid: np.ndarray, part: np.ndarray, is_create: np.ndarray) -> bytes:
    """Pool task: rebuild the id messages from small numeric arrays (little IPC) and hash them."""
    paths = partition_paths(partitions).take(pa.array(part))
    ops = _OPS.take(pa.array(is_create.astype(np.int8)))
    return sha1_prefixes(id_messages(cluster, zxid, paths, ops))


@dataclass(frozen=True)
class _Batch:
    """The numeric columns of one batch (cheap numpy; strings and ids are built from these)."""

    idx: np.ndarray  # state event number (0-based)
    zxid: np.ndarray
    part: np.ndarray
    is_create: np.ndarray
    isr_key: np.ndarray  # row of `isr_table`: (ring start, leader slot, shrunk)
    leader: np.ndarray
    leader_epoch: np.ndarray
    controller_epoch: np.ndarray
    version: np.ndarray
    czxid: np.ndarray


def _segment_counts(part: np.ndarray, order: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Per row: how many flagged rows of the same partition precede it in this batch, itself included.

    `order` is a stable argsort of `part` (shared by the callers: the sort is the expensive part).
    """
    sp, sf = part[order], flags[order].astype(np.int64)
    cums = np.cumsum(sf)
    first = np.r_[0, np.flatnonzero(np.diff(sp)) + 1]
    seg_start = np.repeat(cums[first] - sf[first], np.diff(np.r_[first, len(sp)]))
    out = np.empty(len(part), dtype=np.int64)
    out[order] = cums - seg_start
    return out


def _numeric_batches(events: int, partitions: int, brokers: int, seed: int, batch: int,
                     failover_every: int = FAILOVER_EVERY) -> Iterator[_Batch]:
    rng = np.random.default_rng(seed)
    rf = replication_factor(brokers)
    leader_epoch = np.zeros(partitions, dtype=np.int64)
    version = np.full(partitions, -1, dtype=np.int64)
    czxid = np.zeros(partitions, dtype=np.int64)
    start = np.arange(partitions) % brokers  # replicas of p: start+1, start+2, ... round the ring
    done = 0
    while done < events:
        n = min(batch, events - done)
        idx = np.arange(done, done + n)
        zxid = state_zxids(idx, failover_every)  # strictly increasing
        part = np.where(idx < partitions, idx % max(partitions, 1), rng.integers(0, partitions, n))
        is_create = idx < partitions
        election = ~is_create & (rng.random(n) < 0.3)
        # a shrunk ISR keeps 2 members, so the next election still picks from the ISR (needs RF 3)
        shrink = ~is_create & ~election & (rng.random(n) < 0.5) & (rf >= REPLICATION)
        order = np.argsort(part, kind="stable")
        le = leader_epoch[part] + _segment_counts(part, order, election)
        np.add.at(leader_epoch, part, election.astype(np.int64))
        ver = version[part] + _segment_counts(part, order, np.ones(n, dtype=bool))
        np.add.at(version, part, 1)
        czxid[part[is_create]] = zxid[is_create]
        slot = le % rf  # each election hands leadership to the next replica of the ring (in the ISR either way)
        leader = (start[part] + slot) % brokers + 1
        isr_key = (start[part] * rf + slot) * 2 + shrink.astype(np.int64)
        ce = 1 + idx // failover_every  # epoch 1 from the preamble's election, +1 per failover
        yield _Batch(idx, zxid, part, is_create, isr_key, leader, le, ce, ver, czxid[part])
        done += n


@lru_cache(maxsize=8)
def isr_table(brokers: int) -> pa.StringArray:
    """ISR text per (ring start, leader slot, shrunk): the ring rotated to the leader, last member dropped if shrunk."""
    rf = replication_factor(brokers)
    table = []
    for start in range(brokers):
        for slot in range(rf):
            ring = [(start + (slot + j) % rf) % brokers + 1 for j in range(rf)]
            table += [",".join(map(str, ring)), ",".join(map(str, ring[:-1] or ring))]
    return pa.array(table, pa.string())


def replicas_of(partition: int, brokers: int) -> list[int]:
    """The assignment of partition index `partition` (as written to its topic znode)."""
    start = partition % brokers
    return [(start + j) % brokers + 1 for j in range(replication_factor(brokers))]


def _txn_times(zxid: np.ndarray) -> pa.Array:
    """One millisecond per zxid from T0 (the preamble, below ZXID_BASE, sits just before T0)."""
    return pa.array(T0_US + (np.asarray(zxid, dtype=np.int64) - ZXID_BASE) * 1000).cast(pa.timestamp("us", tz="UTC"))


def _to_table(b: _Batch, partitions: int, brokers: int, ids: pa.StringArray, cluster: str,
              failover_every: int = FAILOVER_EVERY) -> pa.Table:
    n = len(b.zxid)
    data = state_payload_array(b.leader, b.leader_epoch, b.controller_epoch, isr_table(brokers).take(pa.array(b.isr_key)))
    txn_time = _txn_times(b.zxid)
    table = pa.table({
        "zxid": pa.array(b.zxid, pa.int64()), "path": partition_paths(partitions).take(pa.array(b.part)),
        "op": _OPS.take(pa.array(b.is_create.astype(np.int8))), "data": data,
        "version": pa.array(b.version, pa.int32()), "czxid": pa.array(b.czxid, pa.int64()),
        "mzxid": pa.array(b.zxid, pa.int64()), "txn_time": txn_time, "source": pa.repeat(SOURCE, n),
        "observed_at": txn_time, "event_id": ids,
    })
    first, last = int(b.idx[0]), int(b.idx[-1])
    ks = [k for k in range(max(1, -(-first // failover_every)), last // failover_every + 1)]
    if not ks:
        return table
    rows = [r for k in ks for r in failover_rows(k, brokers, partitions, failover_every)]
    merged = pa.concat_tables([control_table(rows, cluster), table])
    return merged.take(pc.sort_indices(merged, [("zxid", "ascending")]))


def topic_count(partitions: int) -> int:
    return (partitions + PARTITIONS_PER_TOPIC - 1) // PARTITIONS_PER_TOPIC


def epoch_czxid(partitions: int) -> int:
    """The zxid that created /controller_epoch in the preamble (its czxid for every later SET)."""
    return ZXID_BASE - topic_count(partitions) - 3  # followed by /controller CREATE, the epoch SET, the topics


def failover_rows(k: int, brokers: int, partitions: int, failover_every: int = FAILOVER_EVERY) -> list[ControlRow]:
    """Failover k (k >= 1): the controller resigns, the next broker wins the 2.1+ election (epoch k+1)."""
    zx = int(state_zxids(np.array([k * failover_every]), failover_every)[0]) - FAILOVER_ROWS
    ms = (zx - ZXID_BASE) + T0_US // 1000
    winner = k % brokers + 1
    from simulator import payloads as zc

    return [
        ControlRow(zx, "/controller", "DELETE", None, None, None),
        ControlRow(zx + 1, "/controller", "CREATE", zc.encode_controller(winner, ms + 1, KAFKA_VERSION), 0, zx + 1),
        ControlRow(zx + 2, "/controller_epoch", "SET", zc.encode_controller_epoch(k + 1), k + 1, epoch_czxid(partitions)),
    ]


class ControlRow(NamedTuple):
    """One non-state row (preamble, failover): zxid, path, op, payload, znode version, czxid."""

    zxid: int
    path: str
    op: str
    data: bytes | None
    version: int | None
    czxid: int | None


def control_table(rows: list[ControlRow], cluster: str) -> pa.Table:
    """znode_events rows (all columns the writer needs) of a few control rows; ids from models.ids.event_id."""
    from models.ids import event_id

    zxids = [r.zxid for r in rows]
    times = _txn_times(np.array(zxids, dtype=np.int64))
    return pa.table({
        "zxid": pa.array(zxids, pa.int64()), "path": pa.array([r.path for r in rows], pa.string()),
        "op": pa.array([r.op for r in rows], pa.string()), "data": pa.array([r.data for r in rows], pa.binary()),
        "version": pa.array([r.version for r in rows], pa.int32()), "czxid": pa.array([r.czxid for r in rows], pa.int64()),
        "mzxid": pa.array(zxids, pa.int64()), "txn_time": times, "source": pa.repeat(SOURCE, len(rows)),
        "observed_at": times,
        "event_id": pa.array([event_id(cluster, SOURCE, r.zxid, r.path, r.op) for r in rows], pa.string()),
    })


def preamble_rows(partitions: int, brokers: int, seed: int = 0) -> list[ControlRow]:
    """What a 2.8 cluster writes before the first partition-state write, in order.

    Brokers register; the first controller is elected the 2.1+ way (`/controller_epoch` created with 0, then
    one multi creating `/controller` and setting the epoch to 1, docs/kafka-metadata.md); each topic's assignment znode is
    created (TopicZNode v3 with topic_id, the CREATE of AdminZkClient topic creation). Without the assignments,
    every first state write would start from NonExistentPartition and read as an illegal transition.
    """
    from simulator import payloads as zc

    rows: list[tuple[str, str, bytes, int]] = [
        (f"/brokers/ids/{b}", "CREATE",
         zc.encode_broker_registration(b, f"broker-{b}.sim", 9092, KAFKA_VERSION, timestamp_ms=T0_US // 1000), 0)
        for b in range(1, brokers + 1)]
    rows += [("/controller_epoch", "CREATE", zc.encode_controller_epoch(0), 0),
             ("/controller", "CREATE", zc.encode_controller(1, T0_US // 1000, KAFKA_VERSION), 0),
             ("/controller_epoch", "SET", zc.encode_controller_epoch(1), 1)]
    for t in range(topic_count(partitions)):
        first = t * PARTITIONS_PER_TOPIC
        count = min(PARTITIONS_PER_TOPIC, partitions - first)
        assignment = {p: replicas_of(first + p, brokers) for p in range(count)}
        rows.append((f"/brokers/topics/t{t:05d}", "CREATE",
                     zc.encode_topic_assignment(assignment, KAFKA_VERSION, topic_id=topic_id(seed, t)), 0))
    zxids = [ZXID_BASE - len(rows) + i for i in range(len(rows))]  # just before the first state write
    assert zxids[brokers] == epoch_czxid(partitions)
    return [ControlRow(z, path, op, data, version, z if op == "CREATE" else epoch_czxid(partitions))
            for z, (path, op, data, version) in zip(zxids, rows, strict=True)]


def preamble_table(partitions: int, brokers: int, cluster: str, seed: int = 0) -> pa.Table:
    """The preamble as znode_events rows (see `preamble_rows`)."""
    return control_table(preamble_rows(partitions, brokers, seed), cluster)


def default_workers(events: int) -> int:
    """Hash in a pool of one process per core for big runs; in-process for small ones."""
    return (os.cpu_count() or 1) if events >= POOL_MIN_EVENTS else 0


def _submit(pool: Pool | None, cluster: str, partitions: int, b: _Batch, chunks: int) -> list[Any]:
    """Start hashing one batch (in `chunks` pool tasks, or synchronously without a pool)."""
    if pool is None:
        return [_hash_chunk(cluster, partitions, b.zxid, b.part, b.is_create)]
    bounds = np.linspace(0, len(b.zxid), chunks + 1, dtype=np.int64)
    return [pool.apply_async(_hash_chunk, (cluster, partitions, b.zxid[s:e], b.part[s:e], b.is_create[s:e]))
            for s, e in pairwise(bounds.tolist()) if e > s]


def _collect(pending: list[Any]) -> pa.StringArray:
    return hex_ids(b"".join(p.get() if isinstance(p, AsyncResult) else p for p in pending))


def generate(events: int, partitions: int, brokers: int = 5, seed: int = 0, cluster: str = "local",
             batch: int = 1_000_000, workers: int | None = None,
             failover_every: int = FAILOVER_EVERY) -> Iterator[pa.Table]:
    """Yield pyarrow batches of znode_events rows (all columns the writer needs); same seed -> same rows.

    Each batch holds `batch` state events plus the rows of the failovers that fall inside it (not the preamble).
    """
    workers = default_workers(events) if workers is None else workers
    # fork: the children only run _hash_chunk (numpy, pyarrow kernels, hashlib) and need no __main__ guard
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    try:
        ahead: deque[tuple[_Batch, list[Any]]] = deque()
        for b in _numeric_batches(events, partitions, brokers, seed, batch, failover_every):
            ahead.append((b, _submit(pool, cluster, partitions, b, workers)))
            if len(ahead) > 1:  # the pool hashes the next batch while this one's columns are built
                done, pending = ahead.popleft()
                yield _to_table(done, partitions, brokers, _collect(pending), cluster, failover_every)
        while ahead:
            done, pending = ahead.popleft()
            yield _to_table(done, partitions, brokers, _collect(pending), cluster, failover_every)
    finally:
        if pool is not None:
            pool.terminate()


def write_offline(lake: Lake, events: int, partitions: int, brokers: int = 5, seed: int = 0,
                  batch: int = 1_000_000, progress: Progress | None = None, workers: int | None = None,
                  failover_every: int = FAILOVER_EVERY) -> int:
    """Append the history to `znode_events` idempotently (writer `offline-sim:<seed>`, batch_seq 0, 1, ...).

    Returns the rows written: `events` partition-state writes plus the preamble and failover rows (progress
    counts the state writes only). Batches are committed in order by one writer thread, so generating batch
    k+1 overlaps writing batch k.
    """
    writer = f"offline-sim:{seed}"
    todo: queue.Queue[tuple[int, pa.Table, int] | None] = queue.Queue(maxsize=1)
    failure: list[BaseException] = []
    written = 0

    def commit() -> None:
        nonlocal written
        while (item := todo.get()) is not None:
            if failure:
                continue  # drain so the producer never blocks after an error
            seq, table, states = item
            try:
                lake.append(ZNODE_EVENTS.name, table, writer_id=writer, batch_seq=seq)
            except BaseException as exc:  # re-raised in the caller's thread below
                failure.append(exc)
                continue
            written += table.num_rows
            if progress is not None:
                progress.advance(states)

    thread = threading.Thread(target=commit, name="offline-writer", daemon=True)
    thread.start()
    try:
        cluster = getattr(lake, "cluster", "local")
        batches = generate(events, partitions, brokers, seed, cluster, batch, workers, failover_every)
        for seq, table in enumerate(batches):
            if failure:
                break
            states = min(batch, events - seq * batch)
            if seq == 0:
                table = pa.concat_tables([preamble_table(partitions, brokers, cluster, seed), table])
            todo.put((seq, table, states))
    finally:
        todo.put(None)
        thread.join()
    if failure:
        raise failure[0]
    log.info("offline: %d events over %d partitions written as %s", written, partitions, writer)
    return written
