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
from engine.increment import DERIVED_TABLES, LOCAL_MAX_ROWS, STREAMED_TABLES, Outputs, run_increment
from engine.monitor_start import MonitorStart, plan_monitor_start
from engine.upkeep import QUALITY_EACH_BATCH_TABLES, MaintenanceSchedule, check_batch_rows
from engine.writes import MONITOR_WRITER, write_increment
from lakehouse.spark_io import stream_table
from models.tables import CONTROLLER_DECISIONS, METADATA_EVENTS, ZNODE_EVENTS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from lakehouse import Lake


log = logging.getLogger(__name__)


# The monitor's input: the streaming source over both bronze tables and what one micro-batch reads from it.


MAX_FILES_PER_TRIGGER = 1000
"""Default of settings ``streaming.max_files_per_trigger``: Delta data files one micro-batch takes per table."""

QUALITY_WRITER = "monitor-quality"
"""The app-transaction id of the in-process monitor's quality_results appends."""
START_MARKER = "monitor-start"
"""App id of the empty commit that gives Delta's source a version to start at right after a rebuild's."""


def monitor_source(spark: SparkSession, lake: Lake, after: Mapping[str, int],
                   max_files_per_trigger: int = MAX_FILES_PER_TRIGGER) -> DataFrame:
    """Both bronze tables through Delta's streaming source as one stream, each row tagged ``_src`` (z:
    znode_events, d: controller_decisions).

    ``after``: bronze versions already in the derived tables (a rebuild's); a new query starts with the
    version after each. Delta starts a stream only at a version that exists, so a table still at the rebuild's
    version gets an empty commit first (idempotent per version; the collectors' appends go on around it).
    """
    tagged = ((ZNODE_EVENTS.name, "z"), (CONTROLLER_DECISIONS.name, "d"))
    for table, _ in tagged:
        if table in after and lake.version(table) == after[table]:
            lake.append(table, [], writer_id=START_MARKER, batch_seq=after[table] + 1)
    z, d = (stream_table(spark, lake, t, after_version=after.get(t), max_files_per_trigger=max_files_per_trigger)
            .withColumn("_src", F.lit(tag)) for t, tag in tagged)
    return z.unionByName(d, allowMissingColumns=True)


def batch_inputs(df: DataFrame, local_max_rows: int) -> tuple[DataFrame | pa.Table, DataFrame | pa.Table]:
    """One micro-batch's bronze rows (znode_events, controller_decisions) from ``monitor_source``'s batch: Arrow
    in this process when they fit ``local_max_rows`` (one Spark job for the whole batch), else DataFrames."""
    head = df.limit(local_max_rows + 1).toArrow() if local_max_rows > 0 else None
    if head is not None and head.num_rows <= local_max_rows:
        return (_source_rows(head, "z", ZNODE_EVENTS.column_names),
                _source_rows(head, "d", CONTROLLER_DECISIONS.column_names))
    return (df.filter("_src = 'z'").select(*ZNODE_EVENTS.column_names),
            df.filter("_src = 'd'").select(*CONTROLLER_DECISIONS.column_names))


def _source_rows(batch: pa.Table, tag: str, columns: Sequence[str]) -> pa.Table:
    return batch.filter(pc.equal(batch["_src"], tag)).select(list(columns))


def check_batch(spark: SparkSession, lake: Lake, out: Outputs, batch_id: int) -> None:
    """The quality suites over one micro-batch's new rows (``engine.upkeep.check_batch_rows``)."""
    frames = {t.name: spark.createDataFrame(out[t.name]) for t in QUALITY_EACH_BATCH_TABLES if out[t.name].num_rows}
    check_batch_rows(spark, lake, frames, QUALITY_WRITER, batch_id)


