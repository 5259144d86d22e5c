"""Shared wiring of the pipeline jobs and commands: argument parsing, lake reads, increment writes.

``pipelines`` stays DataFrame -> DataFrame; everything that touches the lake lives here.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs._monitor_start import (
    MONITOR_WRITER,
    REBUILD_WRITER,
    MonitorStart,
    plan_monitor_start,
    writer_metadata,
)
from lakehouse.arrow_schema import arrow_schema
from lakehouse.delta_source import commit_manifest, data_file_rows, read_data_files
from lakehouse.spark_io import (
    COMMIT_COLUMNS,
    drain_available_now,
    read_files_frame,
    read_table,
    stream_commits,
    stream_table,
    supports_commit_stream,
    write_batch,
)
from models.tables import CONTROLLER_DECISIONS, ZNODE_EVENTS
from pipelines.controller import GLOBAL_TYPES, RESIGN_COLUMNS, resign_marks
from pipelines.decode import decode_table
from pipelines.engine import (
    APPEND_TABLES,
    DERIVED_TABLES,
    Carried,
    Outputs,
    committed_txnlog_range,
    empty_carried,
    run_increment,
    widened_txnlog_range,
)
from pipelines.parallel import use_system_allocator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse import Lake

log = logging.getLogger(__name__)


def read_or_empty(spark: SparkSession, lake: Lake, table: str, version: int | None = None) -> DataFrame:
    lake.ensure(table)
    return read_table(spark, lake, table, version=version)


LOCAL_MAX_ROWS = 1_000_000
"""Default of settings ``pipeline.local_max_rows``: increments up to this many bronze rows run in the driver."""

REBUILD_CHUNK_ROWS = 1_000_000
"""Default of settings ``pipeline.rebuild_chunk_rows``: a longer history is rebuilt in zxid-ordered chunks."""


def rebuild(spark: SparkSession, lake: Lake, local_max_rows: int = LOCAL_MAX_ROWS,
            chunk_rows: int = REBUILD_CHUNK_ROWS) -> dict[str, int]:
    """Batch: all bronze history from empty state; overwrites every derived table.

    The history goes through ``run_increment`` in chunks of about ``chunk_rows`` bronze rows, in zxid order,
    each continuing from the state the previous one left (as the monitor's micro-batches do), so the driver
    holds one chunk's rows and outputs, never the whole history's. Controller decisions go with the last chunk,
    when every znode write they are checked against is known. A chunk of at most ``local_max_rows`` rows is
    read with delta-rs and computed in this process, a larger one through Spark.
    The state tables are written by the last chunk only (the first empties them, marking a rebuild in
    progress); the bronze versions read are recorded with the last commits, so a new monitor continues right
    after them (an interrupted rebuild leaves no such record: the monitor asks for a rebuild).
    """
    for table in STREAMED_TABLES:
        lake.ensure(table)
    versions = {t: int(lake.version(t) or 0) for t in STREAMED_TABLES}  # one snapshot, even while collectors write
    ranges = _zxid_chunks(lake, versions["znode_events"], chunk_rows)
    carry = MonitorCarry.fresh(lake, _txnlog_range(lake, versions["znode_events"]))
    counts = dict.fromkeys(DERIVED_TABLES, 0)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="rebuild-io") as io:
        _rebuild_chunks(spark, lake, versions, ranges, carry, counts, io, local_max_rows)
    return counts


def _rebuild_chunks(spark: SparkSession, lake: Lake, versions: dict[str, int], ranges: list[Chunk], carry: MonitorCarry,
                    counts: dict[str, int], io: ThreadPoolExecutor, local_max_rows: int) -> None:
    """The chunks of ``rebuild``, overlapped: while chunk i folds, chunk i+1 is read and decoded and
    chunk i-1's tables are written (delta-rs reads and writes outside the GIL, on the core the kernels leave);
    chunk i's commits start only after chunk i-1's are done, so the commit order stays the chunk order."""
    # the whole history's txnlog range (MonitorCarry.fresh): what every chunk's decode uses, so the next chunk
    # can be decoded ahead, before this one's state is known (decode is row-local)
    committed = committed_txnlog_range(carry.carried)

    chunks = ZnodeChunks(spark, lake, versions["znode_events"], local_max_rows)

    def read(chunk: Chunk) -> tuple[DataFrame | pa.Table, pa.Table | None]:
        znodes = chunks.read(chunk)
        return znodes, decode_table(znodes, committed) if isinstance(znodes, pa.Table) else None

    reading = io.submit(read, ranges[0])
    writing: Future[None] | None = None
    for i, chunk in enumerate(ranges):
        last = i == len(ranges) - 1
        znodes, decoded = reading.result()
        if not last:
            reading = io.submit(read, ranges[i + 1])
        decisions = _decision_rows(spark, lake, versions["controller_decisions"], local_max_rows, last)
        out = run_increment(spark, znodes, decisions, carry.carried, cluster=lake.cluster, decoded=decoded)
        meta = writer_metadata(REBUILD_WRITER, versions if last else None)

        def write(table: str, first: bool = i == 0, last: bool = last, out: Outputs = out,
                  meta: dict[str, str] = meta) -> None:
            data = out[table]
            if table in STATE_TABLES and not last:
                if not first:
                    return  # the state is written once, by the last chunk
                data = data.slice(0, 0)  # the old state goes; the commit marks a rebuild in progress
            lake.ensure(table)
            seq = (lake.last_batch_seq(table, REBUILD_WRITER) or 0) + 1
            mode = "append" if table in APPEND_TABLES and not first else "overwrite"
            write_batch(data, lake, table, REBUILD_WRITER, seq, mode=mode, metadata=meta)

        if writing is not None:
            writing.result()  # the previous chunk is committed (or its error raised here)
        writing = io.submit(write_tables, write)
        carry.advance(out)
        for table in DERIVED_TABLES:
            counts[table] = out[table].num_rows + (counts[table] if table in APPEND_TABLES else 0)
        if len(ranges) > 1:
            log.info("rebuild chunk %d/%d: zxid [%s, %s), %d bronze rows, %d metadata events", i + 1, len(ranges),
                     chunk[0], chunk[1], chunk[2], out["metadata_events"].num_rows)
    if writing is not None:
        writing.result()


Chunk = tuple[int | None, int | None, int]
"""[lo, hi) zxid range of a rebuild chunk (None: open end) and its bronze row count."""


def _zxid_chunks(lake: Lake, version: int, chunk_rows: int) -> list[Chunk]:
    """Ranges of about ``chunk_rows`` bronze rows each; a zxid is never split, so the rows of one change seen by
    several collectors are deduplicated together (rows without a zxid go with the first chunk)."""
    total = lake.row_count("znode_events", version)
    if chunk_rows <= 0 or total <= chunk_rows:
        return [(None, None, total)]
    zxids = lake.scan("znode_events", ["zxid"], version=version)["zxid"]
    nulls = zxids.null_count
    ordered = np.sort(zxids.drop_null().to_numpy())
    cuts = [int(c) for c in np.unique(ordered[chunk_rows::chunk_rows]) if c > ordered[0]]
    starts = np.searchsorted(ordered, cuts)  # rows below each cut
    sizes = np.diff([0, *starts, len(ordered)])
    sizes[0] += nulls
    bounds: list[int | None] = [None, *cuts, None]
    return [(lo, hi, int(n)) for (lo, hi), n in zip(pairwise(bounds), sizes, strict=True)]


def _txnlog_range(lake: Lake, version: int) -> tuple[int | None, int | None]:
    """The whole history's txnlog zxid range: every chunk drops the watch rows it covers, as one increment would."""
    import pyarrow.dataset as ds

    txn = lake.scan("znode_events", ["zxid"], where=ds.field("source") == "txnlog", version=version)["zxid"]
    lo, hi = (v.as_py() for v in pc.min_max(txn).values())
    return lo, hi


class ZnodeChunks:
    """The bronze znode rows of consecutive rebuild chunks: read with delta-rs when a chunk is small enough to
    compute here, else as a DataFrame.

    Read each data file once: a chunk takes the files whose zxid range (the Delta log's statistics) meets
    its own, and a file that reaches into the next chunk is kept for it. A filtered scan per chunk read every
    file a cut passes through twice and evaluated the filter on every row (10 M bronze rows in 1 M chunks:
    16.6 CPU-s of reads, against 5.9 for the whole table at once). Chunks must be read in zxid order.
    """

    def __init__(self, spark: SparkSession | None, lake: Lake, version: int, local_max_rows: int) -> None:
        self.spark, self.lake, self.version, self.local_max_rows = spark, lake, version, local_max_rows
        spans = lake.file_spans("znode_events", "zxid", version)
        # a compacted file far larger than a chunk would be held whole while its chunks run: scan those
        self.spans = None if spans is None or any(s.rows > 2 * local_max_rows for s in spans) else spans
        self._kept: dict[str, pa.Table] = {}  # files read for a chunk that reach into the next one

    def read(self, chunk: Chunk) -> DataFrame | pa.Table:
        lo, hi, rows = chunk
        if rows > self.local_max_rows:
            return self._frame(lo, hi)
        if self.spans is None:
            return self._scan(lo, hi)
        parts, kept = [], {}
        for span in self.spans:
            has_nulls = lo is None and span.nulls > 0  # rows without a zxid go with the first chunk
            in_range = (span.low is not None and span.high is not None and (lo is None or span.high >= lo)
                        and (hi is None or span.low < hi))
            if not (has_nulls or in_range):
                continue
            data = self._kept.get(span.path)
            if data is None:
                data = read_data_files("znode_events", [span.path])
            if hi is not None and span.high is not None and span.high >= hi:
                kept[span.path] = data
            whole = ((lo is None or (span.low is not None and span.low >= lo and span.nulls == 0))
                     and (hi is None or (span.high is not None and span.high < hi)))
            parts.append(data if whole else _zxid_rows(data, lo, hi))
        self._kept = kept
        data = pa.concat_tables(parts) if parts else arrow_schema("znode_events").empty_table()
        return self.lake.conform_read("znode_events", data)

    def _scan(self, lo: int | None, hi: int | None) -> pa.Table:
        where = None if lo is None and hi is None else _zxid_where(lo, hi)
        return self.lake.conform_read("znode_events", self.lake.scan("znode_events", where=where,
                                                                     version=self.version))

    def _frame(self, lo: int | None, hi: int | None) -> DataFrame:
        assert self.spark is not None, "a chunk above local_max_rows needs a Spark session"
        df = read_or_empty(self.spark, self.lake, "znode_events", self.version)
        if lo is not None:
            df = df.filter(F.col("zxid") >= lo)
        if hi is not None:
            df = df.filter((F.col("zxid") < hi) | F.col("zxid").isNull() if lo is None else F.col("zxid") < hi)
        return df


def _zxid_rows(data: pa.Table, lo: int | None, hi: int | None) -> pa.Table:
    """The rows of ``data`` in [lo, hi) (with the null zxids when lo is None): a zero-copy slice when the
    zxids are in order (as collectors write them), else a filter, which copies every column."""
    zxid = data.column("zxid")
    if zxid.null_count == 0:
        values = zxid.to_numpy()
        if len(values) < 2 or bool(np.all(values[1:] >= values[:-1])):
            start = 0 if lo is None else int(np.searchsorted(values, lo, "left"))
            stop = len(values) if hi is None else int(np.searchsorted(values, hi, "left"))
            return data.slice(start, max(stop - start, 0))
    return data.filter(_zxid_where(lo, hi))


def _zxid_where(lo: int | None, hi: int | None) -> pc.Expression:
    """[lo, hi) of zxid, both ends set or one; an open low end also takes the rows without a zxid."""
    zxid = pc.field("zxid")
    if lo is None:
        return (zxid < hi) | zxid.is_null()
    return zxid >= lo if hi is None else (zxid >= lo) & (zxid < hi)


def _decision_rows(spark: SparkSession, lake: Lake, version: int, local_max_rows: int,
                   last_chunk: bool) -> DataFrame | pa.Table:
    if not last_chunk:
        return lake.conform_read("controller_decisions", lake.scan("controller_decisions", version=version).slice(0, 0))
    if lake.row_count("controller_decisions", version) <= local_max_rows:
        return lake.read_arrow("controller_decisions", version)
    return read_or_empty(spark, lake, "controller_decisions", version)


STATE_TABLES = ("partition_state", "replica_state")


_WRITERS: ThreadPoolExecutor | None = None


def write_tables(write: Callable[[str], None]) -> None:
    """``write`` every derived table: the others concurrently, then the state tables (a committed state means
    the whole increment is committed). delta-rs encodes and commits outside the GIL, so the writes overlap."""
    global _WRITERS
    if _WRITERS is None:  # one pool for the process: starting threads per micro-batch showed in its latency
        _WRITERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="delta-write")
    others = [t for t in DERIVED_TABLES if t not in STATE_TABLES]
    for group in (others, STATE_TABLES):
        for done in [_WRITERS.submit(write, t) for t in group]:
            done.result()


