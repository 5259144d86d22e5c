"""One live process per collector writer id (txnlog, watch): a second one is refused with a one-line error,
and a holder killed with SIGKILL leaves nothing behind that blocks a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from collectors.bronze import WriterBusyError
from collectors.zk_watch import ZkWatchCollector
from tests.collectors.conftest import chroot_of, rows, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
_CLI = "import sys; from zkledger.cli import main; sys.exit(main(sys.argv[1:]))"


def _cli(lake: Any, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _CLI, "--lake", lake.root, "--cluster", "test", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_ENV)


def _refused(proc: subprocess.Popen[str]) -> str:
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "already writing" in lines[0] and "Traceback" not in err, err
    return lines[0]


def test_a_second_txnlog_collector_on_one_data_dir_is_refused(
    zk_server: Any, zk_hosts: str, zk: KazooClient, lake: Any
) -> None:
    zk.create("/a", b"1")
    args = ("collect", "txnlog", "--dir", str(zk_server.data_dir), "--chroot", chroot_of(zk_hosts))
    first = _cli(lake, *args, "--follow")
    try:
        wait_for(lambda: rows(lake, path="/a", op="CREATE"), limit=60)
        line = _refused(_cli(lake, *args))
        assert f"pid {first.pid}" in line
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 0
    ids = [r["event_id"] for r in rows(lake)]
    assert len(ids) == len(set(ids))


_WATCH = textwrap.dedent(
    """
    import sys, threading
    from lakehouse import Lake
    from collectors.zk_watch import ZkWatchCollector
    c = ZkWatchCollector(Lake(sys.argv[1], cluster="test"), sys.argv[2], flush_seconds=0.1)
    c.start()
    print("ready", flush=True)
    c.run(threading.Event())
    """
)


def test_a_second_watch_collector_on_one_ensemble_is_refused_until_the_first_dies(
    zk_hosts: str, zk: KazooClient, lake: Any
) -> None:
    zk.create("/x", b"1")
    holder = subprocess.Popen([sys.executable, "-c", _WATCH, lake.root, zk_hosts], stdout=subprocess.PIPE, env=_ENV)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"ready"
        second = ZkWatchCollector(lake, zk_hosts)
        with pytest.raises(WriterBusyError, match=f"pid {holder.pid}"):
            second.start()
        assert not second.client.connected and not second.lease.held
        _refused(_cli(lake, "collect", "zk", "--zk", zk_hosts, "--duration", "1"))
    finally:
        holder.kill()  # SIGKILL: no cleanup runs
        holder.wait(30)
    zk.set("/x", b"2")
    collector = ZkWatchCollector(lake, zk_hosts, flush_seconds=0.1)
    collector.drain()
    collector.stop()
    creates = [r for r in rows(lake, path="/x", op="CREATE")]
    assert len(creates) == 1
    assert max(r["version"] for r in rows(lake, path="/x") if r["op"] in ("CREATE", "SET")) == 1
