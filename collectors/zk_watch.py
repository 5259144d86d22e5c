"""Live watch collector: snapshot a ZooKeeper subtree, then follow it with one-shot watches.

kazoo 2.11 has no persistent watches, so every znode carries a data watch and a children watch,
re-armed by the read that handles it. Watch callbacks and connection-state listeners only put
work on one queue (they never block); one worker thread does all reads and writes.

Row zxids: CREATE = czxid, SET = mzxid, DELETE = a zxid at or after the real delete and before any
later change of that path (see ``_delete_zxid``). GAP = the largest zxid seen so far on path "/" for
a connection gap, or, for child changes known to be missed, a zxid after them on the parent's path.
Rows found by diffing the tree after a gap or restart have source ``resync``; a SET whose version
jumped by more than one carries ``missed_versions``.

Nothing is lost silently: a child watch is armed by the very read that lists the children (for a new
znode, before its data is read), so every later child change is notified; when the notified relist
cannot be done (the znode is gone) or shows more cversion steps than were seen, or a listed child is
gone before it is read, a GAP names the path whose children were missed. A znode the collector's user
may not read (ACL) gets one GAP naming it; it is retried with a growing delay, and the rest of the tree
is collected meanwhile.

Cost: a snapshot or resync reads the tree breadth-first, ``READ_BATCH`` znodes' data and children per
multiRead request (ZooKeeper 3.6+, ``collectors.zk_batch``), then arms their watches with SetWatches in
large batches. SetWatches carries the zxid the multiRead saw, and the server fires at once any watch whose
znode changed after it, so nothing changed between the read and the arming is lost. A server without
multiRead gets the per-znode path: a getData and a getChildren with watches per znode, ``SWEEP_WINDOW``
znodes in flight. Each listing costs its own children, not the tree (a parent -> children index), so the
work is linear in the tree. A restart reads back only the newest row per path (``load_view``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError, UnimplementedError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

from collectors.bronze import TABLE, BronzeWriter, LakeLike, WriterLease, change_row, dedupe
from collectors.zk_batch import BatchReader, MultiReadAnswer, Read
from models.events import Source, ZnodeChange, ZnodeOp

if TYPE_CHECKING:
    from services.metrics import Metrics

log = logging.getLogger(__name__)

WATCH_SOURCES = (str(Source.WATCH), str(Source.RESYNC))
WATCH = str(Source.WATCH)  # the metrics' source label of this collector's position, gaps and connection
SWEEP_WINDOW = 2000  # znodes read ahead during a per-znode snapshot/resync (two requests each)
READ_BATCH = 1000  # znodes per multiRead during a snapshot/resync (two ops each)
READ_BATCH_PATH_BYTES = 128 * 1024  # and at most this much path text: the request stays far below jute.maxbuffer
READS_IN_FLIGHT = 3  # multiReads sent ahead of the one being applied
RESYNC_BATCH_ROWS = 20_000  # rows per commit while a snapshot/resync runs (latency matters less than commits)
RETRY_FIRST_S, RETRY_MAX_S = 5.0, 300.0  # an unreadable znode is retried after 5 s, 10 s, ... at most 5 min
RESYNC_RETRY_MAX_S = 30.0  # a failing resync is retried after 0.5 s, 1 s, ... at most this
_VIEW_COLUMNS = ["path", "zxid", "op", "version", "mzxid", "czxid"]
_VIEW_OPS = (str(ZnodeOp.CREATE), str(ZnodeOp.SET), str(ZnodeOp.DELETE))


@dataclass(frozen=True, slots=True)
class Known:
    """What we last knew about one znode."""

    version: int
    mzxid: int
    czxid: int


@dataclass(slots=True)
class _Backoff:
    """When an unreadable znode is tried again."""

    due: float
    delay: float
    failures: int = 1


@dataclass(slots=True)
class _ListingCheck:
    """A listing's cversion check, waiting for the reads of the children it added (sweep)."""

    path: str
    stat: ZnodeStat
    observed: int
    waiting: int
    done: bool = field(default=False)


class ScannableLake(LakeLike, Protocol):
    def exists(self, table: str) -> bool: ...

    def snapshot(self, table: str) -> Any: ...


