"""The embedded ZooKeeper: Python API and `zkledger zk start|status|stop` through the real CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from services.errors import ZooKeeperServerError
from services.zookeeper import EmbeddedZooKeeper, port_in_use, running_state, terminate

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("starts_zookeeper")]


def zkledger(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("zkledger")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "zkledger.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def cli_data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir for CLI-started servers; whatever is still running there is killed afterwards."""
    data_dir = tmp_path / "zkdata"
    yield data_dir
    state = running_state(data_dir)
    if state is not None:
        terminate(state.pid)


def connect(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=15)
    client.start(timeout=15)
    return client


def test_cli_start_status_stop(cli_data_dir: Path) -> None:
    started = zkledger("zk", "start", "--data-dir", str(cli_data_dir))
    assert started.returncode == 0, started.stderr
    match = re.search(r"ZooKeeper started at 127\.0\.0\.1:(\d+)", started.stdout.strip().splitlines()[-1])
    assert match, started.stdout
    port = int(match.group(1))

    # the server outlived the CLI process and serves requests
    client = connect(f"127.0.0.1:{port}")
    client.create("/hello", b"world")
    client.stop()
    client.close()

    status = zkledger("zk", "status", "--data-dir", str(cli_data_dir))
    assert status.returncode == 0
    assert f"running at 127.0.0.1:{port}" in status.stdout
    assert (cli_data_dir / "version-2").is_dir()

    stopped = zkledger("zk", "stop", "--data-dir", str(cli_data_dir))
    assert stopped.returncode == 0 and "ZooKeeper stopped" in stopped.stdout
    assert not port_in_use(port)

    after = zkledger("zk", "status", "--data-dir", str(cli_data_dir))
    assert after.returncode == 0 and "not running" in after.stdout


def test_cli_start_defaults_to_the_lake_folder(tmp_path: Path) -> None:
    lake = tmp_path / "lk"
    started = zkledger("--lake", str(lake), "zk", "start")
    try:
        assert started.returncode == 0, started.stderr
        assert running_state(lake / "_zookeeper") is not None
    finally:
        # global options are also accepted after the command
        stopped = zkledger("zk", "stop", "--lake", str(lake))
    assert stopped.returncode == 0 and "ZooKeeper stopped" in stopped.stdout
    assert running_state(lake / "_zookeeper") is None


def test_cli_start_on_a_busy_port_fails_with_one_line(zk_server: EmbeddedZooKeeper, cli_data_dir: Path) -> None:
    result = zkledger("zk", "start", "--port", str(zk_server.port), "--data-dir", str(cli_data_dir))
    assert result.returncode != 0
    assert result.stderr.strip() == f"error: port {zk_server.port} on 127.0.0.1 is already in use; choose another --port"
    assert "Traceback" not in result.stderr
    assert running_state(cli_data_dir) is None


def test_second_start_on_the_same_data_dir_fails(tmp_path: Path) -> None:
    with EmbeddedZooKeeper(tmp_path / "zk") as server:
        with pytest.raises(ZooKeeperServerError, match="already running"):
            EmbeddedZooKeeper(tmp_path / "zk").start()
        assert server.running
    assert not server.running


def test_restart_keeps_port_and_data(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(tmp_path / "zk").start()
    try:
        port = server.port
        client = connect(server.hosts)
        client.create("/kept/deep", b"v1", makepath=True)
        client.stop()
        client.close()

        server.restart()

        assert server.port == port and server.running
        client = connect(server.hosts)
        data, stat = client.get("/kept/deep")
        client.stop()
        client.close()
        assert data == b"v1" and stat.version == 0
        assert any(p.name.startswith("log.") for p in server.txnlog_dir.iterdir())
    finally:
        server.stop()
    assert not port_in_use(port)


def test_zk_hosts_fixture_gives_an_empty_private_chroot(zk_hosts: str, zk_server: EmbeddedZooKeeper) -> None:
    assert zk_hosts.startswith(zk_server.hosts + "/t-")
    client = connect(zk_hosts)
    try:
        assert client.get_children("/") == []
        client.create("/mine", b"x")
    finally:
        client.stop()
        client.close()
    root = connect(zk_server.hosts)
    try:
        assert root.exists(zk_hosts[len(zk_server.hosts):] + "/mine") is not None
    finally:
        root.stop()
        root.close()


def test_a_server_started_from_python_dies_with_its_interpreter(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from services.zookeeper import EmbeddedZooKeeper\n"
        f"zk = EmbeddedZooKeeper({str(tmp_path / 'zk')!r}).start()\n"
        "print(zk.port)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    port = int(result.stdout.strip())
    assert not port_in_use(port)
    assert running_state(tmp_path / "zk") is None
