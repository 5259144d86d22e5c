"""Kafka log collector: controller.log / state-change.log / server.log -> ``controller_decisions``.

Lines are parsed by ``collectors.log_parser`` (pure). This module does the file I/O:

* one writer per file generation: ``writer_id = "logs:<abs path>@<inode>"``; ``batch_seq`` = the
  last line fully consumed, so re-running adds nothing and a partial run continues where it
  committed (a record whose continuation lines may still come is never cut in two).
* ``event_id = event_id(cluster, source_file, inode, line_no)``: the inode keeps the lines of a
  rotated file apart from the new file created at the same path.
* ``follow=True`` tails the files; rotation (rename to ``.1`` + new file) is seen as an inode
  change: the old handle is read to its end, then the new file is read from line 1.
  copytruncate rotation (same inode, the file shrinks) is refused with ``TruncatedLogError``: the new
  content would reuse the old generation's line numbers, so its lines could be neither resumed nor
  told apart. Rotate by rename (log4j's own appenders do).
* unparseable WARN/ERROR lines go to ``quarantine`` (source ``logs``, ref ``<file>:<line>``), and so
  does a line longer than ``MAX_LINE_BYTES``: only its head is read, parsed and kept.
* one live process per writer id (``collectors.bronze.WriterLease``): a second collector on the same
  file fails with ``WriterBusyError`` instead of committing every batch again.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from collectors.bronze import WriterLease
from collectors.log_parser import MAX_MESSAGE_CHARS, LogParser, ParsedRecord, RejectedLine
from models import tables
from models.events import INT32_MAX
from models.ids import event_id

if TYPE_CHECKING:
    from services.metrics import Metrics

log = logging.getLogger(__name__)

DECISIONS = tables.CONTROLLER_DECISIONS.name
QUARANTINE = tables.QUARANTINE.name
SOURCE = "logs"
BATCH_LINES = 20_000  # commit at least this often on big files so a crash loses little work
MAX_LINE_BYTES = MAX_MESSAGE_CHARS  # a longer line is cut to this (the cap the parser puts on a record's text)
_SKIP_CHUNK = 1 << 20
_LOG_NAMES = re.compile(r"^(?:controller\.log.*|state-change\.log.*|server\.log.*|.*\.log)$")
_BROKER_DIR = re.compile(r"^(?:broker|kafka)[-_]?(\d+)$")
_RECORD_COLUMNS = ("ts", "level", "logger", "controller_id", "controller_epoch", "broker_id", "kind", "topic",
                   "partition", "replica", "from_state", "to_state", "leader", "leader_epoch", "isr", "success",
                   "message")


class LogPathError(ValueError):
    """The path given is neither a regular file nor a folder of log files."""


class LakeLike(Protocol):
    root: str
    cluster: str

    def append(self, table: str, rows: Any, writer_id: str, batch_seq: int) -> bool: ...

    def last_batch_seq(self, table: str, writer_id: str) -> int | None: ...


def find_log_files(path: Path) -> list[Path]:
    """The file itself, or every Kafka log file under a directory (recursive, sorted)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        if path.exists():  # a device, a FIFO, a socket: not a file that has lines to resume
            raise LogPathError(f"{path} is not a regular file or a folder")
        raise FileNotFoundError(f"no such file or directory: {path}")
    return sorted(p for p in path.rglob("*") if p.is_file() and _LOG_NAMES.match(p.name))


def broker_from_path(path: Path) -> int | None:
    """Broker id from a directory named like ``broker-3`` / ``kafka_3`` (nearest one wins)."""
    for part in reversed(path.parent.parts):
        m = _BROKER_DIR.match(part)
        if m and int(m.group(1)) <= INT32_MAX:  # a broker id is a Java int
            return int(m.group(1))
    return None


def decision_row(rec: ParsedRecord, cluster: str, source_file: str, inode: int) -> dict[str, Any]:
    row = {k: v for k, v in asdict(rec).items() if k in _RECORD_COLUMNS}
    row["kind"] = str(rec.kind)
    row.update(cluster=cluster, source_file=source_file, line_no=rec.line_no,
               event_id=event_id(cluster, source_file, inode, rec.line_no))
    return row


def quarantine_row(rej: RejectedLine, cluster: str, source_file: str, observed_at: datetime) -> dict[str, Any]:
    ref = f"{source_file}:{rej.line_no}"
    return {"cluster": cluster, "source": SOURCE, "raw": rej.raw, "reason": rej.reason, "observed_at": observed_at,
            "ref": ref, "event_id": event_id(cluster, SOURCE, ref, rej.reason)}


