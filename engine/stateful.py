"""The whole pipeline as one Spark Structured Streaming query with Spark's own stateful operator.

The query (``stateful_stream``), on the bronze streams (Delta's streaming source) of ``znode_events`` and
``controller_decisions``:

1. decode and route on the executors, in one ``mapInArrow`` per source (Arrow from the bronze files to packed
   rows): znode rows are decoded (``pipelines.decode.decode_table``: source dedupe within the task's rows, the
   vectorised codec) and routed (``pipelines.bucket_fold.route``): an event with a partition to its key's
   bucket (a stable hash of topic and partition), an event without to its cluster's stage
   (``CLUSTER_STAGE``) and, when it may change partitions (an election, a broker change, a topic deletion),
   as a fold-only copy to every bucket of its cluster. Decisions go to the stage, and those about one
   partition to its bucket too (``route_decisions``). The quarantine, the gap rows and the txnlog's zxid range
   go to the stage; each cluster's latest ZooKeeper event time to all its buckets (``zk_times``: by it a
   bucket settles the decisions it checks against ZooKeeper, ``detectors.settle_decisions``). Each task's rows
   of one (cluster, bucket) and kind (``StreamPart``) become one row holding them as Arrow IPC bytes, so
   neither the JVM nor the operator (pandas is its only Python interface) handles events one by one;
2. ``groupBy(cluster, bucket).transformWithStateInPandas`` with ``PipelineProcessor``: Python runs once per key
   per micro-batch with the vectorised kernels inside. A bucket folds its keys
   (``pipelines.bucket_fold.bucket_step``: both state machines, the state writes' and transitions' checks,
   the decisions' checks against the writes ZooKeeper held); the cluster's stage does the cluster-wide work
   (``pipelines.cluster_stage.cluster_step``: timeline, controller terms, resignations, gaps). Each key's
   state is one value in Spark's state store (RocksDB), checkpointed by Spark with the stream's offsets.
   Out: one packed row per (key, output table);
3. the sink (``PipelineBatchWriter``, ``foreachBatch``) unpacks each table's rows on the executors
   (``unpacked``) and writes them through Delta's connector, each commit under the app transaction
   ``(writer, batch id)`` so that a replayed batch is skipped: the anomalies first and alone (new ids only,
   published once committed), the append tables side by side, then ``controller_tenure``, ``replica_state``
   and ``partition_state`` MERGEd on their keys. The
   driver plans and commits; it collects only the names of the tables a batch wrote.

``start_stateful_query`` starts it over a lake: ``available_now`` for a rebuild from a fresh checkpoint, a
processing-time trigger for a monitor.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from engine.increment import META_SEQ
from engine.upkeep import QUALITY_EACH_BATCH_TABLES, MaintenanceSchedule, check_batch_rows
from lakehouse.spark_io import stream_table, write_batch
from lakehouse.spark_schema import spark_arrow_schema, spark_schema
from models.events import Source
from models.states import DEFAULT_KAFKA_VERSION
from models.tables import (
    ANOMALIES,
    CONTROLLER_DECISIONS,
    CONTROLLER_TENURE,
    DECODE_QUARANTINE,
    METADATA_EVENTS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
    ZNODE_EVENTS,
    TableSpec,
)
from pipelines.bucket_fold import (
    BUCKET_COLUMN,
    CLUSTER_STAGE,
    EMIT_COLUMN,
    GLOBAL_COLUMNS,
    BucketState,
    at_stage,
    bucket_step,
    ipc_bytes,
    ipc_table,
    route,
    route_decisions,
    zk_times,
)
from pipelines.cluster_stage import ClusterState, StreamPart, cluster_step
from pipelines.decode import decode_table, split_decoded
from pipelines.detectors import GAP_COLUMNS

if TYPE_CHECKING:
    from lakehouse import Lake

log = logging.getLogger(__name__)

STATEFUL_WRITER = "stateful-query"
"""The app-transaction id of the query's Delta commits (one writer; batch ids are its versions)."""
DEFAULT_BUCKETS = 32
"""Key buckets per cluster: fixed for a checkpoint's life (the state is keyed by bucket)."""
PART_COLUMN, TABLE_COLUMN, PACKED_COLUMN = "part", "table", "packed"
PACKED_IN = T.StructType([T.StructField("cluster", T.StringType()), T.StructField(BUCKET_COLUMN, T.IntegerType()),
                          T.StructField(PART_COLUMN, T.StringType()), T.StructField(PACKED_COLUMN, T.BinaryType())])