class RecentIds:
    """The metadata_events ids this process committed, complete for every zxid >= ``floor``.

    Each micro-batch asks which of its ids an earlier batch already committed (a change seen by both
    collectors); answering from memory spares a lake scan per batch. Bounded: past ``max_rows`` the
    lowest zxids are dropped and the floor raised, so older ranges fall back to the lake.
    """

    def __init__(self, floor: int | None, max_rows: int = 1_000_000) -> None:
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
            self.zxids, self.ids = self.zxids.filter(keep), self.ids.filter(keep)
            self.floor = floor if self.floor is None else max(self.floor, floor)


class MonitorCarry:
    """The monitor's carried state: read from the lake once at start, then advanced in memory per batch.

    Only the monitor writes the derived tables (one writer), so after each committed batch the in-memory
    state equals what a re-read would give, and a micro-batch costs what it touches, not the history.
    """

    def __init__(self, lake: Lake) -> None:
        import pyarrow.dataset as ds

        self.lake = lake
        for table in ("metadata_events", "partition_state", "replica_state", "controller_tenure", "anomalies",
                      *STREAMED_TABLES):
            lake.ensure(table)
        meta_type = ds.field("type")
        global_rows: list[dict[str, Any]] = lake.scan("metadata_events", where=meta_type.isin(GLOBAL_TYPES)).to_pylist()
        writes = lake.scan("metadata_events", ["topic", "partition", "leader", "leader_epoch"],
                           where=meta_type == "PARTITION_STATE_WRITTEN")
        txn = lake.scan("znode_events", ["zxid"], where=ds.field("source") == "txnlog")["zxid"]
        lo, hi = (v.as_py() for v in pc.min_max(txn).values())
        terms = lake.read_arrow("controller_tenure")
        self.carried = Carried(
            partition_state=lake.read_arrow("partition_state"), replica_state=lake.read_arrow("replica_state"),
            log_terms=terms.filter(pc.equal(terms["source"], "logs")), global_events=global_rows,
            zk_writes=writes, known_ids=self.committed_ids, txnlog_max_zxid=hi, txnlog_min_zxid=lo,
            # ids already in `anomalies` are not added again (a finding re-found by a later batch);
            # resignation marks may include decisions not streamed yet: they are keyed by event id
            known_anomaly_ids=set(lake.scan("anomalies", ["anomaly_id"])["anomaly_id"].to_pylist()),
            resigns=resign_marks(lake.scan("controller_decisions", list(RESIGN_COLUMNS))),
        )
        top = pc.max(lake.scan("metadata_events", ["zxid"])["zxid"]).as_py()
        self.recent = RecentIds(floor=None if top is None else top + 1)
        self.last_batch: int | None = None  # the last micro-batch this process committed

    @classmethod
    def fresh(cls, lake: Lake, txnlog_range: tuple[int | None, int | None]) -> MonitorCarry:
        """Nothing committed yet (a rebuild's first chunk), with the txnlog range the whole history has."""
        carry = cls.__new__(cls)
        carry.lake = lake
        carry.carried = dataclasses.replace(empty_carried(), txnlog_min_zxid=txnlog_range[0],
                                            txnlog_max_zxid=txnlog_range[1], known_anomaly_ids=set(), resigns=[])
        carry.recent, carry.last_batch = RecentIds(floor=None), None
        return carry

    def committed_ids(self, lo: int, hi: int) -> set[str]:
        """metadata_events ids already committed with zxid in [lo, hi] (cross-batch dedupe)."""
        import pyarrow.dataset as ds

        if self.recent.covers(lo):
            return self.recent.between(lo, hi)
        found = self.lake.scan("metadata_events", ["event_id"], where=(ds.field("zxid") >= lo) & (ds.field("zxid") <= hi))
        return set(found["event_id"].to_pylist())

    def advance(self, out: Outputs) -> None:
        """The state after ``out`` was committed."""
        c = self.carried
        meta = out["metadata_events"]
        terms = out["controller_tenure"]
        writes = meta.filter(pc.equal(meta["type"], "PARTITION_STATE_WRITTEN")).select(["topic", "partition", "leader", "leader_epoch"])
        lo, hi = out.txnlog_bounds
        c.partition_state, c.replica_state = out["partition_state"], out["replica_state"]
        c.log_terms = terms.filter(pc.equal(terms["source"], "logs"))
        c.global_events = c.global_events + meta.filter(pc.is_in(meta["type"], pa.array(GLOBAL_TYPES))).to_pylist()
        c.zk_writes = writes if c.zk_writes is None else pa.concat_tables([c.zk_writes, writes.cast(c.zk_writes.schema)])
        c.txnlog_min_zxid, c.txnlog_max_zxid = widened_txnlog_range(c, lo, hi)
        c.known_anomaly_ids = (c.known_anomaly_ids or set()) | set(out["anomalies"]["anomaly_id"].to_pylist())
        c.resigns = out.resigns
        c.empty = False
        self.recent.add(meta["zxid"], meta["event_id"])


