"""Watch collector against a real ZooKeeper: equals the txn log except what it reports missed;
survives session expiry, server restart and kill -9 with gaps reported and nothing duplicated."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from collectors.txnlog import TxnLogCollector
from collectors.zk_watch import ZkWatchCollector
from tests.collectors.conftest import chroot_of, rows, wait_for

pytestmark = pytest.mark.integration


def _writes(zk: KazooClient, n: int = 20) -> None:
    zk.create("/brokers/topics/t/partitions/0/state", b"s0", makepath=True)
    zk.create("/brokers/ids/1", b"b1", makepath=True, ephemeral=True)
    for i in range(n):
        zk.set("/brokers/topics/t/partitions/0/state", f"s{i + 1}".encode())
    zk.create("/admin/delete_topics/x", b"", makepath=True)
    zk.delete("/admin/delete_topics/x")


def _latest_view(lake: Any) -> dict[str, int]:
    """path -> version as the watch rows say, replayed in zxid order."""
    return _replay([r for r in rows(lake) if r["source"] in ("watch", "resync")])


def _tree(zk: KazooClient, path: str = "/") -> dict[str, int]:
    _data, stat = zk.get(path)
    out = {path: stat.version}
    for k in zk.get_children(path):
        out.update(_tree(zk, path.rstrip("/") + "/" + k))
    return out


def test_watch_history_equals_txnlog_except_reported_misses(
    zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any
) -> None:
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.drain()
    _writes(zk)
    collector.drain()
    collector.stop()
    TxnLogCollector(lake, zk_server.data_dir, chroot=chroot_of(zk_hosts)).run()
    txn = [r for r in rows(lake, source="txnlog") if r["path"] != "/"]
    watch = [r for r in rows(lake) if r["source"] in ("watch", "resync") and r["path"] != "/"]
    key = lambda r: (r["zxid"], r["path"])  # noqa: E731
    # a znode created and deleted between two reads is invisible to watches: it must show up as a GAP
    # on its parent (cversion jump), and then it is the only thing the watch history lacks
    gap_parents = {r["path"] for r in rows(lake, op="GAP")}
    unseen = {key(r) for r in txn if r["op"] == "CREATE"} - {key(r) for r in watch if r["op"] == "CREATE"}
    assert {key(r) for r in watch if r["op"] == "CREATE"} <= {key(r) for r in txn if r["op"] == "CREATE"}
    assert all(p.rsplit("/", 1)[0] in gap_parents for _z, p in unseen), (unseen, gap_parents)
    watch_deletes = Counter(r["path"] for r in watch if r["op"] == "DELETE")
    unseen_paths = {p for _z, p in unseen}
    assert watch_deletes == Counter(r["path"] for r in txn if r["op"] == "DELETE" and r["path"] not in unseen_paths)
    watch_sets = [r for r in watch if r["op"] == "SET"]
    assert {key(r) for r in watch_sets} <= {key(r) for r in txn if r["op"] == "SET"}
    # every txnlog SET is either seen or counted in a reported missed_versions
    for path in {r["path"] for r in txn if r["op"] == "SET"}:
        seen = sum(1 + (r["missed_versions"] or 0) for r in watch_sets if r["path"] == path) + sum(
            r["missed_versions"] or 0 for r in watch if r["op"] == "CREATE" and r["path"] == path
        )
        assert seen == sum(1 for r in txn if r["op"] == "SET" and r["path"] == path)
    assert _latest_view(lake) == _tree(zk)


def test_session_expiry_writes_gap_and_resyncs(zk_hosts: str, zk: KazooClient, lake: Any) -> None:
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.drain()
    zk.create("/controller", b"1")
    collector.drain()
    # the classic trick: a second client on the collector's session closes it -> the collector expires
    sid, passwd = collector.client.client_id
    thief = KazooClient(hosts=zk_hosts, client_id=(sid, passwd), timeout=15)
    thief.start(timeout=15)
    thief.stop()
    thief.close()
    zk.set("/controller", b"2")
    zk.create("/after", b"x")
    wait_for(lambda: rows(lake, op="GAP") and rows(lake, path="/after"), step=lambda: collector.step(0.2))
    collector.drain()
    collector.stop()
    gap = rows(lake, op="GAP")
    assert len(gap) == 1 and "connection" in gap[0]["detail"]
    assert rows(lake, path="/after", op="CREATE")[0]["source"] in ("watch", "resync")
    assert _latest_view(lake) == _tree(zk)
    assert collector.client.client_id is None or collector.client.client_id[0] != sid


def test_server_restart_writes_gap_and_resumes(zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any) -> None:
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.drain()
    zk.create("/x", b"1")
    collector.drain()
    zk_server.restart()
    wait_for(lambda: rows(lake, op="GAP"), step=lambda: collector.step(0.2))
    wait_for(lambda: zk.connected)
    zk.set("/x", b"2")
    wait_for(lambda: any(r["version"] == 1 for r in rows(lake, path="/x")), step=lambda: collector.step(0.2))
    collector.drain()
    collector.stop()
    assert _latest_view(lake) == _tree(zk)


_CHILD = textwrap.dedent(
    """
    import sys, threading
    from lakehouse import Lake
    from collectors.zk_watch import ZkWatchCollector
    c = ZkWatchCollector(Lake(sys.argv[1], cluster="test"), sys.argv[2], batch_size=3, flush_seconds=0.05)
    c.start()
    print("ready", flush=True)
    c.run(threading.Event())
    """
)


def test_kill_9_then_restart_loses_nothing_and_duplicates_nothing(
    zk_hosts: str, zk: KazooClient, lake: Any, tmp_path: Path
) -> None:
    root = str(lake.table_path("znode_events")).rsplit("/", 1)[0]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, root, zk_hosts], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    rnd = random.Random(os.getpid())
    kill_at = rnd.randrange(5, 40)
    for i in range(50):
        zk.create(f"/n{i}", b"x")
        if i % 3 == 0:
            zk.set(f"/n{i}", b"y")
        if i == kill_at:
            os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.drain()
    collector.stop()
    all_rows = rows(lake)
    ids = [r["event_id"] for r in all_rows]
    assert len(ids) == len(set(ids))
    assert _latest_view(lake) == _tree(zk)
    assert rows(lake, op="GAP")  # the restart is reported as a gap
    creates = Counter(r["path"] for r in all_rows if r["op"] == "CREATE")
    assert all(n == 1 for n in creates.values())


def test_simulated_cluster_both_collectors_match_the_simulator(
    zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any, tmp_path: Path
) -> None:
    from simulator.scenarios import run_scenario

    watch = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    watch.drain()
    result = run_scenario("zombie-controller", zk_hosts, kafka_version="3.8", log_dir=tmp_path / "logs", seed=1)
    watch.drain()
    watch.stop()
    TxnLogCollector(lake, zk_server.data_dir, chroot=chroot_of(zk_hosts)).run()
    start = min(r["zxid"] for r in rows(lake, source="txnlog", path="/", op="CREATE"))  # the chroot's birth
    txn = sorted(
        (r for r in rows(lake, source="txnlog") if r["zxid"] > start and r["op"] in ("CREATE", "SET", "DELETE", "MULTI_FAILED")),
        key=lambda r: r["zxid"],
    )
    got = Counter((r["path"], r["op"], r["data"]) for r in txn if r["op"] != "DELETE")
    expected = Counter((w.path, w.op, w.data) for w in result.znode_writes if w.op != "DELETE")
    assert got == expected
    assert got[("/controller_epoch", "MULTI_FAILED", None)] >= 1
    # every delete the simulator made is in the log (the log also has its teardown's session closes)
    assert not Counter(w.path for w in result.znode_writes if w.op == "DELETE") - Counter(
        r["path"] for r in txn if r["op"] == "DELETE"
    )
    # the watch collector ends with the same tree the transaction log describes
    final: dict[str, int] = {}
    for r in txn:
        if r["op"] in ("CREATE", "SET"):
            final[r["path"]] = r["version"]
        elif r["op"] == "DELETE":
            final.pop(r["path"], None)
    final.setdefault("/", 0)
    assert _latest_view(lake) == final


def _txn_changes(lake: Any, zk_server: Any, zk_hosts: str) -> list[dict[str, Any]]:
    TxnLogCollector(lake, zk_server.data_dir, chroot=chroot_of(zk_hosts)).run()
    return sorted((r for r in rows(lake, source="txnlog") if r["op"] in ("CREATE", "SET", "DELETE")),
                  key=lambda r: r["zxid"])


def _replay(watch: list[dict[str, Any]]) -> dict[str, int]:
    """path -> version from the watch rows in zxid order, a delete before a create at one zxid."""
    view: dict[str, int] = {}
    for r in sorted(watch, key=lambda r: (r["zxid"], r["op"] != "DELETE")):
        if r["op"] in ("CREATE", "SET"):
            view[r["path"]] = r["version"]
        elif r["op"] == "DELETE":
            view.pop(r["path"], None)
    return view


def test_delete_under_a_deleted_parent_is_stamped_after_the_real_delete(
    zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any
) -> None:
    zk.create("/topics/t/partitions/0/state", b"s0", makepath=True)
    zk.create("/topics/t/partitions/1/state", b"s0", makepath=True)
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.drain()
    zk.set("/topics/t/partitions/0/state", b"s1")
    collector.drain()
    # a topic deletion removes its subtree bottom-up while the collector reads nothing (its reads happen in
    # drain): every watched znode's parent is gone when the collector learns of the delete; then part of the
    # subtree comes back and a sibling appears (later changes the delete stamps must not overtake)
    zk.delete("/topics/t", recursive=True)
    zk.create("/topics/t/partitions/0", b"again", makepath=True)
    zk.create("/topics/u", b"u")
    collector.drain()
    collector.stop()
    txn = _txn_changes(lake, zk_server, zk_hosts)
    watch = [r for r in rows(lake) if r["source"] in ("watch", "resync")]
    deletes = [r for r in watch if r["op"] == "DELETE"]
    assert {r["path"] for r in deletes} == {r["path"] for r in txn if r["op"] == "DELETE"}
    for r in deletes:
        real = max(t["zxid"] for t in txn if t["op"] == "DELETE" and t["path"] == r["path"])
        later = [t["zxid"] for t in txn if t["path"] == r["path"] and t["zxid"] > real]
        assert r["zxid"] >= real, (r["path"], r["zxid"], real)  # not before the delete happened
        assert not later or r["zxid"] < min(later), (r["path"], r["zxid"], later)  # nor after its next change
    assert _replay(watch) == _tree(zk)


def test_children_created_and_deleted_with_their_parent_unseen_are_reported(
    zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any
) -> None:
    zk.create("/topics/t/partitions", b"", makepath=True)
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.drain()  # lists /topics/t/partitions (empty) and arms its child watch
    zk.create("/topics/t/partitions/0", b"p0")  # fires that watch: the relist is queued, not done
    zk.create("/topics/t/partitions/1", b"p1")  # nothing left armed to tell about this one
    zk.delete("/topics/t", recursive=True)  # ... and all of it goes before the relist
    collector.drain()
    collector.stop()
    txn = _txn_changes(lake, zk_server, zk_hosts)
    watch = [r for r in rows(lake) if r["source"] in ("watch", "resync")]
    seen = {(r["zxid"], r["path"]) for r in watch if r["op"] == "CREATE"}
    unseen = {r["path"] for r in txn if r["op"] == "CREATE" and (r["zxid"], r["path"]) not in seen}
    assert unseen >= {"/topics/t/partitions/0", "/topics/t/partitions/1"}
    gap_paths = {r["path"] for r in rows(lake, op="GAP")}
    assert all(p.rsplit("/", 1)[0] in gap_paths for p in unseen), (unseen, gap_paths)
    assert _replay(watch) == _tree(zk)


def test_stop_handles_notifications_already_received(zk_hosts: str, zk: KazooClient, lake: Any) -> None:
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.drain()
    zk.create("/late", b"x")  # the root's child watch fires; nothing reads the queue until stop()
    wait_for(lambda: collector.work.qsize() > 0)
    collector.stop()
    assert [r["zxid"] for r in rows(lake, path="/late", op="CREATE")] == [zk.exists("/late").czxid]


def test_a_plain_delete_seen_first_by_the_childs_own_watch_is_no_gap(zk_hosts: str, zk: KazooClient, lake: Any) -> None:
    zk.create("/brokers/ids/1", b"b1", makepath=True)
    zk.create("/brokers/ids/2", b"b2")
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.2)
    collector.drain()
    # ZooKeeper sends the child's NodeDeleted before its parent's NodeChildrenChanged: the delete is recorded
    # from the first, and the parent's relist must count it rather than call its cversion step a miss
    zk.delete("/brokers/ids/1")
    collector.drain()
    collector.stop()
    assert rows(lake, op="GAP") == []
    assert [r["path"] for r in rows(lake, op="DELETE")] == ["/brokers/ids/1"]
    assert _replay([r for r in rows(lake) if r["source"] in ("watch", "resync")]) == _tree(zk)
