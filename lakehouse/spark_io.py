"""Spark over the lake, through Delta Lake's own connector: snapshot and time-travel reads, the streaming
source, idempotent batch writes.

Every Spark read and write of a lake table here is ``format("delta")`` (the session is built with Delta's
extension and catalog by ``services.spark_session.build_spark``). Rows that already sit in this process as Arrow (the
collectors' appends, an increment computed in the driver) are written by ``Lake`` with delta-rs, which starts
no JVM; both writers commit to the same tables with the same app-transaction ids.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.lake import Lake, WriteMode, crash_point
from lakehouse.spark_schema import spark_schema

if TYPE_CHECKING:
    import pyarrow as pa
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


def write_batch(
    df: DataFrame | pa.Table,
    lake: Lake,
    table: str,
    writer_id: str,
    batch_seq: int,
    mode: WriteMode = "append",
    metadata: Mapping[str, str] | None = None,
) -> bool:
    """Write a (micro-)batch once per ``(writer_id, batch_seq)``; False when it was already committed.

    A Spark DataFrame is written by Delta's connector from the executors, with the app transaction
    ``txnAppId``/``txnVersion``: Delta itself skips a replayed batch (``batch_seq = batch_id`` in
    ``foreachBatch``). An Arrow table already in this process goes through ``Lake`` (delta-rs), under the same
    app transaction. ``metadata`` goes into the commit's info (``Lake.history``).
    """
    if mode not in ("append", "overwrite"):
        raise ValueError(f"mode must be 'append' or 'overwrite', got {mode!r}")
    if _is_arrow(df):
        crash_point("before_write", batch_seq)
        write = lake.append if mode == "append" else lake.overwrite
        return write(table, df, writer_id=writer_id, batch_seq=batch_seq, metadata=metadata)
    last = lake.last_batch_seq(table, writer_id)
    if last is not None and last >= batch_seq:
        log.info("%s: batch %s/%d already committed, skipped", table, writer_id, batch_seq)
        return False
    schema = spark_schema(table, nullable=True)
    frame: DataFrame = df
    from pyspark.sql import functions as F

    if "cluster" not in frame.columns:
        frame = frame.withColumn("cluster", F.lit(lake.cluster))
    unknown = sorted(set(frame.columns) - set(schema.fieldNames()))
    if unknown:  # refused before anything is created
        raise ValueError(f"{table}: unknown column(s) {', '.join(unknown)}")
    lake.ensure(table)
    crash_point("before_commit", batch_seq)
    present = set(frame.columns)
    frame = frame.select(*(F.col(f.name).cast(f.dataType) if f.name in present
                           else F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields))
    writer = (frame.write.format(DELTA).mode(mode)
              .option("txnAppId", writer_id).option("txnVersion", str(batch_seq)))
    if metadata:
        writer = writer.option("userMetadata", json.dumps(dict(metadata), sort_keys=True))
    writer.save(lake.table_path(table))
    crash_point("after_commit", batch_seq)
    return lake.last_batch_seq(table, writer_id) == batch_seq


def _is_arrow(df: object) -> bool:
    import pyarrow as pa

    return isinstance(df, pa.Table)


__all__ = ["read_table", "stream_table", "write_batch"]