class TruncatedLogError(RuntimeError):
    """A log file was truncated in place (copytruncate): its new lines cannot be resumed or told apart."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}; it was truncated in place (copytruncate rotation is not supported: rotate "
                         "by rename, as log4j's RollingFileAppender / DailyRollingFileAppender do) or the file system "
                         "gave a new file at this path an inode the path had before (collect it under another name)")


class FileTail:
    """One generation (inode) of one log file, read incrementally and committed idempotently."""

    def __init__(self, lake: LakeLike, path: Path, broker_id: int | None, stats: Counter[str],
                 metrics: Metrics | None = None) -> None:
        self.lake, self.path, self.stats = lake, path.resolve(), stats
        self.metrics = metrics  # services.metrics: told of commits, quarantined lines and lines committed
        self.source_file = str(self.path)
        self.fh: BinaryIO = open(self.path, "rb")  # closed by close()
        self.inode = os.fstat(self.fh.fileno()).st_ino
        self.writer_id = f"logs:{self.source_file}@{self.inode}"
        self.lease = WriterLease(lake.root, self.writer_id)
        try:
            self.lease.acquire()
        except BaseException:
            self.fh.close()
            raise
        self.broker_id = broker_id if broker_id is not None else broker_from_path(self.path)
        self._sticky_broker: int | None = None
        self.parser = LogParser()
        self.committed = lake.last_batch_seq(DECISIONS, self.writer_id) or 0
        self.q_committed = lake.last_batch_seq(QUARANTINE, self.writer_id) or 0
        self.line_no = 0
        self._records: list[ParsedRecord] = []
        self._rejected: list[RejectedLine] = []
        self._skip_committed()

    def _skip_committed(self) -> None:
        # resume: lines up to the committed batch_seq are done; the parser restarts on a record boundary
        while self.line_no < self.committed:
            pos = self.fh.tell()
            line = self.fh.readline()
            if not line:  # the file ends before the lines already collected from it
                raise TruncatedLogError(self.path, f"{self.line_no} lines, but {self.committed} were collected")
            if not line.endswith(b"\n"):
                self.fh.seek(pos)
                break
            self.line_no += 1
        if self.committed:
            self.stats["resumed_files"] += 1

    def close(self) -> None:
        self.fh.close()
        self.lease.release()

    def _readline(self, final: bool) -> tuple[bytes, int | None] | None:
        """The next line, and for a line longer than ``MAX_LINE_BYTES`` its length (without the newline) while
        only its first ``MAX_LINE_BYTES`` are returned: the rest is skipped, never held in memory. None when no
        whole line is there yet (unless ``final``)."""
        pos = self.fh.tell()
        raw = self.fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return None
        if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
            if not raw.endswith(b"\n") and not final:
                self.fh.seek(pos)  # the writer is mid-line: wait for the rest
                return None
            return raw, None
        size = len(raw)
        while True:  # skip to the end of the line
            rest = self.fh.readline(_SKIP_CHUNK)
            size += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        if not rest and not final:
            self.fh.seek(pos)  # the writer is still mid-line
            return None
        return raw[:MAX_LINE_BYTES] + b"\n", size - (1 if rest.endswith(b"\n") else 0)

    def pump(self, final: bool) -> int:
        """Read what is there; commit finished records. ``final`` also takes a last unterminated line."""
        read = 0
        while True:
            got = self._readline(final)
            if got is None:
                break
            raw, size = got
            self.line_no += 1
            read += 1
            text = raw.decode("utf-8", errors="replace")
            if size is not None:
                self.stats["long_lines"] += 1
                self._rejected.append(RejectedLine(
                    self.line_no, text.rstrip("\r\n"),
                    f"line of {size} bytes is longer than {MAX_LINE_BYTES}: only its first {MAX_LINE_BYTES} bytes "
                    "were read and kept"))
            self._take(self.parser.feed(self.line_no, text))
            if read % BATCH_LINES == 0:
                self._commit(final=False)
        if final:
            self._take(self.parser.flush())
        self._commit(final)
        self.stats["lines"] += read
        return read

    def _take(self, items: list[ParsedRecord | RejectedLine]) -> None:
        for item in items:
            if isinstance(item, RejectedLine):
                self._rejected.append(item)
                continue
            if item.broker_id is not None and self._sticky_broker is None and item.logger is not None:
                self._sticky_broker = item.broker_id
            if self.broker_id is not None:
                item.broker_id = self.broker_id  # the operator's --broker-id / directory name wins
            elif item.broker_id is None:
                item.broker_id = self._sticky_broker
            self._records.append(item)

    def _commit(self, final: bool) -> None:
        pending = self.parser.pending_line_no
        boundary = self.line_no if (final or pending is None) else pending - 1
        if boundary <= self.committed:
            return
        cluster = self.lake.cluster
        now = datetime.now(UTC)
        q_rows = [quarantine_row(r, cluster, self.source_file, now)
                  for r in self._rejected if self.q_committed < r.line_no <= boundary]
        d_rows = [decision_row(r, cluster, self.source_file, self.inode)
                  for r in self._records if r.line_no <= boundary]
        metrics = self.metrics
        # lines are counted as seen once their records are complete (the last record waits for its continuation
        # lines by design): the commit lag is then the commit's own time
        position = self.stats["committed_lines"] + boundary - self.committed
        newest = max((r["ts"] for r in d_rows if r.get("ts") is not None), default=None)
        if metrics is not None:
            metrics.seen(SOURCE, position, newest)
        # quarantine first: its own batch_seq filter (above) makes a crash between the two commits harmless
        if q_rows and self.lake.append(QUARANTINE, q_rows, writer_id=self.writer_id, batch_seq=boundary):
            self.stats["quarantined"] += len(q_rows)
            if metrics is not None:
                metrics.rows_committed(QUARANTINE, SOURCE, len(q_rows))
                for row in q_rows:
                    metrics.quarantined(SOURCE, row["reason"])
        if self.lake.append(DECISIONS, d_rows, writer_id=self.writer_id, batch_seq=boundary):
            self.stats["records"] += len(d_rows)
            if metrics is not None:
                metrics.rows_committed(DECISIONS, SOURCE, len(d_rows))
        self.stats["committed_lines"] = position
        if metrics is not None:
            metrics.committed(SOURCE, position, newest)
        self.committed = self.q_committed = boundary
        self._records = [r for r in self._records if r.line_no > boundary]
        self._rejected = [r for r in self._rejected if r.line_no > boundary]

    def rotated(self) -> bool:
        """True when the path now names another file (rename rotation)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # renamed away and not yet re-created: keep reading the old handle
        return st.st_ino != self.inode

    def truncated(self) -> bool:
        """True when the file this tail reads shrank below what was read (copytruncate)."""
        return os.fstat(self.fh.fileno()).st_size < self.fh.tell()


