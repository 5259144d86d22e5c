"""Spark over the lake, through Delta Lake's own connector: snapshot and time-travel reads and the streaming
source.

Every Spark read of a lake table here is ``format("delta")`` (the session is built with Delta's extension and
catalog by ``services.spark_session.build_spark``). Spark does not write the lake through the connector: every
commit goes through ``Lake`` (delta-rs), the collectors' appends and the files the query's executors write alike.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.lake import Lake
from lakehouse.spark_schema import spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

DELTA = "delta"


def read_table(
    spark: SparkSession,
    lake: Lake,
    table: str,
    version: int | None = None,
    as_of: datetime | None = None,
) -> DataFrame:
    """A snapshot of a table (now, at a version, or as of a time) with the models.tables columns.

    A table that does not exist yet reads as an empty DataFrame; a version or time it never had raises.
    """
    schema = spark_schema(table, nullable=True)
    if version is not None and as_of is not None:
        raise ValueError("give version or as_of, not both")
    if not lake.exists(table):
        if version is not None or as_of is not None:
            raise FileNotFoundError(f"table {table!r} does not exist under {lake.root}")
        return _empty_frame(spark, schema)
    reader = spark.read.format(DELTA)
    if version is not None:
        reader = reader.option("versionAsOf", version)
    if as_of is not None:
        # the version by the commits' own timestamps (what `history()` shows), one rule for both engines:
        # Delta's timestampAsOf goes by the log files' modification times, a little later than those
        reader = reader.option("versionAsOf", lake.version_at(table, as_of))
    frame = reader.load(lake.table_path(table))
    # columns the spec added after the table was written read as null
    from pyspark.sql import functions as F

    present = set(frame.columns)
    return frame.select(*(F.col(f.name) if f.name in present else F.lit(None).cast(f.dataType).alias(f.name)
                          for f in schema.fields))


def _empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """An empty DataFrame built in the JVM: ``createDataFrame([], schema)`` costs 1-2 s of Python round trips."""
    cols = ", ".join(f"CAST(NULL AS {f.dataType.simpleString()}) AS `{f.name}`" for f in schema.fields)
    return spark.sql(f"SELECT {cols} WHERE false")  # one py4j call, not one per column


def stream_table(
    spark: SparkSession,
    lake: Lake,
    table: str,
    *,
    after_version: int | None = None,
    max_files_per_trigger: int | None = None,
    max_bytes_per_trigger: str | None = None,
) -> DataFrame:
    """Delta's streaming source over an append-only table: each committed row once, in commit order.

    ``after_version``: a new query starts with the version after it (the versions up to it were processed
    elsewhere, e.g. by a rebuild: Delta's ``startingVersion``); without it the first batch is the table as of
    the query's start. A checkpoint's offsets
    win over both, as in Spark. ``max_files_per_trigger`` caps one micro-batch (admission control; Delta's
    default is 1,000 files), ``max_bytes_per_trigger`` too (e.g. ``"256m"``; a soft cap: whole files). Compaction commits (``dataChange=false``) are
    skipped; a commit that deletes or rewrites rows stops the query (bronze tables are append-only).
    """
    lake.ensure(table)
    reader = spark.readStream.format(DELTA)
    if after_version is not None:
        reader = reader.option("startingVersion", str(after_version + 1))
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    if max_bytes_per_trigger is not None:
        reader = reader.option("maxBytesPerTrigger", max_bytes_per_trigger)
    return reader.load(lake.table_path(table))


__all__ = ["read_table", "stream_table"]

