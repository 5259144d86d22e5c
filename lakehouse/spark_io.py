"""Spark over the lake: snapshot reads, a streaming source (one Delta version at a time), a foreachBatch sink.

Engine choice lives in ``_engine`` only: a session with Delta's JVM classes uses ``format("delta")``;
otherwise (this machine: no Maven, so no Delta jars) Spark reads the Parquet files of a delta-rs snapshot
and writes go through ``Lake`` (delta-rs).
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from lakehouse.lake import Lake, WriteMode, crash_point, needs_delta_rs_scan
from lakehouse.spark_schema import spark_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

ENGINE_CONF = "zkledger.lake.engine"
"""Spark conf forcing the engine: ``delta`` (Delta jars present) or ``delta-rs`` (default without jars)."""

Engine = Literal["delta", "delta-rs"]


def _engine(spark: SparkSession) -> Engine:
    """Which engine reads/streams Delta in this session: the ONE place this is decided."""
    forced = spark.conf.get(ENGINE_CONF, None)
    if forced in ("delta", "delta-rs"):
        return forced  # type: ignore[return-value]
    if forced:
        raise ValueError(f"{ENGINE_CONF} must be 'delta' or 'delta-rs', got {forced!r}")
    extensions = spark.conf.get("spark.sql.extensions", None) or ""
    return "delta" if "io.delta.sql.DeltaSparkSessionExtension" in extensions else "delta-rs"


def read_table(
    spark: SparkSession,
    lake: Lake,
    table: str,
    version: int | None = None,
    as_of: datetime | None = None,
) -> DataFrame:
    """A snapshot of a table as a DataFrame with the models.tables schema (empty table -> empty DataFrame)."""
    schema = spark_schema(table, nullable=True)
    if _engine(spark) == "delta":
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        if as_of is not None:
            reader = reader.option("timestampAsOf", as_of.isoformat())
        return reader.load(lake.table_path(table)).select(*schema.fieldNames())
    snap = lake.snapshot(table, version=version, as_of=as_of)
    if needs_delta_rs_scan(snap):
        # Partition values / deletion vectors / column mapping are not in the Parquet files themselves.
        return spark.createDataFrame(lake.conform_read(table, snap.to_pyarrow_table()), schema=schema)
    return read_files_frame(spark, table, snap.file_uris())


def _empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """An empty DataFrame built in the JVM: ``createDataFrame([], schema)`` costs 1-2 s of Python round trips."""
    cols = ", ".join(f"CAST(NULL AS {f.dataType.simpleString()}) AS `{f.name}`" for f in schema.fields)
    return spark.sql(f"SELECT {cols} WHERE false")  # one py4j call, not one per column


def write_batch(
    df: DataFrame | pa.Table,
    lake: Lake,
    table: str,
    writer_id: str,
    batch_seq: int,
    mode: WriteMode = "append",
    metadata: Mapping[str, str] | None = None,
) -> bool:
    """Write a (micro-)batch DataFrame once per ``(writer_id, batch_seq)``; for ``foreachBatch``.

    Use ``batch_seq = batch_id``: Spark replays an uncommitted micro-batch with the same id after a
    restart, and the Delta app transaction makes the replay a no-op. v1 collects the batch to the driver
    as Arrow (``df.toArrow()``): fine for micro-batches, not for huge backfills. An Arrow table already
    collected by the caller is written as is.
    """
    if not _is_arrow(df):  # spare the collect of a committed batch (Lake checks again when it commits)
        last = lake.last_batch_seq(table, writer_id)
        if last is not None and last >= batch_seq:
            log.info("%s: micro-batch %s/%d already committed, skipped", table, writer_id, batch_seq)
            return False
    data = df if _is_arrow(df) else df.toArrow()
    crash_point("before_write", batch_seq)
    if mode == "append":
        return lake.append(table, data, writer_id=writer_id, batch_seq=batch_seq, metadata=metadata)
    if mode == "overwrite":
        return lake.overwrite(table, data, writer_id=writer_id, batch_seq=batch_seq, metadata=metadata)
    raise ValueError(f"mode must be 'append' or 'overwrite', got {mode!r}")


def _is_arrow(df: object) -> bool:
    import pyarrow as pa

    return isinstance(df, pa.Table)


def stream_table(
    spark: SparkSession,
    lake: Lake,
    table: str,
    max_versions_per_trigger: int | None = None,
    after_version: int | None = None,
    bytes_per_partition: int | None = None,
) -> DataFrame:
    """A streaming DataFrame emitting each Delta version's new rows once (offsets = table versions).

    ``max_versions_per_trigger`` caps how many versions one micro-batch takes (admission control).
    ``after_version``: a new query starts after this version (the versions up to it are already processed,
    e.g. by a rebuild); an existing checkpoint's offsets take precedence, as in Spark.
    ``bytes_per_partition``: Parquet bytes one read task takes (consecutive small files share a task).
    An overwrite/delete version in the source stops the query with ``DeltaChangeNotSupported``.
    """
    if _engine(spark) == "delta":
        # Delta's own source has no per-version cap; it is left unbounded here.
        delta = spark.readStream.format("delta")
        if after_version is not None:
            delta = delta.option("startingVersion", str(after_version + 1))
        return delta.load(lake.table_path(table))
    from lakehouse.delta_source import SOURCE_NAME, DeltaVersionSource

    spark.dataSource.register(DeltaVersionSource)
    reader = (
        spark.readStream.format(SOURCE_NAME).option("path", lake.table_path(table)).option("table", table)
    )
    if max_versions_per_trigger is not None:
        reader = reader.option("maxVersionsPerTrigger", str(max_versions_per_trigger))
    if after_version is not None:
        reader = reader.option("afterVersion", str(after_version))
    if bytes_per_partition is not None:
        reader = reader.option("bytesPerPartition", str(bytes_per_partition))
    # the schema given, Spark does not start a Python process just to ask the source for it
    return reader.schema(spark_schema(table, nullable=True)).load()


COMMIT_COLUMNS = ("_commit", "_action")  # stream_commits: commit file name, one JSON action line of it


def stream_commits(spark: SparkSession, lake: Lake, table: str) -> DataFrame:
    """A streaming DataFrame of each new Delta commit of ``table``, once: one row per JSON action line.

    Spark's own text file source over ``_delta_log``: a commit file appears whole (written aside, then
    renamed) and the source's checkpoint records the files it has emitted, so every commit is emitted
    exactly once, with no Python process on the read path (what the monitor's latency needs). Turn the
    rows into data files with ``delta_source.commit_manifest``; a commit that removes data is refused there.
    """
    from pyspark.sql import functions as F

    lake.ensure(table)
    log_dir = f"{lake.table_path(table)}/_delta_log"
    commits = spark.readStream.format("text").option("pathGlobFilter", "*.json").load(log_dir)
    return commits.select(F.col("_metadata.file_name").alias(COMMIT_COLUMNS[0]),
                          F.col("value").alias(COMMIT_COLUMNS[1]))


def supports_commit_stream(spark: SparkSession) -> bool:
    """Whether the monitor reads the Delta log itself (``stream_commits``): the delta-rs engine; with Delta's
    jars, Delta's own source streams the rows."""
    return _engine(spark) == "delta-rs"


def read_files_frame(spark: SparkSession, table: str, files: Sequence[str]) -> DataFrame:
    """Data files of a table as a DataFrame, read by Spark's own Parquet reader with the spec schema (columns
    missing from older files read as null)."""
    schema = spark_schema(table, nullable=True)
    if not files:
        return _empty_frame(spark, schema)
    return spark.read.schema(schema).parquet(*files)


def source_end_versions(progress: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The highest Delta version each ``stream_table`` source reached in a query's progress reports."""
    reached: dict[str, int] = {}
    for report in progress:
        for source in report.get("sources", []):
            offset = _offset_dict(source.get("endOffset"))
            if isinstance(offset, dict) and "table" in offset and "version" in offset:
                table, version = str(offset["table"]), int(offset["version"])
                reached[table] = max(version, reached.get(table, -1))
    return reached


def _offset_dict(end: Any) -> Any:
    """A source's end offset from a progress report: JSON, or (Python sources) the dict's repr."""
    if not isinstance(end, str):
        return end
    try:
        return json.loads(end)
    except ValueError:
        try:
            return ast.literal_eval(end)
        except (ValueError, SyntaxError):
            return None


MAX_DRAIN_RUNS = 10_000
"""A guard against a source that never reports progress (each run commits at least one new batch)."""


def drain_available_now(start: Callable[[], StreamingQuery], lake: Lake, tables: Sequence[str]) -> int:
    """Process everything the streamed ``tables`` hold now, then stop; returns how many runs it took.

    ``start`` starts one ``trigger(availableNow=True)`` query. Spark 4.1 runs one micro-batch per such
    query on a Python source (after a crash: only the replayed uncommitted batch), so runs are repeated
    until every source's committed offset reaches the version that was current when draining began.
    """
    from lakehouse.delta_source import latest_version

    targets = {t: latest_version(lake.table_path(t)) for t in tables}
    for run in range(1, MAX_DRAIN_RUNS + 1):
        query = start()
        query.awaitTermination()
        reached = source_end_versions(query.recentProgress)
        behind = {t: v for t, v in targets.items() if reached.get(t, -1) < v}
        # no batch ran: the checkpoint already covers everything; no named offsets: Delta's own source
        if not reached or not behind:
            return run
        log.info("availableNow run %d stopped before the targets %s; running again", run, behind)
    raise RuntimeError(f"availableNow did not reach {targets} after {MAX_DRAIN_RUNS} runs")