def write_increment(out: Outputs, lake: Lake, writer_id: str, batch_seq: int) -> pa.Table:
    """Write one micro-batch's outputs exactly once (state tables last); returns its new anomalies."""
    meta = writer_metadata(writer_id)

    def write(table: str) -> None:
        lake.ensure(table)
        write_batch(out[table], lake, table, writer_id, batch_seq, mode="append" if table in APPEND_TABLES else "overwrite",
                    metadata=meta)

    write_tables(write)
    return out["anomalies"]


QUALITY_EACH_BATCH_TABLES = ("metadata_events", "partition_transitions", "replica_transitions", "anomalies")


def check_batch(spark: SparkSession, lake: Lake, out: Outputs, batch_id: int) -> None:
    """The quality suites over one micro-batch's new rows (GX on a batch, persist=False); results are stored.

    A failing suite is logged and recorded in quality_results; it does not stop the stream.
    """
    from zkledger.quality import result_rows, run_quality_on_batch

    frames = {t: spark.createDataFrame(out[t]) for t in QUALITY_EACH_BATCH_TABLES if out[t].num_rows}
    if not frames:
        return
    report = run_quality_on_batch(spark, frames)
    lake.append("quality_results", result_rows(report), writer_id="monitor-quality", batch_seq=batch_id)
    for suite in report.suites:
        (log.info if suite.success else log.warning)("batch %d: %s", batch_id, suite.line())


