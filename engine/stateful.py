"""Both state machines as one Spark stateful streaming operator, executors doing the work and the writes.

The query (``fold_stream``), on the bronze ``znode_events`` stream (Delta's streaming source):

1. decode, route and pack on the executors, in one ``mapInArrow`` (Arrow from the bronze files to the blobs):
   decode with ``pipelines.decode.decode_table`` (source dedupe within the task's rows, the vectorised codec),
   keeping the event types the fold reads; route (``pipelines.bucket_fold.route``): an event with a partition
   goes to its key's BUCKET (a stable hash of topic and partition), a cluster-wide event (election, epoch
   change, broker (de)registration, ...) or a topic-level deletion (request) without partition to every bucket
   of its cluster (few rows); pack: the task's rows of one (cluster, bucket) become one row holding them as
   Arrow IPC bytes, so neither the JVM nor the stateful operator (pandas is its only Python interface) handles
   the events one by one;
2. fold: ``groupBy(cluster, bucket).transformWithStateInPandas`` with ``BucketFoldProcessor``: Python runs once
   per bucket per micro-batch, with the vectorised kernels inside (``pipelines.bucket_fold.fold_bucket``). Each
   bucket replays its cluster's timeline from the cluster-wide events it has seen (all of them, in zxid order:
   the fold sorts by zxid), fans them out over its own known keys and carries its keys' partition and replica
   state. That state is one value per bucket in Spark's state store (RocksDB), as Arrow IPC bytes, and is
   checkpointed by Spark with the stream's offsets. The bucket's records leave packed the same way;
3. unpack: ``mapInArrow`` turns each bucket's records of one table back into rows (``unpacked``).

The sink (``FoldBatchWriter``, ``foreachBatch``) writes each micro-batch from the executors through Delta's
connector: the transitions appended with the app transaction ``(writer, batch id)``, then the state tables
MERGEd on their keys under the same app transaction (Delta's idempotent DML), so a replayed batch is skipped.
The driver plans and commits; no row of the fold passes through it.

``start_stateful_fold`` starts the query over a lake: ``available_now`` for a rebuild from a fresh checkpoint,
a processing-time trigger for a monitor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from lakehouse.spark_io import stream_table, write_batch
from lakehouse.spark_schema import spark_schema
from models.states import DEFAULT_KAFKA_VERSION
from models.tables import (
    METADATA_EVENTS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
    ZNODE_EVENTS,
)
from pipelines.bucket_fold import BUCKET_COLUMN, FOLDED_TYPES, BucketState, fold_bucket, route
from pipelines.decode import decode_table
from pipelines.fold_records import FOLD_OUT, FoldRecord

if TYPE_CHECKING:
    from lakehouse import Lake

log = logging.getLogger(__name__)

STATEFUL_WRITER = "stateful-fold"
"""The app-transaction id of the query's Delta commits (one writer; batch ids are its versions)."""
DEFAULT_BUCKETS = 32
"""Key buckets per cluster: fixed for a checkpoint's life (the state is keyed by bucket)."""
PACKED_COLUMN = "packed"
PACKED = T.StructType([T.StructField("cluster", T.StringType()), T.StructField(BUCKET_COLUMN, T.IntegerType()),
                       T.StructField(PACKED_COLUMN, T.BinaryType())])
"""One (cluster, bucket)'s rows as one Arrow IPC stream: what goes in and out of the stateful operator."""
META_SEQ = T.StructType([*spark_schema(METADATA_EVENTS, nullable=True).fields, T.StructField("_seq", T.IntegerType())])
"""A decoded metadata event as the fold reads it (``_seq``: its order within its zxid)."""
STATE_STRUCT = T.StructType([T.StructField(n, T.BinaryType()) for n in (PARTITION_STATE.name, REPLICA_STATE.name,
                                                                        "global_events")])
STATE_RECORDS = (FoldRecord.PARTITION_TRANSITION, FoldRecord.REPLICA_TRANSITION, FoldRecord.PARTITION_STATE,
                 FoldRecord.REPLICA_STATE)
"""The fold records the query emits (the enriched writes ``w`` feed detectors, not run here)."""

_META_ARROW = to_arrow_schema(META_SEQ)
_OUT_ARROW = to_arrow_schema(FOLD_OUT)
_PACKED_ARROW = to_arrow_schema(PACKED)


