"""KRaft metadata log collector: ``__cluster_metadata-0``'s segments (and, where they are gone, a snapshot) into
``kraft_records``, read-only, resumable and idempotent.

Resume point: the log's records are committed under one writer id whose app transaction (``batch_seq``) is the
next offset to read, so every record below it is stored and a replayed batch is skipped. The metadata log is
never compacted, so its offsets run without holes: a batch (or segment) starting above the next offset proves
that records are missing. That is a gap row (``source`` gap, ``offset`` .. ``batch_last_offset`` the missing
offsets). When the missing records were deleted with their segments and a snapshot holds the state past them,
the snapshot's records are stored (``source`` snapshot, under a writer id of their own whose ``batch_seq`` is
the next snapshot offset) before the gap row that names it.

A follower checks at every poll that the last batch it read is unchanged (base offset, leader epoch). Raft
may truncate a node's uncommitted tail and write the new leader's records at those offsets: each such batch's
records at offsets already stored are stored as well, under a writer id of their leader epoch whose
``batch_seq`` is the next offset of that epoch's rewrite, and committed before the log's own rows after them.
The rows stored first stay (they were in the log); at an offset, the newest epoch's row is the log's
(``pipelines.kraft_stage.current_records``, docs/kraft.md). A run that starts checks against the last batches an
earlier run stored.

What cannot be read goes to ``quarantine`` (source ``kraft``): a malformed batch (CRC mismatch, bad lengths)
with its bytes and position, and a record whose payload does not decode, which also lands raw in
``kraft_records`` with a null ``record_type``. Quarantine rows are written before the log rows they belong to;
their ids are deterministic, so a restart skips those an earlier run wrote.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.bronze import BronzeWriter, WriterLease
from collectors.kraft_log import (
    LOG_OVERHEAD,
    KraftLogError,
    MetadataLogDir,
    RecordBatch,
    SegmentFile,
    SnapshotFile,
    read_batches,
)
from lakehouse.arrow_schema import arrow_schema
from models.events import KraftRecordSource
from models.ids import event_id
from models.kraft_records import (
    KraftDecodeError,
    decode_control_record,
    decode_metadata_record,
    readable_metadata_record,
)
from models.tables import KRAFT_RECORDS, QUARANTINE

if TYPE_CHECKING:
    from services.metrics import Metrics

log = logging.getLogger(__name__)

SEGMENT, SNAPSHOT, GAP = KraftRecordSource.SEGMENT, KraftRecordSource.SNAPSHOT, KraftRecordSource.GAP
SOURCE = "kraft"  # the quarantine rows' source column, and the metrics' source label
REWRITE_WRITER = "epoch"
"""``<writer id>:epoch:<leader epoch>``: the writer id of the records batches of that epoch rewrote
(``_take_rewritten``)."""
QUARANTINE_SOURCE = SOURCE
QUARANTINE_RAW_BYTES = 64 * 1024  # of an unreadable batch, kept (hex) in its quarantine row

REMEMBERED_BATCHES = 4096
"""Batches of a segment whose offsets and leader epoch a follower keeps in memory: Raft rewrites only a log's
uncommitted tail, and these tell a rewritten batch from one stored before."""

LIVE_TAIL_GRACE_S = 2.0
"""How long a malformed batch at the end of the newest segment may stay so before it counts as damage: Kafka
may be writing it right now."""


class KraftLake(Protocol):
    root: str
    cluster: str

    def append(self, table: str, rows: Any, writer_id: str, batch_seq: int) -> bool: ...

    def last_batch_seq(self, table: str, writer_id: str) -> int | None: ...

    def exists(self, table: str) -> bool: ...

    def scan(self, table: str, columns: list[str] | None = None, where: Any = None) -> pa.Table: ...


def snapshot_id(snap: SnapshotFile) -> str:
    """Kafka's snapshot id, ``<end offset>-<epoch>``."""
    return f"{snap.end_offset}-{snap.epoch}"


def decode_record(is_control: bool, key: bytes | None, value: bytes | None) -> tuple[str, int]:
    """(record type name, schema version) of one record; KraftDecodeError when its payload is unreadable."""
    if is_control:
        control = decode_control_record(key, value)
        return control.record_type.name, control.version
    if value is None:
        raise KraftDecodeError("metadata record without a value")
    record = decode_metadata_record(value)
    return record.record_type.name, record.version


