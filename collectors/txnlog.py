"""ZooKeeper transaction log (and snapshot) reader: the lossless record of every znode change.

Pure Python, no JVM. Layout (ZooKeeper 3.9, ``org.apache.zookeeper.server.persistence``):

* ``<dataDir>/version-2/log.<first zxid hex>``: FileHeader{magic 'ZKLG', version int, dbid long},
  then per entry: Adler32 checksum (long), length (int), ``length`` bytes =
  TxnHeader{clientId long, cxid int, zxid long, time long, type int} + the jute record of that
  type (+ a TxnDigest{version int, treeDigest long} since 3.6, which we ignore), then 0x42 'B'.
  Log files are preallocated with zeros: a zero checksum/length is the normal end.
* ``snapshot.<zxid hex>``: FileHeader{'ZKSN', version, dbid}, sessions (count, {id long, timeout
  int}), the ACL cache (count, {id long, vector<ACL>}), then nodes {path, DataNode{data, acl long,
  StatPersisted}} in pre-order starting at the root ("") and ending with the path "/".

A failed ``multi`` is logged as a multi of ErrorTxn{err} records, one per op: the op that failed
carries its real error code, the others RUNTIMEINCONSISTENCY (-2). ZooKeeper does not log the
paths of a failed multi, so the failed check's path is inferred (see ``_failed_multi_path``).
"""

from __future__ import annotations

import gzip
import logging
import mmap
import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from collectors.bronze import TABLE, BronzeWriter, LakeLike, WriterLease, change_row, dedupe
from collectors.jute import JuteError, JuteReader
from models.events import Source, ZnodeChange, ZnodeOp
from models.ids import event_id
from models.tables import QUARANTINE

if TYPE_CHECKING:
    from services.metrics import Metrics

log = logging.getLogger(__name__)

LOG_MAGIC = b"ZKLG"
SNAP_MAGIC = b"ZKSN"
END_OF_RECORD = 0x42
_ENTRY_HEAD = struct.Struct(">qi")  # Adler32 checksum (long), length (int)
_NONZERO = re.compile(rb"[^\x00]")
SOURCE = str(Source.TXNLOG)  # the source column of the rows, and the metrics' source label
QUARANTINE_RAW_BYTES = 64 * 1024  # of an unreadable stretch, kept (hex) in its quarantine row

# OpCode values (org.apache.zookeeper.ZooDefs.OpCode)
CREATE_SESSION = -10
CLOSE_SESSION = -11
ERROR = -1
CREATE = 1
DELETE = 2
SET_DATA = 5
SET_ACL = 7
CHECK = 13
MULTI = 14
CREATE2 = 15
CREATE_CONTAINER = 19
DELETE_CONTAINER = 20
CREATE_TTL = 21

RUNTIME_INCONSISTENCY = -2
ERROR_NAMES: dict[int, str] = {
    -2: "RUNTIMEINCONSISTENCY",
    -101: "NONODE",
    -102: "NOAUTH",
    -103: "BADVERSION",
    -108: "NOCHILDRENFOREPHEMERALS",
    -110: "NODEEXISTS",
    -111: "NOTEMPTY",
    -112: "SESSIONEXPIRED",
    -114: "INVALIDACL",
}


@dataclass(frozen=True)
class TxnHeader:
    client_id: int
    cxid: int
    zxid: int
    time_ms: int
    type: int


@dataclass(frozen=True)
class TxnRecord:
    """One decoded txn (or sub-txn of a multi). Fields unused by a type stay None."""

    type: int
    path: str | None = None
    data: bytes | None = None
    version: int | None = None
    ephemeral: bool = False
    err: int | None = None
    timeout: int | None = None
    paths: tuple[str, ...] | None = None  # closeSession: ephemerals to delete (3.6+ CloseSessionTxn)
    subs: tuple[TxnRecord, ...] = ()


@dataclass(frozen=True)
class TxnEntry:
    header: TxnHeader
    record: TxnRecord


@dataclass
class LogReadResult:
    """What one pass over one log file produced and why it stopped."""

    entries: list[TxnEntry]
    end_offset: int  # offset of the first entry not read (resume point for --follow)
    reason: str  # "eof" for a normal end, otherwise what stopped the reader
    clean: bool = True


