"""KRaft metadata log collector: ``__cluster_metadata-0``'s segments (and, where they are gone, a snapshot) into
``kraft_records``, read-only, resumable and idempotent.

Resume point: the log's records are committed under one writer id whose app transaction (``batch_seq``) is the
next offset to read, so every record below it is stored and a replayed batch is skipped. The metadata log is
never compacted, so its offsets run without holes: a batch (or segment) starting above the next offset proves
that records are missing. That is a gap row (``source`` gap, ``offset`` .. ``batch_last_offset`` the missing
offsets). When the missing records were deleted with their segments and a snapshot holds the state past them,
the snapshot's records are stored (``source`` snapshot, under a writer id of their own whose ``batch_seq`` is
the next snapshot offset) before the gap row that names it.

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
from typing import Any, Protocol

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
from models.ids import event_id
from models.kraft_records import KraftDecodeError, decode_control_record, decode_metadata_record
from models.tables import KRAFT_RECORDS, QUARANTINE

log = logging.getLogger(__name__)

SEGMENT = "segment"
SNAPSHOT = "snapshot"
GAP = "gap"
QUARANTINE_SOURCE = "kraft"
QUARANTINE_RAW_BYTES = 64 * 1024  # of an unreadable batch, kept (hex) in its quarantine row

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


def _ms_to_dt(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000.0, tz=UTC) if ms >= 0 else None


def decode_record(is_control: bool, key: bytes | None, value: bytes | None) -> tuple[str, int]:
    """(record type name, schema version) of one record; KraftDecodeError when its payload is unreadable."""
    if is_control:
        control = decode_control_record(key, value)
        return control.record_type.name, control.version
    if value is None:
        raise KraftDecodeError("metadata record without a value")
    record = decode_metadata_record(value)
    return record.record_type.name, record.version


@dataclass
class _Cursor:
    """Where reading of one file stands in this process (a restart reads from 0 and skips stored offsets)."""

    position: int = 0
    stuck: bool = False  # the rest of the file cannot be read (reported once)
    suspect: int | None = None  # position of a malformed batch at the newest segment's end, not yet damage
    suspect_since: float = 0.0
    damage: str = ""  # what the last unreadable stretch was, for the gap row that follows it

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
    pending: list[dict[str, Any]] = field(default_factory=list)
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
    ) -> None:
        self.lake = lake
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
        self.stopped: list[str] = []
        self._quarantined_ids: set[str] = set()
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
        written = 0 if self.log is None else self.log.rows_written
        return {
            "records": written + self.snapshot_records,
            "snapshot_records": self.snapshot_records,
            "gaps": self.gaps,
            "quarantined": self.quarantine.rows_written,
            "next_offset": self.next_offset,
            "unreadable": list(self.stopped),
        }

    def poll_once(self) -> None:
        """Read what is new in the log directory and commit it (following: at most every ``flush_seconds``)."""
        self.lease.acquire()
        stream = self.log if self.log is not None else self._start()
        segments = self.log_dir.segments()
        for i, segment in enumerate(segments):
            following = segments[i + 1] if i + 1 < len(segments) else None
            if following is not None and following.base_offset <= stream.next_offset:
                continue  # every offset of this segment is below the next one needed
            if segment.base_offset > stream.next_offset:
                previous = segments[i - 1] if i > 0 else None
                self._missing(stream, segment, previous)
            cursor = self.cursors.setdefault(segment.path, _Cursor())
            self._read_file(stream, segment.path, cursor, closed=following is not None)
        if not self.follow or time.monotonic() - self._last_commit >= self.flush_seconds:
            self._flush(stream)

    def _start(self) -> _Stream:
        last = self.lake.last_batch_seq(KRAFT_RECORDS.name, self.writer_id)
        self._quarantined_ids = self._stored_quarantine_ids()
        self.log = _Stream(self.writer_id, SEGMENT, None, 0 if last is None else last)
        return self.log

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
        stream.pending.append({
            "cluster": self.lake.cluster, "offset": first, "batch_base_offset": first, "batch_last_offset": last,
            "is_control": False, "source": GAP, "snapshot_id": None if snap is None else snapshot_id(snap),
            "file_name": file_name, "detail": detail, "collected_at": datetime.now(UTC),
        })
        self.gaps += 1

    # ----------------------------------------------------------------- reading files
    def _read_file(self, stream: _Stream, path: Path, cursor: _Cursor, *, closed: bool) -> None:
        """Take the whole batches of one file from the cursor on. ``closed``: nothing will be appended to the
        file (a segment with a newer one after it, or a snapshot), so bytes that do not read are damage."""
        if cursor.stuck:
            return
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            if stream.source == SNAPSHOT:
                raise
            return  # deleted since it was listed (the next poll sees the gap if it was not read)
        if size < cursor.position:  # a follower cut a diverged tail: read it again (stored offsets are skipped)
            log.warning("kraft %s: %s shrank to %d bytes; reading it again", self.log_dir.path, path.name, size)
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
        if batch.last_offset < stream.next_offset:
            return  # stored by an earlier run
        if batch.base_offset > stream.next_offset and stream.source == SEGMENT:
            why = cursor.damage or "missing from the segment"
            self._gap(stream, stream.next_offset, batch.base_offset - 1, path.name,
                      f"offsets {stream.next_offset}..{batch.base_offset - 1} in {path.name}: {why}")
        cursor.damage = ""
        stamp = _ms_to_dt(batch.max_timestamp)
        now = datetime.now(UTC)
        for rec in batch.records:
            if rec.offset < stream.next_offset:
                continue
            row: dict[str, Any] = {
                "cluster": self.lake.cluster, "offset": rec.offset, "batch_base_offset": batch.base_offset,
                "batch_last_offset": batch.last_offset, "leader_epoch": batch.partition_leader_epoch,
                "batch_timestamp": stamp, "is_control": batch.is_control, "key": rec.key, "value": rec.value,
                "source": stream.source, "snapshot_id": stream.snapshot, "file_name": path.name,
                "collected_at": now,
            }
            try:
                row["record_type"], row["record_version"] = decode_record(batch.is_control, rec.key, rec.value)
            except KraftDecodeError as e:
                row["detail"] = f"undecodable: {e.reason}"
                raw = (rec.value or b"").hex() if not batch.is_control else f"key={(rec.key or b'').hex()} " \
                    f"value={(rec.value or b'').hex()}"
                ref = f"{path.resolve()}:{batch.position}#{rec.offset}"
                self._quarantine_row(stream, raw, f"offset {rec.offset}: {e.reason}", ref)
            stream.pending.append(row)
        stream.next_offset = batch.last_offset + 1
        if len(stream.pending) >= self.batch_size:
            self._flush(stream)

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

    def _quarantine_row(self, stream: _Stream, raw: str, reason: str, ref: str) -> None:
        eid = event_id(self.lake.cluster, QUARANTINE_SOURCE, ref, reason)
        if eid in self._quarantined_ids:
            return  # an earlier run wrote it (and crashed before the log rows it belongs to)
        self._quarantined_ids.add(eid)
        stream.pending_quarantine.append({"cluster": self.lake.cluster, "source": QUARANTINE_SOURCE, "raw": raw,
                                          "reason": reason, "observed_at": datetime.now(UTC), "ref": ref,
                                          "event_id": eid})

    def _flush(self, stream: _Stream) -> None:
        """Commit the pending quarantine rows, then the pending records (``batch_seq`` = the next offset)."""
        if stream.pending_quarantine:
            self.quarantine.write(stream.pending_quarantine)
            stream.pending_quarantine = []
        if not stream.pending:
            return
        rows: Sequence[dict[str, Any]] = stream.pending
        if self.lake.append(KRAFT_RECORDS.name, rows, writer_id=stream.writer_id, batch_seq=stream.next_offset):
            records = sum(1 for r in rows if r["source"] != GAP)  # gap rows are counted as gaps
            stream.rows_written += records
            if self.progress is not None:
                self.progress(records)
        self._last_commit = time.monotonic()
        stream.pending = []