def _record_types(is_control: bool, keys: Sequence[bytes | None], values: Sequence[bytes | None],
                  ) -> tuple[list[str | None], list[int | None], list[tuple[int, str]]]:
    """(type names, versions, [(index, reason)] of the undecodable) of one batch's records."""
    names: list[str | None] = []
    versions: list[int | None] = []
    bad: list[tuple[int, str]] = []
    for i, value in enumerate(values):
        try:
            if not is_control and value is not None and (known := readable_metadata_record(value)) is not None:
                name, version = known
            else:
                name, version = decode_record(is_control, keys[i], value)
        except KraftDecodeError as e:
            names.append(None)
            versions.append(None)
            bad.append((i, e.reason))
            continue
        names.append(name)
        versions.append(version)
    return names, versions, bad


_SCHEMA = arrow_schema(KRAFT_RECORDS)
# columns with one value per batch (kept once per batch, repeated when the commit's table is built) and per row
_BATCH_COLUMNS = ("batch_base_offset", "batch_last_offset", "leader_epoch", "batch_timestamp", "is_control",
                  "source", "snapshot_id", "file_name", "collected_at")
_ROW_COLUMNS = ("offset", "key", "value", "record_type", "record_version", "detail")


class _Pending:
    """Rows waiting for their commit, held by column: a log has millions of records, and a dict per row cost
    more than reading them."""

    def __init__(self) -> None:
        self.runs: list[int] = []  # rows per batch
        self.per_batch: dict[str, list[Any]] = {c: [] for c in _BATCH_COLUMNS}
        self.per_row: dict[str, list[Any]] = {c: [] for c in _ROW_COLUMNS}
        self.gap_rows = 0

    def __len__(self) -> int:
        return len(self.per_row["offset"])

    def add_batch(self, batch_values: Sequence[Any], offsets: Sequence[int], keys: Sequence[bytes | None],
                  values: Sequence[bytes | None], names: Sequence[str | None], versions: Sequence[int | None],
                  details: Sequence[str | None] | None) -> None:
        n = len(offsets)
        self.runs.append(n)
        for column, v in zip(_BATCH_COLUMNS, batch_values, strict=True):
            self.per_batch[column].append(v)
        row = self.per_row
        row["offset"].extend(offsets)
        row["key"].extend(keys)
        row["value"].extend(values)
        row["record_type"].extend(names)
        row["record_version"].extend(versions)
        row["detail"].extend(details if details is not None else [None] * n)

    def add_row(self, row: dict[str, Any]) -> None:
        """One row given whole (a gap row); its timestamps as microseconds."""
        self.runs.append(1)
        for column in _BATCH_COLUMNS:
            self.per_batch[column].append(row.get(column))
        for column in _ROW_COLUMNS:
            self.per_row[column].append(row.get(column))
        self.gap_rows += row["source"] == GAP

    def table(self, cluster: str) -> pa.Table:
        n = len(self)
        repeat = pa.array(np.repeat(np.arange(len(self.runs), dtype=np.int64), self.runs))
        columns: list[pa.Array] = []
        for f in _SCHEMA:
            if f.name == "cluster":
                columns.append(pa.array([cluster] * n, f.type))
            elif f.name in self.per_row:
                columns.append(pa.array(self.per_row[f.name], f.type))
            else:
                columns.append(pa.array(self.per_batch[f.name], f.type).take(repeat))
        return pa.Table.from_arrays(columns, schema=_SCHEMA)


def _now_micros() -> int:
    return time.time_ns() // 1000


