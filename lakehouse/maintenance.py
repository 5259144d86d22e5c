"""Table maintenance (compaction, zxid clustering, checkpoint, vacuum) and the guard that keeps every table
readable and writable by both Delta engines.

Both engines write the same tables: delta-rs (the collectors' appends, the JVM-free commands, maintenance) and
Delta's Spark connector (rebuild, monitor). A table feature one of them cannot handle must never be turned on
silently, so `check_shared_protocol` refuses a table whose protocol needs anything outside `SHARED_FEATURES`;
`maintain_table` runs it first, and Spark's session conf keeps Delta's feature defaults off
(``services.spark_session.spark_conf``). What delta-rs 1.6.6 cannot handle was measured, not assumed
(tests/lakehouse/test_interop.py):

- cannot read: deletionVectors, v2Checkpoint, typeWidening, vacuumProtocolCheck (reader features);
- can read but not write (append, optimize): clustering (liquid clustering), domainMetadata, rowTracking,
  inCommitTimestamp, checkpointProtection, icebergCompatV2, typeWidening, vacuumProtocolCheck;
- can read and append but not optimize: columnMapping.

Engine of each step: delta-rs, for all three. Maintenance is a log-level job that must not need a JVM (it runs
from cron or next to the collectors), and delta-rs is the engine the frequent appends already use. Its
OPTIMIZE commits ``remove``/``add`` actions with ``dataChange=false``, which Delta's streaming source skips;
its checkpoints are classic Parquet checkpoints that the connector reads; its full VACUUM deletes data files
that no version in the retention window references, including orphans a killed writer left, but only once
their modification time is older than the retention (so a file a live writer is about to commit survives).
The interop tests run each step on tables the connector wrote and read the result back with the connector.

Clustering on zxid: a zxid-range read (the rebuild's chunks, ``Lake.file_spans``) touches every file whose
zxid range overlaps it. Appends in zxid order give disjoint files, and compaction keeps insertion order, so
clustering pays off only when writers interleave (e.g. a txnlog backfill beside a live watch collector) and
compaction then mixes both ranges in each file. After compaction, the table's *zxid depth* (how many files a
zxid-range read touches per file it needs; 1.0 when the files are disjoint) decides: above `ZORDER_MIN_DEPTH`
the table is Z-ordered on the one column ``zxid`` (a sort), written in row groups of `ROW_GROUP_ROWS` so a read
skips the parts of a file it does not need. Z-order rewrites the whole table where compaction rewrites only the
small files, hence the threshold (the figures: `benchmarks/maintain_zorder.py`, in the README). Delta's liquid
clustering is not used: ``CLUSTER BY`` adds the ``clustering`` and ``domainMetadata`` writer features, and
delta-rs 1.6.6 then refuses to append.

VACUUM retention: Delta's default, 7 days, unless the caller passes a shorter one and ``allow_short_retention``.
A streaming query still needs the files of every version after its checkpointed offset, so the retention is
raised to cover the oldest such version of each table (`stream_floors`).
"""

from __future__ import annotations

import bisect
import glob
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable, WriterProperties
from deltalake.exceptions import CommitFailedError

from lakehouse.checksums import commit_path, write_checksums
from lakehouse.files import ROW_GROUP_ROWS, STAGED_DIR, StagedFiles
from models.tables import ALL_TABLES, KEYED_STATE_TABLES

if TYPE_CHECKING:
    from lakehouse.lake import Lake

log = logging.getLogger(__name__)
KEYED_NAMES = frozenset(spec.name for spec in KEYED_STATE_TABLES)

SHARED_FEATURES: frozenset[str] = frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed",
                                             "timestampNtz"})
"""Table features both engines read, append to, optimize, checkpoint and vacuum (tested both ways)."""

LEGACY_MAX_READER = 1  # reader version 2 means column mapping, which delta-rs cannot optimize
LEGACY_MAX_WRITER = 3  # writer 4 adds generated columns, 5 column mapping, 6 identity columns: untested here
FEATURES_READER = 3  # protocol versions that list their features by name
FEATURES_WRITER = 7

DEFAULT_RETENTION_HOURS = 168
"""Delta's default ``delta.deletedFileRetentionDuration`` (7 days)."""

STREAM_MARGIN_HOURS = 1
"""Extra retention kept beyond the age of the oldest version a stream still needs."""

CLUSTER_COLUMN = "zxid"
ZORDER_MIN_DEPTH = 1.5
"""Z-order a table on zxid when its files' zxid spans add up to more than this many times the table's span."""