@dataclass(frozen=True)
class SnapNode:
    path: str
    data: bytes | None
    czxid: int
    mzxid: int
    version: int
    ephemeral_owner: int
    pzxid: int


@dataclass
class Snapshot:
    zxid: int
    sessions: dict[int, int]
    nodes: list[SnapNode]


# --------------------------------------------------------------------------- decoding records


def _read_create(r: JuteReader, type_: int) -> TxnRecord:
    path = r.read_path()
    data = r.read_buffer()
    r.read_acls()
    ephemeral = False
    if type_ in (CREATE, CREATE2):
        ephemeral = r.read_bool()
    r.read_int()  # parentCVersion
    if type_ == CREATE_TTL:
        r.read_long()  # ttl
    return TxnRecord(type_, path=path, data=data, version=0, ephemeral=ephemeral)


def _read_close_session(r: JuteReader) -> TxnRecord:
    # 3.6+ writes CloseSessionTxn{paths2Delete}; older servers write no record at all.
    if r.remaining < 4:
        return TxnRecord(CLOSE_SESSION)
    start = r.pos
    try:
        paths = r.read_vector(JuteReader.read_path)
    except (JuteError, UnicodeDecodeError):
        r.pos = start
        return TxnRecord(CLOSE_SESSION)
    return TxnRecord(CLOSE_SESSION, paths=tuple(paths))


def _read_multi(r: JuteReader) -> TxnRecord:
    def sub(rr: JuteReader) -> TxnRecord:
        t = rr.read_int()
        body = rr.read_buffer() or b""
        return decode_record(t, JuteReader(body))

    return TxnRecord(MULTI, subs=tuple(r.read_vector(sub)))


def decode_record(type_: int, r: JuteReader) -> TxnRecord:
    """Decode the jute record of one txn type; unknown types decode to a bare TxnRecord."""
    if type_ in (CREATE, CREATE2, CREATE_CONTAINER, CREATE_TTL):
        return _read_create(r, type_)
    if type_ in (DELETE, DELETE_CONTAINER):
        return TxnRecord(type_, path=r.read_path())
    if type_ == SET_DATA:
        path, data = r.read_path(), r.read_buffer()
        return TxnRecord(type_, path=path, data=data, version=r.read_int())
    if type_ == SET_ACL:
        path = r.read_path()
        r.read_acls()
        return TxnRecord(type_, path=path, version=r.read_int())
    if type_ == CHECK:
        return TxnRecord(type_, path=r.read_path(), version=r.read_int())
    if type_ == MULTI:
        return _read_multi(r)
    if type_ == ERROR:
        return TxnRecord(type_, err=r.read_int())
    if type_ == CREATE_SESSION:
        return TxnRecord(type_, timeout=r.read_int())
    if type_ == CLOSE_SESSION:
        return _read_close_session(r)
    log.debug("txn type %s not modelled; kept as a bare record", type_)
    return TxnRecord(type_)


def decode_entry(raw: bytes) -> TxnEntry:
    r = JuteReader(raw)
    header = TxnHeader(r.read_long(), r.read_int(), r.read_long(), r.read_long(), r.read_int())
    return TxnEntry(header, decode_record(header.type, r))


# --------------------------------------------------------------------------- log files


