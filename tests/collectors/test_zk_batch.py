"""multiRead + SetWatches against a real ZooKeeper 3.9: one request reads many znodes as of one zxid, arming
relative to that zxid loses no change made between the read and the arming, and a server that lacks multiRead
(answering UNIMPLEMENTED, as ZooKeeper < 3.6 does) gets the per-znode reads."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.protocol.states import WatchedEvent
from kazoo.security import make_digest_acl

from collectors import zk_watch
from collectors.zk_batch import BatchReader
from collectors.zk_watch import ZkWatchCollector
from models.events import Source
from tests.collectors.conftest import rows, wait_for

pytestmark = pytest.mark.integration

UNKNOWN_OPCODE = 9999  # unknown to ZooKeeper 3.9 as multiRead (22) is to 3.5: the same UNIMPLEMENTED answer


@pytest.fixture
def reader(zk_hosts: str) -> Any:
    client = KazooClient(hosts=zk_hosts, timeout=15)
    client.start(timeout=15)
    yield BatchReader(client)
    client.stop()
    client.close()


def _tree(zk: KazooClient, path: str = "/") -> dict[str, tuple[int, bytes]]:
    data, stat = zk.get(path)
    out = {path: (stat.version, data)}
    for k in zk.get_children(path):
        out.update(_tree(zk, path.rstrip("/") + "/" + k))
    return out


def _view(lake: Any) -> dict[str, tuple[int, bytes]]:
    """path -> (version, data) as the collector's rows say, in zxid order."""
    out: dict[str, tuple[int, bytes]] = {}
    for r in sorted((r for r in rows(lake) if r["op"] != "GAP"), key=lambda r: (r["zxid"], r["op"] != "DELETE")):
        if r["op"] == "DELETE":
            out.pop(r["path"], None)
        else:
            out[r["path"]] = (r["version"], r["data"] or b"")
    return out


def test_multi_read_answers_each_znode_as_of_one_zxid(zk: KazooClient, reader: BatchReader) -> None:
    zk.create("/a/x", b"hello", makepath=True)
    zk.create("/locked", b"s", acl=[make_digest_acl("admin", "pw", all=True)])
    zk.create("/b", b"")
    before = zk.exists("/b").mzxid  # the last write

    answer = reader.read(["/", "/a", "/a/x", "/nope", "/locked", "/b"]).get(timeout=15)

    assert answer.zxid >= before
    for path, got in zip(["/", "/a", "/a/x", "/b"], [answer.reads[i] for i in (0, 1, 2, 5)], strict=True):
        assert not isinstance(got, Exception)
        data, stat, kids = got
        assert (data, stat) == zk.get(path)
        assert sorted(kids) == sorted(zk.get_children(path))
        assert stat.mzxid <= answer.zxid and stat.pzxid <= answer.zxid
    assert isinstance(answer.reads[3], NoNodeError)
    assert isinstance(answer.reads[4], NoAuthError)
    zk.set("/b", b"later")
    assert zk.exists("/b").mzxid > answer.zxid  # the answer's zxid is not after what it did not see


def test_watches_armed_relative_to_the_read_fire_for_changes_made_before_the_arming(
    zk: KazooClient, reader: BatchReader
) -> None:
    for path in ("/data", "/parent", "/gone", "/quiet"):
        zk.create(path, b"0")
    answer = reader.read(["/data", "/parent", "/gone", "/quiet"]).get(timeout=15)
    # changed after the read, before the arming
    zk.set("/data", b"1")
    zk.create("/parent/kid")
    zk.delete("/gone")
    events: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    def on(kind: str) -> Any:
        def record(event: WatchedEvent) -> None:
            with lock:
                events.append((kind, event.type, event.path))
        return record

    for armed in reader.arm(answer.zxid, ["/data", "/parent", "/gone", "/quiet"], on("data"), on("children")):
        armed.get(timeout=15)
    # each change fires its watch: /gone's data watch, its children watch or both (events arrive in any order)
    wait_for(lambda: {("data", "CHANGED", "/data"), ("children", "CHILD", "/parent")} <= set(events)
             and any(e[2] == "/gone" for e in events))
    assert ("data", "CHANGED", "/data") in events
    assert ("children", "CHILD", "/parent") in events
    assert {("data", "DELETED", "/gone"), ("children", "DELETED", "/gone")} & set(events)
    assert not [e for e in events if e[2] == "/quiet"]  # unchanged since the read: armed, not fired
    zk.set("/quiet", b"1")
    wait_for(lambda: ("data", "CHANGED", "/quiet") in events)


