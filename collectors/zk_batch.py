"""Batched ZooKeeper reads and watch arming that kazoo 2.11 does not offer, as kazoo protocol requests.

* ``MultiRead`` (OpCode.multiRead = 22, ZooKeeper 3.6+): getData + getChildren of many znodes in one request.
  The server runs a read request while no write is applied (a standalone server has one request thread; a
  quorum member's CommitProcessor never runs reads and writes together), so one answer is the tree as of one
  zxid: the reply header's, which the server samples before running the reads. A multiRead sets no watches.
* ``SetWatches`` (OpCode.setWatches = 101): arms one-shot data and child watches on many paths at once. For each
  path the server fires at once when the znode is gone (NodeDeleted), its mzxid (data watch) or pzxid (child
  watch) is above ``relative_zxid`` (NodeDataChanged / NodeChildrenChanged); otherwise it registers the watch.
  With ``relative_zxid`` = the zxid a multiRead saw, every change after that read is notified, however long the
  arming comes after it.

A server without multiRead (before 3.6) answers UNIMPLEMENTED and closes the connection (not the session);
``multi_read_supported`` probes that once. Requests go through kazoo's queue (``KazooClient._call``), so they
are ordered with the session's other requests and share its connection, TLS and auth.

Wire formats (zookeeper.jute): a multi request is a run of MultiHeader{int type; bool done; int err} + op record,
closed by MultiHeader{-1, true, -1}; GetDataRequest / GetChildrenRequest = {ustring path; bool watch}; the
MultiResponse answers each op with a MultiHeader + GetDataResponse{buffer data; Stat stat} /
GetChildrenResponse{vector<ustring> children} / ErrorResponse{int err}; SetWatches = {long relativeZxid;
vector<ustring> dataWatches; vector<ustring> existWatches; vector<ustring> childWatches}.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, ConnectionLoss, KazooException, UnimplementedError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat

MULTI_READ = 22
SET_WATCHES = 101
GET_DATA = 4
GET_CHILDREN = 8
ERROR = -1
SET_WATCHES_MAX_BYTES = 128 * 1024  # the Java client's chunk size: far below the server's 1 MiB jute.maxbuffer

_INT = struct.Struct("!i")
_LONG = struct.Struct("!q")
_HEADER = struct.Struct("!iBi")
_STAT = struct.Struct("!qqqqiiiqiiq")
_END = _HEADER.pack(-1, 1, -1)

Read = tuple[bytes, ZnodeStat, list[str]]
"""One znode as a multiRead saw it: data, stat, child names."""


@dataclass(frozen=True, slots=True)
class MultiReadAnswer:
    """The znodes of one multiRead, in request order, each a ``Read`` or the error its reads got, and the zxid
    of the tree they show."""

    zxid: int
    reads: list[Read | KazooException]


def _string(path: str) -> bytes:
    raw = path.encode()
    return _INT.pack(len(raw)) + raw


class MultiRead:
    """getData then getChildren of each path (server paths, chroot included), in one request."""

    type = MULTI_READ

    def __init__(self, client: KazooClient, paths: Sequence[str], opcode: int = MULTI_READ) -> None:
        self.client = client
        self.paths = paths
        self.type = opcode  # tests send an opcode the server lacks to see the UNIMPLEMENTED answer of an old one

    def __repr__(self) -> str:  # kazoo logs requests at DEBUG: name the size, not thousands of paths
        return f"MultiRead({len(self.paths)} znodes)"

    def serialize(self) -> bytes:
        parts: list[bytes] = []
        data_header, children_header = _HEADER.pack(GET_DATA, 0, -1), _HEADER.pack(GET_CHILDREN, 0, -1)
        for path in self.paths:
            record = _string(path) + b"\x00"  # watch = false (a multiRead ignores it anyway)
            parts += (data_header, record, children_header, record)
        parts.append(_END)
        return b"".join(parts)

    def deserialize(self, buf: bytes, offset: int) -> MultiReadAnswer:
        # kazoo stores the reply header's zxid in last_zxid, on this thread, just before calling this
        zxid = int(self.client.last_zxid)
        reads: list[Read | KazooException] = []
        first: tuple[bytes, ZnodeStat] | KazooException | None = None
        header, unpack_int, unpack_stat = _HEADER.unpack_from, _INT.unpack_from, _STAT.unpack_from
        while True:
            kind, done, _err = header(buf, offset)
            offset += 9
            if done:
                break
            got: tuple[bytes, ZnodeStat] | list[str] | KazooException
            if kind == GET_DATA:
                size = unpack_int(buf, offset)[0]
                offset += 4
                data = buf[offset:offset + size] if size > 0 else b""
                offset += max(size, 0)
                got = (data, ZnodeStat._make(unpack_stat(buf, offset)))
                offset += 68
            elif kind == GET_CHILDREN:
                count = unpack_int(buf, offset)[0]
                offset += 4
                kids: list[str] = []
                for _ in range(max(count, 0)):
                    size = unpack_int(buf, offset)[0]
                    offset += 4
                    kids.append(buf[offset:offset + size].decode())
                    offset += size
                got = kids
            elif kind == ERROR:
                got = EXCEPTIONS[unpack_int(buf, offset)[0]]()
                offset += 4
            else:
                raise KazooException(f"multiRead answered an op of type {kind}")
            if first is None:  # each znode's getData, then its getChildren
                first = got if not isinstance(got, list) else KazooException("getChildren answer out of order")
                continue
            if isinstance(first, KazooException):
                reads.append(first)
            elif isinstance(got, KazooException):
                reads.append(got)
            elif isinstance(got, list):
                reads.append((first[0], first[1], got))
            else:
                reads.append(KazooException("getData answer out of order"))
            first = None
        if len(reads) != len(self.paths) or first is not None:
            raise KazooException(f"multiRead answered {len(reads)} of {len(self.paths)} znodes")
        return MultiReadAnswer(zxid, reads)


class SetWatches:
    """Arms data and child watches on server paths with one ``relative_zxid``; ``register`` (kazoo's side of the
    watches) runs on kazoo's connection thread as the request is sent, so no event can come before it."""

    type = SET_WATCHES

    def __init__(self, relative_zxid: int, data: Sequence[str], children: Sequence[str],
                 register: Callable[[], None]) -> None:
        self.relative_zxid = relative_zxid
        self.data = data
        self.children = children
        self.register = register

    def __repr__(self) -> str:
        return f"SetWatches(zxid={self.relative_zxid}, {len(self.data)} data, {len(self.children)} child)"

    def serialize(self) -> bytes:
        self.register()
        parts = [_LONG.pack(self.relative_zxid)]
        for paths in (self.data, (), self.children):  # data, exist, child watches
            parts.append(_INT.pack(len(paths)))
            parts += (_string(p) for p in paths)
        return b"".join(parts)

    def deserialize(self, buf: bytes, offset: int) -> bool:
        return True