class _DecodeRoutePack:
    """``mapInArrow``: the task's bronze rows decoded at once (dedupe sees them together), routed to their buckets,
    one PACKED row per (cluster, bucket)."""

    def __init__(self, buckets: int) -> None:
        self.buckets = buckets

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        if not got:
            return
        decoded = decode_table(pa.Table.from_batches(got))
        keep = pc.and_(decoded["_ok"], pc.is_in(decoded["type"], pa.array(FOLDED_TYPES)))
        meta = decoded.filter(pc.fill_null(keep, False)).select(_META_ARROW.names).cast(_META_ARROW)
        if meta.num_rows == 0:
            return
        rows = route(meta, self.buckets).sort_by([("cluster", "ascending"), (BUCKET_COLUMN, "ascending")])
        cluster = rows["cluster"].to_numpy(zero_copy_only=False)
        bucket = rows[BUCKET_COLUMN].to_numpy()
        starts = np.flatnonzero(np.r_[True, (cluster[1:] != cluster[:-1]) | (bucket[1:] != bucket[:-1])])
        ends = np.r_[starts[1:], len(bucket)]
        body = rows.select(_META_ARROW.names)
        blobs = [_ipc(body.slice(a, b - a)) for a, b in zip(starts, ends, strict=True)]
        yield pa.RecordBatch.from_arrays([pa.array(cluster[starts], pa.string()), pa.array(bucket[starts], pa.int32()),
                                          pa.array(blobs, pa.binary())], schema=_PACKED_ARROW)


class _Unpack:
    """``mapInArrow``: the records of one kind (all kinds: None) in each bucket's packed records, as rows of
    ``columns``."""

    def __init__(self, kind: FoldRecord | None, columns: Sequence[str]) -> None:
        self.kind, self.columns = kind, list(columns)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for blob in batch.column(PACKED_COLUMN).to_pylist():
                records = _unipc(blob)
                if self.kind is not None:
                    records = records.filter(pc.equal(records["rec"], str(self.kind)))
                yield from records.select(self.columns).to_batches(max_chunksize=100_000)


def unpacked(packed: DataFrame, kind: FoldRecord | None = None, columns: Sequence[str] | None = None) -> DataFrame:
    """``fold_stream``'s packed records as rows: of one ``kind`` (default all) with ``columns`` (default all of
    ``FOLD_OUT``)."""
    names = list(columns or FOLD_OUT.fieldNames())
    return packed.mapInArrow(_Unpack(kind, names), T.StructType([FOLD_OUT[c] for c in names]))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _unipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.BufferReader(blob)).read_all()


def fold_stream(bronze: DataFrame, buckets: int = DEFAULT_BUCKETS,
                kafka_version: str = DEFAULT_KAFKA_VERSION) -> DataFrame:
    """The fold's records (``FOLD_OUT`` rows, ``rec`` in ``STATE_RECORDS``) of a bronze ``znode_events`` stream,
    packed: one PACKED row per bucket and micro-batch (``unpacked`` turns them into rows)."""
    packed = bronze.mapInArrow(_DecodeRoutePack(buckets), PACKED)
    folded = packed.groupBy("cluster", BUCKET_COLUMN).transformWithStateInPandas(
        statefulProcessor=BucketFoldProcessor(kafka_version), outputStructType=PACKED, outputMode="Append",
        timeMode="None")
    return folded


class BucketFoldProcessor(StatefulProcessor):
    """One (cluster, bucket): its carried state in one ValueState, folded with each micro-batch's rows."""

    def __init__(self, kafka_version: str = DEFAULT_KAFKA_VERSION) -> None:
        self.kafka_version = kafka_version

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("bucket", STATE_STRUCT)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        blobs = [b for frame in rows for b in frame[PACKED_COLUMN]]
        if not blobs:
            return
        batch = pa.concat_tables([_unipc(b) for b in blobs])
        stored = self.state.get() if self.state.exists() else None
        carried = BucketState.from_bytes(tuple(stored)) if stored is not None else BucketState.empty(_META_ARROW)
        records, after = fold_bucket(carried, batch, self.kafka_version)
        self.state.update(after.to_bytes())
        out = pa.concat_tables([records[rec].cast(_OUT_ARROW) for rec in STATE_RECORDS])
        if out.num_rows:
            yield pd.DataFrame({"cluster": [key[0]], BUCKET_COLUMN: [key[1]], PACKED_COLUMN: [_ipc(out)]})

    def close(self) -> None:
        pass


