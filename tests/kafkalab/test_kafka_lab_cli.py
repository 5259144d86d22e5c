"""`zkledger kafka-lab start|stop|run`: the user's way to the real-broker lab."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def zkledger(lake: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", str(lake), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.usefixtures("starts_kafka")
def test_start_leaves_a_broker_running_and_stop_stops_it(tmp_path: Path) -> None:
    from kazoo.client import KazooClient

    lake = tmp_path / "lake"
    started = zkledger(lake, "kafka-lab", "start", "--brokers", "1")
    try:
        assert started.returncode == 0, started.stderr
        assert "1 brokers up, controller 1" in started.stdout
        state = json.loads((lake / "_kafka_lab" / "lab.json").read_text())
        zk = KazooClient(hosts=state["zookeeper"].split("/")[0], timeout=15)
        zk.start(timeout=15)
        try:
            assert zk.get_children("/kafka/brokers/ids") == ["1"]
        finally:
            zk.stop()
            zk.close()
        again = zkledger(lake, "kafka-lab", "start", "--brokers", "1")
        assert again.returncode == 1 and "already recorded" in again.stderr
    finally:
        stopped = zkledger(lake, "kafka-lab", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped 1 brokers" in stopped.stdout
    assert not Path(f"/proc/{state['brokers']['1']}").exists() or b"kafka.Kafka" not in Path(
        f"/proc/{state['brokers']['1']}/cmdline").read_bytes()
    assert zkledger(lake, "kafka-lab", "stop").returncode == 1


@pytest.mark.parametrize("args, message", [
    (("run", "no-such-scenario"), "unknown scenario"),
    (("run", "--kafka-version", "0.7", "create"), "unknown Kafka line"),
    (("start", "--brokers", "0"), "--brokers must be 1..9"),
])
def test_bad_input_is_a_one_line_error(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    out = zkledger(tmp_path / "lake", "kafka-lab", *args, timeout=60)
    assert out.returncode == 1
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.usefixtures("starts_kafka", "starts_spark", "takes_minutes")  # brokers, then `zkledger rebuild`
@pytest.mark.skipif(os.environ.get("KAFKA_MATRIX") != "1",
                    reason="the longer matrix (KAFKA_MATRIX=1); tests/kafkalab/test_real_kafka.py plays every "
                           "scenario through the same runner by default")
def test_run_plays_scenarios_and_shows_the_comparison_and_the_report(tmp_path: Path) -> None:
    """What `make demo-kafka` runs, on a shorter list: brokers up, scenarios played, zkledger's history against
    Kafka's answers printed, the report written, a one-line summary, exit 0."""
    lake = tmp_path / "lake"
    out = zkledger(lake, "kafka-lab", "run", "create", "controller-failover", timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "scenario controller-failover: done" in out.stderr
    assert "0 mismatches" in out.stdout
    assert "-> match" in out.stdout
    summary = out.stdout.strip().splitlines()[-1]
    points = re.search(r"state matched Kafka at (\d+) of (\d+) points", summary)
    assert points and points.group(1) == points.group(2) and int(points.group(2)) > 20, summary
    report = lake / "zkledger-report.html"
    html = report.read_text(encoding="utf-8")
    assert "<svg" in html, "the report draws no timeline"