def log_files(data_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(first zxid, path) of every txn log under dataDir (or dataDir/version-2), sorted by zxid."""
    return _numbered(data_dir, "log")


def snapshot_files(data_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    return _numbered(data_dir, "snapshot")


def _numbered(data_dir: str | os.PathLike[str], prefix: str) -> list[tuple[int, Path]]:
    base = Path(data_dir)
    if (base / "version-2").is_dir():
        base = base / "version-2"
    if not base.is_dir():
        return []
    pat = re.compile(rf"^{prefix}\.([0-9a-fA-F]+)(\.gz)?$")
    found = [(int(m.group(1), 16), p) for p in base.iterdir() if (m := pat.match(p.name))]
    return sorted(found)


def read_log(path: str | os.PathLike[str], offset: int = 0) -> LogReadResult:
    """Read entries from ``offset`` (0 = file start) until the end, a torn tail or corruption.

    Never raises for bad content: the reason is logged and returned, entries before it are kept.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        # mmap: log files are preallocated (64 MB of zeros), only the used head gets paged in
        buf: bytes | mmap.mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    try:
        return _read_entries(path, buf, offset)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _read_entries(path: str | os.PathLike[str], buf: bytes | mmap.mmap, offset: int) -> LogReadResult:
    if offset == 0:
        if len(buf) < 16:  # ZKLG, version int, dbid long
            return _stop(path, [], 0, f"file header torn ({len(buf)} bytes)")
        if buf[:4] != LOG_MAGIC:
            return _stop(path, [], 0, f"bad magic {buf[:4]!r}, not a ZooKeeper txn log")
        offset = 16
    entries: list[TxnEntry] = []
    pos = offset
    while True:
        entry, nxt, reason = _read_one(buf, pos)
        if entry is None:
            if reason == "eof":
                return LogReadResult(entries, pos, "eof")
            return _stop(path, entries, pos, reason)
        entries.append(entry)
        pos = nxt


def _read_one(buf: bytes | mmap.mmap, pos: int) -> tuple[TxnEntry | None, int, str]:
    if len(buf) - pos < 12:
        # fewer bytes than a checksum+length: normal end if they are zeros, else torn
        return None, pos, "eof" if not buf[pos:].strip(b"\0") else f"torn entry header at offset {pos}"
    checksum, length = _ENTRY_HEAD.unpack_from(buf, pos)
    body = pos + 12
    if length == 0 and checksum == 0:
        return None, pos, "eof"  # preallocated zero padding
    if length <= 0 or length > len(buf) - body - 1:
        return None, pos, f"torn entry at offset {pos} (length {length}, {len(buf) - body} bytes left)"
    raw = bytes(buf[body : body + length])
    if zlib.adler32(raw) != checksum:
        return None, pos, f"checksum mismatch at offset {pos}"
    if buf[body + length] != END_OF_RECORD:
        return None, pos, f"missing end-of-record marker at offset {body + length}"
    try:
        entry = decode_entry(raw)
    except (JuteError, UnicodeDecodeError) as e:
        return None, pos, f"undecodable entry at offset {pos}: {e}"
    return entry, body + length + 1, ""


def next_readable_entry(path: str | os.PathLike[str], offset: int, after_zxid: int | None) -> tuple[int, int] | None:
    """(offset, zxid) of the first whole, checksummed entry after ``offset`` whose zxid is above ``after_zxid``:
    where reading can go on past a damaged stretch. None when nothing readable follows (a torn tail)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size <= offset + 13:
            return None
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        pos = offset + 1
        while pos + 13 <= len(buf):
            nonzero = _NONZERO.search(buf, pos)
            if nonzero is None:
                return None  # only the preallocated zeros are left
            # an entry's first non-zero byte is at most 11 bytes in (its checksum's low half or its length)
            pos = max(pos, nonzero.start() - 11)
            entry, _nxt, _reason = _read_one(buf, pos)
            if entry is not None and (after_zxid is None or entry.header.zxid > after_zxid):
                return pos, entry.header.zxid
            pos += 1
        return None
    finally:
        buf.close()


def _stop(path: str | os.PathLike[str], entries: list[TxnEntry], pos: int, reason: str) -> LogReadResult:
    # debug: the newest log's unfinished last entry stops every read of a busy log (the collector warns once
    # it is taken for damage)
    log.debug("txn log %s: stopped reading: %s (%d entries read before it)", path, reason, len(entries))
    return LogReadResult(entries, pos, reason, clean=False)


# --------------------------------------------------------------------------- snapshots


def read_snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """Header, sessions and nodes of a snapshot (ACLs are skipped). Raises JuteError if unreadable."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        buf = f.read()
    if buf[:4] != SNAP_MAGIC:
        raise JuteError(f"{path}: bad magic {buf[:4]!r}, not a ZooKeeper snapshot")
    r = JuteReader(buf, 16)
    sessions = {}
    for _ in range(r.read_int()):
        sid = r.read_long()
        sessions[sid] = r.read_int()
    for _ in range(r.read_int()):  # ACL cache: {long id, vector<ACL>}
        r.read_long()
        r.read_acls()
    nodes: list[SnapNode] = []
    while (p := r.read_path()) != "/":
        data = r.read_buffer()
        r.read_long()  # acl reference
        czxid, mzxid, _ctime, _mtime = r.read_long(), r.read_long(), r.read_long(), r.read_long()
        version, _cversion, _aversion = r.read_int(), r.read_int(), r.read_int()
        owner, pzxid = r.read_long(), r.read_long()
        nodes.append(SnapNode(p, data, czxid, mzxid, version, owner, pzxid))
    zxid = int(Path(path).name.split(".")[1], 16)
    return Snapshot(zxid, sessions, nodes)


# --------------------------------------------------------------------------- txns -> changes


def _ms_to_dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000.0, tz=UTC)


