"""kill -9 of `zkledger collect txnlog --follow` at seeded random points while ZooKeeper is written to, and
crashes forced between a batch's data write and its commit (and right after the commit), then a restart: the
bronze rows equal, row for row, those of one clean run of the collector over the same transaction log."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from collectors.txnlog import TxnLogCollector
from lakehouse import Lake
from tests.collectors.conftest import chroot_of, rows, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# every column but observed_at (when the row was read, which differs between two runs by design)
COMPARED = ("cluster", "zxid", "path", "op", "data", "version", "czxid", "mzxid", "pzxid", "ephemeral_owner",
            "session_id", "txn_time", "source", "missed_versions", "detail", "event_id")


class Writer(threading.Thread):
    """Keeps writing into the chroot what Kafka would (creates, sets, deletes, multis, an ephemeral whose
    session closes) until stopped."""

    def __init__(self, zk: KazooClient, zk_hosts: str) -> None:
        super().__init__(name="zk-writer", daemon=True)
        self.zk, self.zk_hosts = zk, zk_hosts
        self.stop = threading.Event()
        self.rounds = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.zk.create("/controller_epoch", b"1")
            while not self.stop.is_set():
                self._round(self.rounds)
                self.rounds += 1
                time.sleep(0.02)
        except BaseException as e:  # surfaced by the test, not lost in the thread
            self.error = e

    def _round(self, i: int) -> None:
        zk = self.zk
        zk.create(f"/brokers/topics/t{i}/partitions/0/state", f'{{"leader":{i % 3}}}'.encode(), makepath=True)
        zk.set(f"/brokers/topics/t{i}/partitions/0/state", f'{{"leader":{(i + 1) % 3}}}'.encode())
        tx = zk.transaction()  # a 2.1+ controller write: epoch check + set; every 4th one is fenced
        tx.check("/controller_epoch", version=0 if i % 4 else 7)
        tx.set_data(f"/brokers/topics/t{i}", b"{}")
        tx.commit()
        if i % 3 == 2:
            zk.delete(f"/brokers/topics/t{i - 1}", recursive=True)
        if i % 5 == 0:  # a broker registers and goes away with its session
            broker = KazooClient(hosts=self.zk_hosts, timeout=15)
            broker.start(timeout=15)
            broker.create(f"/brokers/ids/{i}", b"b", makepath=True, ephemeral=True)
            broker.stop()
            broker.close()


def _conf(tmp_path: Path, name: str, batch_size: int) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(f"[collect]\nbatch_size = {batch_size}\n")
    return str(path)


def _start(lake: Lake, zk_server: Any, chroot: str, conf: str, log: Path, crash: str | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ZKLEDGER_LAKE_CRASH", None)
    if crash is not None:
        env["ZKLEDGER_LAKE_CRASH"] = crash
    cmd = [sys.executable, "-m", "zkledger.cli", "--conf", conf, "--lake", lake.root, "--cluster", lake.cluster,
           "collect", "txnlog", "--dir", str(zk_server.data_dir), "--follow", "--chroot", chroot]
    with open(log, "ab") as err:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)


def _table(lake: Lake) -> list[tuple[Any, ...]]:
    return [tuple(r[c] for c in COMPARED) for r in rows(lake)]


def test_kill_9_and_crashes_at_commit_then_restart_lose_and_duplicate_nothing(
    zk_server: Any, zk_hosts: str, zk: KazooClient, tmp_path: Path
) -> None:
    chroot = chroot_of(zk_hosts)
    lake = Lake(tmp_path / "lake", cluster="test")
    writer_id = f"txnlog:{Path(zk_server.data_dir).resolve()}{chroot}"
    last = lambda: lake.last_batch_seq("znode_events", writer_id) if lake.exists("znode_events") else None  # noqa: E731
    log = tmp_path / "collector.log"
    small = _conf(tmp_path, "small", 7)  # several commits per poll, so a kill can land between two of them
    writes = Writer(zk, zk_hosts)
    writes.start()
    rnd = random.Random(20261122)
    kills = 0
    try:
        for delay in (rnd.uniform(0.0, 1.0) for _ in range(3)):
            before = last()
            proc = _start(lake, zk_server, chroot, small, log)
            # once this run has committed something, a seeded random moment later: mid-batch, mid-commit or idle
            wait_for(lambda: last() != before or proc.poll() is not None, limit=120)  # noqa: B023
            time.sleep(delay)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(30) == -signal.SIGKILL
            kills += 1
    finally:
        writes.stop.set()
        writes.join(30)
    assert writes.error is None, writes.error
    assert kills == 3 and writes.rounds > 0, writes.rounds

    # catch up on the backlog (then a kill -9 while idle), so the crash runs below have only their txns to do
    zk.create("/hook", b"")
    z_hook = zk.exists("/hook").czxid
    idle = _start(lake, zk_server, chroot, _conf(tmp_path, "big", 500), log)
    wait_for(lambda: (last() or 0) >= z_hook, limit=120)
    os.kill(idle.pid, signal.SIGKILL)
    assert idle.wait(30) == -signal.SIGKILL

    # forced crashes at exact points of one batch: one txn per batch, so a batch_seq is a known zxid
    one = _conf(tmp_path, "one", 1)
    zk.create("/hook/a", b"a")
    zk.create("/hook/b", b"b")
    zk.create("/hook/c", b"c")
    z_a, z_b, z_c = (zk.exists(f"/hook/{n}").czxid for n in "abc")
    crashed = _start(lake, zk_server, chroot, one, log, crash=f"before_commit:{z_b}")
    assert crashed.wait(120) == -signal.SIGKILL  # killed itself after writing /hook/b's data, before the commit
    assert last() == z_a
    crashed = _start(lake, zk_server, chroot, one, log, crash=f"after_commit:{z_c}")
    assert crashed.wait(120) == -signal.SIGKILL  # committed /hook/c, then died before anything else
    assert last() == z_c

    # a clean restart follows what is written after all that, then stops on SIGTERM
    zk.create("/hook/d", b"d")
    z_d = zk.exists("/hook/d").czxid
    final = _start(lake, zk_server, chroot, small, log)
    try:
        wait_for(lambda: (last() or 0) >= z_d, limit=120)
    finally:
        final.send_signal(signal.SIGTERM)
        assert final.wait(60) == 0, log.read_text()[-2000:]

    reference = Lake(tmp_path / "reference", cluster="test")
    TxnLogCollector(reference, zk_server.data_dir, chroot=chroot).run()  # one clean pass over the same log
    got, want = _table(lake), _table(reference)
    ids = [r[-1] for r in got]
    assert len(ids) == len(set(ids)), "duplicated rows"
    assert Counter(got) == Counter(want), (len(got), len(want))
    ops = Counter(r["op"] for r in rows(lake))
    assert ops["MULTI_FAILED"] >= 1 and ops["CLOSE_SESSION"] >= 1 and ops["DELETE"] >= 1, ops
    assert {r["path"] for r in rows(lake, op="CREATE")} >= {"/hook", "/hook/a", "/hook/b", "/hook/c", "/hook/d"}