class UnsupportedTableFeatures(ValueError):
    """The table's protocol needs a Delta feature one of the project's two engines cannot handle."""


def protocol_problems(dt: DeltaTable) -> list[str]:
    """What in a table's protocol falls outside what both engines handle (empty: the table is shared-safe)."""
    p = dt.protocol()
    problems = []
    if p.min_reader_version >= FEATURES_READER:
        problems += [f"reader feature {f}" for f in sorted(set(p.reader_features or []) - SHARED_FEATURES)]
    elif p.min_reader_version > LEGACY_MAX_READER:
        problems.append(f"reader version {p.min_reader_version} (column mapping)")
    if p.min_writer_version >= FEATURES_WRITER:
        problems += [f"writer feature {f}" for f in sorted(set(p.writer_features or []) - SHARED_FEATURES)]
    elif p.min_writer_version > LEGACY_MAX_WRITER:
        problems.append(f"writer version {p.min_writer_version}")
    return problems


def check_shared_protocol(table: DeltaTable | str) -> None:
    """Raise `UnsupportedTableFeatures` (one line) when a table (handle or path) needs a feature delta-rs or the
    connector cannot handle; such a table was changed outside zkledger and must not be written on."""
    dt = DeltaTable(table) if isinstance(table, str) else table
    problems = protocol_problems(dt)
    if problems:
        p = dt.protocol()
        raise UnsupportedTableFeatures(
            f"{dt.table_uri}: protocol ({p.min_reader_version}, {p.min_writer_version}) needs "
            f"{', '.join(problems)}, which delta-rs cannot handle; zkledger writes each table with both delta-rs "
            f"and Spark's Delta connector and leaves this table alone (drop the feature with Spark's "
            f"ALTER TABLE ... DROP FEATURE, or rebuild the table)")


# ----------------------------------------------------------------------------------------- stream floors
def stream_floors(lake: Lake, checkpoint_dirs: Iterable[str]) -> dict[str, int]:
    """Per table, the oldest version a Delta streaming query checkpointed under ``checkpoint_dirs`` may still
    read: the lowest source offset of each query's last two offset logs (the last may be uncommitted).

    Queries are found by their ``offsets`` folders at any depth; Delta source offsets name the table by its
    id (``reservoirId``), matched here against the lake's tables.
    """
    ids: dict[str, str] = {}
    for name in ALL_TABLES:
        if lake.exists(name):
            ids[str(DeltaTable(lake.table_path(name)).metadata().id)] = name
    floors: dict[str, int] = {}
    for root in checkpoint_dirs:
        for offsets in glob.glob(os.path.join(glob.escape(root), "**", "offsets"), recursive=True):
            logs = sorted((int(n) for n in os.listdir(offsets) if n.isdigit()), reverse=True)[:2]
            for batch in logs:
                for offset in _source_offsets(os.path.join(offsets, str(batch))):
                    table = ids.get(str(offset.get("reservoirId")))
                    version = offset.get("reservoirVersion")
                    if table is not None and isinstance(version, int):
                        floors[table] = min(version, floors.get(table, version))
    return floors


def staged_hours(checkpoint_dirs: Iterable[str]) -> float:
    """Hours since the oldest batch a monitor staged under ``checkpoint_dirs`` (0: none): its files are in the
    tables' folders and in no table yet, so VACUUM must not take them for orphans."""
    folders = (folder for root in checkpoint_dirs
               for folder in glob.glob(os.path.join(glob.escape(root), "**", STAGED_DIR), recursive=True))
    return max((StagedFiles(os.path.dirname(folder)).oldest_age_s() for folder in folders), default=0.0) / 3600


