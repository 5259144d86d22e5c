"""Transaction-log reader against a real ZooKeeper: exact history, corrupt tails, resume."""

from __future__ import annotations

import shutil
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError

from collectors.txnlog import TxnLogCollector, log_files, read_log, read_snapshot, snapshot_files
from tests.collectors.conftest import chroot_of, rows, wait_for

pytestmark = pytest.mark.integration


def _story(zk: KazooClient) -> int:
    """Writes every kind of change Kafka causes; returns the writer's session id."""
    zk.create("/brokers/ids/1", b'{"v":1}', makepath=True, ephemeral=True)
    zk.create("/controller_epoch", b"1")
    zk.set("/controller_epoch", b"2")
    tx = zk.transaction()
    tx.check("/controller_epoch", version=0)  # stale: the epoch znode is at version 1
    tx.set_data("/controller_epoch", b"99")
    assert isinstance(tx.commit()[0], BadVersionError)
    tx = zk.transaction()
    tx.check("/controller_epoch", version=1)
    tx.create("/topic", b"t")
    tx.set_data("/controller_epoch", b"3")
    tx.commit()
    zk.delete("/topic")
    return int(zk.client_id[0])


def _history(lake: Any, session: int) -> list[tuple[str, str, int | None]]:
    mine = sorted(rows(lake, source="txnlog", session_id=session), key=lambda r: (r["zxid"], r["op"], r["path"]))
    return [(r["op"], r["path"], r["version"]) for r in mine]


def test_txnlog_reproduces_exact_history(zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any) -> None:
    session = _story(zk)
    zk.stop()  # closeSession removes the ephemeral broker registration
    summary = TxnLogCollector(lake, zk_server.data_dir, chroot=chroot_of(zk_hosts)).run()
    assert summary["stopped"] == []
    assert _history(lake, session) == [
        ("CREATE_SESSION", "/", None),
        ("CREATE", "/brokers", 0),
        ("CREATE", "/brokers/ids", 0),
        ("CREATE", "/brokers/ids/1", 0),
        ("CREATE", "/controller_epoch", 0),
        ("SET", "/controller_epoch", 1),
        ("MULTI_FAILED", "/controller_epoch", None),
        ("CREATE", "/topic", 0),
        ("SET", "/controller_epoch", 2),
        ("DELETE", "/topic", None),
        ("CLOSE_SESSION", "/", None),
        ("DELETE", "/brokers/ids/1", None),
    ]
    by_op = {(r["op"], r["path"]): r for r in rows(lake, session_id=session)}
    assert "BADVERSION" in by_op[("MULTI_FAILED", "/controller_epoch")]["detail"]
    assert by_op[("DELETE", "/brokers/ids/1")]["ephemeral_owner"] == session
    assert by_op[("CREATE", "/brokers/ids/1")]["data"] == b'{"v":1}'
    set2 = next(r for r in rows(lake, session_id=session, op="SET") if r["version"] == 2)
    assert set2["czxid"] == by_op[("CREATE", "/controller_epoch")]["zxid"] and set2["mzxid"] == set2["zxid"]


def _copy_logs(zk_server: Any, dest: Path) -> Path:
    out = dest / "version-2"
    out.mkdir(parents=True)
    for _z, p in log_files(zk_server.data_dir):
        shutil.copy(p, out / p.name)
    return out


def test_corrupt_and_torn_tails_stop_cleanly(zk_server: Any, zk: KazooClient, tmp_path: Path, lake: Any) -> None:
    for i in range(5):
        zk.create(f"/n{i}", b"x")
    logdir = _copy_logs(zk_server, tmp_path / "zk")
    last = log_files(logdir)[-1][1]
    good = read_log(last)
    assert good.clean and len(good.entries) >= 5
    end = good.end_offset
    raw = bytearray(last.read_bytes())
    # flip one byte inside the last entry: checksum mismatch, everything before it kept
    raw[end - 3] ^= 0xFF
    last.write_bytes(bytes(raw))
    bad = read_log(last)
    assert not bad.clean and "checksum" in bad.reason
    assert len(bad.entries) == len(good.entries) - 1
    # a torn tail: the file ends in the middle of the last entry
    last.write_bytes(bytes(raw[: end - 10]))
    torn = read_log(last)
    assert not torn.clean and "torn" in torn.reason and len(torn.entries) == len(good.entries) - 1
    summary = TxnLogCollector(lake, tmp_path / "zk").run()
    assert summary["stopped"] and summary["events"] > 0