def _err_name(err: int) -> str:
    return ERROR_NAMES.get(err, "UNKNOWN")


@dataclass
class _Node:
    czxid: int
    ephemeral_owner: int


class _ChangeBase(TypedDict):
    """What every change of one transaction shares (its header's fields)."""

    zxid: int
    session_id: int
    txn_time: datetime


@dataclass
class TxnDecoder:
    """Turns txns into ZnodeChanges, tracking the znode tree state the log itself does not repeat.

    ``chroot`` keeps only paths under it and strips it (paths as the Kafka cluster sees them);
    session rows use path "/". ``kafka_fencing_check`` names the path a multi failing on its first
    op with BADVERSION is attributed to (Kafka 2.1+ wraps every controller write as
    multi(CheckOp(/controller_epoch, v), op): KafkaZkClient@3.8.0 l1969-1977).
    """

    chroot: str = ""
    kafka_fencing_check: str = "/controller_epoch"
    nodes: dict[str, _Node] = field(default_factory=dict)
    ephemerals: dict[int, set[str]] = field(default_factory=dict)
    sessions_in_chroot: set[int] = field(default_factory=set)
    sessions_elsewhere: set[int] = field(default_factory=set)

    def relative(self, path: str) -> str | None:
        if not self.chroot:
            return None if path == "/zookeeper" or path.startswith("/zookeeper/") else path
        if path == self.chroot:
            return "/"
        if path.startswith(self.chroot + "/"):
            return path[len(self.chroot) :]
        return None

    def _touch(self, h: TxnHeader, path: str) -> str | None:
        """The chroot-relative path (None outside it), remembering where each session writes."""
        rel = self.relative(path)
        (self.sessions_in_chroot if rel is not None else self.sessions_elsewhere).add(h.client_id)
        return rel

    def seed(self, snap: Snapshot) -> list[ZnodeChange]:
        """Load a snapshot's tree as the starting state; one CREATE per node (zxid = its mzxid)."""
        out = []
        for n in snap.nodes:
            if not n.path:
                continue
            self.nodes[n.path] = _Node(n.czxid, n.ephemeral_owner)
            if n.ephemeral_owner:
                self.ephemerals.setdefault(n.ephemeral_owner, set()).add(n.path)
            rel = self.relative(n.path)
            if rel is not None:
                out.append(
                    ZnodeChange(
                        zxid=n.mzxid, path=rel, op=ZnodeOp.CREATE, data=n.data, version=n.version,
                        czxid=n.czxid, mzxid=n.mzxid, pzxid=n.pzxid, ephemeral_owner=n.ephemeral_owner,
                        detail=f"snapshot.{snap.zxid:x}",
                    )
                )
        return out

    def apply(self, entry: TxnEntry) -> list[ZnodeChange]:
        h, rec = entry.header, entry.record
        if rec.type == MULTI:
            return self._multi(h, rec)
        return self._single(h, rec)

    def _base(self, h: TxnHeader) -> _ChangeBase:
        return {"zxid": h.zxid, "session_id": h.client_id, "txn_time": _ms_to_dt(h.time_ms)}

    def _single(self, h: TxnHeader, rec: TxnRecord) -> list[ZnodeChange]:
        if rec.type in (CREATE, CREATE2, CREATE_CONTAINER, CREATE_TTL):
            return self._create(h, rec)
        if rec.type in (DELETE, DELETE_CONTAINER):
            return self._delete(h, rec.path or "", None)
        if rec.type == SET_DATA:
            return self._set(h, rec)
        if rec.type == CREATE_SESSION:
            return [ZnodeChange(path="/", op=ZnodeOp.CREATE_SESSION, detail=f"timeout={rec.timeout}", **self._base(h))]
        if rec.type == CLOSE_SESSION:
            return self._close_session(h, rec)
        return []  # setACL, check, a standalone error: no znode content changed

    def _create(self, h: TxnHeader, rec: TxnRecord) -> list[ZnodeChange]:
        path = rec.path or ""
        owner = h.client_id if rec.ephemeral else 0
        self.nodes[path] = _Node(h.zxid, owner)
        if owner:
            self.ephemerals.setdefault(owner, set()).add(path)
        rel = self._touch(h, path)
        if rel is None:
            return []
        return [
            ZnodeChange(
                path=rel, op=ZnodeOp.CREATE, data=rec.data, version=0, czxid=h.zxid, mzxid=h.zxid,
                pzxid=h.zxid, ephemeral_owner=owner, **self._base(h),
            )
        ]

    def _set(self, h: TxnHeader, rec: TxnRecord) -> list[ZnodeChange]:
        path = rec.path or ""
        node = self.nodes.get(path)
        rel = self._touch(h, path)
        if rel is None:
            return []
        return [
            ZnodeChange(
                path=rel, op=ZnodeOp.SET, data=rec.data, version=rec.version,
                czxid=node.czxid if node else None, mzxid=h.zxid,
                ephemeral_owner=node.ephemeral_owner if node else None, **self._base(h),
            )
        ]

    def _delete(self, h: TxnHeader, path: str, detail: str | None) -> list[ZnodeChange]:
        node = self.nodes.pop(path, None)
        if node and node.ephemeral_owner:
            self.ephemerals.get(node.ephemeral_owner, set()).discard(path)
        rel = self._touch(h, path)
        if rel is None:
            return []
        return [
            ZnodeChange(
                path=rel, op=ZnodeOp.DELETE, czxid=node.czxid if node else None,
                ephemeral_owner=node.ephemeral_owner if node else None, detail=detail,
                **self._base(h),
            )
        ]

    def _close_session(self, h: TxnHeader, rec: TxnRecord) -> list[ZnodeChange]:
        tracked = self.ephemerals.pop(h.client_id, set())
        # 3.6+ logs the paths; older logs rely on the ephemerals we tracked from creates
        paths = sorted(set(rec.paths) if rec.paths is not None else tracked)
        out = [ZnodeChange(path="/", op=ZnodeOp.CLOSE_SESSION, detail=f"ephemerals={len(paths)}", **self._base(h))]
        for p in paths:
            out.extend(self._delete(h, p, "closeSession"))
        self.sessions_in_chroot.discard(h.client_id)
        self.sessions_elsewhere.discard(h.client_id)
        return out

    def _multi(self, h: TxnHeader, rec: TxnRecord) -> list[ZnodeChange]:
        if any(s.type == ERROR for s in rec.subs):
            return self._failed_multi(h, rec)
        out: list[ZnodeChange] = []
        for s in rec.subs:
            out.extend(self._single(h, s))
        return out

    def _failed_multi(self, h: TxnHeader, rec: TxnRecord) -> list[ZnodeChange]:
        idx, err = next(
            ((i, s.err) for i, s in enumerate(rec.subs) if s.err not in (None, 0, RUNTIME_INCONSISTENCY)),
            (0, RUNTIME_INCONSISTENCY),
        )
        path = self._failed_multi_path(idx, err or 0, len(rec.subs))
        if self.chroot and h.client_id in self.sessions_elsewhere and h.client_id not in self.sessions_in_chroot:
            # a failed multi carries no path: drop it only when its session is known to write elsewhere
            # (a fenced Kafka controller often writes from a fresh session that never touched the chroot)
            return []
        if self.chroot and path != "/" and self.chroot + path not in self.nodes:
            # the check that failed was on a znode this chroot does not have (yet): another cluster's write
            return []
        detail = (
            f"err={err} {_err_name(err or 0)} failed_op={idx} ops={len(rec.subs)}; "
            "path inferred (ZooKeeper does not log the paths of a failed multi)"
        )
        return [ZnodeChange(path=path, op=ZnodeOp.MULTI_FAILED, detail=detail, **self._base(h))]

    def _failed_multi_path(self, idx: int, err: int, n_ops: int) -> str:
        if idx == 0 and err == -103 and n_ops >= 2:
            return self.kafka_fencing_check
        return "/"


