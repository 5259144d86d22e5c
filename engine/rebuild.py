"""``zkledger rebuild``: every derived table from all bronze history, by the pipeline's one Spark query."""

from __future__ import annotations

import shutil
from datetime import timedelta
from typing import TYPE_CHECKING

from engine.stateful import (
    ALL_FILES,
    DEFAULT_BUCKETS,
    checkpoint_writer,
    finish_stateful_query,
    run_stateful_query,
    start_stateful_query,
    stateful_checkpoint,
)
from engine.stateful_sink import derived_counts, reset_derived
from models.states import DEFAULT_KAFKA_VERSION
from pipelines.detectors import DEFAULT_OFFLINE_BLIP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse import Lake


def batch_bytes(megabytes: int) -> str | None:
    """Settings ``pipeline.rebuild_batch_mb`` as Delta's ``maxBytesPerTrigger`` (None: no cap)."""
    return f"{megabytes}m" if megabytes > 0 else None


def rebuild(spark: SparkSession, lake: Lake, checkpoint: str | None = None, *, buckets: int = DEFAULT_BUCKETS,
            kafka_version: str = DEFAULT_KAFKA_VERSION, max_files_per_trigger: int = ALL_FILES,
            max_bytes_per_trigger: str | None = None, offline_blip: timedelta = DEFAULT_OFFLINE_BLIP) -> dict[str, int]:
    """Remove ``checkpoint`` (default: the lake's pipeline checkpoint, which ``monitor`` then continues), empty
    every derived table and run the query over every bronze commit present (``availableNow``); returns each
    derived table's row count. Uncapped, the history is one micro-batch that the executors hold; a cap splits
    it into micro-batches that continue from each other's state (a decision waits, pending, until ZooKeeper's
    history has run past it)."""
    checkpoint = checkpoint or stateful_checkpoint(None, lake.root)
    shutil.rmtree(checkpoint, ignore_errors=True)
    reset_derived(lake, checkpoint_writer(checkpoint))
    query = run_stateful_query(lambda: start_stateful_query(
        spark, lake, checkpoint, buckets=buckets, kafka_version=kafka_version, available_now=True,
        max_files_per_trigger=max_files_per_trigger, max_bytes_per_trigger=max_bytes_per_trigger,
        offline_blip=offline_blip))
    finish_stateful_query(query)
    return derived_counts(lake)
