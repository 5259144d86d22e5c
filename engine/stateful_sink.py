"""The stateful query's sink: a micro-batch's outputs into the lake, written by the executors, committed once.

Per micro-batch (``foreachBatch``), one Spark job. The operator has written a key's state as a file of its own
and a key's appended rows that fill a file (``key_outputs``, ``lakehouse.files``), where they were made: those
rows never cross the JVM again. Its other outputs come packed (one row per key and output table) to
``_WriteOutputs`` on the executors, which gathers a task's rows of each appended table into one file. Only the
files' add-action fields reach the driver, and the anomalies' rows themselves (few, and two keys can find the
same one). The driver then commits through delta-rs, each commit under the
app transaction ``(writer, batch id)``:

1. the new anomalies, alone and first: one row per id (the lowest-zxid finding), less the ids already
   committed, which the sink keeps in memory (read once at its first batch); then published;
2. the appended tables' files, side by side;
3. the state tables by replacement, not MERGE: a key (a bucket, or a cluster's stage for
   ``controller_tenure``) that changed writes its whole state as one file named after the key, and the commit
   removes that key's older file. No table is scanned or joined;
4. ``partition_state`` last and always (with no file when nothing changed): its commit marks the batch done,
   so a replayed batch that finds it runs the operator (Spark wants its state stores committed) and writes
   nothing (``WRITE_PROPERTY`` tells the operator).

A running monitor (``table_commit_s`` > 0) commits only the anomalies in its micro-batches. The other tables'
files of each batch go to ``StagedFiles`` beside the query's checkpoint (its entry marks the batch done), and a
thread of the sink commits every staged batch at once, steps 2-4 as above under the newest batch's id, every
``table_commit_s`` seconds and when the query ends (``StatefulSink.close``); a state table takes each key's
newest file. A query started on a checkpoint with staged batches commits them first.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from engine.upkeep import QUALITY_EACH_BATCH_TABLES, MaintenanceSchedule, check_batch_rows
from lakehouse.arrow_schema import arrow_schema
from lakehouse.files import DataFile, Staged, StagedFiles, cluster_tag, write_data_file
from lakehouse.lake import Lake, crash_point
from lakehouse.spark_schema import spark_arrow_schema, spark_schema
from models.tables import (
    ANOMALIES,
    DECODE_QUARANTINE,
    DERIVED_TABLES,
    KEYED_STATE_TABLES,
    KRAFT_METADATA_EVENTS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_TRANSITIONS,
    RETIRED_TABLES,
    TableSpec,
)
from pipelines.bucket_fold import BUCKET_COLUMN, ipc_bytes, ipc_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

TABLE_COLUMN, PACKED_COLUMN = "table", "packed"
COMMITTED = "committed_"
"""Crash hook stage after a table's commit: ``ZKLEDGER_LAKE_CRASH=committed_<table>:<batch>`` (tests)."""
APPENDED: tuple[TableSpec, ...] = (KRAFT_METADATA_EVENTS, DECODE_QUARANTINE, PARTITION_TRANSITIONS,
                                  REPLICA_TRANSITIONS)
REPLACED: tuple[TableSpec, ...] = KEYED_STATE_TABLES
"""Tables a key writes whole (its state): its new file replaces its old one. ``partition_state`` last."""
assert REPLACED[-1] is PARTITION_STATE  # the batch's done-marker is committed last
WRITTEN = T.StructType([
    T.StructField(TABLE_COLUMN, T.StringType()), T.StructField("cluster", T.StringType()),
    T.StructField(BUCKET_COLUMN, T.IntegerType()), T.StructField("path", T.StringType()),
    T.StructField("size", T.LongType()), T.StructField("rows", T.LongType()), T.StructField("stats", T.StringType()),
    T.StructField("modified_ms", T.LongType()), T.StructField(PACKED_COLUMN, T.BinaryType())])
"""The operator's output and what the executors send back: a written file's add-action fields, or packed rows
(the operator's: anomalies and small appended outputs; the sink's writer's: the anomalies)."""
WRITTEN_ARROW = pa.schema([pa.field(f.name, t) for f, t in zip(WRITTEN.fields, (
    pa.string(), pa.string(), pa.int32(), pa.string(), pa.int64(), pa.int64(), pa.string(), pa.int64(), pa.binary()),
    strict=True)])
