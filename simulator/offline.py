"""Offline mode: a large synthetic partition-state history written straight into bronze `znode_events`.

One topic per 1,000 partitions, 3 brokers of `brokers` per partition; each event after a partition's CREATE is a
SET that either bumps the leader epoch (leader election, 30%), shrinks or expands the ISR (70%); every ~1M events
the controller epoch goes up (a failover). zxids are strictly increasing.

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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

PARTITIONS_PER_TOPIC = 1000
ZXID_BASE = 0x100000000  # epoch 1 of the ZooKeeper ensemble
ID_LEN = 24  # hex chars kept by models.ids.event_id
SOURCE = "txnlog"
POOL_MIN_EVENTS = 200_000  # below this a process pool costs more than it saves
_SEP = "\x1f"  # models.ids.event_id joins its parts with U+001F
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_OPS = pa.array(["SET", "CREATE"])  # indexed by is_create


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

    zxid: np.ndarray
    part: np.ndarray
    is_create: np.ndarray
    shrink: np.ndarray
    leader: np.ndarray
    leader_epoch: np.ndarray
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


def _numeric_batches(events: int, partitions: int, brokers: int, seed: int, batch: int) -> Iterator[_Batch]:
    rng = np.random.default_rng(seed)
    leader_epoch = np.zeros(partitions, dtype=np.int64)
    version = np.full(partitions, -1, dtype=np.int64)
    czxid = np.zeros(partitions, dtype=np.int64)
    start = np.arange(partitions) % brokers
    done = 0
    while done < events:
        n = min(batch, events - done)
        idx = np.arange(done, done + n)
        zxid = idx + ZXID_BASE  # strictly increasing
        part = np.where(idx < partitions, idx % max(partitions, 1), rng.integers(0, partitions, n))
        is_create = idx < partitions
        election = ~is_create & (rng.random(n) < 0.3)
        shrink = ~is_create & ~election & (rng.random(n) < 0.5)
        order = np.argsort(part, kind="stable")
        le = leader_epoch[part] + _segment_counts(part, order, election)
        np.add.at(leader_epoch, part, election.astype(np.int64))
        ver = version[part] + _segment_counts(part, order, np.ones(n, dtype=bool))
        np.add.at(version, part, 1)
        czxid[part[is_create]] = zxid[is_create]
        leader = (start[part] + le) % brokers + 1
        yield _Batch(zxid, part, is_create, shrink, leader, le, ver, czxid[part])
        done += n


def _isr_strings(leader: np.ndarray, shrink: np.ndarray, brokers: int) -> pa.Array:
    """"a,b" or "a,b,c" (leader first, then the next brokers round the ring), gathered from a 2*brokers table."""
    table = []
    for a in range(1, brokers + 1):
        b, c = a % brokers + 1, (a + 1) % brokers + 1
        table += [f"{a},{b},{c}", f"{a},{b}"]
    return pa.array(table).take(pa.array((leader - 1) * 2 + shrink.astype(np.int64)))


def _to_table(b: _Batch, partitions: int, brokers: int, ids: pa.StringArray) -> pa.Table:
    n = len(b.zxid)
    ce = 1 + b.zxid // 1_000_000 - ZXID_BASE // 1_000_000  # a controller failover every ~1M events
    data = state_payload_array(b.leader, b.leader_epoch, ce, _isr_strings(b.leader, b.shrink, brokers))
    t0_us = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1_000_000) + int(b.zxid[0] - ZXID_BASE) * 1000
    txn_time = pa.array(t0_us + np.arange(n, dtype=np.int64) * 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.table({
        "zxid": pa.array(b.zxid, pa.int64()), "path": partition_paths(partitions).take(pa.array(b.part)),
        "op": _OPS.take(pa.array(b.is_create.astype(np.int8))), "data": data,
        "version": pa.array(b.version, pa.int32()), "czxid": pa.array(b.czxid, pa.int64()),
        "mzxid": pa.array(b.zxid, pa.int64()), "txn_time": txn_time, "source": pa.repeat(SOURCE, n),
        "observed_at": txn_time, "event_id": ids,
    })


def preamble_table(partitions: int, brokers: int, cluster: str) -> pa.Table:
    """What a cluster holds before the first partition-state write: brokers, controller, topic assignments.

    Without it every partition's first state write would start from NonExistentPartition (no assignment seen)
    and the whole history would read as illegal transitions. Each partition is assigned to every broker, so
    the ring-rotating leader and ISR of the generated writes always stay inside the replica set.
    """
    from models import znode_codec as zc
    from models.ids import event_id

    version = "2.8"
    rows: list[tuple[str, bytes]] = [(f"/brokers/ids/{b}", zc.encode_broker_registration(b, f"broker-{b}.sim", 9092,
                                                                                            version, timestamp_ms=0))
                                     for b in range(1, brokers + 1)]
    rows.append(("/controller_epoch", zc.encode_controller_epoch(1)))
    rows.append(("/controller", zc.encode_controller(1, 0, version)))
    everyone = list(range(1, brokers + 1))
    topics = (partitions + PARTITIONS_PER_TOPIC - 1) // PARTITIONS_PER_TOPIC
    for t in range(topics):
        count = min(PARTITIONS_PER_TOPIC, partitions - t * PARTITIONS_PER_TOPIC)
        rows.append((f"/brokers/topics/t{t:05d}", zc.encode_topic_assignment(dict.fromkeys(range(count), everyone),
                                                                              version)))
    zxids = [ZXID_BASE - len(rows) + i for i in range(len(rows))]  # just before the first state write
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    return pa.table({
        "zxid": pa.array(zxids, pa.int64()), "path": pa.array([r[0] for r in rows]),
        "op": pa.array(["CREATE"] * len(rows)), "data": pa.array([r[1] for r in rows], pa.binary()),
        "version": pa.array([0] * len(rows), pa.int32()), "czxid": pa.array(zxids, pa.int64()),
        "mzxid": pa.array(zxids, pa.int64()), "txn_time": pa.array([t0] * len(rows), pa.timestamp("us", tz="UTC")),
        "source": pa.repeat(SOURCE, len(rows)), "observed_at": pa.array([t0] * len(rows), pa.timestamp("us", tz="UTC")),
        "event_id": pa.array([event_id(cluster, SOURCE, z, r[0], "CREATE") for z, r in zip(zxids, rows, strict=True)]),
    })


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
             batch: int = 1_000_000, workers: int | None = None) -> Iterator[pa.Table]:
    """Yield pyarrow batches of znode_events rows (all columns the writer needs); same seed -> same rows."""
    workers = default_workers(events) if workers is None else workers
    # fork: the children only run _hash_chunk (numpy, pyarrow kernels, hashlib) and need no __main__ guard
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    try:
        ahead: deque[tuple[_Batch, list[Any]]] = deque()
        for b in _numeric_batches(events, partitions, brokers, seed, batch):
            ahead.append((b, _submit(pool, cluster, partitions, b, workers)))
            if len(ahead) > 1:  # the pool hashes the next batch while this one's columns are built
                done, pending = ahead.popleft()
                yield _to_table(done, partitions, brokers, _collect(pending))
        while ahead:
            done, pending = ahead.popleft()
            yield _to_table(done, partitions, brokers, _collect(pending))
    finally:
        if pool is not None:
            pool.terminate()


def write_offline(lake: object, events: int, partitions: int, brokers: int = 5, seed: int = 0,
                  batch: int = 1_000_000, progress: object | None = None, workers: int | None = None) -> int:
    """Append the history to `znode_events` idempotently (writer `offline-sim:<seed>`, batch_seq 0, 1, ...).

    Batches are committed in order by one writer thread, so generating batch k+1 overlaps writing batch k.
    """
    writer = f"offline-sim:{seed}"
    todo: queue.Queue[tuple[int, pa.Table] | None] = queue.Queue(maxsize=1)
    failure: list[BaseException] = []
    written = 0

    def commit() -> None:
        nonlocal written
        while (item := todo.get()) is not None:
            if failure:
                continue  # drain so the producer never blocks after an error
            seq, table = item
            try:
                lake.append("znode_events", table, writer_id=writer, batch_seq=seq)  # type: ignore[attr-defined]
            except BaseException as exc:  # re-raised in the caller's thread below
                failure.append(exc)
                continue
            written += table.num_rows
            if progress is not None:
                progress.advance(table.num_rows)  # type: ignore[attr-defined]

    thread = threading.Thread(target=commit, name="offline-writer", daemon=True)
    thread.start()
    try:
        cluster = getattr(lake, "cluster", "local")
        for seq, table in enumerate(generate(events, partitions, brokers, seed, cluster, batch, workers)):
            if failure:
                break
            if seq == 0:
                table = pa.concat_tables([preamble_table(partitions, brokers, cluster), table])
            todo.put((seq, table))
    finally:
        todo.put(None)
        thread.join()
    if failure:
        raise failure[0]
    log.info("offline: %d events over %d partitions written as %s", written, partitions, writer)
    return written