def load_view(lake: ScannableLake, sources: tuple[str, ...] = WATCH_SOURCES) -> tuple[dict[str, Known], int]:
    """The tree our rows in ``znode_events`` describe (path -> newest CREATE/SET, deleted paths left out)
    and the largest zxid among them.

    Reads only the view's columns of this cluster's rows of ``sources``, batch by batch, and keeps the newest
    row per path in Arrow, so memory follows the number of paths, not the length of the history.
    """
    if not lake.exists(TABLE):
        return {}, 0
    where = (pc.field("cluster") == lake.cluster) & pc.field("source").isin(list(sources))
    batches = lake.snapshot(TABLE).to_pyarrow_dataset().to_batches(columns=_VIEW_COLUMNS, filter=where)
    max_zxid = 0
    newest: pa.Table | None = None
    parts: list[pa.Table] = []
    held = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        top = pc.max(batch.column("zxid")).as_py()
        max_zxid = max(max_zxid, top or 0)
        part = pa.Table.from_batches([batch]).filter(pc.is_in(batch.column("op"), pa.array(_VIEW_OPS)))
        parts.append(part)
        held += part.num_rows
        if held > max(1_000_000, 2 * (newest.num_rows if newest is not None else 0)):
            newest = _newest_per_path(pa.concat_tables([*([newest] if newest is not None else []), *parts]))
            parts, held = [], 0
    if parts:
        newest = _newest_per_path(pa.concat_tables([*([newest] if newest is not None else []), *parts]))
    view: dict[str, Known] = {}
    if newest is None:
        return view, max_zxid
    live = newest.filter(pc.not_equal(newest.column("op"), str(ZnodeOp.DELETE)))
    for path, version, mzxid, czxid in zip(*(live.column(c).to_pylist() for c in ("path", "version", "mzxid", "czxid")),
                                           strict=True):
        view[path] = Known(version, mzxid, czxid)
    return view, max_zxid


def _newest_per_path(rows: pa.Table) -> pa.Table:
    """The last row per path in (zxid, a DELETE before a CREATE/SET at one zxid) order."""
    if rows.num_rows == 0:
        return rows
    live = pc.cast(pc.not_equal(rows.column("op"), str(ZnodeOp.DELETE)), pa.int8())
    keyed = rows.append_column("_live", live).sort_by([("path", "ascending"), ("zxid", "ascending"),
                                                       ("_live", "ascending")])
    paths = keyed.column("path").combine_chunks()
    n = len(paths)
    last = pa.concat_arrays([pc.not_equal(paths.slice(0, n - 1), paths.slice(1)), pa.array([True])])
    return keyed.filter(last).drop_columns(["_live"])


