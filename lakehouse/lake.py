"""The lake: one Delta table per models.tables spec, written and read with delta-rs (no JVM).

Spark reads, streams and writes the same tables through Delta's own connector (``lakehouse.spark_io``).

Idempotence: every commit carries a Delta app transaction ``(writer_id, batch_seq)``. delta-rs does not
reject a repeated ``(app_id, version)`` itself, so ``append``/``overwrite`` read
``transaction_version(writer_id)`` first and skip a batch that is already in the table. That check is
race-free because there is one writer per ``writer_id`` (architecture.md); writers with different ids
commit concurrently and delta-rs' conflict checker (plus a retry here) serialises them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from lakehouse.arrow_schema import arrow_schema, spec_for
from lakehouse.checksums import write_checksums
from lakehouse.files import ROW_GROUP_ROWS, DataFile, file_key

log = logging.getLogger(__name__)

STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"
"""The table property naming the columns both engines keep per-file statistics on (``TableSpec.stats_columns``)."""

Rows: TypeAlias = "Sequence[Mapping[str, Any]] | pa.Table"
WriteMode = Literal["append", "overwrite"]

USER_METADATA = "userMetadata"
"""The commit-info field where Delta's Spark connector keeps a writer's metadata (one JSON string here)."""

CRASH_ENV = "ZKLEDGER_LAKE_CRASH"
"""Test hook: ``<stage>:<batch_seq>`` (stage ``before_commit`` or ``after_commit``) makes the process
SIGKILL itself at that point of that batch, to prove restart idempotence with a real crash."""

_COMMIT_RETRIES = 8


def needs_delta_rs_scan(dt: DeltaTable) -> bool:
    """Whether the table's data files alone are not its rows (partition values, column mapping, deletion
    vectors or any other reader feature): then only delta-rs' own scan reads them right."""
    protocol = dt.protocol()
    features = set(protocol.reader_features or [])
    return bool(dt.metadata().partition_columns) or bool(features - {"timestampNtz"}) or (
        protocol.min_reader_version > 1 and not features
    )


@dataclass(frozen=True)
class FileSpan:
    """One data file of a table version and one int column's statistics in the Delta log."""

    path: str  # absolute
    rows: int
    nulls: int  # rows where the column is null
    low: int | None  # the column's min and max (None: the file has no non-null value)
    high: int | None


def crash_point(stage: str, batch_seq: int) -> None:
    """Kill this process (SIGKILL, no cleanup) if the crash hook asks for this stage and batch."""
    want = os.environ.get(CRASH_ENV)
    if want and want == f"{stage}:{batch_seq}":
        log.warning("crash hook %s: killing pid %d", want, os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)


_WRITER_PROPERTIES = WriterProperties(max_row_group_size=ROW_GROUP_ROWS, compression="SNAPPY")
"""delta-rs' own compression, in the row groups Spark splits a file's tasks at (``files.ROW_GROUP_ROWS``)."""