def monitor_batch(spark: SparkSession, lake: Lake, df: DataFrame, batch_id: int,
                  publish: Callable[[list[dict[str, Any]]], Any] | None = None, quality: bool = False,
                  carry: MonitorCarry | None = None, batch_base: int = 0,
                  local_max_rows: int = LOCAL_MAX_ROWS, after_versions: Mapping[str, int] | None = None) -> int:
    """One foreachBatch call: the batch's bronze rows (from its Delta commits, or the rows themselves), the
    increment, written exactly once.

    A replayed batch whose state tables are committed is skipped; a partly committed one is recomputed
    (same inputs -> same rows and ids) and the per-table app transaction drops what was already written.
    The app-transaction version is ``batch_base + batch_id`` (a new checkpoint continues the numbering).
    A batch of at most ``local_max_rows`` rows is read and computed in this process, a larger one by Spark.
    """
    batch_id += batch_base
    carry = carry or MonitorCarry(lake)
    # the batch after the one this process just committed cannot be in the lake yet (one monitor per lake)
    follows = carry.last_batch is not None and batch_id == carry.last_batch + 1
    if not follows and _committed(lake, "partition_state", batch_id):
        return 0
    began = time.monotonic()
    replay = not follows and _committed(lake, "metadata_events", batch_id)
    znodes: DataFrame | pa.Table
    decisions: DataFrame | pa.Table
    if COMMIT_COLUMNS[1] in df.columns:
        znodes, decisions = _commit_inputs(spark, lake, df.toArrow(), after_versions or {}, local_max_rows)
    else:
        head = df.limit(local_max_rows + 1).toArrow() if local_max_rows > 0 else None
        if head is not None and head.num_rows <= local_max_rows:  # all of it: one Spark job for the whole batch
            znodes = _source_rows(head, "z", ZNODE_EVENTS.column_names)
            decisions = _source_rows(head, "d", CONTROLLER_DECISIONS.column_names)
        else:
            znodes = df.filter("_src = 'z'").select(*ZNODE_EVENTS.column_names)
            decisions = df.filter("_src = 'd'").select(*CONTROLLER_DECISIONS.column_names)
    carried = carry.carried
    if replay:  # this batch's own events are already in the table
        carried = dataclasses.replace(carried, known_ids=None)
    out = run_increment(spark, znodes, decisions, carried, cluster=lake.cluster)
    rows = write_increment(out, lake, MONITOR_WRITER, batch_id).to_pylist()
    carry.advance(out)
    carry.last_batch = batch_id
    if quality:
        check_batch(spark, lake, out, batch_id)
    if publish is not None and not replay:
        publish(sorted(rows, key=lambda r: (r["zxid"] is None, r["zxid"] or 0, r["anomaly_id"])))
    log.info("micro-batch %d: %d metadata events, %d anomalies, %s, %.2f s", batch_id, out["metadata_events"].num_rows,
             len(rows), "in process" if isinstance(znodes, pa.Table) else "through Spark", time.monotonic() - began)
    return len(rows)


