"""The monitor's carried state: what the next increment continues from, held in memory between batches."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.increment import (
    DERIVED_TABLES,
    STREAMED_TABLES,
    Carried,
    Outputs,
    empty_carried,
    widened_txnlog_range,
)
from engine.writes import MONITOR_WRITER
from models.events import MetadataEventType, Source, TenureSource
from models.tables import (
    ANOMALIES,
    CONTROLLER_DECISIONS,
    CONTROLLER_TENURE,
    METADATA_EVENTS,
    PARTITION_STATE,
    REPLICA_STATE,
    ZNODE_EVENTS,
)
from pipelines import detectors as D
from pipelines.controller import GLOBAL_TYPES, RESIGN_COLUMNS, resign_marks
from pipelines.detectors import distinct_writes

if TYPE_CHECKING:
    from lakehouse import Lake


class RecentIds:
    """The metadata_events ids this process committed, complete for every zxid >= ``floor``.

    Each micro-batch asks which of its ids an earlier batch already committed (a change seen by both
    collectors); answering from memory spares a lake scan per batch. Bounded: past ``max_rows`` the
    lowest zxids are dropped and the floor raised, so older ranges fall back to the lake. Both collectors
    deliver a change within seconds of each other, so the default (a minute or more of a busy cluster's
    changes, ~10 MB) answers from memory in steady operation.
    """

    def __init__(self, floor: int | None, max_rows: int = 200_000) -> None:
        self.floor = floor  # None: nothing committed before this process, memory is complete
        self.max_rows = max_rows
        self.zxids = pa.chunked_array([], pa.int64())
        self.ids = pa.chunked_array([], pa.string())

    def covers(self, lo: int) -> bool:
        return self.floor is None or lo >= self.floor

    def between(self, lo: int, hi: int) -> set[str]:
        inside = pc.and_(pc.greater_equal(self.zxids, lo), pc.less_equal(self.zxids, hi))
        return set(self.ids.filter(inside).to_pylist())

    def add(self, zxids: pa.ChunkedArray, ids: pa.ChunkedArray) -> None:
        self.zxids = pa.chunked_array(self.zxids.chunks + zxids.cast(pa.int64()).chunks, pa.int64())
        self.ids = pa.chunked_array(self.ids.chunks + ids.cast(pa.string()).chunks, pa.string())
        if len(self.zxids) > self.max_rows:  # keep the upper half of the zxids, every id at the new floor
            floor = int(np.partition(self.zxids.to_numpy(), len(self.zxids) // 2)[len(self.zxids) // 2])
            keep = pc.greater_equal(self.zxids, floor)
            # one chunk each: a filtered chunked array keeps every (emptied) chunk of the batches it dropped
            self.zxids = pa.chunked_array([self.zxids.filter(keep).combine_chunks()])
            self.ids = pa.chunked_array([self.ids.filter(keep).combine_chunks()])
            self.floor = floor if self.floor is None else max(self.floor, floor)


def complete_versions(lake: Lake) -> dict[str, int | None]:
    """Each derived table's version as of the monitor's last complete micro-batch (None: the current one).

    A batch whose commits a crash cut short (some tables hold it, others not) is read as not there: the
    replayed batch is recomputed from the state before it, as the first run computed it.
    """
    seqs = {t: lake.last_batch_seq(t, MONITOR_WRITER) if lake.exists(t) else None for t in DERIVED_TABLES}
    newest = max((s for s in seqs.values() if s is not None), default=None)
    versions: dict[str, int | None] = dict.fromkeys(DERIVED_TABLES)
    if newest is None or all(s == newest for s in seqs.values()):
        return versions
    for table, seq in seqs.items():
        if seq == newest:  # this table committed the cut batch: its version before that commit
            version = int(lake.version(table) or 0)
            while version > 0 and (lake.snapshot(table, version).transaction_version(MONITOR_WRITER) or -1) >= newest:
                version -= 1
            versions[table] = version
    return versions


def pending_decisions(lake: Lake, version: int | None) -> tuple[int | None, pa.Table]:
    """(the latest ZooKeeper event time of ``metadata_events`` at ``version``, the logged decisions not settled by
    it): what a monitor continues from. Decisions not streamed yet may be among them; their findings are
    deterministic, so one found twice is kept once."""
    import pyarrow.dataset as ds

    zk_time = D.zk_time_seen(lake.scan(METADATA_EVENTS.name, ["event_time"], version=version), None)
    where = None
    if zk_time is not None:  # only the last DECISION_SETTLE of the logs can still be waiting
        where = ds.field("ts") > pa.scalar(D.settle_horizon(zk_time), pa.timestamp("us", tz="UTC"))
    _, pending = D.settle_decisions(D.PENDING_DECISIONS.empty_table(), lake.scan(CONTROLLER_DECISIONS.name, where=where),
                                    zk_time)
    return zk_time, pending


class MonitorCarry:
    """The monitor's carried state: read from the lake once at start, then advanced in memory per batch.

    Only the monitor writes the derived tables (one writer), so after each committed batch the in-memory
    state equals what a re-read would give, and a micro-batch costs what it touches, not the history.
    Read as of the last complete batch (``complete_versions``).
    """

    def __init__(self, lake: Lake) -> None:
        import pyarrow.dataset as ds

        self.lake = lake
        for table in (METADATA_EVENTS.name, PARTITION_STATE.name, REPLICA_STATE.name, CONTROLLER_TENURE.name, ANOMALIES.name,
                      *STREAMED_TABLES):
            lake.ensure(table)
        self.versions = complete_versions(lake)
        at = self.versions
        meta_type = ds.field("type")
        global_rows: list[dict[str, Any]] = lake.scan(METADATA_EVENTS.name, where=meta_type.isin(GLOBAL_TYPES),
                                                      version=at[METADATA_EVENTS.name]).to_pylist()
        writes = lake.scan(METADATA_EVENTS.name, ["topic", "partition", "leader", "leader_epoch"],
                           where=meta_type == str(MetadataEventType.PARTITION_STATE_WRITTEN), version=at[METADATA_EVENTS.name])
        writes = distinct_writes(writes)
        txn = lake.scan(ZNODE_EVENTS.name, ["zxid"], where=ds.field("source") == str(Source.TXNLOG))["zxid"]
        lo, hi = (v.as_py() for v in pc.min_max(txn).values())
        terms = lake.read_arrow(CONTROLLER_TENURE.name, at[CONTROLLER_TENURE.name])
        self.carried = Carried(
            partition_state=lake.read_arrow(PARTITION_STATE.name, at[PARTITION_STATE.name]),
            replica_state=lake.read_arrow(REPLICA_STATE.name, at[REPLICA_STATE.name]),
            log_terms=terms.filter(pc.equal(terms["source"], str(TenureSource.LOGS))), global_events=global_rows,
            zk_writes=writes, known_ids=self.committed_ids, txnlog_max_zxid=hi, txnlog_min_zxid=lo,
            # ids already in `anomalies` are not added again (a finding re-found by a later batch);
            # resignation marks may include decisions not streamed yet: they are keyed by event id
            known_anomaly_ids=set(lake.scan(ANOMALIES.name, ["anomaly_id"], version=at[ANOMALIES.name])["anomaly_id"].to_pylist()),
            resigns=resign_marks(lake.scan(CONTROLLER_DECISIONS.name, list(RESIGN_COLUMNS))),
        )
        self.carried.zk_time, self.carried.pending_decisions = pending_decisions(lake, at[METADATA_EVENTS.name])
        top = pc.max(lake.scan(METADATA_EVENTS.name, ["zxid"], version=at[METADATA_EVENTS.name])["zxid"]).as_py()
        self.recent = RecentIds(floor=None if top is None else top + 1)
        self.last_batch: int | None = None  # the last micro-batch this process committed

    @classmethod
    def fresh(cls, lake: Lake, txnlog_range: tuple[int | None, int | None]) -> MonitorCarry:
        """Nothing committed yet (a rebuild's first chunk), with the txnlog range the whole history has."""
        carry = cls.__new__(cls)
        carry.lake = lake
        carry.carried = dataclasses.replace(empty_carried(), txnlog_min_zxid=txnlog_range[0],
                                            txnlog_max_zxid=txnlog_range[1], known_anomaly_ids=set(), resigns=[])
        carry.recent, carry.last_batch, carry.versions = RecentIds(floor=None), None, dict.fromkeys(DERIVED_TABLES)
        return carry

    def committed_ids(self, lo: int, hi: int) -> set[str]:
        """metadata_events ids already committed with zxid in [lo, hi] (cross-batch dedupe)."""
        import pyarrow.dataset as ds

        if self.recent.covers(lo):
            return self.recent.between(lo, hi)
        # until this process commits, as of the last complete batch: a replayed batch's own rows are not "earlier"
        version = self.versions[METADATA_EVENTS.name] if self.last_batch is None else None
        found = self.lake.scan(METADATA_EVENTS.name, ["event_id"], where=(ds.field("zxid") >= lo) & (ds.field("zxid") <= hi),
                               version=version)
        return set(found["event_id"].to_pylist())

    def advance(self, out: Outputs) -> None:
        """The state after ``out`` was committed."""
        c = self.carried
        meta = out[METADATA_EVENTS.name]
        terms = out[CONTROLLER_TENURE.name]
        writes = meta.filter(pc.equal(meta["type"], str(MetadataEventType.PARTITION_STATE_WRITTEN))).select(["topic", "partition", "leader", "leader_epoch"])
        lo, hi = out.txnlog_bounds
        c.partition_state, c.replica_state = out[PARTITION_STATE.name], out[REPLICA_STATE.name]
        c.log_terms = terms.filter(pc.equal(terms["source"], str(TenureSource.LOGS)))
        c.global_events = c.global_events + meta.filter(pc.is_in(meta["type"], pa.array(GLOBAL_TYPES))).to_pylist()
        c.zk_writes = distinct_writes(writes if c.zk_writes is None
                                      else pa.concat_tables([c.zk_writes, writes.cast(c.zk_writes.schema)]))
        c.txnlog_min_zxid, c.txnlog_max_zxid = widened_txnlog_range(c, lo, hi)
        c.known_anomaly_ids = (c.known_anomaly_ids or set()) | set(out[ANOMALIES.name]["anomaly_id"].to_pylist())
        c.resigns = out.resigns
        c.pending_decisions, c.zk_time = out.pending_decisions, out.zk_time
        c.empty = False
        self.recent.add(meta["zxid"], meta["event_id"])
