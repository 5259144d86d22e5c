"""A Structured Streaming source over a Delta table, as a PySpark Python Data Source (no Delta jars needed).

Offsets are Delta table versions: ``{"version": v, "table": name}`` means "every version <= v of that table has
been emitted" (the name makes a query's progress and checkpoint readable per source; older offsets without it
are read the same way). A micro-batch ``(start, end]`` reads the Parquet files that the commits
``start+1 .. end`` added (``add`` actions with ``dataChange=true`` in ``_delta_log/<v>.json``, the Delta
protocol's commit files), so each row of an append-only table is emitted exactly once. A commit that removes
data (overwrite, delete, merge) cannot be expressed as new rows: the source refuses it with a clear error.
Compaction (``optimize``: remove+add with ``dataChange=false``) is skipped.

The monitor streams the commit files themselves instead (``spark_io.stream_commits``, Spark's own file source
over ``_delta_log``) and reads the added files with ``commit_manifest`` + ``read_data_files``: no Python worker,
the same refusal of commits that remove data.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from lakehouse.arrow_schema import arrow_schema
from lakehouse.spark_schema import spark_schema

log = logging.getLogger(__name__)

SOURCE_NAME = "zkledger_delta"
BYTES_PER_PARTITION = 64 * 1024 * 1024  # Parquet bytes one read task takes (option bytesPerPartition)
_LOG_DIR = "_delta_log"


class DeltaChangeNotSupported(RuntimeError):
    """A Delta commit removed data: an append-only stream cannot replay it."""


def latest_version(path: str) -> int:
    """The newest committed version (-1 when the table does not exist yet), from the log's file names."""
    try:
        names = os.listdir(os.path.join(path, _LOG_DIR))
    except FileNotFoundError:
        return -1
    versions = [int(n[:20]) for n in names if n.endswith(".json") and len(n) == 25 and n[:20].isdigit()]
    return max(versions, default=-1)