def monitor_batch(spark: SparkSession, lake: Lake, df: DataFrame, batch_id: int,
                  publish: Callable[[list[dict[str, Any]]], Any] | None = None, quality: bool = False,
                  carry: MonitorCarry | None = None, batch_base: int = 0,
                  local_max_rows: int = LOCAL_MAX_ROWS) -> int:
    """One foreachBatch call: the batch's bronze rows from Delta's streaming source, the increment, written
    exactly once.

    A replayed batch whose state tables are committed is skipped; a partly committed one is recomputed
    (same inputs -> same rows and ids) and the per-table app transaction drops what was already written.
    The app-transaction version is ``batch_base + batch_id`` (a new checkpoint continues the numbering).
    A batch of at most ``local_max_rows`` rows is read and computed in this process, a larger one by Spark.
    """
    batch_id += batch_base
    carry = carry or MonitorCarry(lake)
    # the batch after the one this process just committed cannot be in the lake yet (one monitor per lake)
    follows = carry.last_batch is not None and batch_id == carry.last_batch + 1
    if not follows and _committed(lake, DERIVED_TABLES, batch_id):
        return 0
    began = time.monotonic()
    replay = not follows and _committed(lake, (METADATA_EVENTS.name,), batch_id)
    znodes, decisions = batch_inputs(df, local_max_rows)
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
    log.info("micro-batch %d: %d metadata events, %d anomalies, %s, %.2f s", batch_id, out[METADATA_EVENTS.name].num_rows,
             len(rows), "in process" if isinstance(znodes, pa.Table) else "through Spark", time.monotonic() - began)
    return len(rows)


def start_monitor(spark: SparkSession, lake: Lake, checkpoint_dir: str, *, trigger_seconds: float | None = None,
                  available_now: bool = False,
                  publish: Callable[[list[dict[str, Any]]], Any] | None = None,
                  quality: bool = False, carry: MonitorCarry | None = None,
                  start: MonitorStart | None = None, local_max_rows: int = LOCAL_MAX_ROWS,
                  max_files_per_trigger: int = MAX_FILES_PER_TRIGGER,
                  maintain_every_s: float = 0.0) -> StreamingQuery:
    """The streaming pipeline: both bronze tables' new rows (Delta's streaming source) in one query,
    foreachBatch -> run_increment; with ``maintain_every_s``, the lake's maintenance between batches.

    For "process what is there, then stop" use ``drain_monitor``.
    """
    for table in STREAMED_TABLES:
        lake.ensure(table)
    start = start or plan_monitor_start(lake, checkpoint_dir)
    after = start.after_versions or {}
    both = monitor_source(spark, lake, after, max_files_per_trigger)
    carry = carry or MonitorCarry(lake)
    base = start.batch_base

    maintenance = MaintenanceSchedule(lake, checkpoint_dir, maintain_every_s)

    def each_batch(df: DataFrame, batch_id: int) -> None:
        monitor_batch(spark, lake, df, batch_id, publish, quality, carry, base, local_max_rows)
        maintenance.after_batch()

    writer = both.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint_dir).queryName("zkledger_monitor")
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_seconds:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def drain_monitor(spark: SparkSession, lake: Lake, checkpoint_dir: str, *,
                  publish: Callable[[list[dict[str, Any]]], Any] | None = None, quality: bool = False,
                  local_max_rows: int = LOCAL_MAX_ROWS, max_files_per_trigger: int = MAX_FILES_PER_TRIGGER) -> int:
    """``monitor --available-now``: every bronze row present now is processed (in micro-batches of at most
    ``max_files_per_trigger`` files per table, a replayed uncommitted batch first), then the monitor stops.
    Returns the number of micro-batches that had input rows."""
    query = start_monitor(spark, lake, checkpoint_dir, available_now=True, publish=publish, quality=quality,
                          local_max_rows=local_max_rows, max_files_per_trigger=max_files_per_trigger)
    query.awaitTermination()
    return sum(1 for progress in query.recentProgress if progress.get("numInputRows", 0) > 0)


def _committed(lake: Lake, tables: Sequence[str], batch_id: int) -> bool:
    """Every one of ``tables`` holds the monitor's batch ``batch_id``."""
    for table in tables:
        last = lake.last_batch_seq(table, MONITOR_WRITER)
        if last is None or last < batch_id:
            return False
    return True


def monitor_checkpoint(checkpoint_root: str | None, lake_root: str) -> str:
    """The monitor's Structured Streaming checkpoint folder: under ``[streaming] checkpoint_root``, else the lake's."""
    return os.path.join(checkpoint_root or os.path.join(lake_root, "_checkpoints"), "monitor")