class Lake:
    """Delta tables under one root folder, for one Kafka cluster.

    Args:
        root: folder holding one sub-folder per table.
        cluster: value filled into the ``cluster`` column when a row does not carry one.
        checkpoint_interval: write a Delta checkpoint every this many versions, so reading a table
            that collectors append to in many small commits stays fast (0 disables).
    """

    def __init__(self, root: str | os.PathLike[str], cluster: str, *, checkpoint_interval: int = 50) -> None:
        self.root = str(Path(root).absolute())
        self.cluster = cluster
        self.checkpoint_interval = checkpoint_interval
        # newest-version handles, brought up to date per use (a monitor reads and writes every table each
        # micro-batch: replaying the log from the last checkpoint each time cost more than the batch's work),
        # with the version each was loaded at: a handle brought forward commit by commit keeps every one it
        # applied (its cost grows with uptime), so it is loaded afresh from the newest checkpoint now and then
        self._handles: dict[str, DeltaTable] = {}
        self._loaded_at: dict[str, int] = {}
        self._handle_locks: dict[str, threading.Lock] = {}
        self._handles_guard = threading.Lock()

    @property
    def _reload_after(self) -> int:
        """Commits a cached handle applies one by one before it is loaded afresh (from a checkpoint)."""
        return 2 * self.checkpoint_interval if self.checkpoint_interval > 0 else 200

    def __repr__(self) -> str:
        return f"Lake(root={self.root!r}, cluster={self.cluster!r})"

    # ----------------------------------------------------------------- paths and state
    def table_path(self, table: str) -> str:
        spec_for(table)  # unknown names fail here, not as a stray folder
        return os.path.join(self.root, table)

    def exists(self, table: str) -> bool:
        return DeltaTable.is_deltatable(self.table_path(table))

    def _load(self, table: str, version: int | None = None) -> DeltaTable:
        try:
            return DeltaTable(self.table_path(table), version=version)
        except TableNotFoundError:
            raise FileNotFoundError(f"table {table!r} does not exist under {self.root}") from None

    @contextmanager
    def _current(self, table: str) -> Iterator[DeltaTable]:
        """The table at its newest version, for one thread at a time: a cached handle that reads only the
        commits made since its last use."""
        with self._handles_guard:
            lock = self._handle_locks.setdefault(table, threading.Lock())
        with lock:
            dt = self._handles.get(table)
            if dt is not None:
                try:
                    dt.update_incremental()
                except Exception:  # the folder was replaced under us: load it afresh
                    dt = None
            if dt is not None and dt.version() - self._loaded_at[table] >= self._reload_after:
                dt = None
            if dt is None:
                dt = self._handles[table] = self._load(table)
                self._loaded_at[table] = dt.version()
            yield dt

    def version(self, table: str) -> int | None:
        """Current version of the table, None when it does not exist."""
        if not self.exists(table):
            return None
        with self._current(table) as dt:
            return dt.version()

    def last_batch_seq(self, table: str, writer_id: str) -> int | None:
        """The highest batch_seq committed by ``writer_id`` (None: never, or no table)."""
        if not self.exists(table):
            return None
        with self._current(table) as dt:
            return dt.transaction_version(writer_id)

    def history(self, table: str, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit infos, newest first (``version``, ``timestamp`` in ms, ``operation``...).

        A commit's metadata appears as top-level keys whichever engine wrote it: delta-rs stores it so,
        Delta's connector as one JSON ``userMetadata`` string, unpacked here.
        """
        commits = self._load(table).history(limit)
        for commit in commits:
            extra = commit.get(USER_METADATA)
            if isinstance(extra, str):
                try:
                    unpacked = json.loads(extra)
                except ValueError:
                    continue
                if isinstance(unpacked, dict):
                    commit.update({k: v for k, v in unpacked.items() if k not in commit})
        return commits

    def version_at(self, table: str, as_of: datetime) -> int:
        """The newest version committed at or before ``as_of`` (timezone-aware), by the commits' own
        timestamps (what ``history()`` shows, so a time read there selects that very version)."""
        if as_of.tzinfo is None:
            raise ValueError("as_of must be timezone-aware (UTC)")
        as_of_ms = as_of.timestamp() * 1000
        versions = [int(h["version"]) for h in self._load(table).history() if int(h["timestamp"]) <= as_of_ms]
        if not versions:
            raise ValueError(f"{table}: no version at or before {as_of.isoformat()}")
        return max(versions)

    # ----------------------------------------------------------------- create
    def ensure(self, table: str) -> None:
        """Create the empty table with its models.tables schema and statistics columns if it is missing."""
        path = self.table_path(table)
        if DeltaTable.is_deltatable(path):
            return
        os.makedirs(path, exist_ok=True)
        try:
            DeltaTable.create(path, arrow_schema(table), mode="ignore", name=table,
                              configuration={STATS_COLUMNS_PROPERTY: ",".join(spec_for(table).stats_columns)})
            write_checksums(path, 0)
            log.info("created table %s at %s", table, path)
        except DeltaError:
            # Another process created it between our check and our commit: that is fine.
            if not DeltaTable.is_deltatable(path):
                raise

    # ----------------------------------------------------------------- write
    def append(self, table: str, rows: Rows, writer_id: str, batch_seq: int,
               metadata: Mapping[str, str] | None = None) -> bool:
        """Append rows once per ``(writer_id, batch_seq)``; False when the batch was already committed.

        ``metadata`` goes into the commit's info (``history()``), e.g. which bronze versions a rebuild read.
        """
        return self._write(table, rows, writer_id, batch_seq, "append", metadata)

    def overwrite(self, table: str, rows: Rows, writer_id: str, batch_seq: int,
                  metadata: Mapping[str, str] | None = None, *, new_schema: bool = False) -> bool:
        """Replace the table's contents once per ``(writer_id, batch_seq)``; False when already done.
        ``new_schema``: the table takes the spec's schema too (a derived table written by an older release)."""
        return self._write(table, rows, writer_id, batch_seq, "overwrite", metadata, new_schema=new_schema)

    def _write(self, table: str, rows: Rows, writer_id: str, batch_seq: int, mode: WriteMode,
               metadata: Mapping[str, str] | None = None, *, new_schema: bool = False) -> bool:
        if batch_seq < 0:
            raise ValueError(f"batch_seq must be >= 0, got {batch_seq}")
        data = self.conform(table, rows)

        def write(dt: DeltaTable, properties: CommitProperties) -> None:
            write_deltalake(dt, data, mode=mode, commit_properties=properties,
                            schema_mode="overwrite" if new_schema else None,
                            writer_properties=_WRITER_PROPERTIES)

        done = self._commit_once(table, writer_id, batch_seq, write, metadata)
        if done:
            log.debug("%s: committed %d rows as %s/%d (%s)", table, data.num_rows, writer_id, batch_seq, mode)
        return done

    def commit_files(self, table: str, files: Sequence[DataFile], writer_id: str, batch_seq: int, *,
                     replace_keys: Collection[tuple[str, int]] = (), replace_all: bool = False,
                     metadata: Mapping[str, str] | None = None) -> bool:
        """Commit data files written by ``lakehouse.files.write_data_file`` as one transaction, once per
        ``(writer_id, batch_seq)``; False when the batch was already committed. The same commit removes the
        table's files keyed by one of ``replace_keys`` (``files.file_key``), or every file (``replace_all``).
        Files may be none: the commit then only records the batch."""
        if batch_seq < 0:
            raise ValueError(f"batch_seq must be >= 0, got {batch_seq}")

        def commit(dt: DeltaTable, properties: CommitProperties) -> None:
            now = int(time.time() * 1000)
            actions: list[AddAction | RemoveAction] = [
                AddAction(f.path, f.size, {}, f.modified_ms, True, f.stats) for f in files]
            if replace_keys or replace_all:
                present = pa.table(dt.get_add_actions(flatten=True))
                for path, size in zip(present.column("path").to_pylist(), present.column("size_bytes").to_pylist(),
                                      strict=True):
                    if replace_all or file_key(path) in replace_keys:
                        actions.append(RemoveAction(path, True, now, size))
            dt.create_write_transaction(actions, mode="append", schema=arrow_schema(table),
                                        commit_properties=properties)
            dt.update_incremental()  # the handle does not follow its own transaction (its checkpoint and checksum do)

        return self._commit_once(table, writer_id, batch_seq, commit, metadata)

    def _commit_once(self, table: str, writer_id: str, batch_seq: int,
                     commit: Callable[[DeltaTable, CommitProperties], None],
                     metadata: Mapping[str, str] | None) -> bool:
        """Run ``commit`` on the table's newest version under the app transaction ``(writer_id, batch_seq)``,
        unless the table holds that batch already (False); a commit that loses a race is tried again."""
        self.ensure(table)
        for attempt in range(_COMMIT_RETRIES):
            with self._current(table) as dt:  # per attempt: the check, the commit and the checkpoint share it
                last = dt.transaction_version(writer_id)
                if last is not None and last >= batch_seq:
                    log.info("%s: batch %s/%d already committed (last %d), skipped", table, writer_id, batch_seq,
                             last)
                    return False
                crash_point("before_commit", batch_seq)
                try:
                    commit(dt, CommitProperties(app_transactions=[Transaction(writer_id, batch_seq)],
                                                custom_metadata=dict(metadata) if metadata else None))
                except CommitFailedError as e:
                    # A concurrent writer won the race for this version (e.g. overwrite vs append).
                    log.warning("%s: commit conflict (attempt %d): %s", table, attempt + 1, e)
                    time.sleep(0.05 * (attempt + 1))
                    continue
                crash_point("after_commit", batch_seq)
                write_checksums(self.table_path(table), dt.version())
                self._maybe_checkpoint(dt)
            return True
        raise CommitFailedError(f"{table}: gave up after {_COMMIT_RETRIES} conflicting commits")

    def _maybe_checkpoint(self, dt: DeltaTable) -> None:
        """A checkpoint every ``checkpoint_interval`` versions (``dt`` is the table just committed to)."""
        if self.checkpoint_interval <= 0:
            return
        v = dt.version()
        if v > 0 and v % self.checkpoint_interval == 0:
            dt.create_checkpoint()
            log.debug("%s: checkpoint at version %d", dt.table_uri, v)

    def conform(self, table: str, rows: Rows) -> pa.Table:
        """Rows (dicts or a pyarrow Table) as a pa.Table with exactly the table's schema.

        Missing nullable columns become null, a missing ``cluster`` becomes the Lake's cluster,
        columns are reordered and cast; unknown columns and nulls in non-nullable columns raise ValueError.
        """
        schema = arrow_schema(table)
        src = rows if isinstance(rows, pa.Table) else _from_rows(table, rows, schema)
        unknown = sorted(set(src.column_names) - set(schema.names))
        if unknown:
            raise ValueError(f"{table}: unknown column(s) {', '.join(unknown)}")
        n = src.num_rows
        arrays = []
        for field in schema:
            arr = _cast(table, field, src.column(field.name)) if field.name in src.column_names else None
            if field.name == "cluster":
                arr = _fill_cluster(arr, n, self.cluster)
            if arr is None:
                arr = pa.nulls(n, field.type)
            if not field.nullable and arr.null_count:
                raise ValueError(
                    f"{table}: column {field.name!r} is not nullable but has {arr.null_count} null value(s)"
                )
            arrays.append(arr)
        return pa.Table.from_arrays(arrays, schema=schema)

    # ----------------------------------------------------------------- read
    def read_arrow(self, table: str, version: int | None = None, as_of: datetime | None = None) -> pa.Table:
        """The table as of now, as of a version, or as of a time (the last commit at or before it)."""
        dt = self.snapshot(table, version=version, as_of=as_of)
        return self.conform_read(table, dt.to_pyarrow_table())

    def row_count(self, table: str, version: int | None = None) -> int:
        """Rows in the table (at a version), from the Parquet footers: no data is read."""
        if self.version(table) is None:
            return 0
        if version is None:
            with self._current(table) as dt:
                return int(dt.to_pyarrow_dataset().count_rows())
        return int(self._load(table, version).to_pyarrow_dataset().count_rows())

    def scan(self, table: str, columns: list[str] | None = None, where: Any = None,
             version: int | None = None) -> pa.Table:
        """Rows (now, or at a version) matching a pyarrow ``where`` expression (files pruned by their statistics)."""
        if self.version(table) is None:
            return self.conform_read(table, arrow_schema(table).empty_table()).select(columns or arrow_schema(table).names)
        if version is None:
            with self._current(table) as dt:
                return dt.to_pyarrow_dataset().to_table(columns=columns, filter=where)
        return self._load(table, version).to_pyarrow_dataset().to_table(columns=columns, filter=where)

    def scan_batches(self, table: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """The table's current rows, ``columns`` only, a record batch at a time (memory follows a batch)."""
        if self.version(table) is None:
            return
        with self._current(table) as dt:
            local = os.path.isdir(self.table_path(table)) and not needs_delta_rs_scan(dt)
            files = [self._data_file_path(table, p) for p in dt.file_uris()] if local else []
            dataset = None if local else dt.to_pyarrow_dataset()
        if dataset is not None:
            yield from dataset.to_batches(columns=columns, batch_readahead=1, fragment_readahead=1)
            return
        for path in files:  # Arrow's own reader: delta-rs' dataset reads through a Python file handler
            yield from pq.ParquetFile(path).iter_batches(columns=columns, use_threads=False)

    def clusters(self, table: str) -> frozenset[str]:
        """The clusters that have rows in ``table`` (its cluster column only is read)."""
        if not self.exists(table) or self.version(table) is None:
            return frozenset()
        return frozenset(pc.unique(self.scan(table, columns=["cluster"])["cluster"]).to_pylist())

    def file_spans(self, table: str, column: str, version: int | None = None) -> list[FileSpan] | None:
        """The table's data files (at a version) with ``column``'s range, from the Delta log: no data is read.
        None when the files cannot be read one by one on that basis (a file without statistics for the
        column, or deletion vectors)."""
        if self.version(table) is None:
            return []
        dt = self._load(table, version)
        if needs_delta_rs_scan(dt):  # partitions, column mapping, deletion vectors: only delta-rs reads them right
            return None
        actions = pa.table(dt.get_add_actions(flatten=True))
        needed = ("path", "num_records", f"null_count.{column}", f"min.{column}", f"max.{column}")
        if any(name not in actions.column_names for name in needed):
            return None
        spans = []
        for path, rows, nulls, low, high in zip(*(actions.column(name).to_pylist() for name in needed), strict=True):
            if rows is None or nulls is None or (nulls < rows and (low is None or high is None)):
                return None  # no statistics for this file
            spans.append(FileSpan(self._data_file_path(table, path), rows, nulls, low, high))
        return spans

    def _data_file_path(self, table: str, path: str) -> str:
        """A data file's local path from the Delta log's (a URI, or relative to the table and URL-encoded)."""
        return unquote(urlparse(path).path) if "://" in path else os.path.join(self.table_path(table), unquote(path))

    def snapshot(self, table: str, version: int | None = None, as_of: datetime | None = None) -> DeltaTable:
        """A delta-rs DeltaTable pinned to a version or a time (time travel)."""
        if version is not None and as_of is not None:
            raise ValueError("give version or as_of, not both")
        if as_of is not None:
            version = self.version_at(table, as_of)
        return self._load(table, version=version)

    def conform_read(self, table: str, data: pa.Table) -> pa.Table:
        """Read data shaped to the current spec: spec order and types, null for columns added since."""
        schema = arrow_schema(table)
        n = data.num_rows
        cols = [
            data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(n, f.type)
            for f in schema
        ]
        if _no_bad_nulls(cols, schema):
            return pa.Table.from_arrays(cols, schema=schema)
        # Files written before a column existed hold nulls the spec may now forbid: keep the data.
        log.warning("%s: stored rows have nulls in non-nullable columns; schema relaxed", table)
        return pa.Table.from_arrays(cols, schema=pa.schema([f.with_nullable(True) for f in schema]))

    # ----------------------------------------------------------------- maintenance
    def checkpoint(self, table: str) -> None:
        self._load(table).create_checkpoint()

    def optimize(self, table: str) -> dict[str, Any]:
        """Compact small files (collectors append many small batches). Returns delta-rs metrics."""
        dt = self._load(table)
        metrics: dict[str, Any] = dt.optimize.compact()
        write_checksums(self.table_path(table), dt.version())
        return metrics

    def vacuum(self, table: str, retention_hours: int = 168) -> list[str]:
        """Delete files no snapshot newer than ``retention_hours`` needs (limits time travel)."""
        dt = self._load(table)
        removed: list[str] = dt.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False)
        dt.update_incremental()
        write_checksums(self.table_path(table), dt.version())
        return removed


def _from_rows(table: str, rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    names = set(schema.names)
    for row in rows:
        extra = set(row) - names
        if extra:
            raise ValueError(f"{table}: unknown column(s) {', '.join(sorted(extra))}")
    # Nullable while building: the null checks in conform() give a better message than pyarrow's.
    relaxed = pa.schema([f.with_nullable(True) for f in schema])
    try:
        return pa.Table.from_pylist(list(rows), schema=relaxed)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ValueError(f"{table}: rows do not fit the schema: {e}") from None


def _cast(table: str, field: pa.Field, col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks()
    if arr.type == field.type:
        return arr
    # Timestamps: ns -> us truncation is expected, not an error; naive values are taken as UTC.
    safe = not pa.types.is_timestamp(field.type)
    try:
        return arr.cast(field.type, safe=safe)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise ValueError(f"{table}: column {field.name!r} ({arr.type}) cannot be cast to {field.type}: {e}") from None


def _fill_cluster(arr: pa.Array | None, n: int, cluster: str) -> pa.Array:
    if arr is None:
        return pa.array([cluster] * n, pa.string())
    if arr.null_count == 0:
        return arr
    return pa.array([cluster if v is None else v for v in arr.to_pylist()], pa.string())


def _no_bad_nulls(cols: list[pa.ChunkedArray | pa.Array], schema: pa.Schema) -> bool:
    return all(f.nullable or c.null_count == 0 for c, f in zip(cols, schema, strict=True))


def conform_file(table: str, data: pa.Table) -> pa.Table:
    """A data file's rows in the spec's column order and types (null for columns added later)."""
    schema = arrow_schema(table)
    n = data.num_rows
    cols = [
        data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(n, f.type) for f in schema
    ]
    return pa.Table.from_arrays(cols, names=schema.names)


def read_data_files(table: str, files: Sequence[str]) -> pa.Table:
    """The rows of these plain data files (``Lake.file_spans``), in this order, in the spec's columns."""
    parts = [conform_file(table, pq.read_table(f)) for f in files]
    return pa.concat_tables(parts) if parts else arrow_schema(table).empty_table()