_REPLACED_NAMES = frozenset(spec.name for spec in REPLACED)
DERIVED = DERIVED_TABLES


def reset_derived(lake: Lake, writer_id: str) -> None:
    """Empty every derived table that exists (a rebuild starts over), once per writer; a table an older release
    wrote takes today's schema (new columns) in the same commit, and one it stored that is no longer stored
    (``RETIRED_TABLES``) is removed."""
    for spec in DERIVED:
        if lake.exists(spec.name):
            lake.overwrite(spec.name, arrow_schema(spec).empty_table(), writer_id=f"{writer_id}-reset", batch_seq=0,
                           new_schema=True)
    for name in RETIRED_TABLES:
        folder = Path(lake.root) / name
        if (folder / "_delta_log").is_dir():
            shutil.rmtree(folder)
            log.info("removed %s, which an older release stored (today a view)", name)


def derived_counts(lake: Lake) -> dict[str, int]:
    """Each derived table's row count (0 for a table not there)."""
    return {spec.name: lake.row_count(spec.name) if lake.exists(spec.name) else 0 for spec in DERIVED}


APPEND_FILE_ROWS = 500_000
"""Rows of one appended table a task gathers into one file: a task writes a file per appended table, not one per
key (a fleet's micro-batch would leave hundreds of tiny files per table), and its memory stays bounded."""
KEY_FILE_ROWS = 10_000
"""Rows of one appended table that a key writes as a file of its own, from the operator: a file of this size is
not a small one, and its rows skip the hop through the JVM to the sink's writer."""
WRITE_PROPERTY = "zkledger.sink.write"
"""The Spark local property by which the sink tells the operator whether this job's outputs are wanted: "false"
for a batch already committed (Spark replays the operator; files written then would never be committed)."""


def key_outputs(lake_root: str, cluster: str, bucket: int, tables: Iterable[tuple[str, pa.Table]]) -> list[
        dict[str, Any]]:
    """One key's output tables as ``WRITTEN`` records, where the key's step ran: a state table's rows, and an
    appended table's rows of at least KEY_FILE_ROWS, written as files now (only the add action's fields go on);
    the anomalies and fewer appended rows packed, for ``output_files`` to gather per task."""
    lake = Lake(lake_root, cluster)
    records: list[dict[str, Any]] = []
    for table, rows in tables:
        if table != ANOMALIES.name and (table in _REPLACED_NAMES or rows.num_rows >= KEY_FILE_ROWS):
            keyed = (cluster, bucket) if table in _REPLACED_NAMES else None
            records.append(_file_record(lake_root, table, lake.conform(table, rows), cluster, bucket, keyed))
        else:
            records.extend(packed_records([(table, cluster, bucket, rows)]))
    return records


def _file_record(lake_root: str, table: str, rows: pa.Table, cluster: str | None, bucket: int | None,
                 key: tuple[str, int] | None) -> dict[str, Any]:
    f = write_data_file(os.path.join(lake_root, table), table, rows, key)
    return {TABLE_COLUMN: table, "cluster": cluster, BUCKET_COLUMN: bucket, "path": f.path, "size": f.size,
            "rows": f.rows, "stats": f.stats, "modified_ms": f.modified_ms}