@dataclass
class _Cursor:
    """Where reading of one file stands in this process (a restart reads from 0 and skips stored offsets)."""

    position: int = 0
    stuck: bool = False  # the rest of the file cannot be read (reported once)
    suspect: int | None = None  # position of a malformed batch at the newest segment's end, not yet damage
    suspect_since: float = 0.0
    damage: str = ""  # what the last unreadable stretch was, for the gap row that follows it
    # first offset stored -> (last offset, leader epoch) of the batches taken from the file, oldest first
    stored: dict[int, tuple[int, int]] = field(default_factory=dict)
    anchor: tuple[int, int, int] | None = None  # (base offset, leader epoch, byte position) of the last batch read

    def remember(self, first: int, batch: RecordBatch) -> None:
        """Offsets `first` .. the batch's last were stored from it."""
        self.stored[first] = (batch.last_offset, batch.partition_leader_epoch)
        if len(self.stored) > REMEMBERED_BATCHES:
            del self.stored[next(iter(self.stored))]

    def stored_otherwise(self, first: int, last: int, epoch: int) -> tuple[str, int, int] | None:
        """(epochs, first, last offset) of what remembered batches stored between `first` and `last` under
        another leader epoch than `epoch` (None: nothing)."""
        if not self.stored or last < next(iter(self.stored)):
            return None  # below what is remembered (stored long ago)
        found = [(stored_epoch, max(base, first), min(end, last)) for base, (end, stored_epoch) in self.stored.items()
                 if base <= last and end >= first and stored_epoch != epoch]
        if not found:
            return None
        epochs = ", ".join(str(e) for e in sorted({e for e, _, _ in found}))
        return epochs, min(f for _, f, _ in found), max(t for _, _, t in found)

    def replace(self, first: int, last: int, epoch: int) -> None:
        """Offsets `first` .. `last` now hold a batch of leader epoch `epoch` (Raft rewrote them)."""
        spans: dict[int, tuple[int, int]] = {}
        for base, (end, stored_epoch) in self.stored.items():
            if end < first or base > last:
                spans[base] = (end, stored_epoch)
                continue
            if base < first:
                spans[base] = (first - 1, stored_epoch)
            if end > last:
                spans[last + 1] = (end, stored_epoch)
        spans[first] = (last, epoch)
        self.stored = dict(sorted(spans.items()))  # oldest (lowest) first, as stored_otherwise reads it

    def damage_confirmed(self, position: int) -> bool:
        now = time.monotonic()
        if self.suspect != position:
            self.suspect, self.suspect_since = position, now
        return now - self.suspect_since >= LIVE_TAIL_GRACE_S


@dataclass
class _Stream:
    """Offsets committed under one writer id: the log (segments) or one snapshot."""

    writer_id: str
    source: str
    snapshot: str | None
    next_offset: int
    pending: _Pending = field(default_factory=_Pending)
    pending_quarantine: list[dict[str, Any]] = field(default_factory=list)
    rows_written: int = 0