class ZkWatchCollector:
    """Watches ``hosts`` + ``chroot`` and appends what it sees to ``znode_events`` (never writes to ZooKeeper)."""

    def __init__(
        self,
        lake: ScannableLake,
        hosts: str,
        chroot: str = "",
        *,
        auth_data: list[tuple[str, str]] | None = None,
        use_ssl: bool = False,
        certfile: str | None = None,
        keyfile: str | None = None,
        ca: str | None = None,
        verify_certs: bool = True,
        timeout: float = 15.0,
        batch_size: int = 500,
        flush_seconds: float = 2.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.lake = lake
        self.metrics = metrics  # services.metrics: told of commits, positions, gaps and the connection
        self.hosts = hosts + chroot.rstrip("/")
        self.writer = BronzeWriter(lake, f"watch:{self.hosts}")
        self.lease = WriterLease(lake.root, self.writer.writer_id)
        self.client = KazooClient(
            hosts=self.hosts, timeout=timeout, auth_data=auth_data or None, read_only=False,
            use_ssl=use_ssl, certfile=certfile or None, keyfile=keyfile or None, ca=ca or None,
            verify_certs=verify_certs,
        )
        self.batch = BatchReader(self.client)
        # multiRead + SetWatches for snapshots/resyncs; None until the server was asked (``start``)
        self.batched: bool | None = None
        # test hook: runs with a batch's paths after its multiRead is applied and before its watches are armed
        self.before_arming: Callable[[list[str]], None] | None = None
        self.batch_size = max(1, batch_size)
        self.flush_seconds = flush_seconds
        self.view: dict[str, Known] = {}
        self.kids: dict[str, set[str]] = {}  # parent path -> paths of its children in the view
        self.cversions: dict[str, int] = {}
        # child creates/deletes under a parent seen some other way (a child's own watch) since its last listing
        self.child_changes: dict[str, int] = {}
        self.unreadable: dict[str, _Backoff] = {}  # znodes the ACLs keep from us, and when to try again
        self.work: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.gaps = 0
        self.resyncs = 0
        self.max_zxid = 0
        self._pending: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()
        self._in_gap = False
        self._need_resync = False
        self._resync_due = 0.0
        self._resync_delay = 0.0
        self._sweeping = False
        self._started = False
        self._first_snapshot = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Take the writer id's lease, connect, load the last known view from the lake, and snapshot (resync)
        the subtree. WriterBusyError when another process collects as this writer."""
        self.lease.acquire()
        try:
            self.client.start()
            if self.metrics is not None:
                self.metrics.source_connected(True)
            if self.batched is None:
                # before the state listener: an old server answers by dropping the connection, which is no gap
                self.batched = self.batch.multi_read_supported()
                if not self.batched:
                    log.info("the server has no multiRead (ZooKeeper < 3.6): reading znode by znode")
            self.client.add_listener(self._on_state)
            self._load_view()
            if self.view:
                self._gap("collector restarted; changes while it was down are reconstructed by resync")
            self._first_snapshot = not self.view
            self._resync(Source.RESYNC)
            self._first_snapshot = False
            self._flush()
        except BaseException:
            self.lease.release()
            raise
        self._started = True

    def stop(self, drain_seconds: float = 5.0) -> None:
        """Handle the notifications already received (each names a change that happened), flush, disconnect."""
        try:
            self._finish_queued(drain_seconds)
            self._flush()
        finally:
            self.client.stop()
            self.client.close()
            self.lease.release()

    def _finish_queued(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        while self.client.connected and time.monotonic() < deadline:
            try:
                kind, arg = self.work.get_nowait()
            except queue.Empty:
                return
            self._handle(kind, arg)
        left = self.work.qsize()
        if left:  # never drop them silently: the next start resyncs and reports its own gap too
            self._gap(f"stopped with {left} notification(s) unhandled", flush=False)

    def run(self, stop_event: threading.Event) -> dict[str, int]:
        """Collect until ``stop_event`` is set (the CLI sets it on SIGTERM/SIGINT), flush, disconnect."""
        if not self._started:
            self.start()
        try:
            while not stop_event.is_set():
                self.step(timeout=0.2)
        finally:
            self.stop()
        return self.summary()

    def run_for(self, seconds: float) -> dict[str, int]:
        stop = threading.Event()
        threading.Timer(seconds, stop.set).start()
        return self.run(stop)

    def drain(self, quiet: float = 0.5, limit: float = 30.0) -> None:
        """Process work until none arrived for ``quiet`` seconds (tests), then flush."""
        if not self._started:
            self.start()
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if not self.step(timeout=quiet) and not self._need_resync:
                break
        self._flush()

    def summary(self) -> dict[str, int]:
        return {"events": self.writer.rows_written, "batches": self.writer.batches_written, "gaps": self.gaps,
                "quarantined": 0}

    def step(self, timeout: float) -> bool:
        """Handle one queued item (or a pending resync); False when nothing was there."""
        handled = False
        now = time.monotonic()
        if self._need_resync and self.client.connected and now >= self._resync_due:
            self._resync(Source.RESYNC)
            handled = True
        if self.unreadable and self.client.connected:
            self._retry_unreadable(now)
        try:
            kind, arg = self.work.get(timeout=timeout)
        except queue.Empty:
            kind, arg = "", None
        if kind:
            self._handle(kind, arg)
            handled = True
        if len(self._pending) >= self.batch_size or time.monotonic() - self._last_flush >= self.flush_seconds:
            self._flush()
        if self.metrics is not None:
            self.metrics.loop_turned(idle=not self._pending and not self._need_resync)
        return handled

    # ------------------------------------------------------------------ callbacks (never block)

    def _on_state(self, state: str) -> None:
        self.work.put(("state", state))

    def _on_data(self, event: WatchedEvent) -> None:
        if event.path is not None:  # path-less events are connection news, reported by _on_state
            self.work.put(("node", event.path or "/"))  # kazoo strips the chroot: its root arrives as ""

    def _on_children(self, event: WatchedEvent) -> None:
        if event.path is not None:
            # the type matters: CHILD = some child came or went since the listing that armed the watch,
            # DELETED = the znode itself went with no child change in between
            self.work.put(("children", (event.path or "/", event.type)))

    # ------------------------------------------------------------------ worker

    def _handle(self, kind: str, arg: Any) -> None:
        try:
            if kind == "state":
                self._handle_state(arg)
            elif kind == "node":
                if arg in self.view:  # else a late notice for a recorded delete; a re-creation shows in the parent
                    self._visit(arg, Source.WATCH)
            elif kind == "children":
                path, fired = arg
                changed = fired == EventType.CHILD
                if path in self.view:
                    self._children(path, Source.WATCH, changed=changed)
                elif changed:  # its delete is recorded, but not what happened under it before
                    self._missed_children(path, self._delete_zxid(path))
        except KazooException as e:  # connection trouble mid-read: the state listener reports the gap
            log.warning("read failed (%s: %s); will resync after reconnect", type(e).__name__, e)
            self._need_resync = True

    def _handle_state(self, state: str) -> None:
        if self.metrics is not None:
            self._count_state(state, self.metrics)
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            if not self._in_gap:
                self._gap(f"connection {state.lower()}" + ("; session expired or closed" if state == KazooState.LOST else ""))
            self._in_gap = True
            self._need_resync = True
        elif state == KazooState.CONNECTED and self._in_gap:
            self._in_gap = False
            self._need_resync = True
            self._resync_due = 0.0

    def _count_state(self, state: str, metrics: Metrics) -> None:
        metrics.source_connected(state == KazooState.CONNECTED)
        if state == KazooState.LOST:
            metrics.session_expired(WATCH)
        elif state == KazooState.CONNECTED and self._in_gap:
            metrics.reconnected(WATCH)

    def _gap(self, reason: str, path: str = "/", zxid: int | None = None, *, flush: bool = True) -> None:
        at = self.max_zxid if zxid is None else zxid
        self.gaps += 1
        if self.metrics is not None:
            self.metrics.gap(WATCH)
        self._emit(ZnodeChange(zxid=at, path=path, op=ZnodeOp.GAP, detail=reason), Source.WATCH)
        log.warning("collection gap at zxid %d (%s): %s", at, path, reason)
        if flush:
            self._flush()

    # ------------------------------------------------------------------ unreadable znodes (ACLs)

    def _unreadable(self, path: str, error: NoAuthError) -> None:
        """The ACL of ``path`` denies us READ: one GAP naming it (its content and subtree are missed), then
        retries with a growing delay; never a resync, which would only meet the same ACL again."""
        now = time.monotonic()
        known = self.unreadable.get(path)
        if known is not None:
            known.failures += 1
            known.delay = min(known.delay * 2, RETRY_MAX_S)
            known.due = now + known.delay
            return
        self.unreadable[path] = _Backoff(now + RETRY_FIRST_S, RETRY_FIRST_S)
        # its stat is unreadable too: the zxid of the refused read's reply is at or after its last change
        at = max(int(self.client.last_zxid), self.max_zxid)
        self._gap(f"{path} is not readable by the collector's user ({type(error).__name__}: no READ permission "
                  "in its ACL): its data and everything under it are not collected; retried with backoff",
                  path=path, zxid=at, flush=False)

    def _behind_acl(self, path: str) -> bool:
        """Whether ``path`` or an ancestor is unreadable (then not reading it says nothing about a delete)."""
        while True:
            if path in self.unreadable:
                return True
            if path == "/":
                return False
            path = path.rsplit("/", 1)[0] or "/"

    def _retry_unreadable(self, now: float) -> None:
        for path, backoff in list(self.unreadable.items()):
            if backoff.due > now or self.unreadable.get(path) is not backoff:
                continue
            try:
                there = self.client.exists(path) is not None
            except NoAuthError as e:  # ZooKeeper 3.9 checks READ on exists too
                self._unreadable(path, e)
                continue
            if not there:
                del self.unreadable[path]  # gone: a known one's delete is recorded by its parent's listing
                continue
            failures = backoff.failures
            known = path in self.view
            if self._visit(path, Source.RESYNC) and known and backoff.failures == failures:
                self._children(path, Source.RESYNC)
            if backoff.failures == failures:  # no NoAuthError this time
                self.unreadable.pop(path, None)
                log.info("%s is readable again", path)

    # ------------------------------------------------------------------ reading

    def _visit(self, path: str, source: Source) -> bool:
        """Read one znode (re-arming its data watch) and emit what changed; False if it is gone or unreadable."""
        if path not in self.view:
            return self._visit_new(path, source)
        try:
            data, stat = self.client.get(path, watch=self._on_data)
        except NoNodeError:
            self._deleted(path, source)
            return False
        except NoAuthError as e:
            self._unreadable(path, e)
            return False
        self._observe(path, data, stat, source)
        return True

    def _visit_new(self, path: str, source: Source, tries: int = 3) -> bool:
        """A znode we do not know yet: list its children before reading it, so that its child watch is
        armed from the first read on (any child change after it is then notified, see ``_children``)."""
        try:
            kids, listed = self.client.get_children(path, watch=self._on_children, include_data=True)
            data, stat = self.client.get(path, watch=self._on_data)
        except NoNodeError:
            self._vanished(path)
            return False
        except NoAuthError as e:
            self._unreadable(path, e)
            return False
        return self._new_read(path, source, kids, listed, data, stat, tries, None)

    def _new_read(self, path: str, source: Source, kids: list[str], listed: ZnodeStat, data: bytes,
                  stat: ZnodeStat, tries: int, sweep: deque[tuple[str, _ListingCheck | None]] | None) -> bool:
        if stat.czxid != listed.czxid:  # deleted and re-created between the two reads: start over
            self._vanished(path)
            return tries > 1 and self._visit_new(path, source, tries - 1)
        self._observe(path, data, stat, source, listing=(kids, listed), sweep=sweep)
        return True

    def _vanished(self, path: str, at: int | None = None) -> None:
        # listed under its parent but gone before it could be read: it and whatever was created under it are
        # missed; the reply zxid of the failed read (``at``) is at or after its delete
        zxid = at if at is not None else int(self.client.last_zxid)
        self._gap(f"{path} was deleted before it could be read: it and anything created under it are missed",
                  path=path, zxid=max(zxid, 0), flush=False)

    def _know(self, path: str, known: Known) -> None:
        if path not in self.view and path != "/":
            self.kids.setdefault(path.rsplit("/", 1)[0] or "/", set()).add(path)
        self.view[path] = known

    def _forget(self, path: str) -> Known | None:
        old = self.view.pop(path, None)
        if old is not None and path != "/":
            parent = path.rsplit("/", 1)[0] or "/"
            siblings = self.kids.get(parent)
            if siblings is not None:
                siblings.discard(path)
                if not siblings:
                    del self.kids[parent]
        return old

    def _observe(
        self, path: str, data: bytes, stat: ZnodeStat, source: Source,
        listing: tuple[list[str], ZnodeStat] | None = None,
        sweep: deque[tuple[str, _ListingCheck | None]] | None = None,
    ) -> bool:
        """Record one read; True when it is a new incarnation whose children were listed here."""
        old = self.view.get(path)
        if old is not None and old.mzxid == stat.mzxid and old.czxid == stat.czxid:
            return False  # duplicate notification
        if old is not None and old.czxid != stat.czxid:
            self._deleted(path, source, at=stat.czxid - 1, counted=True)  # deleted and re-created between two reads
            old = None
        self._know(path, Known(stat.version, stat.mzxid, stat.czxid))
        if old is None:
            self._emit_stat(path, ZnodeOp.CREATE, stat.czxid, data, stat, source, stat.version or None)
            if not self._first_snapshot:
                self.cversions[path] = 0  # born while we watch: all its child changes should be seen
            if listing is not None:
                self._apply_listing(path, *listing, source, sweep=sweep)
            else:
                # re-created since the last read: its children were not watched until this listing, so if
                # it is gone already, report what may have happened under it
                self._children(path, source, changed=True)
            return True
        missed = stat.version - old.version - 1
        self._emit_stat(path, ZnodeOp.SET, stat.mzxid, data, stat, source, missed if missed > 0 else None)
        return False

    def _children(self, path: str, source: Source, *, changed: bool = False) -> list[str]:
        """Read (and re-watch) the children; visit new ones, delete gone ones; returns their paths.

        ``changed``: a child watch fired with NodeChildrenChanged, so children came or went since the
        listing that armed it. If ``path`` is gone (or is a new incarnation) before this relist, those
        changes can no longer be seen and are reported as a GAP on ``path``.
        """
        try:
            kids, stat = self.client.get_children(path, watch=self._on_children, include_data=True)
        except NoNodeError:
            at = self._deleted(path, source)
            if changed:
                self._missed_children(path, at if at is not None else self._delete_zxid(path))
            return []
        except NoAuthError as e:
            self._unreadable(path, e)
            return []
        return self._listed(path, kids, stat, source, changed=changed)

    def _listed(self, path: str, kids: list[str], stat: ZnodeStat, source: Source, *, changed: bool = False,
                sweep: deque[tuple[str, _ListingCheck | None]] | None = None) -> list[str]:
        known_node = self.view.get(path)
        if known_node is not None and known_node.czxid != stat.czxid:
            # deleted and re-created since we knew it: the old one's child changes are lost with it
            self._deleted(path, source, at=stat.czxid - 1, counted=True)
            if changed:
                self._missed_children(path, stat.czxid - 1)
            self._visit(path, source)  # records the new incarnation and lists its children
            return [path.rstrip("/") + "/" + k for k in kids]
        return self._apply_listing(path, kids, stat, source, sweep=sweep)

    def _apply_listing(self, path: str, kids: list[str], stat: ZnodeStat, source: Source,
                       sweep: deque[tuple[str, _ListingCheck | None]] | None = None) -> list[str]:
        """Visit the new children of one listing, delete the gone ones, check the cversion; their paths.

        With ``sweep`` (a snapshot/resync) every listed child is queued there to be read in a later window
        instead, and the cversion check waits for the reads of the new ones.
        """
        prefix = path.rstrip("/") + "/"
        current = [prefix + k for k in kids]
        listed = set(current)
        known = self.kids.get(path, set())
        added = [child for child in current if child not in self.view]
        gone = sorted(known - listed)
        for child in gone:
            # the parent's pzxid in this very listing is at or after the child's delete, and the child
            # is not back in it, so it comes before any re-creation
            self._deleted(child, source, at=stat.pzxid, counted=True)
        observed = len(gone) + self.child_changes.pop(path, 0)
        if sweep is not None:
            check = _ListingCheck(path, stat, observed, len(added))
            new = set(added)
            for child in current:
                sweep.append((child, check if child in new else None))
            if not added:
                self._check_cversion(path, stat, observed)
            return current
        # a listed child already gone when read came and went unseen: not counted, so the cversion check
        # reports it; one we may not read was seen (and has its own GAP)
        seen = sum(1 for child in added if self._visit(child, source) or child in self.unreadable)
        self._check_cversion(path, stat, observed + seen)
        return current

    def _missed_children(self, path: str, at: int) -> None:
        self.cversions.pop(path, None)
        self._gap(f"children of {path} changed and it was deleted before they could be listed again: "
                  "child creates/deletes under it may be missed", path=path, zxid=at, flush=False)

    def _check_cversion(self, path: str, stat: ZnodeStat, observed: int) -> None:
        # cversion counts child creates+deletes: a bigger jump than we saw means a child came and went unseen
        old = self.cversions.get(path)
        self.cversions[path] = stat.cversion
        if old is not None and stat.cversion - old > observed:
            missed = stat.cversion - old - observed
            self._gap(f"{missed} child create/delete(s) under {path} missed (cversion {old}->{stat.cversion})",
                      path=path, zxid=stat.pzxid)

    def _deleted(self, path: str, source: Source, *, at: int | None = None, counted: bool = False) -> int | None:
        """Record the delete of a known znode and its known subtree; returns the DELETE's zxid.

        ``counted``: the caller accounts for it in the parent's cversion check itself.
        """
        old = self._forget(path)
        if old is None:
            return None
        self.cversions.pop(path, None)
        self.child_changes.pop(path, None)
        if not counted and path != "/":
            # still known, so the parent's last listing had it: this delete came after that listing
            parent = path.rsplit("/", 1)[0] or "/"
            self.child_changes[parent] = self.child_changes.get(parent, 0) + 1
        zxid = at if at is not None else self._delete_zxid(path)
        # a znode's children are deleted before it and re-created after it: its stamp bounds them too
        for sub in sorted(self.kids.get(path, ())):
            self._deleted(sub, source, at=zxid, counted=True)
        self._emit(ZnodeChange(zxid=zxid, path=path, op=ZnodeOp.DELETE, czxid=old.czxid, mzxid=old.mzxid), source)
        return zxid

    def _delete_zxid(self, path: str) -> int:
        """A zxid at or after the (already happened) delete of ``path`` and before any later re-creation.

        Why it holds: take the lowest ancestor that still exists. If it is the incarnation we knew, its
        pzxid was bumped by the delete of its child on our path, which ZooKeeper only allows once the
        whole subtree (``path`` included) was gone, and a re-creation of ``path`` needs that child
        re-created first. If it was re-created since (czxid changed), the old subtree was gone before
        its czxid, so czxid - 1 is after the delete and before anything new below it.
        """
        ancestor = path
        while ancestor != "/":
            ancestor = ancestor.rsplit("/", 1)[0] or "/"
            stat = self.client.exists(ancestor)
            if stat is None:
                continue
            known = self.view.get(ancestor)
            bound = int(stat.czxid) - 1 if known is not None and known.czxid != stat.czxid else int(stat.pzxid)
            if ancestor == (path.rsplit("/", 1)[0] or "/"):
                again = self.client.exists(path)  # re-created after the delete, under the same parent
                if again is not None:
                    bound = min(bound, int(again.czxid) - 1)
            return bound
        # nothing above it survives (the watched root itself is gone): the server's zxid when it told us so
        return max(int(self.client.last_zxid), self.max_zxid)

    # ------------------------------------------------------------------ snapshot / resync

    def _resync(self, source: Source) -> None:
        """Diff the whole subtree against the last known view, re-arming every watch.

        A failed resync (connection trouble) is retried after a growing delay, not at once.
        """
        self._need_resync = False
        self.resyncs += 1
        self._sweeping = True
        try:
            seen: set[str] = set()
            if self.batched:
                self._sweep_batched(seen, source)
            else:
                self._sweep(seen, source)
            # shallowest first: a deleted znode's stamp then bounds its subtree (see _deleted)
            for gone in sorted(set(self.view) - seen, key=len):
                if gone in self.view and not self._behind_acl(gone):
                    self._deleted(gone, source)
            self._resync_delay = 0.0
        except KazooException as e:
            if isinstance(e, UnimplementedError) and self.batched:
                self.batched = False  # reconnected to an older server (a rolling up/downgrade)
                log.warning("the server has no multiRead (ZooKeeper < 3.6): reading znode by znode")
            self._resync_delay = min(max(self._resync_delay * 2, 0.5), RESYNC_RETRY_MAX_S)
            self._resync_due = time.monotonic() + self._resync_delay
            log.warning("resync interrupted (%s: %s); retrying in %.1fs", type(e).__name__, e, self._resync_delay)
            self._need_resync = True
        finally:
            self._sweeping = False

    def _sweep(self, seen: set[str], source: Source) -> None:
        """Read the tree breadth-first with ``SWEEP_WINDOW`` znodes' reads in flight (ZooKeeper answers one
        session's requests in order, so a new znode's listing still precedes its data read)."""
        frontier: deque[tuple[str, _ListingCheck | None]] = deque([("/", None)])
        while frontier:
            window = [frontier.popleft() for _ in range(min(SWEEP_WINDOW, len(frontier)))]
            reads = [self._send(path) for path, _check in window]
            for (path, check), (new, first, second) in zip(window, reads, strict=True):
                ok = self._swept(path, new, first, second, source, frontier)
                if ok:
                    seen.add(path)
                if check is not None:
                    check.waiting -= 1
                    check.observed += ok or path in self.unreadable
                    if check.waiting == 0:
                        self._check_cversion(check.path, check.stat, check.observed)

    def _sweep_batched(self, seen: set[str], source: Source) -> None:
        """Read the tree breadth-first, ``READ_BATCH`` znodes per multiRead and ``READS_IN_FLIGHT`` multiReads
        ahead; after applying each answer, arm its znodes' data and child watches relative to the answer's zxid."""
        frontier: deque[tuple[str, _ListingCheck | None]] = deque([("/", None)])
        inflight: deque[tuple[list[tuple[str, _ListingCheck | None]], IAsyncResult]] = deque()
        arming: deque[IAsyncResult] = deque()
        while frontier or inflight:
            while frontier and len(inflight) < READS_IN_FLIGHT:
                batch: list[tuple[str, _ListingCheck | None]] = []
                size = 0
                while frontier and len(batch) < READ_BATCH and size < READ_BATCH_PATH_BYTES:
                    batch.append(frontier.popleft())
                    size += len(batch[-1][0])
                inflight.append((batch, self.batch.read([path for path, _check in batch])))
            batch, pending = inflight.popleft()
            answer: MultiReadAnswer = pending.get()
            read: list[str] = []
            for (path, check), result in zip(batch, answer.reads, strict=True):
                ok = self._swept_read(path, result, answer.zxid, source, frontier)
                if ok:
                    seen.add(path)
                    read.append(path)
                if check is not None:
                    check.waiting -= 1
                    check.observed += ok or path in self.unreadable
                    if check.waiting == 0:
                        self._check_cversion(check.path, check.stat, check.observed)
            if self.before_arming is not None:
                self.before_arming(read)
            arming.extend(self.batch.arm(answer.zxid, read, self._on_data, self._on_children))
            while arming and arming[0].ready():
                arming.popleft().get()  # raises a connection failure, as a read would
        for armed in arming:
            armed.get()

    def _swept_read(self, path: str, result: Read | KazooException, zxid: int, source: Source,
                    frontier: deque[tuple[str, _ListingCheck | None]]) -> bool:
        """Apply one znode of a multiRead answer (data, stat and listing of one moment); False when it is gone or
        unreadable."""
        if isinstance(result, NoNodeError):
            if path in self.view:
                self._deleted(path, source)
            else:
                self._vanished(path, zxid)
            return False
        if isinstance(result, NoAuthError):
            self._unreadable(path, result)
            return False
        if isinstance(result, KazooException):
            raise result
        data, stat, kids = result
        if not self._observe(path, data, stat, source, listing=(kids, stat), sweep=frontier):
            self._apply_listing(path, kids, stat, source, sweep=frontier)
        return True

    def _send(self, path: str) -> tuple[bool, IAsyncResult, IAsyncResult]:
        if path not in self.view:  # as _visit_new: the listing (arming the child watch) first
            return (True, self.client.get_children_async(path, watch=self._on_children, include_data=True),
                    self.client.get_async(path, watch=self._on_data))
        return (False, self.client.get_async(path, watch=self._on_data),
                self.client.get_children_async(path, watch=self._on_children, include_data=True))

    def _swept(self, path: str, new: bool, first: IAsyncResult, second: IAsyncResult, source: Source,
               frontier: deque[tuple[str, _ListingCheck | None]]) -> bool:
        """Apply one znode's two reads from the sweep (as ``_visit`` then ``_children`` would); False when it is
        gone or unreadable."""
        if new:
            try:
                kids, listed = first.get()
                data, stat = second.get()
            except NoNodeError:
                self._vanished(path)
                return False
            except NoAuthError as e:
                self._unreadable(path, e)
                return False
            if path in self.view:  # read meanwhile (a sync fallback under a re-created parent)
                return True
            return self._new_read(path, source, kids, listed, data, stat, 3, frontier)
        try:
            data, stat = first.get()
        except NoNodeError:
            self._deleted(path, source)
            return False
        except NoAuthError as e:
            self._unreadable(path, e)
            return False
        if self._observe(path, data, stat, source):
            return True  # a new incarnation: _observe listed its children itself
        try:
            kids, kstat = second.get()
        except NoNodeError:
            self._deleted(path, source)
            return True
        except NoAuthError as e:
            self._unreadable(path, e)
            return True
        self._listed(path, kids, kstat, source, sweep=frontier)
        return True

    # ------------------------------------------------------------------ rows

    def _emit_stat(
        self, path: str, op: ZnodeOp, zxid: int, data: bytes, stat: ZnodeStat, source: Source, missed: int | None
    ) -> None:
        change = ZnodeChange(
            zxid=zxid, path=path, op=op, data=data, version=stat.version, czxid=stat.czxid, mzxid=stat.mzxid,
            pzxid=stat.pzxid, ephemeral_owner=stat.ephemeralOwner, session_id=self._session_id(),
        )
        self._emit(change, source, missed)

    def _session_id(self) -> int | None:
        sid = getattr(self.client, "_session_id", None)
        return int(sid) if sid is not None else None

    def _emit(self, change: ZnodeChange, source: Source, missed: int | None = None) -> None:
        self.max_zxid = max(self.max_zxid, change.zxid)
        if self.metrics is not None:
            self.metrics.seen(WATCH, self.max_zxid)
        self._pending.append(change_row(change, cluster=self.lake.cluster, source=source, missed_versions=missed))
        if len(self._pending) >= (RESYNC_BATCH_ROWS if self._sweeping else self.batch_size):
            self._flush()

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        written = self.writer.write(self._pending)
        if self.metrics is not None:
            if written:  # else a batch already in the lake (a replay): nothing new
                for source, n in Counter(str(r["source"]) for r in dedupe(self._pending)).items():
                    self.metrics.rows_committed(TABLE, source, n)
            self.metrics.committed(WATCH, self.max_zxid)
        self._pending = []

    def _load_view(self) -> None:
        """The last known tree from our earlier rows in the lake (a restart continues, not re-snapshots)."""
        view, max_zxid = load_view(self.lake)
        self.max_zxid = max(self.max_zxid, max_zxid)
        for path, known in view.items():
            self._know(path, known)
