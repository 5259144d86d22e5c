"""Data files written where the rows are (a Spark executor, any process), committed later by one writer.

``write_data_file`` runs next to the data: it shapes rows to the table's schema, writes one Parquet file into
the table's folder and returns a ``DataFile``, the Delta ``add`` action's fields (size, row count, the per-file
statistics of the table's ``stats_columns``). ``Lake.commit_files`` then commits the files of a batch as one
Delta transaction under the writer's app transaction, through delta-rs. A file written but never committed is
not part of the table (a replayed batch's first attempt leaves such files; ``vacuum`` removes them).

A file can carry a key, ``(cluster, bucket)`` of the step that wrote it, in its name: a table whose rows a
key replaces as a whole (its state) removes that key's older files in the same commit (``file_key``).

A running monitor stages its batches' files for a later commit, listed under ``STAGED_DIR`` in its checkpoint
(``StagedFiles``): until then they are in no table, and ``maintain`` keeps them.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from hashlib import sha1
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakehouse.arrow_schema import spec_for
from models.tables import ALL_TABLES, TableSpec

ROW_GROUP_ROWS = 128 * 1024
"""Rows per Parquet row group of every file zkledger writes: Spark splits a file into tasks at row groups (a
micro-batch of one large bronze file is then routed on every core), and a zxid-range read of a sorted file
skips the row groups it does not need."""

STAGED_DIR = "zkledger-staged"
"""The folder of a query's checkpoint listing its staged batches, one JSON file each."""
_KEYED = re.compile(r"^k(?P<cluster>[0-9a-f]{16})\.(?P<bucket>-?\d+)\.[0-9a-f]{32}\.parquet$")
STRING_STATS_MAX = 32
"""Longer strings get no min/max: Delta readers treat a truncated string bound by rules of their own."""


@dataclass(frozen=True)
class DataFile:
    """One written data file of ``table``, as its Delta ``add`` action needs it."""

    table: str
    path: str  # relative to the table's folder
    size: int
    rows: int
    stats: str  # Delta's statistics JSON
    modified_ms: int


def cluster_tag(cluster: str) -> str:
    """A file-name-safe, fixed-length stand-in for a cluster name."""
    return sha1(cluster.encode()).hexdigest()[:16]


def file_key(path: str) -> tuple[str, int] | None:
    """The ``(cluster_tag, bucket)`` a keyed file was written for, None for a file without a key."""
    m = _KEYED.match(os.path.basename(path))
    return (m["cluster"], int(m["bucket"])) if m else None


def write_data_file(table_path: str, table: str, rows: pa.Table, key: tuple[str, int] | None = None) -> DataFile:
    """Write ``rows`` (already shaped to the table's arrow schema) as one Parquet file in ``table_path``.

    ``key``: (cluster, bucket) for a file that replaces that key's older files when committed."""
    name = (f"k{cluster_tag(key[0])}.{key[1]}.{uuid.uuid4().hex}.parquet" if key is not None
            else f"part-{uuid.uuid4().hex}.parquet")
    full = os.path.join(table_path, name)
    pq.write_table(rows, full, compression="snappy", row_group_size=ROW_GROUP_ROWS)
    return DataFile(table, name, os.path.getsize(full), rows.num_rows, file_stats(table, rows),
                    int(time.time() * 1000))


def file_stats(table: str, rows: pa.Table) -> str:
    """Delta's per-file statistics JSON for the table's ``stats_columns``: row count, nulls, min and max."""
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for name in spec_for(table).stats_columns:
        col = rows.column(name)
        nulls[name] = col.null_count
        if col.null_count == len(col):
            continue
        low, high = (v.as_py() for v in pc.min_max(col).values())
        if pa.types.is_timestamp(col.type):
            # Delta keeps timestamps to the millisecond: round outward so no row falls outside its file's range
            low = _ms_iso(low.replace(microsecond=low.microsecond // 1000 * 1000))
            high = _ms_iso(high.replace(microsecond=high.microsecond // 1000 * 1000)
                           + (timedelta(milliseconds=1) if high.microsecond % 1000 else timedelta()))
        elif pa.types.is_string(col.type) and max(len(low), len(high)) > STRING_STATS_MAX:
            continue
        mins[name], maxs[name] = low, high
    return json.dumps({"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
                      separators=(",", ":"))


def _ms_iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


Staged = list[tuple[TableSpec, tuple[str, int] | None, DataFile]]
"""A batch's files to commit: (table, the key a state table's file replaces, the file)."""


class StagedFiles:
    """The batches a running monitor has written and not committed yet, beside its checkpoint: one JSON file per
    batch with its files' add-action fields (an entry is written whole, by rename). The monitor's sink stages and
    commits them (``engine.stateful_sink``); ``maintain`` keeps their files."""

    def __init__(self, checkpoint: str | Path) -> None:
        self.folder = Path(checkpoint) / STAGED_DIR

    def _path(self, batch_id: int) -> Path:
        return self.folder / f"{batch_id:020d}.json"

    def add(self, batch_id: int, files: Staged) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        body = [{"table": spec.name, "key": list(key) if key else None, "path": f.path, "size": f.size,
                 "rows": f.rows, "stats": f.stats, "modified_ms": f.modified_ms} for spec, key, f in files]
        part = self._path(batch_id).with_suffix(".part")
        part.write_text(json.dumps(body))
        os.replace(part, self._path(batch_id))

    def holds(self, batch_id: int) -> bool:
        return self._path(batch_id).exists()

    def batches(self) -> list[tuple[int, Staged]]:
        """Every staged batch, oldest first."""
        if not self.folder.is_dir():
            return []
        out = []
        for path in sorted(self.folder.glob("*.json")):
            files: Staged = []
            for f in json.loads(path.read_text()):
                spec = ALL_TABLES[f["table"]]
                files.append((spec, tuple(f["key"]) if f["key"] else None,
                              DataFile(spec.name, f["path"], f["size"], f["rows"], f["stats"], f["modified_ms"])))
            out.append((int(path.stem), files))
        return out

    def remove(self, batch_ids: Iterable[int]) -> None:
        for batch_id in batch_ids:
            self._path(batch_id).unlink(missing_ok=True)

    def oldest_age_s(self, now: float | None = None) -> float:
        """Seconds since the oldest staged batch was staged (0: none staged)."""
        ages = []
        for path in self.folder.glob("*.json") if self.folder.is_dir() else ():
            try:
                ages.append((time.time() if now is None else now) - path.stat().st_mtime)
            except FileNotFoundError:  # committed meanwhile
                continue
        return max(0.0, max(ages, default=0.0))