class KraftCollector:
    """Reads a KRaft metadata log directory into ``kraft_records``; ``run()`` does one pass or follows."""

    def __init__(
        self,
        lake: KraftLake,
        log_dir: str | os.PathLike[str],
        follow: bool = False,
        *,
        batch_size: int = 5000,
        poll_seconds: float = 0.5,
        flush_seconds: float = 1.0,
        progress: Callable[[int], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.lake = lake
        self.metrics = metrics  # services.metrics: told of commits, positions, gaps and quarantined stretches
        self.log_dir = MetadataLogDir(log_dir)  # NotAMetadataLogDirError for anything else
        self.follow = follow
        self.batch_size = max(1, batch_size)
        self.poll_seconds = poll_seconds
        # following: rows found wait for a later poll until this long after the last commit
        self.flush_seconds = flush_seconds
        self.progress = progress
        self.writer_id = f"kraft:{self.log_dir.path.resolve()}"
        self.lease = WriterLease(lake.root, self.writer_id)  # covers the snapshot and quarantine writers too
        self.quarantine = BronzeWriter(lake, f"{self.writer_id}:quarantine", table=QUARANTINE.name)
        self.log: _Stream | None = None
        self.cursors: dict[Path, _Cursor] = {}
        self.snapshot_records = 0
        self.gaps = 0
        self.rewritten = 0  # batches Kafka rewrote at offsets already collected
        self.rewrites: dict[int, _Stream] = {}  # leader epoch -> the records its batches rewrote
        self.stopped: list[str] = []
        self._quarantined_ids: set[str] = set()
        self._stored_tail: dict[int, tuple[int, int]] = {}  # what an earlier run stored last, for the first cursor
        self._last_commit = 0.0

    # ----------------------------------------------------------------- running
    def run(self, stop_event: threading.Event | None = None) -> dict[str, Any]:
        """One pass (or, following, passes until ``stop_event`` is set); returns a summary."""
        stop = stop_event or threading.Event()
        try:
            self.poll_once()
            while self.follow and not stop.wait(self.poll_seconds):
                self.poll_once()
            if self.log is not None:
                self._flush(self.log)
        finally:
            self.close()
        return self.summary()

    def close(self) -> None:
        self.lease.release()

    @property
    def next_offset(self) -> int | None:
        """The next log offset to read: every record below it is stored (None before the first poll)."""
        return None if self.log is None else self.log.next_offset

    def summary(self) -> dict[str, Any]:
        written = sum(s.rows_written for s in (self.log, *self.rewrites.values()) if s is not None)
        return {
            "records": written + self.snapshot_records,
            "snapshot_records": self.snapshot_records,
            "gaps": self.gaps,
            "quarantined": self.quarantine.rows_written,
            "rewritten": self.rewritten,
            "next_offset": self.next_offset,
            "unreadable": list(self.stopped),
        }

    def poll_once(self) -> None:
        """Read what is new in the log directory and commit it (following: at most every ``flush_seconds``)."""
        self.lease.acquire()
        if self.metrics is not None:
            self.metrics.source_connected(self.log_dir.path.is_dir())
        stream = self.log if self.log is not None else self._start()
        segments = self.log_dir.segments()
        for i, segment in enumerate(segments):
            following = segments[i + 1] if i + 1 < len(segments) else None
            if following is not None and following.base_offset <= stream.next_offset:
                continue  # every offset of this segment is below the next one needed
            if segment.base_offset > stream.next_offset:
                previous = segments[i - 1] if i > 0 else None
                self._missing(stream, segment, previous)
            cursor = self.cursors.get(segment.path)
            if cursor is None:
                cursor = self.cursors[segment.path] = _Cursor(stored=dict(self._stored_tail))
            self._read_file(stream, segment.path, cursor, closed=following is not None)
        if not self.follow or time.monotonic() - self._last_commit >= self.flush_seconds:
            self._flush(stream)
        if self.metrics is not None:
            self.metrics.loop_turned(idle=not len(stream.pending))

    def _start(self) -> _Stream:
        last = self.lake.last_batch_seq(KRAFT_RECORDS.name, self.writer_id)
        self._quarantined_ids = self._stored_quarantine_ids()
        self.log = _Stream(self.writer_id, SEGMENT, None, 0 if last is None else last)
        self._stored_tail = self._stored_batches(self.log.next_offset)
        return self.log

    def _stored_batches(self, next_offset: int) -> dict[int, tuple[int, int]]:
        """The batches an earlier run stored last (first offset -> (last offset, leader epoch)), at each offset
        the newest epoch's, so that a tail Kafka rewrote while no collector ran is seen as well."""
        if not next_offset or not self.lake.exists(KRAFT_RECORDS.name):
            return {}
        since = max(0, next_offset - REMEMBERED_BATCHES)
        rows = self.lake.scan(KRAFT_RECORDS.name, columns=["offset", "batch_base_offset", "leader_epoch"],
                              where=(pc.field("cluster") == self.lake.cluster) & (pc.field("source") == SEGMENT)
                              & (pc.field("offset") >= since) & (pc.field("offset") < next_offset))
        newest: dict[int, tuple[int, int]] = {}  # offset -> (epoch, batch base offset)
        for offset, base, epoch in zip(*(rows.column(c).to_pylist() for c in rows.column_names), strict=True):
            if offset not in newest or epoch > newest[offset][0]:
                newest[offset] = (epoch, base)
        spans: dict[tuple[int, int], list[int]] = {}
        for offset, (epoch, base) in newest.items():
            span = spans.setdefault((base, epoch), [offset, offset])
            span[0], span[1] = min(span[0], offset), max(span[1], offset)
        return {first: (last, epoch) for (_, epoch), (first, last) in sorted(spans.items(), key=lambda kv: kv[1])}

    def _stored_quarantine_ids(self) -> set[str]:
        """Ids of the quarantine rows earlier runs on this directory wrote (a restart must not add them again)."""
        if not self.lake.exists(QUARANTINE.name):
            return set()
        found = self.lake.scan(QUARANTINE.name, columns=["ref", "event_id"],
                               where=pc.field("source") == QUARANTINE_SOURCE)
        prefix = f"{self.log_dir.path.resolve()}{os.sep}"
        return {eid for ref, eid in zip(found.column("ref").to_pylist(), found.column("event_id").to_pylist(),
                                        strict=True) if ref is not None and ref.startswith(prefix)}

    # ----------------------------------------------------------------- gaps and snapshots
    def _missing(self, stream: _Stream, segment: SegmentFile, previous: SegmentFile | None) -> None:
        """Offsets ``stream.next_offset .. segment.base_offset - 1`` are in no segment: deleted before they were
        read (or lost with a damaged segment end). A snapshot at or past the segment holds their effect."""
        first, last = stream.next_offset, segment.base_offset - 1
        covering = [s for s in self.log_dir.snapshots() if s.end_offset >= segment.base_offset]
        snap = covering[0] if covering else None
        why = f"not in any segment (deleted before they were read; next segment {segment.path.name})"
        if previous is not None and (damaged := self.cursors.get(previous.path)) is not None and damaged.damage:
            why = f"lost with the unreadable end of {previous.path.name}: {damaged.damage}"
        if snap is not None and self._read_snapshot(snap):
            detail = f"offsets {first}..{last} {why}; covered by snapshot {snapshot_id(snap)}"
        else:
            detail = f"offsets {first}..{last} {why}; no snapshot covers them"
        self._flush(stream)
        self._gap(stream, first, last, segment.path.name, detail, snap)
        stream.next_offset = segment.base_offset
        self._flush(stream)
        log.warning("kraft %s: %s", self.log_dir.path, detail)

    def _read_snapshot(self, snap: SnapshotFile) -> bool:
        """Store a snapshot's records (those not stored yet); False when it could not be read at all."""
        sid = snapshot_id(snap)
        writer_id = f"{self.writer_id}:snapshot:{sid}"
        last = self.lake.last_batch_seq(KRAFT_RECORDS.name, writer_id)
        stream = _Stream(writer_id, SNAPSHOT, sid, 0 if last is None else last)
        try:
            self._read_file(stream, snap.path, _Cursor(), closed=True)
        except FileNotFoundError:
            log.warning("kraft %s: snapshot %s was deleted while it was read", self.log_dir.path, snap.path.name)
            return False
        self._flush(stream)
        self.snapshot_records += stream.rows_written
        log.info("kraft %s: read snapshot %s (%d records stored)", self.log_dir.path, sid, stream.rows_written)
        return True

    def _gap(self, stream: _Stream, first: int, last: int, file_name: str, detail: str,
             snap: SnapshotFile | None = None) -> None:
        stream.pending.add_row({
            "offset": first, "batch_base_offset": first, "batch_last_offset": last,
            "is_control": False, "source": GAP, "snapshot_id": None if snap is None else snapshot_id(snap),
            "file_name": file_name, "detail": detail, "collected_at": _now_micros(),
        })
        self.gaps += 1
        if self.metrics is not None:
            self.metrics.gap(SOURCE)

    # ----------------------------------------------------------------- reading files
    def _read_file(self, stream: _Stream, path: Path, cursor: _Cursor, *, closed: bool) -> None:
        """Take the whole batches of one file from the cursor on. ``closed``: nothing will be appended to the
        file (a segment with a newer one after it, or a snapshot), so bytes that do not read are damage."""
        if cursor.stuck:
            return
        try:
            path.stat()
            unchanged = self._tail_unchanged(path, cursor)
        except FileNotFoundError:
            if stream.source == SNAPSHOT:
                raise
            return  # deleted since it was listed (the next poll sees the gap if it was not read)
        if not unchanged:  # a follower cut a diverged tail and took the leader's
            log.warning("kraft %s: %s changed under its last collected batch (Raft truncated a diverged tail); "
                        "reading it again", self.log_dir.path, path.name)
            cursor.position = 0
        while True:
            scan = read_batches(path, cursor.position)
            try:
                for batch in scan:
                    self._take(stream, path, batch, cursor)
                    cursor.position = scan.next_position
                    cursor.suspect = None
                break
            except FileNotFoundError:
                if stream.source == SNAPSHOT:
                    raise
                return
            except KraftLogError as err:
                cursor.position = err.position
                if not closed and not cursor.damage_confirmed(err.position):
                    if self.follow:
                        return  # looked at again at the next poll
                    time.sleep(max(LIVE_TAIL_GRACE_S - (time.monotonic() - cursor.suspect_since), 0.0))
                    continue
                after = self._batch_end(path, err.position)
                self._quarantine_bytes(stream, path, err.position, after, err.reason)
                cursor.damage = f"batch at byte {err.position} unreadable ({err.reason})"
                cursor.suspect = None
                if after is None:
                    cursor.stuck = True
                    return
                cursor.position = after
        if closed and cursor.position < self._size(path):
            # a closed file ending in a batch that never became whole: Kafka would have truncated it
            reason = f"{self._size(path) - cursor.position} bytes at the end do not form a whole batch"
            self._quarantine_bytes(stream, path, cursor.position, None, reason)
            cursor.damage = f"bytes from {cursor.position} unreadable ({reason})"
            cursor.stuck = True

    @staticmethod
    def _tail_unchanged(path: Path, cursor: _Cursor) -> bool:
        """Whether the last batch read from the file is still where it was, with its base offset and leader
        epoch: by Raft's log matching, then so is everything before it."""
        if cursor.anchor is None:
            return True
        base, epoch, position = cursor.anchor
        with open(path, "rb") as f:
            f.seek(position)
            head = f.read(16)
        return len(head) == 16 and int.from_bytes(head[:8], "big", signed=True) == base \
            and int.from_bytes(head[12:16], "big", signed=True) == epoch

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0

    @staticmethod
    def _batch_end(path: Path, position: int) -> int | None:
        """Where the next batch starts after a malformed one, from its length field; None when that length
        cannot be trusted (the rest of the file is then unreadable)."""
        with open(path, "rb") as f:
            f.seek(position)
            head = f.read(LOG_OVERHEAD)
            size = os.fstat(f.fileno()).st_size
        if len(head) < LOG_OVERHEAD:
            return None
        length = int.from_bytes(head[8:12], "big", signed=True)
        end = position + LOG_OVERHEAD + length
        return end if length > 0 and end <= size else None

    def _take(self, stream: _Stream, path: Path, batch: RecordBatch, cursor: _Cursor) -> None:
        if stream.source == SEGMENT:
            cursor.anchor = (batch.base_offset, batch.partition_leader_epoch, batch.position)
            if batch.base_offset < stream.next_offset:
                self._take_rewritten(stream, path, batch, cursor)
        if batch.last_offset < stream.next_offset:
            return  # stored by an earlier run
        if batch.base_offset > stream.next_offset and stream.source == SEGMENT:
            why = cursor.damage or "missing from the segment"
            self._gap(stream, stream.next_offset, batch.base_offset - 1, path.name,
                      f"offsets {stream.next_offset}..{batch.base_offset - 1} in {path.name}: {why}")
        cursor.damage = ""
        self._add_records(stream, path, batch, stream.next_offset)
        if stream.source == SEGMENT:
            cursor.remember(max(batch.base_offset, stream.next_offset), batch)
        stream.next_offset = batch.last_offset + 1
        if len(stream.pending) >= self.batch_size:
            self._flush(stream)

    def _add_records(self, stream: _Stream, path: Path, batch: RecordBatch, first: int,
                     last: int | None = None) -> None:
        """The batch's records at offsets ``first`` .. ``last`` (default its last) into the stream's pending rows;
        an undecodable one also into quarantine."""
        records = batch.records
        if records and (records[0].offset < first or (last is not None and records[-1].offset > last)):
            records = tuple(r for r in records if r.offset >= first and (last is None or r.offset <= last))
        if records:
            offsets, _, keys, values, _ = zip(*records, strict=True)
            names, versions, bad = _record_types(batch.is_control, keys, values)
            details: list[str | None] | None = None
            if bad:
                details = [None] * len(records)
                for i, reason in bad:
                    details[i] = f"undecodable: {reason}"
                    key, value, offset = keys[i], values[i], offsets[i]
                    raw = (value or b"").hex() if not batch.is_control else f"key={(key or b'').hex()} " \
                        f"value={(value or b'').hex()}"
                    ref = f"{path.resolve()}:{batch.position}#{offset}"
                    self._quarantine_row(stream, raw, f"offset {offset}: {reason}", ref)
            stamp = batch.max_timestamp * 1000 if batch.max_timestamp >= 0 else None
            if self.metrics is not None and stream is self.log:
                self.metrics.seen(SOURCE, batch.last_offset,
                                  None if stamp is None else stamp / 1_000_000)
            stream.pending.add_batch(
                (batch.base_offset, batch.last_offset, batch.partition_leader_epoch, stamp, batch.is_control,
                 stream.source, stream.snapshot, path.name, _now_micros()),
                offsets, keys, values, names, versions, details)

    def _take_rewritten(self, stream: _Stream, path: Path, batch: RecordBatch, cursor: _Cursor) -> None:
        """A batch at offsets already stored, under another leader epoch than the batch stored there: Raft
        truncated what was collected (records a leader appended and never committed) and the log now holds the
        new leader's. Its records at those offsets are stored beside the truncated ones (which were in the log,
        and stay), under the writer of its epoch; at an offset the newest epoch's record is the log's."""
        epoch = batch.partition_leader_epoch
        last = min(batch.last_offset, stream.next_offset - 1)
        found = cursor.stored_otherwise(batch.base_offset, last, epoch)
        if found is None:
            return
        collected, first, _ = found
        rewrite = self.rewrites.get(epoch)
        if rewrite is None:
            writer_id = f"{self.writer_id}:{REWRITE_WRITER}:{epoch}"
            stored = self.lake.last_batch_seq(KRAFT_RECORDS.name, writer_id)
            rewrite = self.rewrites[epoch] = _Stream(writer_id, SEGMENT, None, 0 if stored is None else stored)
        if max(batch.base_offset, rewrite.next_offset) <= last:
            self._add_records(rewrite, path, batch, max(batch.base_offset, rewrite.next_offset), last)
            rewrite.next_offset = last + 1
        cursor.replace(batch.base_offset, last, epoch)
        self.rewritten += 1
        if self.metrics is not None:
            self.metrics.rewritten(SOURCE)
        log.warning("kraft %s: %s: offsets %d..%d rewritten at leader epoch %d after they were collected at epoch "
                    "%s (Raft truncated a diverged tail); both are stored, the newest epoch's is the log's",
                    self.log_dir.path, path.name, first, last, epoch, collected)

    # ----------------------------------------------------------------- quarantine and commits
    def _quarantine_bytes(self, stream: _Stream, path: Path, position: int, end: int | None, reason: str) -> None:
        with open(path, "rb") as f:
            f.seek(position)
            raw = f.read(QUARANTINE_RAW_BYTES if end is None else min(QUARANTINE_RAW_BYTES, end - position))
        where = f"bytes {position}..{end - 1}" if end is not None else f"bytes from {position} to the end"
        detail = f"{path.name}: {where} unreadable: {reason}"
        self._quarantine_row(stream, raw.hex(), detail, f"{path.resolve()}:{position}")
        self.stopped.append(detail)
        log.warning("kraft %s: %s", self.log_dir.path, detail)
        self._flush(stream)  # the reader moves past it: record it now

    def _quarantine_row(self, stream: _Stream, raw: str, reason: str, ref: str) -> bool:
        """Queue a quarantine row; False when an earlier run (or this one) wrote it already."""
        eid = event_id(self.lake.cluster, QUARANTINE_SOURCE, ref, reason)
        if eid in self._quarantined_ids:
            return False  # an earlier run wrote it (and crashed before the log rows it belongs to)
        self._quarantined_ids.add(eid)
        stream.pending_quarantine.append({"cluster": self.lake.cluster, "source": QUARANTINE_SOURCE, "raw": raw,
                                          "reason": reason, "observed_at": datetime.now(UTC), "ref": ref,
                                          "event_id": eid})
        return True

    def _flush(self, stream: _Stream) -> None:
        """Commit the pending quarantine rows, then the pending records (``batch_seq`` = the next offset); the
        log's after the records its batches rewrote (a reader meets an offset's newest epoch no later than
        the offsets after it)."""
        if stream is self.log:
            for rewrite in self.rewrites.values():
                self._flush(rewrite)
        if stream.pending_quarantine:
            before = self.quarantine.rows_written
            self.quarantine.write(stream.pending_quarantine)
            if self.metrics is not None:
                self.metrics.rows_committed(QUARANTINE.name, SOURCE, self.quarantine.rows_written - before)
                for row in stream.pending_quarantine:
                    self.metrics.quarantined(SOURCE, str(row["reason"]))
            stream.pending_quarantine = []
        pending = stream.pending
        if not len(pending):
            return
        rows = pending.table(self.lake.cluster)
        if self.lake.append(KRAFT_RECORDS.name, rows, writer_id=stream.writer_id, batch_seq=stream.next_offset):
            records = len(pending) - pending.gap_rows  # gap rows are counted as gaps
            stream.rows_written += records
            if self.progress is not None:
                self.progress(records)
            if self.metrics is not None:
                self.metrics.rows_committed(KRAFT_RECORDS.name, SOURCE, records)
                if stream is self.log:
                    self.metrics.committed(SOURCE, stream.next_offset - 1)
        self._last_commit = time.monotonic()
        stream.pending = _Pending()