"""The operator's input: one task's rows of one ``StreamPart`` for one key, as one Arrow IPC stream."""
PACKED_OUT = T.StructType([T.StructField("cluster", T.StringType()), T.StructField(BUCKET_COLUMN, T.IntegerType()),
                           T.StructField(TABLE_COLUMN, T.StringType()), T.StructField(PACKED_COLUMN, T.BinaryType())])
"""The operator's output: one key's rows of one output table, as one Arrow IPC stream."""
BUCKET_STATE = T.StructType([T.StructField(n, T.BinaryType()) for n in (
    "partition_state", "replica_state", "global_events", "zk_writes", "recent_ids", "pending_decisions", "zk_time")])
CLUSTER_STATE = T.StructType([T.StructField(n, T.BinaryType()) for n in ("global_events", "log_terms", "resigns",
                                                                         "txnlog", "recent_ids")])
DERIVED: tuple[TableSpec, ...] = (ANOMALIES, METADATA_EVENTS, DECODE_QUARANTINE, PARTITION_TRANSITIONS,
                                  REPLICA_TRANSITIONS, CONTROLLER_TENURE, REPLICA_STATE, PARTITION_STATE)
"""Every table the query writes."""
APPEND_ORDER: tuple[TableSpec, ...] = (METADATA_EVENTS, DECODE_QUARANTINE, PARTITION_TRANSITIONS, REPLICA_TRANSITIONS)
MERGED: tuple[tuple[TableSpec, tuple[str, ...] | None], ...] = (
    (CONTROLLER_TENURE, ("cluster",)), (REPLICA_STATE, None), (PARTITION_STATE, None))
"""The tables MERGEd each batch, with the scope whose rows the batch did not write again are deleted: a stage
writes its cluster's whole tenure (a few rows). The state tables are upserts: the fold never forgets a replica
(after a deletion or a reassignment its row stays, in its last state), so a batch's rows are all that changed.
``partition_state`` last: committed, it means the whole batch is."""
TENURE_KEY = ("cluster", "source", "controller_id", "controller_epoch", "start_zxid")

_META_ARROW = to_arrow_schema(META_SEQ)
_PACKED_IN_ARROW = to_arrow_schema(PACKED_IN)
_PACKED_OUT_ARROW = to_arrow_schema(PACKED_OUT)
_GLOBAL_ARROW = pa.schema([_META_ARROW.field(c) for c in GLOBAL_COLUMNS])


def _packed(rows: pa.Table, part: StreamPart) -> pa.RecordBatch | None:
    """``rows`` (with ``cluster`` and ``bucket``) as one PACKED_IN row per (cluster, bucket)."""
    if rows.num_rows == 0:
        return None
    rows = rows.sort_by([("cluster", "ascending"), (BUCKET_COLUMN, "ascending")])
    cluster = rows["cluster"].to_numpy(zero_copy_only=False)
    bucket = rows[BUCKET_COLUMN].to_numpy()
    starts = np.flatnonzero(np.r_[True, (cluster[1:] != cluster[:-1]) | (bucket[1:] != bucket[:-1])])
    ends = np.r_[starts[1:], len(bucket)]
    body = rows.drop_columns([BUCKET_COLUMN])
    blobs = [ipc_bytes(body.slice(a, b - a)) for a, b in zip(starts, ends, strict=True)]
    n = len(starts)
    return pa.RecordBatch.from_arrays([pa.array(cluster[starts], pa.string()), pa.array(bucket[starts], pa.int32()),
                                       pa.array([str(part)] * n, pa.string()), pa.array(blobs, pa.binary())],
                                      schema=_PACKED_IN_ARROW)