def _source_rows(batch: pa.Table, tag: str, columns: Sequence[str]) -> pa.Table:
    return batch.filter(pc.equal(batch["_src"], tag)).select(list(columns))


def _commit_inputs(spark: SparkSession, lake: Lake, commits: pa.Table, after_versions: Mapping[str, int],
                   local_max_rows: int) -> tuple[Any, Any]:
    """A micro-batch's bronze rows from the Delta commits it streamed: the files those commits added, read here
    (pyarrow) when they fit ``local_max_rows``, else by Spark's own Parquet reader. Commits at or below
    ``after_versions`` (what a rebuild already read) are skipped."""
    files: dict[str, list[str]] = {}
    for table, tag in (("znode_events", "z"), ("controller_decisions", "d")):
        mine = commits.filter(pc.equal(commits["_src"], tag))
        pairs = zip(mine[COMMIT_COLUMNS[0]].to_pylist(), mine[COMMIT_COLUMNS[1]].to_pylist(), strict=True)
        files[table] = commit_manifest(lake.table_path(table), pairs, after_versions.get(table, -1))
    rows = sum(data_file_rows(f) for f in files.values()) if local_max_rows > 0 else None
    if rows is not None and rows <= local_max_rows:
        return read_data_files("znode_events", files["znode_events"]), read_data_files(
            "controller_decisions", files["controller_decisions"])
    return (read_files_frame(spark, "znode_events", files["znode_events"]),
            read_files_frame(spark, "controller_decisions", files["controller_decisions"]))


