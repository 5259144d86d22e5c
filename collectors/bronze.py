"""Shared bronze sink: ZnodeChange -> ``znode_events`` rows with deterministic ids, idempotent batches.

Each collector owns one ``writer_id``; every Delta commit carries (writer_id, batch_seq) as an app
transaction, so replaying a batch after a crash is a no-op and a restart continues the sequence. That
holds only for one live process per writer id: ``WriterLease`` makes a second one fail at start.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import IO, Any, Protocol

from models.events import Source, ZnodeChange
from models.ids import event_id
from models.tables import ZNODE_EVENTS

log = logging.getLogger(__name__)

TABLE = ZNODE_EVENTS.name


LEASE_DIR = "_writers"


class LakeLike(Protocol):
    root: str
    cluster: str

    def append(self, table: str, rows: Any, writer_id: str, batch_seq: int) -> bool: ...

    def last_batch_seq(self, table: str, writer_id: str) -> int | None: ...


def change_row(
    change: ZnodeChange,
    *,
    cluster: str,
    source: Source | str,
    observed_at: datetime | None = None,
    missed_versions: int | None = None,
) -> dict[str, Any]:
    """One ``znode_events`` row; event_id = event_id(cluster, source, zxid, path, op) (architecture.md)."""
    src = str(source)
    return {
        "cluster": cluster,
        "zxid": change.zxid,
        "path": change.path,
        "op": str(change.op),
        "data": change.data,
        "version": change.version,
        "czxid": change.czxid,
        "mzxid": change.mzxid,
        "pzxid": change.pzxid,
        "ephemeral_owner": change.ephemeral_owner,
        "session_id": change.session_id,
        "txn_time": change.txn_time,
        "source": src,
        "missed_versions": missed_versions,
        "detail": change.detail,
        "observed_at": observed_at or datetime.now(UTC),
        "event_id": event_id(cluster, src, change.zxid, change.path, str(change.op)),
    }


def dedupe(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the last row per event_id (e.g. a multi that set one znode twice), in first-seen order."""
    by_id: dict[str, dict[str, Any]] = {}
    for r in rows:
        by_id[r["event_id"]] = r
    return list(by_id.values())


class BronzeWriter:
    """Appends row batches for one writer_id; batch_seq continues from what the lake recorded."""

    def __init__(self, lake: LakeLike, writer_id: str, table: str = TABLE) -> None:
        self.lake = lake
        self.writer_id = writer_id
        self.table = table
        self.rows_written = 0
        self.batches_written = 0

    @property
    def last_seq(self) -> int | None:
        return self.lake.last_batch_seq(self.table, self.writer_id)

    def next_seq(self) -> int:
        last = self.last_seq
        return 0 if last is None else last + 1

    def write(self, rows: Sequence[dict[str, Any]], batch_seq: int | None = None) -> bool:
        """Commit ``rows`` as one batch (``batch_seq`` defaults to the next one); False if already there."""
        seq = self.next_seq() if batch_seq is None else batch_seq
        unique = dedupe(rows)
        done = self.lake.append(self.table, unique, writer_id=self.writer_id, batch_seq=seq)
        if done:
            self.rows_written += len(unique)
            self.batches_written += 1
            log.debug("%s: batch %d, %d rows", self.writer_id, seq, len(unique))
        return done


class WriterBusyError(RuntimeError):
    """Another live process already writes with this writer id (its batches would interleave with ours)."""


class WriterLease:
    """An exclusive lock on one writer id, held while a collector writes with it.

    A ``flock`` on ``<lake>/_writers/<sha256 of the id>.lock``: the kernel drops it when the holder exits,
    crashed or not, so a stale lock never blocks a restart. The file names the holder's pid for the error.
    """

    def __init__(self, lake_root: str | os.PathLike[str], writer_id: str) -> None:
        self.writer_id = writer_id
        digest = hashlib.sha256(writer_id.encode()).hexdigest()[:32]
        self.path = os.path.join(os.fspath(lake_root), LEASE_DIR, f"{digest}.lock")
        self._fh: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._fh is not None

    def acquire(self) -> WriterLease:
        """Take the lock (a no-op when held); WriterBusyError when another process holds it."""
        if self._fh is not None:
            return self
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fh = open(self.path, "a+")  # kept open: the lock lives as long as the handle
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().split(" ", 1)[0].strip() or "?"
            fh.close()
            raise WriterBusyError(
                f"another collector (pid {holder}) is already writing as {self.writer_id!r} to this lake; "
                "stop it first (two writers with one id would write every row twice)") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()} {self.writer_id}\n")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            fh, self._fh = self._fh, None
            fh.close()  # closing the descriptor drops the flock

    def __enter__(self) -> WriterLease:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