# --------------------------------------------------------------------------- whole directories


def choose_base_snapshot(data_dir: str | os.PathLike[str]) -> Snapshot | None:
    """The snapshot to start from when the logs before it were purged (None when logs start at zxid 1).

    Preferred: the newest snapshot older than the first remaining log (the logs continue right after
    it, also across a leader-epoch change where zxids jump); otherwise the oldest snapshot, skipping the
    logged txns it already contains. Unreadable snapshots are skipped with a warning.
    """
    logs = log_files(data_dir)
    first_log = logs[0][0] if logs else None
    if first_log is not None and first_log <= 1:
        return None
    snaps = snapshot_files(data_dir)
    before = [s for s in snaps if first_log is None or s[0] < first_log]
    candidates = list(reversed(before)) + [s for s in snaps if s not in before]
    for _zxid, p in candidates:
        try:
            return read_snapshot(p)
        except (JuteError, OSError, UnicodeDecodeError) as e:
            log.warning("snapshot %s unreadable (%s); trying the next one", p, e)
    return None


# --------------------------------------------------------------------------- the collector


LIVE_TAIL_GRACE_S = 2.0
"""How long the newest log may show the same unreadable entry before it counts as damage: ZooKeeper may be
half-way through writing it (its buffered stream flushes an entry in pieces, and the file grows in steps)."""