def test_an_entry_zookeeper_is_still_writing_is_read_when_done_not_taken_for_a_gap(
        zk_server: Any, zk_hosts: str, zk: KazooClient, tmp_path: Path, lake: Any) -> None:
    """The newest log seen half-way through an entry, with the entries after it already there (the file grew in
    steps, a buffered write landed in pieces): once the entry is whole, every transaction is read; no GAP."""
    for i in range(8):
        zk.create(f"/w{i}", b"x")
    logdir = _copy_logs(zk_server, tmp_path / "zk")
    newest = log_files(logdir)[-1][1]
    whole = newest.read_bytes()
    offsets = _entry_offsets(newest)
    entries = read_log(newest).entries
    half = next(i for i, e in enumerate(entries) if str(getattr(e.record, "path", "")).endswith("/w3"))
    body = offsets[half] + 12
    unfinished = bytearray(whole)
    unfinished[body + 4 : offsets[half + 1]] = bytes(offsets[half + 1] - body - 4)  # the rest not written yet
    newest.write_bytes(bytes(unfinished))
    follower = TxnLogCollector(lake, tmp_path / "zk", follow=True, chroot=chroot_of(zk_hosts), flush_seconds=0)
    follower.poll_once()
    assert follower.gaps == 0 and not rows(lake, op="GAP")
    newest.write_bytes(whole)  # ZooKeeper finished the entry
    time.sleep(0.1)
    follower.poll_once()
    summary = follower.summary()
    assert summary["gaps"] == 0 and summary["quarantined"] == 0 and summary["stopped"] == []
    assert {f"/w{i}" for i in range(8)} <= {r["path"] for r in rows(lake, op="CREATE")}
    assert not rows(lake, op="GAP")


def _entry_offsets(path: Path) -> list[int]:
    """Where each entry of a txn log starts: a 16-byte file header, then checksum(8) length(4) body marker(1)."""
    raw, at, out = path.read_bytes(), 16, []
    while at + 12 <= len(raw):
        length = struct.unpack_from(">i", raw, at + 8)[0]
        if length <= 0:
            break
        out.append(at)
        at += 12 + length + 1
    return out


def _two_logs(data_dir: Path) -> None:
    """Creates /a0../a4, restarts the server (a new log file), creates /b0, /b1."""
    from services.zookeeper import EmbeddedZooKeeper

    server = EmbeddedZooKeeper(data_dir).start()
    try:
        for epoch, names in enumerate((["/a0", "/a1", "/a2", "/a3", "/a4"], ["/b0", "/b1"])):
            client = KazooClient(hosts=server.hosts, timeout=15)
            client.start(timeout=15)
            for name in names:
                client.create(name, b"x")
            client.stop()
            client.close()
            if epoch == 0:
                server.restart()  # the next writes go to a new log: the first one is finished
    finally:
        server.stop()


@pytest.mark.usefixtures("starts_zookeeper")
def test_a_corrupt_entry_inside_a_finished_log_is_a_reported_gap(tmp_path: Path, lake: Any) -> None:
    _two_logs(tmp_path / "zk")
    (first_zxid, first), (next_first, _second) = log_files(tmp_path / "zk")[:2]
    entries = read_log(first).entries
    created = [e.header.zxid for e in entries if getattr(e.record, "path", None) == "/a2"]
    at = _entry_offsets(first)[[e.header.zxid for e in entries].index(created[0])]
    raw = bytearray(first.read_bytes())
    raw[at + 14] ^= 0xFF  # inside the entry's body: its checksum no longer matches
    first.write_bytes(bytes(raw))

    summary = TxnLogCollector(lake, tmp_path / "zk").run()
    assert summary["gaps"] == 1 and summary["quarantined"] == 1
    got = {(r["path"], r["op"]): r for r in rows(lake)}
    assert {("/a0", "CREATE"), ("/a1", "CREATE"), ("/b0", "CREATE"), ("/b1", "CREATE")} <= set(got)
    # only the damaged entry is lost: reading goes on at the next whole entry
    assert ("/a2", "CREATE") not in got and {("/a3", "CREATE"), ("/a4", "CREATE")} <= set(got)
    gap = got[("/", "GAP")]
    assert gap["zxid"] == created[0] and gap["source"] == "txnlog"
    assert "checksum mismatch" in gap["detail"] and f"{created[0]:#x}..{created[0]:#x} are lost" in gap["detail"]
    quarantine = lake.read_arrow("quarantine").to_pylist()
    assert len(quarantine) == 1 and quarantine[0]["ref"] == f"{first.name}:{at}"
    assert quarantine[0]["source"] == "txnlog" and quarantine[0]["reason"] == gap["detail"]
    again = TxnLogCollector(lake, tmp_path / "zk").run()  # a rerun reports nothing twice
    assert again["events"] == 0 and again["gaps"] == 0 and lake.read_arrow("quarantine").num_rows == 1
    assert first_zxid < created[0] < next_first


