"""Offline mode: a large synthetic partition-state history written straight into bronze `znode_events`.

Vectorised with numpy; payload bytes come from a templated fast path (`fast_state_payloads`) that produces
exactly what `encode_partition_state` produces (tested on a sample). One topic per 1,000 partitions, 3 brokers
of `brokers` per partition; each event after a partition's CREATE is a SET that either bumps the leader epoch
(leader election, 30%), shrinks or expands the ISR (70%); every ~1M events the controller epoch goes up
(a failover). zxids are strictly increasing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from models.ids import event_id

log = logging.getLogger(__name__)

PARTITIONS_PER_TOPIC = 1000


def fast_state_payloads(leader: np.ndarray, leader_epoch: np.ndarray, controller_epoch: np.ndarray,
                        isr: list[str]) -> list[bytes]:
    """Same bytes as encode_partition_state(leader, le, ce, isr) (no leader_recovery_state)."""
    return [
        b'{"controller_epoch":%d,"leader":%d,"version":1,"leader_epoch":%d,"isr":[%s]}' % (c, ld, e, i.encode())
        for ld, e, c, i in zip(leader.tolist(), leader_epoch.tolist(), controller_epoch.tolist(), isr, strict=True)
    ]


def generate(events: int, partitions: int, brokers: int = 5, seed: int = 0, cluster: str = "local",
             batch: int = 1_000_000) -> Iterator[pa.Table]:
    """Yield pyarrow batches of znode_events rows (all columns the writer needs)."""
    rng = np.random.default_rng(seed)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    leader_epoch = np.zeros(partitions, dtype=np.int64)
    version = np.full(partitions, -1, dtype=np.int64)
    czxid = np.zeros(partitions, dtype=np.int64)
    start = np.arange(partitions) % brokers
    done = 0
    while done < events:
        n = min(batch, events - done)
        idx = np.arange(done, done + n)
        zxid = idx + 0x100000000  # epoch 1 of the ZooKeeper ensemble, strictly increasing
        part = np.where(idx < partitions, idx % max(partitions, 1), rng.integers(0, partitions, n))
        is_create = idx < partitions
        election = ~is_create & (rng.random(n) < 0.3)
        shrink = ~is_create & ~election & (rng.random(n) < 0.5)
        # per-row leader epoch: cumulative bumps per partition within this batch
        bumps = np.zeros(n, dtype=np.int64)
        order = np.argsort(part, kind="stable")
        sp, se = part[order], election[order].astype(np.int64)
        cums = np.cumsum(se)
        first = np.r_[0, np.flatnonzero(np.diff(sp)) + 1]
        seg_start = np.repeat(cums[first] - se[first], np.diff(np.r_[first, len(sp)]))
        bumps[order] = cums - seg_start
        le = leader_epoch[part] + bumps
        ones = np.ones(n, dtype=np.int64)
        vc = np.zeros(n, dtype=np.int64)
        np.add.at(leader_epoch, part, election.astype(np.int64))
        cv = np.cumsum(ones[order])
        vstart = np.repeat(cv[first] - 1, np.diff(np.r_[first, len(sp)]))
        vc[order] = cv - vstart
        ver = version[part] + vc
        np.add.at(version, part, 1)
        czxid[part[is_create]] = zxid[is_create]
        leader = (start[part] + le) % brokers + 1
        r2, r3 = (leader % brokers) + 1, ((leader + 1) % brokers) + 1
        isr = [f"{a},{b}" if s else f"{a},{b},{c}" for a, b, c, s in zip(leader.tolist(), r2.tolist(), r3.tolist(), shrink.tolist(), strict=True)]
        ce = 1 + zxid // 1_000_000 - 0x100000000 // 1_000_000
        data = fast_state_payloads(leader, le, ce, isr)
        topics = part // PARTITIONS_PER_TOPIC
        paths = [f"/brokers/topics/t{t:05d}/partitions/{p % PARTITIONS_PER_TOPIC}/state" for t, p in zip(topics.tolist(), part.tolist(), strict=True)]
        ops = np.where(is_create, "CREATE", "SET").tolist()
        ids = [event_id(cluster, "txnlog", z, pth, o) for z, pth, o in zip(zxid.tolist(), paths, ops, strict=True)]
        times = [base + timedelta(milliseconds=int(z - 0x100000000)) for z in zxid[:1].tolist()]
        t0 = times[0]
        txn_time = pa.array((t0.timestamp() * 1e6 + np.arange(n) * 1000).astype("int64"), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
        yield pa.table({
            "zxid": pa.array(zxid, pa.int64()), "path": pa.array(paths), "op": pa.array(ops),
            "data": pa.array(data, pa.binary()), "version": pa.array(ver, pa.int32()),
            "czxid": pa.array(czxid[part], pa.int64()), "mzxid": pa.array(zxid, pa.int64()),
            "txn_time": txn_time, "source": pa.array(["txnlog"] * n), "observed_at": txn_time,
            "event_id": pa.array(ids),
        })
        done += n


def write_offline(lake: object, events: int, partitions: int, brokers: int = 5, seed: int = 0,
                  batch: int = 1_000_000, progress: object | None = None) -> int:
    """Append the history to `znode_events` idempotently (writer `offline-sim:<seed>`, batch_seq 0, 1, ...)."""
    writer = f"offline-sim:{seed}"
    written = 0
    for seq, table in enumerate(generate(events, partitions, brokers, seed, getattr(lake, "cluster", "local"), batch)):
        lake.append("znode_events", table, writer_id=writer, batch_seq=seq)  # type: ignore[attr-defined]
        written += table.num_rows
        if progress is not None:
            progress.advance(table.num_rows)  # type: ignore[attr-defined]
    return written