def _source_offsets(path: str) -> list[dict[str, Any]]:
    """The JSON source offsets of one offset log file (line 1 the format version, line 2 the batch's metadata)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines()[2:]:
            try:
                value = json.loads(line)
            except ValueError:
                continue  # "-" (a source with no offset yet) or a non-JSON offset of another source
            if isinstance(value, dict):
                out.append(value)
    return out


def hours_since_version(table_path: str, version: int) -> float:
    """Hours since ``version`` of a table was committed (its log file's time; 0 when that file is gone)."""
    commit = commit_path(table_path, version)
    try:
        return max(0.0, (time.time() - os.stat(commit).st_mtime) / 3600)
    except FileNotFoundError:
        return 0.0


# ----------------------------------------------------------------------------------------- maintenance
@dataclass
class TableReport:
    """What maintenance did to one table."""

    table: str
    files_before: int = 0
    files_after: int = 0
    files_compacted: int = 0  # small files rewritten (removed) by compaction or Z-order
    zxid_depth: float | None = None  # None: the table has no zxid column (or no data)
    zordered: bool = False
    checkpoint_version: int | None = None
    vacuumed: int = 0  # files deleted
    retention_hours: int = DEFAULT_RETENTION_HOURS
    skipped: str = ""  # why the table was left alone
    refused: bool = False  # skipped because the engines cannot share the table (an error, unlike a conflict)

    def line(self) -> str:
        if self.skipped:
            return f"{self.table}: skipped ({self.skipped})"
        depth = "" if self.zxid_depth is None else f", zxid depth {self.zxid_depth:.2f}"
        cluster = " z-ordered on zxid" if self.zordered else ""
        return (f"{self.table}: {self.files_before} -> {self.files_after} files ({self.files_compacted} rewritten"
                f"{cluster}{depth}), checkpoint at version {self.checkpoint_version}, {self.vacuumed} files vacuumed "
                f"(retention {self.retention_hours} h)")


@dataclass
class MaintainReport:
    """What `maintain_tables` did, table by table."""

    tables: list[TableReport] = field(default_factory=list)

    def summary(self) -> str:
        done = [t for t in self.tables if not t.skipped]
        skipped = len(self.tables) - len(done)
        zordered = sum(t.zordered for t in done)
        return (f"maintained {len(done)} tables: {sum(t.files_compacted for t in done)} files compacted, "
                f"{zordered} z-ordered on zxid, {len(done)} checkpoints, {sum(t.vacuumed for t in done)} files "
                f"vacuumed" + (f"; {skipped} skipped" if skipped else ""))


def zxid_depth(dt: DeltaTable) -> float | None:
    """How many data files a zxid-range read touches per file it needs: the mean, over the files, of the number
    of files whose zxid range intersects the file's own (1.0: disjoint files; None: no zxid statistics)."""
    if CLUSTER_COLUMN not in dt.schema().to_arrow().names:
        return None
    actions = pa.table(dt.get_add_actions(flatten=True))
    lo_name, hi_name = f"min.{CLUSTER_COLUMN}", f"max.{CLUSTER_COLUMN}"
    if actions.num_rows == 0 or lo_name not in actions.column_names:
        return None
    spans = [(lo, hi) for lo, hi in zip(actions.column(lo_name).to_pylist(), actions.column(hi_name).to_pylist(),
                                        strict=True) if lo is not None and hi is not None]
    if not spans:
        return None
    lows = sorted(lo for lo, _ in spans)
    highs = sorted(hi for _, hi in spans)
    # files meeting [lo, hi]: those starting at or before hi, less those ending before lo
    meets = [bisect.bisect_right(lows, hi) - bisect.bisect_left(highs, lo) for lo, hi in spans]
    return sum(meets) / len(spans)


def _writer_properties() -> WriterProperties:
    return WriterProperties(max_row_group_size=ROW_GROUP_ROWS, compression="ZSTD")


def check_retention(retention_hours: int, allow_short_retention: bool) -> None:
    """Refuse a retention below Delta's default unless the caller allowed it explicitly."""
    if retention_hours < 0:
        raise ValueError(f"retention must be >= 0 hours, got {retention_hours}")
    if retention_hours < DEFAULT_RETENTION_HOURS and not allow_short_retention:
        raise ValueError(f"a VACUUM retention of {retention_hours} h is below Delta's default of "
                         f"{DEFAULT_RETENTION_HOURS} h (7 days): time travel and readers of older versions lose "
                         f"their files; allow it explicitly to go ahead")


def maintain_table(lake: Lake, table: str, *, retention_hours: int = DEFAULT_RETENTION_HOURS,
                   allow_short_retention: bool = False, stream_floor: int | None = None,
                   zorder: bool | None = None, target_size: int | None = None, keep_hours: float = 0.0) -> TableReport:
    """Compact (and Z-order on zxid where it pays off), checkpoint and VACUUM one table, all with delta-rs. The
    state tables held as a file per key (``KEYED_STATE_TABLES``) are checkpointed and vacuumed only.

    ``stream_floor``: the oldest version a streaming query still reads; the retention grows to keep it, and to
    keep files of the last ``keep_hours`` that are in no table yet (a monitor's staged batches).
    ``zorder``: None decides by the table's zxid depth; True/False forces it. Raises
    `UnsupportedTableFeatures` for a table the two engines cannot share (nothing is changed then).
    """
    check_retention(retention_hours, allow_short_retention)
    report = TableReport(table, retention_hours=retention_hours)
    if not lake.exists(table):
        report.skipped = "no table"
        return report
    path = lake.table_path(table)
    dt = DeltaTable(path)
    check_shared_protocol(dt)
    report.files_before = len(dt.file_uris())
    keyed = table in KEYED_NAMES  # one file per key, replaced by its name: never rewritten here
    if not keyed:
        metrics = dt.optimize.compact(target_size=target_size, writer_properties=_writer_properties())
        report.files_compacted = int(metrics.get("numFilesRemoved", 0))
        dt.update_incremental()
    report.zxid_depth = zxid_depth(dt)
    cluster = zorder if zorder is not None else (report.zxid_depth or 0.0) > ZORDER_MIN_DEPTH
    if cluster and not keyed and report.zxid_depth is not None:
        metrics = dt.optimize.z_order([CLUSTER_COLUMN], target_size=target_size,
                                     writer_properties=_writer_properties())
        report.files_compacted += int(metrics.get("numFilesRemoved", 0))
        report.zordered = True
        dt.update_incremental()
    dt.create_checkpoint()
    report.checkpoint_version = dt.version()
    write_checksums(path, dt.version())
    report.files_after = len(dt.file_uris())
    if stream_floor is not None:
        needed = math.ceil(hours_since_version(path, max(stream_floor - 1, 0))) + STREAM_MARGIN_HOURS
        if needed > report.retention_hours:
            log.info("%s: retention raised to %d h for a stream at version %d", table, needed, stream_floor)
            report.retention_hours = needed
    if keep_hours > 0 and math.ceil(keep_hours) + STREAM_MARGIN_HOURS > report.retention_hours:
        report.retention_hours = math.ceil(keep_hours) + STREAM_MARGIN_HOURS
        log.info("%s: retention raised to %d h for a monitor's staged batches", table, report.retention_hours)
    removed = dt.vacuum(retention_hours=report.retention_hours, dry_run=False,
                        enforce_retention_duration=not allow_short_retention, full=True)
    report.vacuumed = len(removed)
    dt.update_incremental()
    write_checksums(path, dt.version())  # vacuum's own commits
    return report


def maintain_tables(lake: Lake, tables: Iterable[str] | None = None, *,
                    retention_hours: int = DEFAULT_RETENTION_HOURS, allow_short_retention: bool = False,
                    checkpoint_dirs: Iterable[str] = (), stream_versions: Mapping[str, int] | None = None,
                    zorder: bool | None = None, on_table: Callable[[TableReport], None] | None = None) -> MaintainReport:
    """Maintain ``tables`` (default: every table of models.tables that exists), one after the other.

    ``checkpoint_dirs``: Structured Streaming checkpoints of queries reading the lake (the monitor's): their
    offsets bound what VACUUM may delete (`stream_floors`); ``stream_versions`` adds floors known otherwise.
    ``on_table`` is called with each table's report as it finishes (progress lines). A table the engines
    cannot share (``refused``), or whose compaction lost a race with a concurrent overwrite, is skipped with
    the reason, and the others are still maintained.
    """
    check_retention(retention_hours, allow_short_retention)
    names = list(tables) if tables is not None else [t for t in ALL_TABLES if lake.exists(t)]
    for name in names:
        if name not in ALL_TABLES:
            raise ValueError(f"unknown table {name!r} (known: {', '.join(sorted(ALL_TABLES))})")
    checkpoint_dirs = list(checkpoint_dirs)
    floors = stream_floors(lake, checkpoint_dirs)
    staged = staged_hours(checkpoint_dirs)
    for name, version in (stream_versions or {}).items():
        floors[name] = min(version, floors.get(name, version))
    report = MaintainReport()
    for name in names:
        try:
            one = maintain_table(lake, name, retention_hours=retention_hours,
                                 allow_short_retention=allow_short_retention, stream_floor=floors.get(name),
                                 zorder=zorder, keep_hours=staged)
        except UnsupportedTableFeatures as exc:
            log.error("%s", exc)
            one = TableReport(name, retention_hours=retention_hours, skipped=str(exc), refused=True)
        except CommitFailedError as exc:  # e.g. an overwrite removed the files being compacted: next run
            log.warning("%s: maintenance lost a commit race, left for the next run: %s", name, exc)
            one = TableReport(name, retention_hours=retention_hours, skipped=f"concurrent commit: {exc}")
        report.tables.append(one)
        if on_table is not None:
            on_table(one)
    return report