def added_files(path: str, version: int) -> list[tuple[str, int]]:
    """(absolute path, bytes) of the data files commit ``version`` added (raises on commits that removed data)."""
    commit = os.path.join(path, _LOG_DIR, f"{version:020d}.json")
    try:
        with open(commit, encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        raise DeltaChangeNotSupported(
            f"{path}: commit {version} is no longer in the Delta log (log cleanup?); restart the stream "
            "from a new checkpoint"
        ) from None
    return _data_adds(path, version, lines)


def _data_adds(path: str, version: int, lines: Iterable[str]) -> list[tuple[str, int]]:
    """The ``add`` actions with dataChange of one commit's JSON lines; a data ``remove`` is refused."""
    files: list[tuple[str, int]] = []
    for line in lines:
        if not line.strip():
            continue
        action = json.loads(line)
        remove = action.get("remove")
        if remove is not None and remove.get("dataChange", True):
            raise DeltaChangeNotSupported(
                f"{path}: version {version} removes data (overwrite/delete); the append-only stream "
                "cannot replay it, read it as a batch snapshot instead"
            )
        add = action.get("add")
        if add is not None and add.get("dataChange", True):
            if add.get("deletionVector"):
                raise DeltaChangeNotSupported(f"{path}: version {version} uses deletion vectors")
            files.append((_resolve(path, add["path"]), int(add.get("size") or 0)))
    return files


_COMMIT_FILE = re.compile(r"(\d{20})\.json")


def commit_version(file_name: str) -> int | None:
    """The version of a ``_delta_log`` commit file name (None for checkpoints, temporary files and the rest)."""
    m = _COMMIT_FILE.fullmatch(os.path.basename(file_name))
    return int(m.group(1)) if m else None


def commit_manifest(path: str, actions: Iterable[tuple[str, str]], after_version: int = -1) -> list[str]:
    """The data files added by the commits whose (file name, JSON line) pairs are given, in version order.

    Commits at or below ``after_version`` are skipped (already processed, e.g. by a rebuild); a commit
    that removes data raises ``DeltaChangeNotSupported``.
    """
    by_version: dict[int, list[str]] = {}
    for name, line in actions:
        version = commit_version(name)
        if version is not None and version > after_version:
            by_version.setdefault(version, []).append(line)
    return [f for v in sorted(by_version) for f, _size in _data_adds(path, v, by_version[v])]


def _resolve(table_path: str, file_path: str) -> str:
    if "://" in file_path:
        return unquote(urlparse(file_path).path)
    return os.path.join(table_path, unquote(file_path))


class FileGroup(InputPartition):
    """Consecutive added Parquet files (in version order) read by one task."""

    def __init__(self, files: Sequence[str]) -> None:
        super().__init__(tuple(files))
        self.files = tuple(files)


def group_files(files: Sequence[tuple[str, int]], bytes_per_group: int) -> list[FileGroup]:
    """Consecutive files packed into groups of about ``bytes_per_group`` (a file is never split).

    A task costs ~0.1 s here whatever it reads, and the collectors commit small files several times a
    second: one task per file made a one-second micro-batch mostly task overhead. Big batches still
    spread over many tasks.
    """
    groups: list[FileGroup] = []
    current: list[str] = []
    size = 0
    for path, nbytes in files:
        if current and size + nbytes > bytes_per_group:
            groups.append(FileGroup(current))
            current, size = [], 0
        current.append(path)
        size += nbytes
    if current:
        groups.append(FileGroup(current))
    return groups


class DeltaVersionStreamReader(DataSourceStreamReader):
    """Reads each new Delta version's added files once; optional admission control in versions.

    Spark 4.1's Python sources have no admission-control hook (``latestOffset`` gets no start offset), so
    the cap is kept here from the offsets Spark plans and commits. Nor do they support
    ``Trigger.AvailableNow``: Spark falls back to ONE micro-batch per run (after a crash, just the replayed
    uncommitted batch), so a run may stop before the data present at its start is processed.
    ``spark_io.drain_available_now`` repeats runs until it is.
    """

    def __init__(self, path: str, table: str, max_versions: int | None, after_version: int = -1,
                 bytes_per_partition: int = BYTES_PER_PARTITION) -> None:
        self.path = path
        self.bytes_per_partition = bytes_per_partition
        self.table = table
        self.max_versions = max_versions
        self.after_version = after_version  # a new query starts after it (Spark uses the checkpoint's otherwise)
        # The highest end offset Spark has planned or committed, to cap the next batch (admission control).
        self._known_end: int | None = None

    def initialOffset(self) -> dict[str, Any]:
        return self._offset(self.after_version)

    def _offset(self, version: int) -> dict[str, Any]:
        return {"version": version, "table": self.table}

    def latestOffset(self) -> dict[str, Any]:
        latest = latest_version(self.path)
        if self.max_versions is not None:
            # Spark calls commit(last end) before this on a restart; None means a fresh query (from -1).
            known = self.after_version if self._known_end is None else self._known_end
            latest = min(latest, known + self.max_versions)
        return self._offset(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = int(start["version"]) + 1, int(end["version"])
        self._note_end(last)
        files = [f for v in range(first, last + 1) for f in added_files(self.path, v)]
        groups = group_files(files, self.bytes_per_partition)
        log.debug("%s: versions %d..%d -> %d file(s) in %d partition(s)", self.table, first, last, len(files),
                  len(groups))
        return groups

    def commit(self, end: dict[str, Any]) -> None:
        self._note_end(int(end["version"]))

    def _note_end(self, end: int) -> None:
        self._known_end = end if self._known_end is None else max(self._known_end, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileGroup)
        for file in partition.files:
            yield from conform_file(self.table, pq.read_table(file)).to_batches()


def conform_file(table: str, data: pa.Table) -> pa.Table:
    """A data file's rows in the spec's column order and types (null for columns added later)."""
    schema = arrow_schema(table)
    n = data.num_rows
    cols = [
        data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(n, f.type) for f in schema
    ]
    return pa.Table.from_arrays(cols, names=schema.names)


class DeltaVersionSource(DataSource):
    """``spark.readStream.format("zkledger_delta").option("path", ...).option("table", ...)``.

    Options (strings, as Spark passes them): ``path`` (table folder), ``table`` (models.tables name, gives
    the schema), ``maxVersionsPerTrigger`` (optional admission control), ``afterVersion`` (a new query skips
    the versions up to it), ``bytesPerPartition`` (Parquet bytes per read task, default 64 MiB).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return spark_schema(self._option("table"), nullable=True)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        raw = self.options.get("maxVersionsPerTrigger")
        max_versions = int(raw) if raw else None
        if max_versions is not None and max_versions < 1:
            raise ValueError("maxVersionsPerTrigger must be >= 1")
        after = int(self.options.get("afterVersion") or -1)
        per_partition = int(self.options.get("bytesPerPartition") or BYTES_PER_PARTITION)
        if per_partition < 1:
            raise ValueError("bytesPerPartition must be >= 1")
        return DeltaVersionStreamReader(self._option("path"), self._option("table"), max_versions, after,
                                        per_partition)

    def _option(self, key: str) -> str:
        value = self.options.get(key)
        if not value:
            raise ValueError(f"{SOURCE_NAME}: option {key!r} is required")
        return str(value)


def read_data_files(table: str, files: Sequence[str]) -> pa.Table:
    """The rows of these data files, in this order, in the spec's columns (what the rows stream would give)."""
    parts = [conform_file(table, pq.read_table(f)) for f in files]
    return pa.concat_tables(parts) if parts else arrow_schema(table).empty_table()


def data_file_rows(files: Sequence[str]) -> int:
    """Rows in these Parquet files, from their footers."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
