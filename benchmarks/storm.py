"""A failover storm as bronze `znode_events`: every partition's leader moves, its ISR shrinks, epochs bump.

Version 0 of the table: the cluster's preamble (brokers, controller 1 with epoch 1, the topics' assignments)
and every partition's first state (leader a, ISR a,b,c, leader_epoch 0). Version 1: a controller failover (broker 2 takes over with epoch 2) and, for every partition,
a state write with leader b, ISR b,c, leader_epoch 1, controller_epoch 2. Payloads are the exact Kafka bytes
(`simulator.offline.state_payload_array`), ids the documented `models.ids.event_id` meaning.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from models.ids import event_id
from models.tables import ZNODE_EVENTS
from simulator.offline import (
    ZXID_BASE,
    hex_ids,
    id_messages,
    partition_paths,
    preamble_table,
    sha1_prefixes,
    state_payload_array,
)

_COLUMNS = ["zxid", "path", "op", "data", "version", "czxid", "mzxid", "txn_time", "source", "observed_at", "event_id"]
_T0_US = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1_000_000)


def _controller_rows(cluster: str, zxid: int, broker: int, epoch: int, op: str) -> pa.Table:
    rows = [("/controller", b'{"version":1,"brokerid":%d,"timestamp":"%d"}' % (broker, 1767225600000 + zxid - ZXID_BASE)),
            ("/controller_epoch", b"%d" % epoch)]
    zx = [zxid, zxid + 1]
    t = pa.array([_T0_US + (z - ZXID_BASE) * 1000 for z in zx]).cast(pa.timestamp("us", tz="UTC"))
    return pa.table({
        "zxid": pa.array(zx, pa.int64()), "path": [p for p, _ in rows], "op": [op, op],
        "data": pa.array([d for _, d in rows], pa.binary()), "version": pa.array([epoch - 1] * 2, pa.int32()),
        "czxid": pa.array([ZXID_BASE] * 2, pa.int64()), "mzxid": pa.array(zx, pa.int64()), "txn_time": t,
        "source": ["txnlog"] * 2, "observed_at": t,
        "event_id": [event_id(cluster, "txnlog", z, p, op) for z, (p, _) in zip(zx, rows, strict=True)],
    })


def _state_rows(cluster: str, first_zxid: int, partitions: int, brokers: int, storm: bool) -> pa.Table:
    part = np.arange(partitions, dtype=np.int64)
    a = part % brokers + 1
    b, c = a % brokers + 1, (a + 1) % brokers + 1
    leader = b if storm else a
    isr = pa.array([f"{x},{y}" for x, y in zip(b.tolist(), c.tolist(), strict=True)] if storm
                   else [f"{x},{y},{z}" for x, y, z in zip(a.tolist(), b.tolist(), c.tolist(), strict=True)])
    le = np.full(partitions, 1 if storm else 0)
    ce = np.full(partitions, 2 if storm else 1)
    zxid = first_zxid + part
    op = "SET" if storm else "CREATE"
    paths = partition_paths(partitions)
    ops = pa.array([op] * partitions)
    t = pa.array(_T0_US + (zxid - ZXID_BASE) * 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.table({
        "zxid": pa.array(zxid, pa.int64()), "path": paths, "op": ops,
        "data": state_payload_array(leader, le, ce, isr), "version": pa.array(np.full(partitions, int(storm)), pa.int32()),
        "czxid": pa.array(ZXID_BASE + 2 + part, pa.int64()), "mzxid": pa.array(zxid, pa.int64()), "txn_time": t,
        "source": pa.repeat("txnlog", partitions), "observed_at": t,
        "event_id": hex_ids(sha1_prefixes(id_messages(cluster, zxid, paths, ops))),
    })


def write_storm(lake: Any, partitions: int, brokers: int = 6) -> int:
    """Two bronze commits (before, storm); returns the number of bronze rows written.

    Before: what `simulate --offline` writes first (brokers register, controller 1 is elected with epoch 1,
    each topic's assignment znode is created: `simulator.offline.preamble_table`), then every partition's
    first state. So the storm is a legal one, as in a real cluster: every election is Online -> Online and
    every dropped ISR member Online -> Offline; a healthy storm yields no anomalies.
    """
    z = ZXID_BASE
    before = pa.concat_tables([preamble_table(partitions, brokers, lake.cluster).select(_COLUMNS),
                               _state_rows(lake.cluster, z, partitions, brokers, storm=False).select(_COLUMNS)])
    z2 = z + partitions
    during = pa.concat_tables([_controller_rows(lake.cluster, z2, 2, 2, "SET").select(_COLUMNS),
                               _state_rows(lake.cluster, z2 + 2, partitions, brokers, storm=True).select(_COLUMNS)])
    lake.append(ZNODE_EVENTS.name, before, writer_id=f"bench-storm-{lake.cluster}", batch_seq=0)
    lake.append(ZNODE_EVENTS.name, during, writer_id=f"bench-storm-{lake.cluster}", batch_seq=1)
    return int(before.num_rows + during.num_rows)
