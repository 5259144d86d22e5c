"""``zkledger rebuild``: every derived table from all bronze history, by the pipeline's one Spark query."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.stateful import ALL_FILES, DEFAULT_BUCKETS, stateful_checkpoint, stateful_rebuild
from models.states import DEFAULT_KAFKA_VERSION

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse import Lake


def rebuild(spark: SparkSession, lake: Lake, checkpoint: str | None = None, *, buckets: int = DEFAULT_BUCKETS,
            kafka_version: str = DEFAULT_KAFKA_VERSION, max_files_per_trigger: int = ALL_FILES,
            max_bytes_per_trigger: str | None = None) -> dict[str, int]:
    """Empty the derived tables and run the query from a fresh ``checkpoint`` (default: the lake's pipeline
    checkpoint, which ``monitor`` then continues) over every bronze commit present; returns each derived
    table's row count. Uncapped, the history is one micro-batch; a cap splits it into micro-batches that
    continue from each other's state."""
    return stateful_rebuild(spark, lake, checkpoint or stateful_checkpoint(None, lake.root), buckets=buckets,
                            kafka_version=kafka_version, max_files_per_trigger=max_files_per_trigger,
                            max_bytes_per_trigger=max_bytes_per_trigger)