@pytest.mark.usefixtures("starts_zookeeper")
def test_a_torn_last_entry_before_a_new_epoch_is_no_gap(tmp_path: Path, lake: Any) -> None:
    _two_logs(tmp_path / "zk")
    (_z, first), (_next, second) = log_files(tmp_path / "zk")[:2]
    # a standalone restart keeps the epoch; a new leader would start the next log at (epoch + 1) << 32 | 1
    second.rename(second.with_name(f"log.{(1 << 32) + 1:x}"))
    raw = first.read_bytes()
    first.write_bytes(raw[: _entry_offsets(first)[-1] + 10])  # the server died while logging its last proposal
    summary = TxnLogCollector(lake, tmp_path / "zk").run()
    assert summary["gaps"] == 0 and summary["quarantined"] == 0
    got = {(r["path"], r["op"]) for r in rows(lake)}
    assert ("/", "GAP") not in got and ("/b1", "CREATE") in got


def test_resume_and_follow_without_duplicates(zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any) -> None:
    chroot = chroot_of(zk_hosts)
    zk.create("/a", b"1")
    first = TxnLogCollector(lake, zk_server.data_dir, chroot=chroot).run()
    assert first["events"] >= 1
    zk.set("/a", b"2")
    zk.create("/b", b"1")
    second = TxnLogCollector(lake, zk_server.data_dir, chroot=chroot).run()
    assert second["events"] >= 2
    assert TxnLogCollector(lake, zk_server.data_dir, chroot=chroot).run()["events"] == 0
    # follow: new entries appear while the collector runs
    stop = threading.Event()
    follower = TxnLogCollector(lake, zk_server.data_dir, follow=True, chroot=chroot, poll_seconds=0.1)
    t = threading.Thread(target=follower.run, args=(stop,))
    t.start()
    try:
        zk.create("/c", b"followed")
        wait_for(lambda: rows(lake, path="/c", op="CREATE"))
    finally:
        stop.set()
        t.join(30)
    all_rows = rows(lake)
    ids = [r["event_id"] for r in all_rows]
    assert len(ids) == len(set(ids))
    assert sorted(r["version"] for r in rows(lake, path="/a")) == [0, 1]


def _pending(collector: TxnLogCollector, path: str) -> bool:
    return any(r["path"] == path for r in collector._pending)


def test_following_commits_once_per_flush_interval_and_what_is_pending_at_stop(
        zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any) -> None:
    chroot = chroot_of(zk_hosts)
    follower = TxnLogCollector(lake, zk_server.data_dir, follow=True, chroot=chroot, flush_seconds=3600)
    follower.poll_once()  # the first poll commits what is there
    committed = follower.writer.batches_written
    for path in ("/paced0", "/paced1", "/paced2"):  # polls, each finding a new change: held back until the interval is up
        zk.create(path, b"x")
        wait_for(lambda p=path: follower.poll_once() == 0 and _pending(follower, p))
    assert follower.writer.batches_written == committed and not rows(lake, path="/paced0")
    follower.flush_seconds = 0  # the interval is up: the next poll commits all three at once
    follower.poll_once()
    assert follower.writer.batches_written == committed + 1
    assert {r["path"] for r in rows(lake, op="CREATE") if r["path"].startswith("/paced")} == {"/paced0", "/paced1", "/paced2"}
    # stopping commits what a poll found since the last commit
    follower.flush_seconds = 3600
    zk.create("/paced3", b"x")
    wait_for(lambda: follower.poll_once() == 0 and _pending(follower, "/paced3"))
    stop = threading.Event()
    stop.set()
    follower.run(stop)
    assert rows(lake, path="/paced3", op="CREATE")


def test_snapshot_reader_reads_the_tree(zk_server: Any) -> None:
    snaps = snapshot_files(zk_server.data_dir)
    assert snaps
    snap = read_snapshot(snaps[0][1])
    assert snap.zxid == snaps[0][0]
    assert {"", "/zookeeper"} <= {n.path for n in snap.nodes}


