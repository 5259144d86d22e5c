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
gone before it is read, a GAP names the path whose children were missed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

from collectors.bronze import BronzeWriter, LakeLike, change_row
from models.events import Source, ZnodeChange, ZnodeOp

log = logging.getLogger(__name__)

WATCH_SOURCES = (str(Source.WATCH), str(Source.RESYNC))


@dataclass(frozen=True)
class Known:
    """What we last knew about one znode."""

    version: int
    mzxid: int
    czxid: int


class ZkWatchCollector:
    """Watches ``hosts`` + ``chroot`` and appends what it sees to ``znode_events`` (never writes to ZooKeeper)."""

    def __init__(
        self,
        lake: LakeLike,
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
    ) -> None:
        self.lake = lake
        self.hosts = hosts + chroot.rstrip("/")
        self.writer = BronzeWriter(lake, f"watch:{self.hosts}")
        self.client = KazooClient(
            hosts=self.hosts, timeout=timeout, auth_data=auth_data or None, read_only=False,
            use_ssl=use_ssl, certfile=certfile or None, keyfile=keyfile or None, ca=ca or None,
            verify_certs=verify_certs,
        )
        self.batch_size = max(1, batch_size)
        self.flush_seconds = flush_seconds
        self.view: dict[str, Known] = {}
        self.cversions: dict[str, int] = {}
        # child creates/deletes under a parent seen some other way (a child's own watch) since its last listing
        self.child_changes: dict[str, int] = {}
        self.work: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.gaps = 0
        self.max_zxid = 0
        self._pending: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()
        self._in_gap = False
        self._need_resync = False
        self._started = False
        self._first_snapshot = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect, load the last known view from the lake, and snapshot (resync) the subtree."""
        self.client.add_listener(self._on_state)
        self.client.start()
        self._load_view()
        if self.view:
            self._gap("collector restarted; changes while it was down are reconstructed by resync")
        self._first_snapshot = not self.view
        self._resync(Source.RESYNC)
        self._first_snapshot = False
        self._flush()
        self._started = True

    def stop(self, drain_seconds: float = 5.0) -> None:
        """Handle the notifications already received (each names a change that happened), flush, disconnect."""
        self._finish_queued(drain_seconds)
        self._flush()
        self.client.stop()
        self.client.close()

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
        if self._need_resync and self.client.connected:
            self._resync(Source.RESYNC)
            handled = True
        try:
            kind, arg = self.work.get(timeout=timeout)
        except queue.Empty:
            kind, arg = "", None
        if kind:
            self._handle(kind, arg)
            handled = True
        if len(self._pending) >= self.batch_size or time.monotonic() - self._last_flush >= self.flush_seconds:
            self._flush()
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
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            if not self._in_gap:
                self._gap(f"connection {state.lower()}" + ("; session expired or closed" if state == KazooState.LOST else ""))
            self._in_gap = True
            self._need_resync = True
        elif state == KazooState.CONNECTED and self._in_gap:
            self._in_gap = False
            self._need_resync = True

    def _gap(self, reason: str, path: str = "/", zxid: int | None = None, *, flush: bool = True) -> None:
        at = self.max_zxid if zxid is None else zxid
        self.gaps += 1
        self._emit(ZnodeChange(zxid=at, path=path, op=ZnodeOp.GAP, detail=reason), Source.WATCH)
        log.warning("collection gap at zxid %d (%s): %s", at, path, reason)
        if flush:
            self._flush()

    def _visit(self, path: str, source: Source) -> bool:
        """Read one znode (re-arming its data watch) and emit what changed; False if it is gone."""
        if path not in self.view:
            return self._visit_new(path, source)
        try:
            data, stat = self.client.get(path, watch=self._on_data)
        except NoNodeError:
            self._deleted(path, source)
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
        if stat.czxid != listed.czxid:  # deleted and re-created between the two reads: start over
            self._vanished(path)
            return tries > 1 and self._visit_new(path, source, tries - 1)
        self._observe(path, data, stat, source, listing=(kids, listed))
        return True

    def _vanished(self, path: str) -> None:
        # listed under its parent but gone before it could be read: it and whatever was created under it are
        # missed; the reply zxid of the failed read is at or after its delete
        self._gap(f"{path} was deleted before it could be read: it and anything created under it are missed",
                  path=path, zxid=max(int(self.client.last_zxid), 0), flush=False)

    def _observe(
        self, path: str, data: bytes, stat: ZnodeStat, source: Source,
        listing: tuple[list[str], ZnodeStat] | None = None,
    ) -> None:
        old = self.view.get(path)
        if old is not None and old.mzxid == stat.mzxid and old.czxid == stat.czxid:
            return  # duplicate notification
        if old is not None and old.czxid != stat.czxid:
            self._deleted(path, source, at=stat.czxid - 1, counted=True)  # deleted and re-created between two reads
            old = None
        self.view[path] = Known(stat.version, stat.mzxid, stat.czxid)
        if old is None:
            self._emit_stat(path, ZnodeOp.CREATE, stat.czxid, data, stat, source, stat.version or None)
            if not self._first_snapshot:
                self.cversions[path] = 0  # born while we watch: all its child changes should be seen
            if listing is not None:
                self._apply_listing(path, *listing, source)
            else:
                # re-created since the last read: its children were not watched until this listing, so if
                # it is gone already, report what may have happened under it
                self._children(path, source, changed=True)
        else:
            missed = stat.version - old.version - 1
            self._emit_stat(path, ZnodeOp.SET, stat.mzxid, data, stat, source, missed if missed > 0 else None)

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
        known_node = self.view.get(path)
        if known_node is not None and known_node.czxid != stat.czxid:
            # deleted and re-created since we knew it: the old one's child changes are lost with it
            self._deleted(path, source, at=stat.czxid - 1, counted=True)
            if changed:
                self._missed_children(path, stat.czxid - 1)
            self._visit(path, source)  # records the new incarnation and lists its children
            return [path.rstrip("/") + "/" + k for k in kids]
        return self._apply_listing(path, kids, stat, source)

    def _apply_listing(self, path: str, kids: list[str], stat: ZnodeStat, source: Source) -> list[str]:
        """Visit the new children of one listing, delete the gone ones, check the cversion; their paths."""
        prefix = path.rstrip("/") + "/"
        current = {prefix + k for k in kids}
        known = {p for p in self.view if p != path and p.startswith(prefix) and "/" not in p[len(prefix) :]}
        added, gone = sorted(current - set(self.view)), sorted(known - current)
        # a listed child already gone when read came and went unseen: not counted, so the cversion check reports it
        seen = sum(1 for child in added if self._visit(child, source))
        for child in gone:
            # the parent's pzxid in this very listing is at or after the child's delete, and the child
            # is not back in it, so it comes before any re-creation
            self._deleted(child, source, at=stat.pzxid, counted=True)
        self._check_cversion(path, stat, seen + len(gone) + self.child_changes.pop(path, 0))
        return sorted(current)

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
        old = self.view.pop(path, None)
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
        for sub in [p for p in self.view if p.startswith(path.rstrip("/") + "/")]:
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

    def _resync(self, source: Source) -> None:
        """Diff the whole subtree against the last known view, re-arming every watch."""
        self._need_resync = False
        try:
            seen: set[str] = set()
            self._walk("/", seen, source)
            # shallowest first: a deleted znode's stamp then bounds its subtree (see _deleted)
            for gone in sorted(set(self.view) - seen, key=len):
                self._deleted(gone, source)
        except KazooException as e:
            log.warning("resync interrupted (%s); will retry", type(e).__name__)
            self._need_resync = True

    def _walk(self, path: str, seen: set[str], source: Source) -> None:
        if not self._visit(path, source):
            return
        seen.add(path)
        for child in self._children(path, source):
            self._walk(child, seen, source)

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
        self._pending.append(change_row(change, cluster=self.lake.cluster, source=source, missed_versions=missed))
        if len(self._pending) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        self.writer.write(self._pending)
        self._pending = []

    def _load_view(self) -> None:
        """The last known tree from our earlier rows in the lake (a restart continues, not re-snapshots)."""
        if not getattr(self.lake, "exists", lambda _t: False)("znode_events"):
            return
        rows = self.lake.read_arrow("znode_events").select(  # type: ignore[attr-defined]
            ["cluster", "source", "zxid", "path", "op", "version", "mzxid", "czxid"]
        ).to_pylist()
        mine = [r for r in rows if r["cluster"] == self.lake.cluster and r["source"] in WATCH_SOURCES]
        for r in sorted(mine, key=lambda r: (r["zxid"], r["op"] != "DELETE")):
            self.max_zxid = max(self.max_zxid, r["zxid"])
            if r["op"] in ("CREATE", "SET"):
                self.view[r["path"]] = Known(r["version"], r["mzxid"], r["czxid"])
            elif r["op"] == "DELETE":
                self.view.pop(r["path"], None)