def start_monitor(spark: SparkSession, lake: Lake, checkpoint_dir: str, *, trigger_seconds: float | None = None,
                  available_now: bool = False,
                  publish: Callable[[list[dict[str, Any]]], Any] | None = None,
                  quality: bool = False, carry: MonitorCarry | None = None,
                  start: MonitorStart | None = None, local_max_rows: int = LOCAL_MAX_ROWS) -> StreamingQuery:
    """The streaming pipeline: both bronze tables' new Delta commits in one query, foreachBatch -> run_increment.

    For "process what is there, then stop" use ``drain_monitor``.
    """
    for table in STREAMED_TABLES:
        lake.ensure(table)
    start = start or plan_monitor_start(lake, checkpoint_dir)
    after = start.after_versions or {}
    tagged = (("znode_events", "z"), ("controller_decisions", "d"))
    if supports_commit_stream(spark):  # the commits; the batch reads the files they added (_commit_inputs)
        z, d = (stream_commits(spark, lake, t).withColumn("_src", F.lit(tag)) for t, tag in tagged)
    else:  # Delta's own source: the rows
        z, d = (stream_table(spark, lake, t, after_version=after.get(t)).withColumn("_src", F.lit(tag))
                for t, tag in tagged)
    both = z.unionByName(d, allowMissingColumns=True)
    carry = carry or MonitorCarry(lake)
    base = start.batch_base
    writer = both.writeStream.foreachBatch(
        lambda df, batch_id: monitor_batch(spark, lake, df, batch_id, publish, quality, carry, base, local_max_rows,
                                           after)
    ).option("checkpointLocation", checkpoint_dir).queryName("zkledger_monitor")
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_seconds:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def drain_monitor(spark: SparkSession, lake: Lake, checkpoint_dir: str, *,
                  publish: Callable[[list[dict[str, Any]]], Any] | None = None, quality: bool = False,
                  local_max_rows: int = LOCAL_MAX_ROWS) -> int:
    """``monitor --available-now``: every bronze row present now is processed, then the monitor stops.

    Runs availableNow queries until the checkpoint covers the tables' current versions (one run usually;
    two after a crash left an uncommitted batch). Returns the number of runs.
    """
    for table in STREAMED_TABLES:
        lake.ensure(table)
    start = plan_monitor_start(lake, checkpoint_dir)
    carry = MonitorCarry(lake)  # one carried state across the runs: they continue one another
    return drain_available_now(
        lambda: start_monitor(spark, lake, checkpoint_dir, available_now=True, publish=publish, quality=quality,
                              carry=carry, start=start,
                              local_max_rows=local_max_rows),
        lake, STREAMED_TABLES)


STREAMED_TABLES = ("znode_events", "controller_decisions")


def _committed(lake: Lake, table: str, batch_id: int) -> bool:
    last = lake.last_batch_seq(table, MONITOR_WRITER)
    return last is not None and last >= batch_id


def monitor_checkpoint(checkpoint_root: str | None, lake_root: str) -> str:
    """The monitor's Structured Streaming checkpoint folder: under ``[streaming] checkpoint_root``, else the lake's."""
    return os.path.join(checkpoint_root or os.path.join(lake_root, "_checkpoints"), "monitor")


def job_context(args: argparse.Namespace) -> tuple[Any, Lake]:
    """Settings and the Lake for a job's parsed arguments."""
    from conf.settings import load_settings
    from lakehouse import Lake

    use_system_allocator()
    settings = load_settings(args.conf, lake=args.lake, cluster=args.cluster)
    return settings, Lake(settings.lake.root, settings.lake.cluster)
