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
2. ``groupBy(cluster, bucket).transformWithStateInPandas`` with ``engine.key_processor.PipelineProcessor``:
   Python runs once per key per micro-batch (``engine.key_steps``) with the vectorised kernels inside. A bucket
   folds its keys (``pipelines.bucket_fold.bucket_step``: both state machines, the state writes' and
   transitions' checks, the decisions' checks against the writes ZooKeeper held); the cluster's stage does the
   cluster-wide work
   (``pipelines.cluster_stage.cluster_step``: timeline, controller terms, resignations, gaps). Each key's
   state is one value in Spark's state store (RocksDB), checkpointed by Spark with the stream's offsets.
   Out: per (key, output table), the file the key wrote (its state; appended rows that fill a file) or its rows
   packed (``engine.stateful_sink.key_outputs``);
3. the sink (``engine.stateful_sink.StatefulSink``, ``foreachBatch``): one Spark job in which the executors
   gather the packed rows of each appended table into one data file per task and the driver commits every
   file through delta-rs, each
   commit under the app transaction ``(writer, batch id)``: the new anomalies first, the appended tables side
   by side, the state tables by replacing the changed keys' files, ``partition_state`` last.

``start_stateful_query`` starts it over a lake: ``available_now`` for a rebuild from a fresh checkpoint, a
processing-time trigger for a monitor.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.query import StreamingQuery

from engine.key_placement import place
from engine.key_processor import PipelineProcessor
from engine.key_steps import PACKED_IN
from engine.query_events import JsonQueryListener
from engine.stateful_sink import (
    DERIVED,
    WRITTEN,
    StatefulSink,
)
from engine.upkeep import MaintenanceSchedule
from lakehouse.files import StagedFiles
from lakehouse.spark_io import stream_table
from models.events import KraftRecordSource
from models.states import DEFAULT_KAFKA_VERSION
from models.tables import (
    CONTROLLER_DECISIONS,
    KRAFT_RECORDS,
    ZNODE_EVENTS,
)
from models.znode_codec import PATH_PATTERNS, PathKind
from pipelines.bucket_fold import (
    BUCKET_COLUMN,
    BucketLayout,
    Buckets,
    BucketState,
    ipc_bytes,
)
from pipelines.cluster_stage import ClusterState, StreamPart
from pipelines.detectors import DEFAULT_OFFLINE_BLIP
from pipelines.keyed_pipeline import (
    by_key,
    route_decision_rows,
    route_kraft_records,
    route_znode_rows,
)
from pipelines.kraft_stage import rewritten_offsets
from pipelines.parallel import arrow_memory_pool, release_free_memory
from services.errors import UserError

if TYPE_CHECKING:
    from lakehouse import Lake

log = logging.getLogger(__name__)

STATEFUL_WRITER = "stateful-query"
"""The app-transaction id of the query's Delta commits (one writer; batch ids are its versions)."""
DEFAULT_BUCKETS = 32
"""The most key buckets a cluster gets (``BucketLayout``): fixed for a checkpoint's life (the state is keyed by
bucket)."""
BUCKET_PARTS = tuple(f.name for f in fields(BucketState))
CLUSTER_PARTS = tuple(f.name for f in fields(ClusterState))
"""The state's parts, each one value in Spark's state store (``engine.key_processor``)."""
_PACKED_IN_ARROW = to_arrow_schema(PACKED_IN)


def _packed(rows: pa.Table, part: StreamPart) -> pa.RecordBatch | None:
    """``rows`` (with ``cluster`` and ``bucket``) as one PACKED_IN row per (cluster, bucket)."""
    keys = list(by_key(rows))
    if not keys:
        return None
    return pa.RecordBatch.from_arrays([pa.array([c for c, _, _ in keys], pa.string()),
                                       pa.array([b for _, b, _ in keys], pa.int32()),
                                       pa.array([str(part)] * len(keys), pa.string()),
                                       pa.array([ipc_bytes(body) for _, _, body in keys], pa.binary())],
                                      schema=_PACKED_IN_ARROW)


