"""``metadata_events``, a view: every typed metadata change, made when read rather than stored.

A ZooKeeper cluster's events are decoded from ``znode_events`` by the codec and source dedupe the pipeline folds
with (``pipelines.decode.metadata_events_of``): each change once, the transaction log's copy wherever the log
covers its zxid. A KRaft cluster's events are made from its metadata log against the metadata image, which no
row-by-row decode can do, so the pipeline stores them (``kraft_metadata_events``) and the view adds them.
Storing the ZooKeeper events again would write each bronze row twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.spark_schema import spark_arrow_schema
from models.events import Source
from models.tables import KRAFT_METADATA_EVENTS, METADATA_EVENTS, ZNODE_EVENTS

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse import Lake

SCHEMA = spark_arrow_schema(METADATA_EVENTS)
STORED = (ZNODE_EVENTS.name, KRAFT_METADATA_EVENTS.name)
"""The stored tables the view reads."""


def exists(lake: Lake) -> bool:
    """Whether the view has a table to read (it may still be empty)."""
    return any(lake.exists(t) for t in STORED)


def read(lake: Lake, columns: list[str] | None = None, cluster: str | None = None) -> pa.Table:
    """The view now, as Arrow (``columns``: those only; ``cluster``: that cluster's rows only)."""
    import pyarrow.dataset as ds

    from pipelines.decode import metadata_events_of

    where = ds.field("cluster") == cluster if cluster is not None else None
    parts = [SCHEMA.empty_table()]
    for table in STORED:
        if not lake.exists(table):
            continue
        rows = lake.conform_read(table, lake.scan(table, where=where))
        parts.append((metadata_events_of(rows) if table == ZNODE_EVENTS.name else rows).cast(SCHEMA))
    view = pa.concat_tables(parts)
    return view.select(columns) if columns is not None else view


def read_any(lake: Lake, name: str) -> pa.Table | None:
    """A stored table or this view, now, as Arrow; None when there is nothing to read."""
    if name == METADATA_EVENTS.name:
        return read(lake) if exists(lake) else None
    return lake.read_arrow(name) if lake.exists(name) else None


def frame(spark: SparkSession, lake: Lake) -> DataFrame:
    """The view now, as a Spark DataFrame: ``znode_events`` decoded in the executors (the rows of one zxid in one
    task, each cluster's transaction-log range computed first), then ``kraft_metadata_events``."""
    from pyspark.sql import functions as F

    from lakehouse.spark_io import read_table
    from lakehouse.spark_schema import spark_schema

    out = spark_schema(METADATA_EVENTS, nullable=True)
    bronze = read_table(spark, lake, ZNODE_EVENTS.name)
    rows = (bronze.where(F.col("source") == str(Source.TXNLOG)).groupBy("cluster")
            .agg(F.min("zxid").alias("lo"), F.max("zxid").alias("hi")).collect())
    ranges = {r["cluster"]: (r["lo"], r["hi"]) for r in rows}

    def decode(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.decode import metadata_events_of

        got = list(batches)
        if not got:
            return
        table = pa.Table.from_batches(got)
        for cluster in pc.unique(table["cluster"]).to_pylist():
            rows = table.filter(pc.equal(table["cluster"], cluster))
            yield from metadata_events_of(rows, ranges.get(cluster)).cast(SCHEMA).to_batches()

    decoded = bronze.repartition("cluster", "zxid").mapInArrow(decode, out)
    return decoded.unionByName(read_table(spark, lake, KRAFT_METADATA_EVENTS.name))


__all__ = ["SCHEMA", "STORED", "exists", "frame", "read", "read_any"]