def test_an_unimplemented_answer_means_no_multi_read_and_the_session_survives(reader: BatchReader) -> None:
    assert reader.multi_read_supported()
    client = reader.client
    session = client.client_id[0]
    assert not BatchReader(client, multi_read_opcode=UNKNOWN_OPCODE).multi_read_supported()
    assert client.connected and client.client_id[0] == session
    assert client.exists("/") is not None


def _kafka_tree(zk: KazooClient, topics: int = 30) -> None:
    for t in range(topics):
        zk.create(f"/brokers/topics/t{t}", b'{"partitions":{}}', makepath=True)
        for p in range(2):
            zk.create(f"/brokers/topics/t{t}/partitions/{p}/state", f"s{t}.{p}".encode(), makepath=True)
        zk.create(f"/config/topics/t{t}", b"{}", makepath=True)


@pytest.mark.parametrize("bound", [("READ_BATCH", 7), ("READ_BATCH_PATH_BYTES", 100)], ids=["znodes", "bytes"])
def test_batched_snapshot_equals_the_per_znode_snapshot(
    zk: KazooClient, zk_hosts: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, bound: tuple[str, int]
) -> None:
    from lakehouse import Lake

    _kafka_tree(zk)
    monkeypatch.setattr(zk_watch, *bound)  # many batches, several in flight, listings split across them
    lakes = {}
    for batched in (True, False):
        lake = Lake(tmp_path / f"lake-{batched}", cluster="test")
        collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
        if not batched:
            collector.batched = False
        collector.start()
        assert collector.batched is batched
        collector.stop()
        lakes[batched] = lake
    key = lambda r: (r["path"], r["op"], r["zxid"], r["version"], r["data"], r["pzxid"])  # noqa: E731
    assert sorted(map(key, rows(lakes[True]))) == sorted(map(key, rows(lakes[False])))
    assert _view(lakes[True]) == _tree(zk)
    assert not rows(lakes[True], op="GAP")


def test_changes_between_the_batched_read_and_the_arming_are_not_lost(
    zk: KazooClient, zk_hosts: str, lake: Any
) -> None:
    _kafka_tree(zk, topics=3)
    zk.create("/brokers/topics/gone", b"g")
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    paused: list[list[str]] = []

    def between(read: list[str]) -> None:
        if "/brokers/topics/t1" in read and not paused:  # read, and not yet watched
            paused.append(read)
            zk.set("/brokers/topics/t1", b"changed")
            zk.create("/brokers/topics/t1/new-child", b"n")
            zk.delete("/brokers/topics/gone")

    collector.before_arming = between
    collector.start()
    collector.drain()
    collector.stop()
    assert paused and "/brokers/topics/gone" in paused[0]  # both were read in that very batch
    assert [(r["version"], r["data"]) for r in rows(lake, path="/brokers/topics/t1", op="SET")] == [(1, b"changed")]
    assert [r["source"] for r in rows(lake, path="/brokers/topics/t1/new-child", op="CREATE")] == ["watch"]
    assert len(rows(lake, path="/brokers/topics/gone", op="DELETE")) == 1
    assert not rows(lake, op="GAP")
    assert _view(lake) == _tree(zk)


def test_a_server_without_multi_read_is_read_znode_by_znode(zk: KazooClient, zk_hosts: str, lake: Any) -> None:
    _kafka_tree(zk, topics=3)
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.batch = BatchReader(collector.client, multi_read_opcode=UNKNOWN_OPCODE)
    collector.start()
    assert collector.batched is False
    zk.set("/brokers/topics/t2/partitions/1/state", b"s1")  # followed with per-znode watches
    wait_for(lambda: rows(lake, path="/brokers/topics/t2/partitions/1/state", op="SET"),
             step=lambda: collector.step(0.2))
    collector.drain()
    collector.stop()
    assert not rows(lake, op="GAP")  # the probe's dropped connection is no gap: nothing was watched yet
    assert _view(lake) == _tree(zk)


def test_a_resync_on_a_server_without_multi_read_falls_back(zk: KazooClient, zk_hosts: str, lake: Any) -> None:
    _kafka_tree(zk, topics=3)
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.start()
    assert collector.batched is True
    # as after reconnecting to an older member of the ensemble
    collector.batch = BatchReader(collector.client, multi_read_opcode=UNKNOWN_OPCODE)
    zk.create("/brokers/topics/t9", b"new")
    collector._resync(Source.RESYNC)
    assert collector.batched is False and collector._need_resync
    wait_for(lambda: rows(lake, path="/brokers/topics/t9", op="CREATE"), step=lambda: collector.step(0.2))
    collector.drain()
    collector.stop()
    assert all("connection" in g["detail"] for g in rows(lake, op="GAP"))  # the drop, reported
    assert _view(lake) == _tree(zk)