def collect_logs(
    lake: LakeLike,
    path: str | os.PathLike[str],
    follow: bool = False,
    broker_id: int | None = None,
    progress: Callable[[int], None] | None = None,
    stop_event: threading.Event | None = None,
    poll_interval: float = 0.5,
    metrics: Metrics | None = None,
) -> dict[str, Any]:
    """Parse Kafka logs at ``path`` (file or directory) into ``controller_decisions``; returns a summary.

    With ``follow`` it keeps tailing (new files in a directory too) until ``stop_event`` is set.
    """
    root = Path(path)
    stats: Counter[str] = Counter()
    tails: dict[Path, FileTail] = {}
    finished: set[int] = set()  # inodes of generations finished after a rotation in this run
    retired: list[FileTail] = []
    stop = stop_event or threading.Event()
    try:
        first = True
        while True:
            for file in _discover(root, tolerate_missing=follow and not first):
                key = file.resolve()
                if key not in tails and not _is_rotated_copy(key, tails, finished):
                    tails[key] = FileTail(lake, key, broker_id, stats, metrics)
                    stats["files"] += 1
            if metrics is not None:
                metrics.source_connected(root.exists())
            for key, tail in list(tails.items()):
                tail.pump(final=not follow)
                if follow and tail.truncated():
                    raise TruncatedLogError(tail.path, "it shrank under the collector")
                if follow and tail.rotated():
                    tail.pump(final=True)  # finish the old generation through its handle
                    tail.close()
                    finished.add(tail.inode)
                    retired.append(tail)
                    tails[key] = FileTail(lake, key, broker_id, stats, metrics)
                    stats["rotations"] += 1
                    tails[key].pump(final=False)
            first = False
            if progress is not None:
                progress(stats["lines"])
            if metrics is not None:  # every complete record is committed
                metrics.loop_turned(idle=True)
            if not follow or stop.wait(poll_interval):
                break
        if follow:
            for tail in tails.values():
                tail.pump(final=True)
    finally:
        for tail in tails.values():
            tail.close()
    for tail in [*tails.values(), *retired]:
        for name, n in tail.parser.stats.items():
            stats[f"parse_{name}"] += n
    summary: dict[str, Any] = {"files": stats["files"], "lines": stats["lines"], "records": stats["records"],
                               "quarantined": stats["quarantined"], "rotations": stats["rotations"],
                               "skipped": stats["parse_noise"] + stats["parse_orphan_continuation"],
                               "cut_lines": stats["parse_cut"]}
    log.info("collect_logs %s: %s", root, summary)
    return summary


def _discover(root: Path, tolerate_missing: bool) -> list[Path]:
    """Log files under root; while following, a file renamed away and not yet re-created is not an error."""
    try:
        return find_log_files(root)
    except FileNotFoundError:
        if tolerate_missing:
            return []
        raise


def _is_rotated_copy(path: Path, tails: dict[Path, FileTail], finished: set[int]) -> bool:
    """A ``.1`` file whose inode is a generation we already read (follow mode after a rename)."""
    try:
        ino = os.stat(path).st_ino
    except FileNotFoundError:
        return True
    return ino in finished or any(t.inode == ino for t in tails.values())