@pytest.mark.usefixtures("starts_zookeeper")
def test_purged_logs_start_from_the_snapshot(tmp_path: Path, lake: Any) -> None:
    from services.zookeeper import EmbeddedZooKeeper

    server = EmbeddedZooKeeper(tmp_path / "zk").start()
    try:
        client = KazooClient(hosts=server.hosts, timeout=15)
        client.start(timeout=15)
        client.create("/old", b"v0")
        client.set("/old", b"v1")
        client.create("/gone", b"x")
        client.delete("/gone")
        client.stop()
        client.close()
        server.restart()  # loading the database writes snapshot.<last zxid>
        client = KazooClient(hosts=server.hosts, timeout=15)
        client.start(timeout=15)
        client.create("/new", b"n")
        client.stop()
        client.close()
    finally:
        server.stop()
    # purge like `zkCleanup`: drop the first epoch's log and the initial snapshot
    logs = log_files(tmp_path / "zk")
    assert len(logs) >= 2
    logs[0][1].unlink()
    snapshot_files(tmp_path / "zk")[0][1].unlink()
    summary = TxnLogCollector(lake, tmp_path / "zk").run()
    assert summary["stopped"] == []
    got = {(r["path"], r["op"]): r for r in rows(lake)}
    assert got[("/old", "CREATE")]["data"] == b"v1" and got[("/old", "CREATE")]["version"] == 1
    assert got[("/old", "CREATE")]["detail"].startswith("snapshot.")
    assert ("/gone", "CREATE") not in got and ("/new", "CREATE") in got
    assert TxnLogCollector(lake, tmp_path / "zk").run()["events"] == 0


def test_cli_collect_txnlog_and_zk(
    zk_server: Any, zk_hosts: str, zk: KazooClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lakehouse import Lake
    from zkledger.cli import main

    zk.create("/cli", b"1")
    base = ["--lake", str(tmp_path / "lake"), "--cluster", "test", "collect"]
    assert main([*base, "txnlog", "--dir", str(zk_server.data_dir), "--chroot", chroot_of(zk_hosts)]) == 0
    assert "events written" in capsys.readouterr().out
    assert main([*base, "zk", "--zk", zk_hosts, "--duration", "1"]) == 0
    assert "collect zk:" in capsys.readouterr().out
    got = rows(Lake(tmp_path / "lake", cluster="test"), path="/cli", op="CREATE")
    assert {r["source"] for r in got} == {"txnlog", "resync"}
    assert main([*base, "txnlog", "--dir", str(tmp_path / "missing")]) == 1
    assert "no such directory" in capsys.readouterr().err


@pytest.mark.usefixtures("starts_zookeeper")
def test_the_newest_log_damaged_in_the_middle_is_a_gap_and_the_rest_is_read(tmp_path: Path, lake: Any) -> None:
    from services.zookeeper import EmbeddedZooKeeper

    server = EmbeddedZooKeeper(tmp_path / "zk").start()
    try:
        client = KazooClient(hosts=server.hosts, timeout=15)
        client.start(timeout=15)
        for i in range(50):
            client.create(f"/n{i:02d}", b"x")
        client.stop()
        client.close()
    finally:
        server.stop()
    (_z, newest), = log_files(tmp_path / "zk")  # the only log, so the newest: no next log bounds the damage
    entries = read_log(newest).entries
    offsets = _entry_offsets(newest)
    damaged = next(i for i, e in enumerate(entries) if getattr(e.record, "path", None) == "/n05")
    raw = bytearray(newest.read_bytes())
    raw[offsets[damaged] + 20] ^= 0xFF  # inside /n05's entry
    newest.write_bytes(bytes(raw))

    summary = TxnLogCollector(lake, tmp_path / "zk").run()
    created = {r["path"] for r in rows(lake, op="CREATE")}
    assert "/n05" not in created and {f"/n{i:02d}" for i in range(50) if i != 5} <= created
    assert summary["gaps"] == 1 and summary["quarantined"] == 1
    lost = entries[damaged].header.zxid
    gap, = rows(lake, op="GAP")
    assert gap["zxid"] == lost and f"{lost:#x}..{lost:#x} are lost" in gap["detail"]
    assert "checksum mismatch" in gap["detail"] and f"read again from offset {offsets[damaged + 1]}" in gap["detail"]
    q, = lake.read_arrow("quarantine").to_pylist()
    assert q["ref"] == f"{newest.name}:{offsets[damaged]}" and q["reason"] == gap["detail"]
    assert bytes.fromhex(q["raw"]) == bytes(raw[offsets[damaged] : offsets[damaged + 1]])  # the unreadable part
    again = TxnLogCollector(lake, tmp_path / "zk").run()  # a rerun reports nothing twice
    assert again["events"] == 0 and again["gaps"] == 0 and lake.read_arrow("quarantine").num_rows == 1