class _DecodeRoute:
    """``mapInArrow`` on bronze ``znode_events``: the task's rows decoded at once (dedupe sees them together) and
    routed; quarantine, gap rows and the txnlog range to each cluster's stage."""

    def __init__(self, buckets: int) -> None:
        self.buckets = buckets

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        if not got:
            return
        bronze = pa.Table.from_batches(got)
        meta, quarantine = split_decoded(decode_table(bronze))
        gaps = bronze.filter(pc.fill_null(pc.greater(bronze["missed_versions"], 0), False)).select(list(GAP_COLUMNS))
        txn = bronze.filter(pc.fill_null(pc.equal(bronze["source"], str(Source.TXNLOG)), False))
        ranges = txn.group_by("cluster").aggregate([("zxid", "min"), ("zxid", "max")])
        ranges = pa.table({"cluster": ranges["cluster"], "lo": ranges["zxid_min"], "hi": ranges["zxid_max"]})
        for rows, part in ((route(meta.cast(_META_ARROW), self.buckets), StreamPart.EVENTS),
                           (zk_times(meta, self.buckets), StreamPart.ZK_TIME),
                           (at_stage(quarantine), StreamPart.QUARANTINE), (at_stage(gaps), StreamPart.GAPS),
                           (at_stage(ranges), StreamPart.TXNLOG)):
            packed = _packed(rows, part)
            if packed is not None:
                yield packed


class _RouteDecisions:
    """``mapInArrow`` on bronze ``controller_decisions``: each row to its cluster's stage, and to its partition's
    bucket when it is about one."""

    def __init__(self, buckets: int) -> None:
        self.buckets = buckets

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        if got:
            packed = _packed(route_decisions(pa.Table.from_batches(got), self.buckets), StreamPart.DECISIONS)
            if packed is not None:
                yield packed


class _Unpack:
    """``mapInArrow``: the packed rows of one output table as that table's rows."""

    def __init__(self, spec: TableSpec) -> None:
        self.schema = spark_arrow_schema(spec)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for blob in batch.column(PACKED_COLUMN).to_pylist():
                rows = ipc_table(blob)
                yield from rows.select(self.schema.names).cast(self.schema).to_batches(max_chunksize=100_000)


def unpacked(packed: DataFrame, spec: TableSpec) -> DataFrame:
    """``stateful_stream``'s packed output rows of one table, as that table's rows."""
    return packed.filter(F.col(TABLE_COLUMN) == spec.name).mapInArrow(_Unpack(spec), spark_schema(spec, nullable=True))


def stateful_stream(bronze: DataFrame, decisions: DataFrame, buckets: int = DEFAULT_BUCKETS,
                    kafka_version: str = DEFAULT_KAFKA_VERSION) -> DataFrame:
    """Every derived table's rows of the bronze streams, packed (PACKED_OUT; ``unpacked`` gives one table's)."""
    routed = bronze.mapInArrow(_DecodeRoute(buckets), PACKED_IN).unionByName(
        decisions.mapInArrow(_RouteDecisions(buckets), PACKED_IN))
    return routed.groupBy("cluster", BUCKET_COLUMN).transformWithStateInPandas(
        statefulProcessor=PipelineProcessor(kafka_version), outputStructType=PACKED_OUT, outputMode="Append",
        timeMode="None")


