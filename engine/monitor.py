"""``zkledger monitor``: the increment as one Structured Streaming query over both bronze tables (foreachBatch)."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from engine.carry import MonitorCarry
from engine.increment import LOCAL_MAX_ROWS, STREAMED_TABLES, Outputs, run_increment
from engine.monitor_start import MonitorStart, plan_monitor_start
from engine.writes import MONITOR_WRITER, write_increment
from lakehouse.delta_source import commit_manifest, data_file_rows, read_data_files
from lakehouse.spark_io import (
    COMMIT_COLUMNS,
    drain_available_now,
    read_files_frame,
    stream_commits,
    stream_table,
    supports_commit_stream,
)
from models.tables import CONTROLLER_DECISIONS, ZNODE_EVENTS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from lakehouse import Lake


log = logging.getLogger(__name__)


# The monitor's input: the streaming source over both bronze tables and what one micro-batch reads from it.


def monitor_source(spark: SparkSession, lake: Lake, after: Mapping[str, int]) -> DataFrame:
    """Both bronze tables' new Delta commits as one stream, each row tagged ``_src`` (z: znode_events,
    d: controller_decisions); ``after``: bronze versions already in the derived tables (a rebuild's)."""
    tagged = (("znode_events", "z"), ("controller_decisions", "d"))
    if supports_commit_stream(spark):  # the commits; the batch reads the files they added (_commit_inputs)
        z, d = (stream_commits(spark, lake, t).withColumn("_src", F.lit(tag)) for t, tag in tagged)
    else:  # Delta's own source: the rows
        z, d = (stream_table(spark, lake, t, after_version=after.get(t)).withColumn("_src", F.lit(tag))
                for t, tag in tagged)
    return z.unionByName(d, allowMissingColumns=True)


def batch_inputs(spark: SparkSession, lake: Lake, df: DataFrame, after_versions: Mapping[str, int],
                 local_max_rows: int) -> tuple[DataFrame | pa.Table, DataFrame | pa.Table]:
    """One micro-batch's bronze rows (znode_events, controller_decisions) from ``monitor_source``'s batch: Arrow
    when they fit ``local_max_rows``, else DataFrames."""
    znodes: DataFrame | pa.Table
    decisions: DataFrame | pa.Table
    if COMMIT_COLUMNS[1] in df.columns:
        znodes, decisions = _commit_inputs(spark, lake, df.toArrow(), after_versions, local_max_rows)
    else:
        head = df.limit(local_max_rows + 1).toArrow() if local_max_rows > 0 else None
        if head is not None and head.num_rows <= local_max_rows:  # all of it: one Spark job for the whole batch
            znodes = _source_rows(head, "z", ZNODE_EVENTS.column_names)
            decisions = _source_rows(head, "d", CONTROLLER_DECISIONS.column_names)
        else:
            znodes = df.filter("_src = 'z'").select(*ZNODE_EVENTS.column_names)
            decisions = df.filter("_src = 'd'").select(*CONTROLLER_DECISIONS.column_names)
    return znodes, decisions


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
    znodes, decisions = batch_inputs(spark, lake, df, after_versions or {}, local_max_rows)
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
    both = monitor_source(spark, lake, after)
    carry = carry or MonitorCarry(lake)
    base = start.batch_base

    def each_batch(df: DataFrame, batch_id: int) -> None:
        monitor_batch(spark, lake, df, batch_id, publish, quality, carry, base, local_max_rows, after)

    writer = both.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint_dir).queryName("zkledger_monitor")
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


def _committed(lake: Lake, table: str, batch_id: int) -> bool:
    last = lake.last_batch_seq(table, MONITOR_WRITER)
    return last is not None and last >= batch_id


def monitor_checkpoint(checkpoint_root: str | None, lake_root: str) -> str:
    """The monitor's Structured Streaming checkpoint folder: under ``[streaming] checkpoint_root``, else the lake's."""
    return os.path.join(checkpoint_root or os.path.join(lake_root, "_checkpoints"), "monitor")