ROUTE_CHUNK_ROWS = 250_000
"""Bronze rows a task routes at a time: a task's memory follows this, not the size of its files (routing is
row-local, so a chunk routes as a task of its own would; copies of one change in two chunks meet in their key)."""
ROUTE_ARROW_POOL = "mimalloc"
"""The Arrow memory pool of the route's tasks. Its kernels make and drop a chunk's buffers (megabytes each) chunk
after chunk: mimalloc keeps the pages and reuses them, in the worker's next route task too, where the C library
(``WORKER_ARROW_POOL``, which the operator's steps run faster on) maps and faults them in afresh; those kept pages
are the memory it costs (``benchmarks.driver_memory``). ``ROUTE_ARROW_POOL_ENV`` in a worker's environment
overrides it (``benchmarks.route_pool``)."""
ROUTE_ARROW_POOL_ENV = "ZKLEDGER_ROUTE_ARROW_POOL"


class _Route:
    """``mapInArrow`` on a bronze table: the task's rows routed by ``route`` (``keyed_pipeline.route_znode_rows``
    or ``route_decision_rows``) in chunks of ``ROUTE_CHUNK_ROWS``, packed per key and part, on the Arrow pool
    ``ROUTE_ARROW_POOL``."""

    def __init__(self, route: Callable[[pa.Table, Buckets], list[tuple[StreamPart, pa.Table]]], buckets: Buckets) -> None:
        self.route, self.buckets = route, buckets

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with arrow_memory_pool(os.environ.get(ROUTE_ARROW_POOL_ENV, ROUTE_ARROW_POOL)):
            yield from self._chunks(batches)

    def _chunks(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        chunk: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            chunk.append(batch)
            rows += batch.num_rows
            if rows >= ROUTE_CHUNK_ROWS:
                yield from self._routed(chunk)
                chunk, rows = [], 0
        if chunk:
            yield from self._routed(chunk)

    def _routed(self, chunk: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for part, rows in self.route(pa.Table.from_batches(chunk), self.buckets):
            packed = _packed(rows, part)
            if packed is not None:
                yield packed
        release_free_memory()


def stateful_stream(bronze: DataFrame, decisions: DataFrame, kraft: DataFrame | None = None,
                    buckets: Buckets = DEFAULT_BUCKETS,
                    kafka_version: str = DEFAULT_KAFKA_VERSION,
                    offline_blip: timedelta = DEFAULT_OFFLINE_BLIP,
                    zookeeper_clusters: frozenset[str] = frozenset(), lake_root: str | None = None,
                    rewritten: pa.Table | None = None) -> DataFrame:
    """Every derived table's rows of the bronze streams as ``WRITTEN`` records: packed, or, with ``lake_root``, the files
    the operator wrote there (``StatefulSink`` commits them).
    ``zookeeper_clusters``: the clusters with a ZooKeeper history, whose KRaft records are not folded
    (``pipelines.kraft_stage.route_kraft_rows``); ``buckets``: every cluster's bucket count, or a layout;
    ``rewritten``: the KRaft offsets Raft rewrote, as the lake held them at the start (``kraft_rewrites``)."""
    routed = bronze.mapInArrow(_Route(route_znode_rows, buckets), PACKED_IN).unionByName(
        decisions.mapInArrow(_Route(route_decision_rows, buckets), PACKED_IN))
    if kraft is not None:
        route = functools.partial(route_kraft_records, zookeeper_clusters=zookeeper_clusters, rewritten=rewritten)
        routed = routed.unionByName(kraft.mapInArrow(_Route(route, buckets), PACKED_IN))
    return routed.groupBy("cluster", BUCKET_COLUMN).transformWithStateInPandas(
        statefulProcessor=PipelineProcessor(kafka_version, offline_blip, lake_root, BUCKET_PARTS, CLUSTER_PARTS),
        outputStructType=WRITTEN,
        outputMode="Append",
        timeMode="None")


def start_stateful_query(spark: SparkSession, lake: Lake, checkpoint: str | Path, *, buckets: int = DEFAULT_BUCKETS,
                         kafka_version: str = DEFAULT_KAFKA_VERSION, writer_id: str | None = None,
                         available_now: bool = False, processing_time: str | None = None,
                         max_files_per_trigger: int | None = None, max_bytes_per_trigger: str | None = None,
                         publish: Callable[[list[dict[str, Any]]], object] | None = None, quality: bool = False,
                         maintain_every_s: float = 0.0, offline_blip: timedelta = DEFAULT_OFFLINE_BLIP,
                         table_commit_s: float = 0.0) -> StreamingQuery:
    """Start the pipeline over ``lake``'s bronze streams, writing every derived table.

    ``available_now``: every bronze commit present at start, then stop (a rebuild from a fresh checkpoint);
    else ``processing_time`` (e.g. ``"1 second"``) for a monitor. ``buckets``: the most buckets a cluster gets
    on a new checkpoint (``checkpoint_buckets``; an existing one keeps its own).
    ``max_files_per_trigger``/``max_bytes_per_trigger`` cap a micro-batch (Delta's admission
    control). ``writer_id``: default the checkpoint's own (``checkpoint_writer``). ``publish``: called on
    the driver with each batch's new anomalies once they are committed. ``quality``: the quality suites on
    each batch's new rows; ``maintain_every_s``: the lake's maintenance between batches this often (0: never);
    ``offline_blip``: settings ``pipeline.offline_blip_ms`` (an OFFLINE_PARTITION that ends within it is a blip);
    ``table_commit_s``: commit every table but the anomalies this often rather than in each micro-batch (0: in
    each), which ``finish_stateful_query`` completes once the query has stopped.
    """
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    layout = checkpoint_buckets(lake, checkpoint, buckets, int(spark.conf.get("spark.sql.shuffle.partitions") or 0))
    if writer_id is None and not (Path(checkpoint) / WRITER_FILE).exists():
        foreign = [spec.name for spec in DERIVED if lake.exists(spec.name) and lake.row_count(spec.name)]
        if foreign:  # a fresh query would write every event of the history next to them again
            raise UserError(f"the derived tables ({', '.join(foreign)}) hold rows this checkpoint did not write: "
                            f"run `zkledger rebuild` (it starts the monitor's checkpoint at {checkpoint} afresh)")
    writer_id = writer_id or checkpoint_writer(checkpoint)
    if available_now == (processing_time is not None):
        raise ValueError("give available_now or processing_time, one of them")
    bronze, decisions = (stream_table(spark, lake, t.name, max_files_per_trigger=max_files_per_trigger,
                                      max_bytes_per_trigger=max_bytes_per_trigger)
                         for t in (ZNODE_EVENTS, CONTROLLER_DECISIONS))
    kraft = (stream_table(spark, lake, KRAFT_RECORDS.name, max_files_per_trigger=max_files_per_trigger,
                          max_bytes_per_trigger=max_bytes_per_trigger)
             if reads_kraft(lake, checkpoint) else None)
    sink = StatefulSink(lake, writer_id, publish, quality, MaintenanceSchedule(lake, str(checkpoint), maintain_every_s),
                        StagedFiles(checkpoint), table_commit_s)
    zookeeper_clusters = lake.clusters(ZNODE_EVENTS.name) if kraft is not None else frozenset()
    writer = (stateful_stream(bronze, decisions, kraft, layout, kafka_version, offline_blip, zookeeper_clusters,
                              lake.root, kraft_rewrites(lake) if kraft is not None else None).writeStream
              .option("checkpointLocation", str(checkpoint)).foreachBatch(sink))
    writer = writer.trigger(availableNow=True) if processing_time is None else writer.trigger(processingTime=processing_time)
    query = writer.start()
    _SINKS[str(query.id)] = sink
    if id(spark) not in _LOGGED_SESSIONS:  # one listener per session logs every query
        spark.streams.addListener(ProgressLog())
        _LOGGED_SESSIONS.add(id(spark))
    return query


_LOGGED_SESSIONS: set[int] = set()
_SINKS: dict[str, StatefulSink] = {}


def finish_stateful_query(query: StreamingQuery) -> None:
    """After the query has stopped: commit what its sink has staged (``table_commit_s``)."""
    sink = _SINKS.pop(str(query.id), None)
    if sink is not None:
        sink.close()


SPAWN_TIMED_OUT = "Python worker failed to connect back"
"""Spark gives a Python process it starts on the driver a fixed 10 s to connect back. The stateful operator
starts one in the first micro-batch of each run of the query (the processor's state schema); a loaded machine
can miss the window, and the run ends before it has read or written anything."""
SPAWN_ATTEMPTS = 3


def run_stateful_query(start: Callable[[], StreamingQuery],
                       wait: Callable[[StreamingQuery], object] = StreamingQuery.awaitTermination) -> StreamingQuery:
    """``start`` the query and ``wait`` on it; a run that ended with ``SPAWN_TIMED_OUT`` before its first
    micro-batch starts again from its checkpoint, as a restart after a crash would (at most ``SPAWN_ATTEMPTS``
    runs). Returns the last run's query; any other failure is raised."""
    from pyspark.errors import StreamingQueryException

    attempt = 1
    while True:
        query = start()
        try:
            wait(query)
            return query
        except StreamingQueryException as exc:
            if attempt == SPAWN_ATTEMPTS or SPAWN_TIMED_OUT not in str(exc) or query.recentProgress:
                raise
            finish_stateful_query(query)
            log.warning("the query's first micro-batch timed out starting a Python process on the driver; "
                        "starting it again from its checkpoint (%d of %d)", attempt + 1, SPAWN_ATTEMPTS)
            attempt += 1


class ProgressLog(JsonQueryListener):
    """Each micro-batch as one INFO line: rows in, and where its time went (Spark's own phases)."""

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        phases = ", ".join(f"{k} {v / 1000:.1f} s" for k, v in sorted(progress.durationMs.items(), key=lambda kv: -kv[1])
                           if k != "triggerExecution" and v >= 100)
        log.info("stateful query batch %d done: %d rows in %.1f s (%s)", progress.batchId, progress.numInputRows,
                 progress.durationMs.get("triggerExecution", 0) / 1000, phases)


WRITER_FILE = "zkledger-writer"
SOURCES_FILE = "zkledger-sources"
"""Beside a checkpoint's offsets: the bronze tables its query reads (a query's sources are fixed for its life)."""


def reads_kraft(lake: Lake, checkpoint: str | Path) -> bool:
    """Whether the query on ``checkpoint`` reads ``kraft_records``: decided when the checkpoint is new (when the
    lake has KRaft records), kept after, so a ZooKeeper-only lake's query reads two streams."""
    path = Path(checkpoint) / SOURCES_FILE
    if path.exists():
        reads = KRAFT_RECORDS.name in path.read_text().split()
        if not reads and lake.exists(KRAFT_RECORDS.name) and lake.row_count(KRAFT_RECORDS.name):
            log.warning("%s has KRaft records this checkpoint's query does not read: run `zkledger rebuild`",
                        KRAFT_RECORDS.name)
        return reads
    reads = lake.exists(KRAFT_RECORDS.name) and lake.row_count(KRAFT_RECORDS.name) > 0
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [ZNODE_EVENTS.name, CONTROLLER_DECISIONS.name, *([KRAFT_RECORDS.name] if reads else [])]
    path.write_text("\n".join(names) + "\n")
    return reads


BUCKETS_FILE = "zkledger-buckets"
"""Beside a checkpoint's offsets: its ``BucketLayout`` (the state is keyed by bucket, so it is fixed for its life)."""


def kraft_rewrites(lake: Lake) -> pa.Table:
    """``pipelines.kraft_stage.rewritten_offsets`` of the lake's whole ``kraft_records``: a record Raft truncated is
    then dropped even when a micro-batch before its replacement's reads it (a rebuild folds the log as it stands)."""
    segment = pc.field("source") == str(KraftRecordSource.SEGMENT)
    return rewritten_offsets(lake.scan(KRAFT_RECORDS.name, columns=["cluster", "offset", "leader_epoch", "source"],
                                       where=segment))


def checkpoint_buckets(lake: Lake, checkpoint: str | Path, buckets: int, state_partitions: int = 0) -> BucketLayout:
    """The bucket layout of the query on ``checkpoint``: kept beside its offsets; on a new checkpoint, each cluster
    of the lake sized by its partitions (at most ``buckets``), a cluster the lake does not hold yet ``buckets``,
    and, given the query's ``state_partitions``, each sized cluster's buckets keyed to spread evenly over them
    (``engine.key_placement``). A checkpoint begun before layouts were kept used ``buckets`` for every cluster."""
    path = Path(checkpoint) / BUCKETS_FILE
    if path.exists():
        kept = BucketLayout.from_json(json.loads(path.read_text()))
        if kept.default != buckets:
            log.info("the checkpoint at %s keeps its %d buckets per cluster (settings: %d)", checkpoint,
                     kept.default, buckets)
        return kept
    offsets = Path(checkpoint) / "offsets"
    begun = offsets.is_dir() and any(offsets.iterdir())  # a batch ran: its state is keyed by some layout
    layout = BucketLayout(buckets) if begun else BucketLayout.sized(buckets, cluster_partitions(lake))
    if state_partitions > 0 and not begun:
        layout = place(layout, state_partitions)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(layout.to_json()))
    tmp.replace(path)
    return layout


def cluster_partitions(lake: Lake) -> dict[str, int]:
    """Each cluster's partitions in bronze ``znode_events``: its distinct partition-state znodes (read a batch
    at a time: only each batch's distinct paths are held)."""
    if not lake.exists(ZNODE_EVENTS.name):
        return {}
    def distinct(tables: list[pa.Table]) -> pa.Table:
        return pa.concat_tables(tables).group_by(["cluster", "path"], use_threads=False).aggregate([])

    held: list[pa.Table] = []
    rows_held = known = 0
    for batch in lake.scan_batches(ZNODE_EVENTS.name, ["cluster", "path"]):
        rows = pa.Table.from_batches([batch])
        rows = rows.filter(pc.fill_null(pc.ends_with(rows["path"], _STATE_SUFFIX), False))  # cheap, then exact
        held.append(rows.select(["cluster", "path"]))
        rows_held += rows.num_rows
        if rows_held > 2 * known + _DISTINCT_EVERY_ROWS:  # memory follows the distinct znodes, not the history
            held = [distinct(held)]
            rows_held = known = held[0].num_rows
    if not held:
        return {}
    paths = distinct(held)
    paths = paths.filter(pc.match_substring_regex(paths["path"], _STATE_PATH))
    counts = paths.group_by("cluster").aggregate([("path", "count")])
    del held, paths
    pa.default_memory_pool().release_unused()  # the driver holds no more of the scan while the query runs
    return dict(zip(counts["cluster"].to_pylist(), counts["path_count"].to_pylist(), strict=True))


_STATE_PATH = PATH_PATTERNS[PathKind.PARTITION_STATE].removeprefix("^")  # a chroot may precede it
_STATE_SUFFIX = "/state"
_DISTINCT_EVERY_ROWS = 250_000


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