class FoldBatchWriter:
    """``foreachBatch`` sink: a micro-batch's fold records into the lake, once per batch id."""

    def __init__(self, lake: Lake, writer_id: str = STATEFUL_WRITER) -> None:
        self.lake, self.writer_id = lake, writer_id

    def __call__(self, records: DataFrame, batch_id: int) -> None:
        records = records.persist()  # the packed records: a few rows per bucket
        began = step = time.monotonic()
        spent: dict[str, float] = {}

        def lap(what: str) -> None:
            nonlocal step
            spent[what], step = time.monotonic() - step, time.monotonic()

        try:
            records.count()  # the fold itself runs here, once
            lap("fold")
            for kind, spec in ((FoldRecord.PARTITION_TRANSITION, PARTITION_TRANSITIONS),
                               (FoldRecord.REPLICA_TRANSITION, REPLICA_TRANSITIONS)):
                write_batch(unpacked(records, kind, spec.column_names), self.lake, spec.name, self.writer_id, batch_id)
                lap(spec.name)
            # the state tables last: a committed state means the whole batch is
            self._merge(unpacked(records, FoldRecord.PARTITION_STATE, PARTITION_STATE.column_names),
                        PARTITION_STATE.name, PARTITION_STATE.key, batch_id)
            lap(PARTITION_STATE.name)
            self._merge(unpacked(records, FoldRecord.REPLICA_STATE, REPLICA_STATE.column_names),
                        REPLICA_STATE.name, REPLICA_STATE.key, batch_id)
            lap(REPLICA_STATE.name)
        finally:
            records.unpersist()
        log.info("stateful fold batch %d: %.1f s (%s)", batch_id, time.monotonic() - began,
                 ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()))

    def _merge(self, rows: DataFrame, table: str, keys: tuple[str, ...], batch_id: int) -> None:
        """Upsert a batch's state rows on ``keys``; the target rows of a key whose (cluster, topic, partition) the
        batch wrote and this batch did not (a replica gone) are deleted. Idempotent per batch id."""
        lake = self.lake
        lake.ensure(table)
        last = lake.last_batch_seq(table, self.writer_id)
        if last is not None and last >= batch_id:
            log.info("%s: batch %s/%d already committed, skipped", table, self.writer_id, batch_id)
            return
        spark = rows.sparkSession
        path = lake.table_path(table)
        part_keys = ["cluster", "topic", "partition"]
        source = rows.withColumn("_del", F.lit(False))
        if tuple(part_keys) != keys:
            target = spark.read.format("delta").load(path)
            touched = rows.select(*part_keys).distinct()
            gone = (target.join(touched, part_keys, "left_semi").join(rows.select(*keys), list(keys), "left_anti")
                    .select(*rows.columns).withColumn("_del", F.lit(True)))
            source = source.unionByName(gone)
        view = f"_fold_{table}_{batch_id}"
        source.createOrReplaceTempView(view)
        cols = rows.columns
        on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
        update = ", ".join(f"t.`{c}` = s.`{c}`" for c in cols)
        names = ", ".join(f"`{c}`" for c in cols)
        values = ", ".join(f"s.`{c}`" for c in cols)
        conf = spark.conf
        conf.set("spark.databricks.delta.write.txnAppId", self.writer_id)
        conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            spark.sql(f"MERGE INTO delta.`{path}` t USING {view} s ON {on} "
                      f"WHEN MATCHED AND s._del THEN DELETE "
                      f"WHEN MATCHED THEN UPDATE SET {update} "
                      f"WHEN NOT MATCHED AND NOT s._del THEN INSERT ({names}) VALUES ({values})")
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")
            spark.catalog.dropTempView(view)


def start_stateful_fold(spark: SparkSession, lake: Lake, checkpoint: str | Path, *, buckets: int = DEFAULT_BUCKETS,
                        kafka_version: str = DEFAULT_KAFKA_VERSION, writer_id: str = STATEFUL_WRITER,
                        available_now: bool = False, processing_time: str | None = None,
                        max_files_per_trigger: int | None = None, after_version: int | None = None) -> StreamingQuery:
    """Start the fold over ``lake``'s bronze stream, writing the transitions and the state tables.

    ``available_now``: every bronze commit present at start, then stop (a rebuild from a fresh checkpoint);
    else ``processing_time`` (e.g. ``"1 second"``) for a monitor. ``buckets`` must stay the same for a
    checkpoint. ``after_version``: the bronze versions up to it are not streamed (Delta's ``startingVersion``).
    """
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    if available_now == (processing_time is not None):
        raise ValueError("give available_now or processing_time, one of them")
    bronze = stream_table(spark, lake, ZNODE_EVENTS.name, after_version=after_version,
                          max_files_per_trigger=max_files_per_trigger)
    writer = (fold_stream(bronze, buckets, kafka_version).writeStream
              .option("checkpointLocation", str(checkpoint)).foreachBatch(FoldBatchWriter(lake, writer_id)))
    writer = writer.trigger(availableNow=True) if processing_time is None else writer.trigger(processingTime=processing_time)
    return writer.start()
