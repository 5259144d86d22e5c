"""``zkledger monitor``: the pipeline's one Spark query on its checkpoint, continuing where ``rebuild`` (or the
last monitor) ended."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engine.stateful import (
    DEFAULT_BUCKETS,
    finish_stateful_query,
    run_stateful_query,
    start_stateful_query,
    stateful_checkpoint,
)
from pipelines.detectors import DEFAULT_OFFLINE_BLIP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from lakehouse import Lake

MAX_FILES_PER_TRIGGER = 1000
"""Default of settings ``streaming.max_files_per_trigger``: Delta data files one micro-batch takes per table."""


def start_monitor(spark: SparkSession, lake: Lake, checkpoint: str | None = None, *, trigger_seconds: float = 1.0,
                  available_now: bool = False, buckets: int = DEFAULT_BUCKETS,
                  publish: Callable[[list[dict[str, Any]]], object] | None = None, quality: bool = False,
                  max_files_per_trigger: int = MAX_FILES_PER_TRIGGER, maintain_every_s: float = 0.0,
                  offline_blip: timedelta = DEFAULT_OFFLINE_BLIP, table_commit_s: float = 0.0) -> StreamingQuery:
    """Start the monitor: a micro-batch every ``trigger_seconds``, or (``available_now``) every bronze commit
    present now, then stop. ``publish`` gets each batch's new anomalies once they are committed;
    ``table_commit_s``: the other tables are committed this often (0: in each micro-batch), and
    ``stop_monitor`` commits the rest."""
    return start_stateful_query(
        spark, lake, checkpoint or stateful_checkpoint(None, lake.root), buckets=buckets, available_now=available_now,
        processing_time=None if available_now else f"{trigger_seconds} seconds",
        max_files_per_trigger=max_files_per_trigger, publish=publish, quality=quality, maintain_every_s=maintain_every_s,
        offline_blip=offline_blip, table_commit_s=0.0 if available_now else table_commit_s)


def stop_monitor(query: StreamingQuery) -> None:
    """Stop a monitor's query (if it still runs) and commit the batches it staged."""
    query.stop()
    finish_stateful_query(query)


def drain_monitor(spark: SparkSession, lake: Lake, checkpoint: str | None = None, **options: Any) -> int:
    """``monitor --available-now``: every bronze commit present now (a replayed unfinished batch first), then
    stop. Returns the number of micro-batches that had input rows."""
    query = run_stateful_query(lambda: start_monitor(spark, lake, checkpoint, available_now=True, **options))
    finish_stateful_query(query)
    return sum(1 for progress in query.recentProgress if progress.get("numInputRows", 0) > 0)