class PipelineProcessor(StatefulProcessor):
    """One key per micro-batch: a bucket (its carried ``BucketState``) or a cluster's stage (``ClusterState``),
    each one ValueState of Arrow IPC bytes."""

    def __init__(self, kafka_version: str = DEFAULT_KAFKA_VERSION) -> None:
        self.kafka_version = kafka_version

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_STATE)
        self.cluster_state = handle.getValueState("cluster", CLUSTER_STATE)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        blobs: dict[StreamPart, list[pa.Table]] = {}
        for frame in rows:
            for part, blob in zip(frame[PART_COLUMN], frame[PACKED_COLUMN], strict=True):
                blobs.setdefault(StreamPart(part), []).append(ipc_table(blob))
        if not blobs:
            return
        parts = {part: pa.concat_tables(tables) for part, tables in blobs.items()}
        cluster, bucket = str(key[0]), int(key[1])
        if bucket == CLUSTER_STAGE:
            stored = self.cluster_state.get() if self.cluster_state.exists() else None
            carried = ClusterState.from_bytes(tuple(stored)) if stored else ClusterState.empty(_GLOBAL_ARROW)
            out, after = cluster_step(cluster, carried, parts)
            self.cluster_state.update(after.to_bytes())
        else:
            stored = self.bucket_state.get() if self.bucket_state.exists() else None
            state = BucketState.from_bytes(tuple(stored)) if stored else BucketState.empty(_META_ARROW)
            events = parts.get(StreamPart.EVENTS, _META_ARROW.append(pa.field(EMIT_COLUMN, pa.bool_())).empty_table())
            out, state = bucket_step(cluster, state, events, parts.get(StreamPart.DECISIONS), self.kafka_version,
                                     parts.get(StreamPart.ZK_TIME))
            self.bucket_state.update(state.to_bytes())
        tables = [(name, rows) for name, rows in out.items() if rows.num_rows]
        if tables:
            yield pd.DataFrame({"cluster": [cluster] * len(tables), BUCKET_COLUMN: [bucket] * len(tables),
                                TABLE_COLUMN: [name for name, _ in tables],
                                PACKED_COLUMN: [ipc_bytes(rows) for _, rows in tables]})

    def close(self) -> None:
        pass


def _one_per_id(found: DataFrame) -> DataFrame:
    """One row per anomaly id: two keys can find one (a split brain's pair), kept at its lowest-zxid write."""
    first = Window.partitionBy("anomaly_id").orderBy(F.col("zxid").asc_nulls_last(),
                                                      F.element_at("evidence", -1).asc_nulls_last())
    return found.withColumn("_n", F.row_number().over(first)).filter("_n = 1").drop("_n")