def output_files(lake_root: str, records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One task's ``WRITTEN`` records with every packed table written: a record of a written file and the
    anomalies (few, and two keys can find one) as they are; a state table's rows as a file named after their
    key, which replaces that key's older file when committed; the appended tables' rows of every key gathered
    into files of up to APPEND_FILE_ROWS rows."""
    out: list[dict[str, Any]] = []
    gathered: dict[str, list[pa.Table]] = {}
    lakes: dict[str, Lake] = {}  # conform fills a missing cluster column from its lake's

    def flush(table: str) -> None:
        out.append(_file_record(lake_root, table, pa.concat_tables(gathered.pop(table)), None, None, None))

    for record in records:
        table, cluster, bucket = record[TABLE_COLUMN], record["cluster"], record[BUCKET_COLUMN]
        if table == ANOMALIES.name or record.get("path") is not None:
            out.append(record)
            continue
        lake = lakes.get(cluster) or lakes.setdefault(cluster, Lake(lake_root, cluster))
        rows = lake.conform(table, ipc_table(record[PACKED_COLUMN]))
        if table in _REPLACED_NAMES:
            out.append(_file_record(lake_root, table, rows, cluster, bucket, (cluster, bucket)))
            continue
        gathered.setdefault(table, []).append(rows)
        if sum(t.num_rows for t in gathered[table]) >= APPEND_FILE_ROWS:
            flush(table)
    for table in list(gathered):
        flush(table)
    return out


def packed_records(outputs: Iterable[tuple[str, str, int, pa.Table]]) -> list[dict[str, Any]]:
    """(table, cluster, bucket, rows) as packed ``WRITTEN`` records, nothing written yet."""
    return [{TABLE_COLUMN: table, "cluster": cluster, BUCKET_COLUMN: bucket, PACKED_COLUMN: ipc_bytes(rows)}
            for table, cluster, bucket, rows in outputs]


def output_records(records: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(records, schema=WRITTEN_ARROW)


class _WriteOutputs:
    """``mapInArrow`` on the operator's ``WRITTEN`` records, on the executors: ``output_files``."""

    def __init__(self, lake_root: str) -> None:
        self.lake_root = lake_root

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = output_files(self.lake_root, (record for batch in batches for record in batch.to_pylist()))
        if out:
            yield from output_records(out).to_batches()


def one_per_id(found: pa.Table) -> pa.Table:
    """One row per anomaly id: two keys can find one (a split brain's pair), kept at its lowest-zxid finding
    (then its lowest last evidence id)."""
    if found.num_rows == 0:
        return found
    ranked = found.append_column("_z", pc.fill_null(found["zxid"], np.iinfo(np.int64).max)).append_column(
        "_e", pc.fill_null(_last_items(found["evidence"]), "\U0010ffff"))
    ranked = found.take(pc.sort_indices(ranked, [("anomaly_id", "ascending"), ("_z", "ascending"),
                                                 ("_e", "ascending")]))
    ids = ranked["anomaly_id"].to_numpy(zero_copy_only=False)
    return ranked.filter(pa.array(np.r_[True, ids[1:] != ids[:-1]]))


def _last_items(lists: pa.ChunkedArray) -> pa.Array:
    """Each list's last item (null for an empty or null list)."""
    arr = lists.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    ends = arr.offsets.to_numpy()[1:] - 1
    empty = lengths == 0
    return arr.values.take(pa.array(np.where(empty, 0, ends), mask=empty)) if len(arr.values) else pa.nulls(
        len(arr), arr.type.value_type)


STAGED = "staged"
"""Crash hook stage after a batch's files are staged: ``ZKLEDGER_LAKE_CRASH=staged:<batch>`` (tests)."""
_SPECS = {spec.name: spec for spec in DERIVED}


def newest_per_key(batches: Sequence[tuple[int, Staged]]) -> tuple[Staged, list[DataFile]]:
    """Several batches' files as one commit's: every appended file, and of a state table each key's newest file
    (the others, never committed, are returned to delete)."""
    appended: Staged = []
    newest: dict[tuple[str, tuple[str, int]], tuple[TableSpec, tuple[str, int], DataFile]] = {}
    superseded: list[DataFile] = []
    for _, files in sorted(batches, key=lambda b: b[0]):
        for spec, key, f in files:
            if key is None:
                appended.append((spec, key, f))
                continue
            older = newest.get((spec.name, key))
            if older is not None:
                superseded.append(older[2])
            newest[(spec.name, key)] = (spec, key, f)
    return appended + list(newest.values()), superseded


class StatefulSink:
    """``foreachBatch`` sink of the stateful query: a micro-batch's tables into the lake, each once per batch
    id (see the module's docstring for the order)."""

    def __init__(self, lake: Lake, writer_id: str, publish: Callable[[list[dict[str, Any]]], object] | None = None,
                 quality: bool = False, maintenance: MaintenanceSchedule | None = None,
                 staged: StagedFiles | None = None, table_commit_s: float = 0.0) -> None:
        self.lake, self.writer_id, self.publish = lake, writer_id, publish
        self.quality, self.maintenance = quality, maintenance
        self._known: set[str] | None = None  # committed anomaly ids, read at the first batch
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="stateful-sink")
        self.staged, self.table_commit_s = staged, table_commit_s
        self._committing = threading.Lock()  # one commit of the staged batches at a time
        self._closed = threading.Event()
        self._committer: threading.Thread | None = None
        if staged is not None:
            self.commit_staged()  # a killed monitor's batches first: they are done, and older than any to come
            if table_commit_s > 0:
                self._committer = threading.Thread(target=self._commit_staged_every, name="stateful-sink-committer",
                                                   daemon=True)
                self._committer.start()

    def _commit_staged_every(self) -> None:
        while not self._closed.wait(self.table_commit_s):
            try:
                self.commit_staged()
            except Exception:  # the batches stay staged; the next turn tries again
                log.exception("committing the staged batches failed; they stay staged")

    def close(self) -> None:
        """Stop committing staged batches periodically, then commit what is staged (the query has ended)."""
        self._closed.set()
        if self._committer is not None:
            self._committer.join()
        self.commit_staged()
        self._pool.shutdown()

    def commit_staged(self) -> int:
        """Commit every staged batch as one commit per table, under the newest batch's id; returns how many."""
        if self.staged is None:
            return 0
        with self._committing:
            batches = self.staged.batches()
            if not batches:
                return 0
            files, superseded = newest_per_key(batches)
            newest = batches[-1][0]
            self._commit_tables(files, newest)
            for f in superseded:  # never committed, so never read
                Path(self.lake.table_path(f.table), f.path).unlink(missing_ok=True)
            self.staged.remove(b for b, _ in batches)
            log.info("stateful query: committed staged batches %d-%d (%d files)", batches[0][0], newest, len(files))
            return len(batches)

    def __call__(self, records: DataFrame, batch_id: int) -> None:
        began = step = time.monotonic()
        spent: dict[str, float] = {}

        def lap(what: str) -> None:
            nonlocal step
            spent[what], step = time.monotonic() - step, time.monotonic()

        spark = records.sparkSession
        last = self.lake.last_batch_seq(PARTITION_STATE.name, self.writer_id)
        staged = self.staged is not None and self.staged.holds(batch_id)
        if staged or (last is not None and last >= batch_id):  # the batch is done: a replay writes nothing
            # the operator still runs: Spark requires every state store partition to commit each batch
            spark.sparkContext.setLocalProperty(WRITE_PROPERTY, "false")
            records.write.format("noop").mode("overwrite").save()
            log.info("stateful query batch %d: already committed, nothing written", batch_id)
            return
        self.ensure_tables()
        spark.sparkContext.setLocalProperty(WRITE_PROPERTY, "true")
        # the one job: the operator runs, the executors write the files, the driver gets their fields
        got = records.mapInArrow(_WriteOutputs(self.lake.root), WRITTEN).toArrow()
        lap("query and files")
        files, new = self.commit(got, batch_id)
        lap("commits")
        if self.quality:
            self._check(spark, files, new, batch_id)
            lap("quality")
        log.info("stateful query batch %d: %.1f s (%s)", batch_id, time.monotonic() - began,
                 ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()))
        if self.maintenance is not None:
            self.maintenance.after_batch()

    def ensure_tables(self) -> None:
        """Create the derived tables that do not exist yet (before any file is written into their folders)."""
        for spec in DERIVED:
            self.lake.ensure(spec.name)

    def commit(self, got: pa.Table, batch_id: int) -> tuple[dict[str, list[tuple[tuple[str, int] | None, DataFile]]],
                                                            pa.Table]:
        """Commit a batch's outputs (``output_records``) in the sink's order, or with ``table_commit_s`` its
        anomalies and stage the rest; returns its files by table and its new anomalies."""
        new = self._commit_anomalies(got, batch_id)
        files = self._files(got)
        listed: Staged = [(_SPECS[table], key, f) for table, keyed in files.items() for key, f in keyed]
        if self.staged is not None and self.table_commit_s > 0:
            self.staged.add(batch_id, listed)
            crash_point(STAGED, batch_id)
        else:
            self._commit_tables(listed, batch_id)
        return files, new

    def _commit_tables(self, files: Staged, batch_id: int) -> None:
        """Every table but the anomalies: the appended tables side by side, then the state tables,
        ``partition_state`` last and always (it marks the batch done)."""
        by_table: dict[str, list[tuple[tuple[str, int] | None, DataFile]]] = {}
        for spec, key, f in files:
            by_table.setdefault(spec.name, []).append((key, f))
        others = [spec for spec in (*APPENDED, *REPLACED[:-1]) if by_table.get(spec.name)]
        for done in [self._pool.submit(self._commit, spec, by_table[spec.name], batch_id) for spec in others]:
            done.result()
        self._commit(PARTITION_STATE, by_table.get(PARTITION_STATE.name, []), batch_id)

    def _files(self, got: pa.Table) -> dict[str, list[tuple[tuple[str, int] | None, DataFile]]]:
        files: dict[str, list[tuple[tuple[str, int] | None, DataFile]]] = {}
        written = got.filter(pc.is_valid(got["path"]))
        for row in written.to_pylist():
            table = row[TABLE_COLUMN]
            key = (cluster_tag(row["cluster"]), row[BUCKET_COLUMN]) if table in _REPLACED_NAMES else None
            files.setdefault(table, []).append((key, DataFile(table, row["path"], row["size"], row["rows"],
                                                              row["stats"], row["modified_ms"])))
        return files

    def _commit(self, spec: TableSpec, files: list[tuple[tuple[str, int] | None, DataFile]], batch_id: int) -> None:
        keys = {key for key, _ in files if key is not None}
        # a writer's first commit replaces what other writers left: its state starts from the whole history
        first = spec in REPLACED and self.lake.last_batch_seq(spec.name, self.writer_id) is None
        self.lake.commit_files(spec.name, [f for _, f in files], self.writer_id, batch_id, replace_keys=keys,
                               replace_all=first)
        crash_point(COMMITTED + spec.name, batch_id)

    def _commit_anomalies(self, got: pa.Table, batch_id: int) -> pa.Table:
        """Commit the batch's new anomalies (then publish them); returns them (the table's arrow schema)."""
        schema = spark_arrow_schema(ANOMALIES)
        blobs = got.filter(pc.equal(got[TABLE_COLUMN], ANOMALIES.name))[PACKED_COLUMN].to_pylist()
        found = pa.concat_tables([ipc_table(b).select(schema.names).cast(schema) for b in blobs]) if blobs else \
            schema.empty_table()
        if self._known is None:
            ids = self.lake.scan(ANOMALIES.name, columns=["anomaly_id"])["anomaly_id"] if self.lake.exists(
                ANOMALIES.name) else pa.array([], pa.string())
            self._known = set(ids.to_pylist())
        found = one_per_id(found)
        new = found.filter(pa.array([i not in self._known for i in found["anomaly_id"].to_pylist()], pa.bool_()))
        rows = self.lake.conform(ANOMALIES.name, new)
        if rows.num_rows == 0:
            return rows
        committed = self.lake.append(ANOMALIES.name, rows, self.writer_id, batch_id)
        crash_point(COMMITTED + ANOMALIES.name, batch_id)
        self._known.update(rows["anomaly_id"].to_pylist())
        if committed and self.publish is not None:
            self.publish(rows.to_pylist())
        return rows

    def _check(self, spark: SparkSession, files: dict[str, list[tuple[tuple[str, int] | None, DataFile]]],
               anomalies: pa.Table, batch_id: int) -> None:
        """The quality suites on the batch's new rows: read back from the files it just committed."""
        frames: dict[str, DataFrame] = {}
        for spec in QUALITY_EACH_BATCH_TABLES:
            if spec is ANOMALIES:
                if anomalies.num_rows:
                    frames[spec.name] = spark.createDataFrame(anomalies)
            elif files.get(spec.name):
                paths = [f"{self.lake.table_path(spec.name)}/{f.path}" for _, f in files[spec.name]]
                frames[spec.name] = spark.read.schema(spark_schema(spec, nullable=True)).parquet(*paths)
        check_batch_rows(spark, self.lake, frames, f"{self.writer_id}-quality", batch_id)