@dataclass
class _FileCursor:
    offset: int = 0
    done: bool = False
    reason: str = ""
    last_zxid: int | None = None  # of the last entry read from the file
    suspect: int | None = None  # offset of an unreadable entry in the newest log, not yet taken for damage
    suspect_since: float = 0.0

    def damage_confirmed(self, offset: int) -> bool:
        """The newest log's entry at ``offset`` has stayed unreadable for ``LIVE_TAIL_GRACE_S``."""
        now = time.monotonic()
        if self.suspect != offset:
            self.suspect, self.suspect_since = offset, now
        return now - self.suspect_since >= LIVE_TAIL_GRACE_S


class TxnLogCollector:
    """Reads a ZooKeeper data dir into ``znode_events`` (source txnlog), resumable and idempotent.

    Each commit's batch_seq is the largest zxid in it, so the lake's app transaction for our
    writer_id *is* the resume point: every txn at or below it is already stored. Rows of one txn
    never straddle two commits. The whole log is always re-decoded from the start (cheap) so the
    tree state (czxids, ephemeral owners) is right; only txns above the resume point are written.
    """

    def __init__(
        self,
        lake: LakeLike,
        data_dir: str | os.PathLike[str],
        follow: bool = False,
        *,
        chroot: str = "",
        batch_size: int = 5000,
        poll_seconds: float = 0.5,
        flush_seconds: float = 1.0,
        progress: Callable[[int], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.lake = lake
        self.metrics = metrics  # services.metrics: told of commits, positions, gaps and quarantined stretches
        self._pending_time: float | None = None  # ZooKeeper's time of the newest pending txn (Unix seconds)
        self.data_dir = Path(data_dir)
        self.follow = follow
        self.chroot = chroot.rstrip("/")
        self.batch_size = max(1, batch_size)
        self.poll_seconds = poll_seconds
        # following: what a poll found waits for the next poll until this long after the last commit (a
        # commit costs the same for 10 rows as for 5,000, and every commit is one more file to read)
        self.flush_seconds = flush_seconds
        self._last_commit = 0.0
        self.progress = progress
        self.writer = BronzeWriter(lake, f"txnlog:{self.data_dir.resolve()}{self.chroot}")
        self.decoder = TxnDecoder(chroot=self.chroot)
        self.cursors: dict[Path, _FileCursor] = {}
        self.stopped: list[str] = []
        self._pending: list[dict[str, object]] = []
        self._pending_zxid = -1
        self._floor = -1  # txns at or below this zxid are already in the lake
        self._started = False
        self.gaps = 0  # lost stretches of a log reported (GAP row + quarantine row each)
        self.quarantine = BronzeWriter(lake, f"{self.writer.writer_id}:lost", table=QUARANTINE.name)
        self.lease = WriterLease(lake.root, self.writer.writer_id)  # covers the quarantine writer too

    @property
    def last_zxid(self) -> int | None:
        """Largest zxid stored by this collector (the resume point)."""
        return self.writer.last_seq

    def run(self, stop_event: threading.Event | None = None) -> dict[str, Any]:
        """One pass (or, with follow, passes until ``stop_event`` is set); returns a summary."""
        stop = stop_event or threading.Event()
        try:
            self.poll_once()
            while self.follow and not stop.wait(self.poll_seconds):
                self.poll_once()
            self._flush()
        finally:
            self.close()
        return self.summary()

    def close(self) -> None:
        """Let another process write as this collector (its writer id's lease)."""
        self.lease.release()

    def summary(self) -> dict[str, Any]:
        return {
            "events": self.writer.rows_written,
            "batches": self.writer.batches_written,
            "last_zxid": self.last_zxid,
            "gaps": self.gaps,
            "quarantined": self.quarantine.rows_written,
            "stopped": list(self.stopped),
        }

    def poll_once(self) -> int:
        """Read whatever is new in the data dir and commit it (following: once ``flush_seconds`` have passed since
        the last commit, else at a later poll); returns the rows written."""
        before = self.writer.rows_written
        self.lease.acquire()
        if self.metrics is not None:
            self.metrics.source_connected(self.data_dir.is_dir())
        if not self._started:
            self._start()
        files = log_files(self.data_dir)
        for i, (first, path) in enumerate(files):
            cur = self.cursors.setdefault(path, _FileCursor())
            if cur.done:
                continue
            next_first = files[i + 1][0] if i + 1 < len(files) else None
            self._read_file(path, cur, first, next_first)
        if not self.follow or time.monotonic() - self._last_commit >= self.flush_seconds:
            self._flush()
        if self.metrics is not None:
            self.metrics.loop_turned(idle=not self._pending)
        return self.writer.rows_written - before

    def _start(self) -> None:
        last = self.writer.last_seq
        self._floor = -1 if last is None else last
        snap = choose_base_snapshot(self.data_dir)
        if snap is not None:
            rows = [self._row(c) for c in self.decoder.seed(snap)]
            if snap.zxid > self._floor and rows:
                if self.writer.write(rows, batch_seq=snap.zxid) and self.metrics is not None:
                    self.metrics.rows_committed(TABLE, SOURCE, len(dedupe(rows)))
                if self.metrics is not None:
                    self.metrics.committed(SOURCE, snap.zxid)
            self._floor = max(self._floor, snap.zxid)
            log.info("txnlog %s: starting from snapshot.%x (%d znodes)", self.data_dir, snap.zxid, len(rows))
        self._started = True

    def _read_file(self, path: Path, cur: _FileCursor, first: int, next_first: int | None) -> None:
        """Read what is new in one log (named after its ``first`` zxid); ``next_first``: the next log's.

        A damaged stretch with readable entries after it (this log's or a finished one's) is reported as
        lost (GAP + quarantine) and reading goes on after it; a damaged tail ends the read. In the newest log,
        which ZooKeeper may still be writing, an entry counts as damaged only once it has stayed unreadable for
        ``LIVE_TAIL_GRACE_S`` (following: at a later poll; else after waiting here).
        """
        live = next_first is None
        while True:
            res = read_log(path, cur.offset)
            for entry in res.entries:
                self._take(entry, cur)
            cur.offset = res.end_offset
            if res.clean:
                cur.suspect = None
                break
            if live and not cur.damage_confirmed(res.end_offset):
                if self.follow:
                    return  # read again at the next poll
                time.sleep(max(LIVE_TAIL_GRACE_S - (time.monotonic() - cur.suspect_since), 0.0))
                continue
            resume = next_readable_entry(path, res.end_offset, cur.last_zxid)
            if resume is None:
                break
            offset, zxid = resume
            first_lost = first if cur.last_zxid is None else cur.last_zxid + 1
            self._report_lost(path, res, first_lost, zxid - 1, offset)
            cur.offset = offset
        if not res.clean and res.reason != cur.reason:
            cur.reason = res.reason
            self.stopped.append(f"{path.name}: {res.reason}")
            log.warning("txn log %s: stopped reading: %s", path, res.reason)
        # a newer log exists, so this one is complete (ZooKeeper rolls logs, never appends to old ones)
        cur.done = next_first is not None
        if next_first is not None and not res.clean:
            self._lost_tail(path, cur, res, first, next_first)

    def _take(self, entry: TxnEntry, cur: _FileCursor) -> None:
        changes = self.decoder.apply(entry)
        zxid = entry.header.zxid
        cur.last_zxid = zxid
        if zxid <= self._floor or not changes:
            return
        if len(self._pending) >= self.batch_size:
            self._flush()
        self._pending.extend(self._row(c) for c in changes)
        self._pending_zxid = zxid
        self._pending_time = entry.header.time_ms / 1000
        if self.metrics is not None:
            self.metrics.seen(SOURCE, zxid, self._pending_time)

    def _lost_tail(self, path: Path, cur: _FileCursor, res: LogReadResult, first: int, next_first: int) -> None:
        """A finished log that could not be read to its end: the transactions between its last readable
        entry and the next log's first are lost. Say so in the lake, where the pipeline sees it: a GAP row
        (a COLLECTION_GAP anomaly) and the unreadable bytes in quarantine."""
        first_lost = first if cur.last_zxid is None else cur.last_zxid + 1
        if first_lost >= next_first:
            return  # only bytes after the file's last transaction (the next log starts right after it)
        if first_lost <= self._floor:
            return  # reported by an earlier run
        last_lost = next_first - 1
        next_epoch = ((first_lost >> 32) + 1) << 32  # a zxid is (epoch << 32) | counter
        if next_first >= next_epoch:  # the next log starts a newer epoch
            if res.reason.startswith("torn"):
                # a crash while logging a proposal, then a new leader: that proposal was never committed
                log.warning("txn log %s: torn last entry before epoch %d, nothing lost", path, next_first >> 32)
                return
            last_lost = next_epoch - 1  # corruption: the rest of the old epoch is unknown
        self._report_lost(path, res, first_lost, last_lost, None)

    def _report_lost(self, path: Path, res: LogReadResult, first_lost: int, last_lost: int, resume: int | None) -> None:
        """GAP row + quarantine row (the unreadable bytes) for transactions ``first_lost..last_lost`` lost to
        damage starting at ``res.end_offset``; ``resume``: where readable entries start again (None: never)."""
        if first_lost <= self._floor or first_lost > last_lost:
            return  # reported by an earlier run, or no transaction fits in the damaged stretch
        self._flush()
        with open(path, "rb") as f:
            f.seek(res.end_offset)
            raw = f.read(min(QUARANTINE_RAW_BYTES, resume - res.end_offset) if resume is not None else 64)
        where = (f"bytes {res.end_offset}..{resume - 1} unreadable, read again from offset {resume}"
                 if resume is not None else f"bytes from offset {res.end_offset} unreadable")
        detail = f"{path.name}: {res.reason}; transactions {first_lost:#x}..{last_lost:#x} are lost at most ({where})"
        ref = f"{path.name}:{res.end_offset}"
        source = str(Source.TXNLOG)
        kept = self.quarantine.write([{"cluster": self.lake.cluster, "source": source, "raw": raw.hex(),
                                       "reason": detail, "observed_at": datetime.now(UTC), "ref": ref,
                                       "event_id": event_id(self.lake.cluster, source, ref, detail)}],
                                     batch_seq=first_lost)
        if self.metrics is not None and kept:  # not kept: reported by an earlier run
            self.metrics.rows_committed(QUARANTINE.name, source, 1)
            self.metrics.quarantined(source, detail)
            self.metrics.gap(source)
        self._pending.append(self._row(ZnodeChange(zxid=first_lost, path="/", op=ZnodeOp.GAP, detail=detail)))
        self._pending_zxid = first_lost
        self.gaps += 1
        self._flush()

    def _row(self, change: ZnodeChange) -> dict[str, object]:
        return change_row(change, cluster=self.lake.cluster, source=Source.TXNLOG)

    def _flush(self) -> None:
        if not self._pending:
            return
        before = self.writer.rows_written
        self.writer.write(self._pending, batch_seq=self._pending_zxid)
        if self.metrics is not None:
            self.metrics.rows_committed(TABLE, SOURCE, self.writer.rows_written - before)
            self.metrics.committed(SOURCE, self._pending_zxid, self._pending_time)
        self._last_commit = time.monotonic()
        self._floor = self._pending_zxid
        if self.progress is not None:
            self.progress(len(self._pending))
        self._pending = []