class PipelineBatchWriter:
    """``foreachBatch`` sink: a micro-batch's tables into the lake, each once per batch id."""

    def __init__(self, lake: Lake, writer_id: str = STATEFUL_WRITER,
                 publish: Callable[[list[dict[str, Any]]], object] | None = None, quality: bool = False,
                 maintenance: MaintenanceSchedule | None = None) -> None:
        self.lake, self.writer_id, self.publish = lake, writer_id, publish
        self.quality, self.maintenance = quality, maintenance

    def __call__(self, records: DataFrame, batch_id: int) -> None:
        records = records.persist()  # the packed rows: a few per key
        began = step = time.monotonic()
        spent: dict[str, float] = {}

        def lap(what: str) -> None:
            nonlocal step
            spent[what], step = time.monotonic() - step, time.monotonic()

        try:
            # the operator runs here, once; what comes back is the names of the tables written (at most 8)
            written = {r[0] for r in records.select(TABLE_COLUMN).distinct().collect()}
            lap("query")
            # the anomalies first, alone: what an alert waits for; then the other appends at once (Spark runs
            # jobs from several driver threads side by side; each commit is its own, idempotent per batch id),
            # then the MERGEs one by one (they share the session's txn conf)
            if ANOMALIES.name in written:
                self._append(records, ANOMALIES, batch_id)
                lap("anomalies")
            appends = [spec for spec in APPEND_ORDER if spec.name in written]
            with ThreadPoolExecutor(max_workers=len(appends) or 1, thread_name_prefix="stateful-sink") as pool:
                for done in [pool.submit(self._append, records, spec, batch_id) for spec in appends]:
                    done.result()
            lap("appends")
            for spec, scope in MERGED:
                if spec.name in written:
                    keys = TENURE_KEY if spec is CONTROLLER_TENURE else spec.key
                    self._merge(unpacked(records, spec), spec.name, keys, batch_id, scope)
                    lap(spec.name)
            if self.quality:
                frames = {spec.name: _one_per_id(unpacked(records, spec)) if spec is ANOMALIES else unpacked(records, spec)
                          for spec in QUALITY_EACH_BATCH_TABLES if spec.name in written}
                check_batch_rows(records.sparkSession, self.lake, frames, f"{self.writer_id}-quality", batch_id)
                lap("quality")
        finally:
            records.unpersist()
        log.info("stateful query batch %d: %.1f s (%s)", batch_id, time.monotonic() - began,
                 ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()))
        if self.maintenance is not None:
            self.maintenance.after_batch()

    def _append(self, records: DataFrame, spec: TableSpec, batch_id: int) -> None:
        if spec is not ANOMALIES:
            write_batch(unpacked(records, spec), self.lake, spec.name, self.writer_id, batch_id)
            return
        new = self._new_anomalies(unpacked(records, ANOMALIES)).persist()
        try:
            committed = write_batch(new, self.lake, ANOMALIES.name, self.writer_id, batch_id)
            if committed and self.publish is not None:
                self.publish([r.asDict(recursive=True) for r in new.collect()])  # few: new findings only
        finally:
            new.unpersist()

    def _new_anomalies(self, found: DataFrame) -> DataFrame:
        """``_one_per_id`` less the ids already committed (ids are deterministic: a finding seen again is not new)."""
        self.lake.ensure(ANOMALIES.name)
        known = found.sparkSession.read.format("delta").load(self.lake.table_path(ANOMALIES.name)).select("anomaly_id")
        return _one_per_id(found).join(known, "anomaly_id", "left_anti")

    def _merge(self, rows: DataFrame, table: str, keys: tuple[str, ...], batch_id: int,
               scope: tuple[str, ...] | None) -> None:
        """Upsert a batch's rows on ``keys``; with a ``scope`` (e.g. a cluster), the target rows in a scope the
        batch wrote that it did not write again are deleted. Idempotent per batch id."""
        lake = self.lake
        lake.ensure(table)
        last = lake.last_batch_seq(table, self.writer_id)
        if last is not None and last >= batch_id:
            log.info("%s: batch %s/%d already committed, skipped", table, self.writer_id, batch_id)
            return
        if last is None and lake.row_count(table) == 0:  # a rebuild's first batch: nothing to merge with
            write_batch(rows, lake, table, self.writer_id, batch_id)
            return
        spark = rows.sparkSession
        path = lake.table_path(table)
        source = rows.withColumn("_del", F.lit(False))
        if scope is not None:
            target = spark.read.format("delta").load(path)
            touched = rows.select(*scope).distinct()
            on_keys = [target[k].eqNullSafe(rows[k]) for k in keys]
            gone = (target.join(touched, list(scope), "left_semi").join(rows.select(*keys), on_keys, "left_anti")
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


def start_stateful_query(spark: SparkSession, lake: Lake, checkpoint: str | Path, *, buckets: int = DEFAULT_BUCKETS,
                         kafka_version: str = DEFAULT_KAFKA_VERSION, writer_id: str | None = None,
                         available_now: bool = False, processing_time: str | None = None,
                         max_files_per_trigger: int | None = None, max_bytes_per_trigger: str | None = None,
                         publish: Callable[[list[dict[str, Any]]], object] | None = None, quality: bool = False,
                         maintain_every_s: float = 0.0) -> StreamingQuery:
    """Start the pipeline over ``lake``'s bronze streams, writing every derived table.

    ``available_now``: every bronze commit present at start, then stop (a rebuild from a fresh checkpoint);
    else ``processing_time`` (e.g. ``"1 second"``) for a monitor. ``buckets`` must stay the same for a
    checkpoint. ``max_files_per_trigger``/``max_bytes_per_trigger`` cap a micro-batch (Delta's admission
    control). ``writer_id``: default the checkpoint's own (``checkpoint_writer``). ``publish``: called on
    the driver with each batch's new anomalies once they are committed. ``quality``: the quality suites on
    each batch's new rows; ``maintain_every_s``: the lake's maintenance between batches this often (0: never).
    """
    writer_id = writer_id or checkpoint_writer(checkpoint)
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    if available_now == (processing_time is not None):
        raise ValueError("give available_now or processing_time, one of them")
    bronze, decisions = (stream_table(spark, lake, t.name, max_files_per_trigger=max_files_per_trigger,
                                      max_bytes_per_trigger=max_bytes_per_trigger)
                         for t in (ZNODE_EVENTS, CONTROLLER_DECISIONS))
    sink = PipelineBatchWriter(lake, writer_id, publish, quality,
                               MaintenanceSchedule(lake, str(checkpoint), maintain_every_s))
    writer = (stateful_stream(bronze, decisions, buckets, kafka_version).writeStream
              .option("checkpointLocation", str(checkpoint)).foreachBatch(sink))
    writer = writer.trigger(availableNow=True) if processing_time is None else writer.trigger(processingTime=processing_time)
    query = writer.start()
    spark.streams.addListener(ProgressLog(str(query.id)))
    return query


class ProgressLog(StreamingQueryListener):
    """Each micro-batch of one query as one INFO line: rows in, and where its time went (Spark's own phases)."""

    def __init__(self, query_id: str) -> None:
        self.query_id = query_id

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if str(progress.id) != self.query_id:
            return
        phases = ", ".join(f"{k} {v / 1000:.1f} s" for k, v in sorted(progress.durationMs.items(), key=lambda kv: -kv[1])
                           if k != "triggerExecution" and v >= 100)
        log.info("stateful query batch %d done: %d rows in %.1f s (%s)", progress.batchId, progress.numInputRows,
                 progress.durationMs.get("triggerExecution", 0) / 1000, phases)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


WRITER_FILE = "zkledger-writer"


def checkpoint_writer(checkpoint: str | Path) -> str:
    """The app-transaction id of a checkpoint's commits, kept beside its offsets: a new checkpoint numbers its
    batches from 0 again, and Delta remembers every writer's last batch, so each checkpoint writes as its own."""
    path = Path(checkpoint) / WRITER_FILE
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = f"{STATEFUL_WRITER}-{uuid.uuid4().hex[:12]}"
    path.write_text(writer)
    return writer


def stateful_checkpoint(checkpoint_root: str | None, lake_root: str) -> str:
    """The stateful query's checkpoint folder: under ``[streaming] checkpoint_root``, else the lake's."""
    return os.path.join(checkpoint_root or os.path.join(lake_root, "_checkpoints"), "stateful")


ALL_FILES = 2**31 - 1
"""``maxFilesPerTrigger`` for no cap (Delta's default is 1,000 files)."""


def stateful_rebuild(spark: SparkSession, lake: Lake, checkpoint: str | Path, *, buckets: int = DEFAULT_BUCKETS,
                     kafka_version: str = DEFAULT_KAFKA_VERSION, max_files_per_trigger: int = ALL_FILES,
                     max_bytes_per_trigger: str | None = None) -> dict[str, int]:
    """Every derived table from all bronze history: the query from a fresh ``checkpoint`` with ``availableNow``.

    The old checkpoint goes and every derived table is emptied first; a monitor on the same checkpoint then
    continues where the rebuild ended. Returns each derived table's row count. Uncapped (the default), the
    history is one micro-batch, so every logged decision is checked against every write ZooKeeper held, as the
    in-process rebuild does; the executors hold it, the driver does not. A cap splits it into micro-batches
    that continue from each other's state, and a decision then meets the writes of its batch and before.
    """
    shutil.rmtree(checkpoint, ignore_errors=True)
    writer = checkpoint_writer(checkpoint)
    for spec in DERIVED:
        if lake.exists(spec.name):
            lake.overwrite(spec.name, spark_arrow_schema(spec).empty_table(), writer_id=f"{writer}-reset", batch_seq=0)
    query = start_stateful_query(spark, lake, checkpoint, buckets=buckets, kafka_version=kafka_version,
                                 available_now=True, max_files_per_trigger=max_files_per_trigger,
                                 max_bytes_per_trigger=max_bytes_per_trigger)
    query.awaitTermination()
    return {spec.name: lake.row_count(spec.name) if lake.exists(spec.name) else 0 for spec in DERIVED}