class BatchReader:
    """Sends ``MultiRead`` and ``SetWatches`` on ``client``'s session; paths are the client's (inside its chroot)."""

    def __init__(self, client: KazooClient, multi_read_opcode: int = MULTI_READ) -> None:
        self.client = client
        self.opcode = multi_read_opcode

    def _server_path(self, path: str) -> str:
        # the collector's paths are normalised and kazoo's chroot has no trailing "/": plain concatenation
        # (kazoo's own prefixing normalises every path again, a noticeable cost at 1M paths)
        chroot: str = (self.client.chroot or "").rstrip("/")
        return chroot + path if path != "/" else chroot or "/"

    def read(self, paths: Sequence[str]) -> IAsyncResult:
        """Data, stat and children of ``paths`` in one round trip; the result is a ``MultiReadAnswer``."""
        result = self.client.handler.async_result()
        self.client._call(MultiRead(self.client, [self._server_path(p) for p in paths], self.opcode), result)
        return result

    def arm(self, relative_zxid: int, paths: Sequence[str], on_data: Callable[[Any], None],
            on_children: Callable[[Any], None]) -> list[IAsyncResult]:
        """Data and child watches on ``paths``, each firing at once if the znode changed after ``relative_zxid``;
        the watchers are kazoo's like any other (``client._data_watchers`` / ``_child_watchers``)."""
        sent: list[IAsyncResult] = []
        chunk: list[str] = []
        size = 0
        for path in paths:
            server = self._server_path(path)
            chunk.append(server)
            size += 2 * (len(server) + 4)
            if size >= SET_WATCHES_MAX_BYTES:
                sent.append(self._arm(relative_zxid, chunk, on_data, on_children))
                chunk, size = [], 0
        if chunk:
            sent.append(self._arm(relative_zxid, chunk, on_data, on_children))
        return sent

    def _arm(self, relative_zxid: int, servers: list[str], on_data: Callable[[Any], None],
             on_children: Callable[[Any], None]) -> IAsyncResult:
        client = self.client

        def register() -> None:
            data, children = client._data_watchers, client._child_watchers
            for server in servers:
                data[server].add(on_data)
                children[server].add(on_children)

        result = client.handler.async_result()
        client._call(SetWatches(relative_zxid, servers, servers, register), result)
        return result

    def multi_read_supported(self, timeout: float = 30.0) -> bool:
        """Whether the server answers multiRead (ZooKeeper 3.6+). An older one answers UNIMPLEMENTED and drops the
        connection: this then waits until kazoo has reconnected (same session) before returning False."""
        try:
            self.read(["/"]).get(timeout=timeout)
            return True
        except UnimplementedError:
            pass
        deadline = time.monotonic() + timeout
        while True:  # the dropped connection fails requests until kazoo has reconnected
            try:
                self.client.exists("/")
                return False
            except ConnectionLoss:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
