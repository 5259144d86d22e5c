"""jobs/monitor.py submitted to a real Spark standalone master with two workers (1 core each): the driver killed
and restarted, then a worker killed mid-stream; the derived tables equal a local run's."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.jobs.spark_submit import ROOT, submit_command
from tests.standalone_cluster import StandaloneCluster, spark_env

pytestmark = pytest.mark.spark


def _story() -> Any:
    """Two controller tenures, two topics, leader moves, ISR changes and a zombie write, in zxid order."""
    from tests.history import History

    h = History(cluster="cluster-run")
    h.broker(1).broker(2).broker(3).controller(1, 1)
    h.topic("t", {0: [1, 2, 3], 1: [2, 3, 1]}).topic("u", {0: [3, 1, 2]})
    h.state("t", 0, 1, 0, 1, [1, 2, 3], op="CREATE").state("t", 1, 2, 0, 1, [2, 3, 1], op="CREATE")
    h.state("u", 0, 3, 0, 1, [3, 1, 2], op="CREATE")
    for round_ in range(3):
        h.state("t", 0, 1, 0, 1, [1, 2]).state("t", 0, 1, 0, 1, [1, 2, 3])  # the leader's ISR shrinks and grows
        h.state("u", 0, 3, round_ + 1, 1, [3, 1, 2])
    h.controller(2, 2)
    h.state("t", 0, 2, 1, 2, [2, 3])  # the new controller moves the leader
    h.state("t", 1, 3, 1, 1, [3, 1])  # a zombie write: leader change by controller epoch 1 < 2
    h.state("u", 0, 1, 4, 2, [1, 2])
    return h


def _wait_rows(lake: Any, table: str, at_least: int, proc: subprocess.Popen[bytes], log: Path,
               limit_s: float = 300) -> int:
    """Wait until ``table`` holds ``at_least`` rows (a micro-batch committed); the count then."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        n = lake.row_count(table) if lake.exists(table) else 0
        if n >= at_least:
            return int(n)
        assert proc.poll() is None, f"{proc.args!r} exited: {log.read_text(errors='replace')[-2000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{table} never reached {at_least} rows: {log.read_text(errors='replace')[-2000:]}")


def test_submitted_monitor_survives_a_killed_driver_and_a_killed_worker(
        standalone_cluster: StandaloneCluster, tmp_path: Path) -> None:
    """jobs/monitor.py on two workers, one bronze commit per micro-batch: the driver is SIGKILLed after its first
    micro-batch, restarted, and one worker is killed while the restarted monitor streams. The derived tables
    equal the same steps run in this process over the same bronze."""
    import signal

    from engine.local_run import run_local
    from lakehouse import Lake
    from tests.conftest import assert_same_tables

    h = _story()
    remote, local = Lake(str(tmp_path / "remote-lake"), h.cluster), Lake(str(tmp_path / "local-lake"), h.cluster)
    # 4 commits, one micro-batch each, every one adding partition transitions: the driver killed in the first, the
    # worker once the second has rows, the rest run without it (each batch costs seconds on 1 core)
    commits = [h.rows[i:i + 6] for i in range(0, len(h.rows), 6)]
    assert len(commits) == 4
    for target in (remote, local):
        for seq, rows in enumerate(commits):
            target.append("znode_events", rows, writer_id="fixture", batch_seq=seq)
    run_local(local)

    conf = tmp_path / "cluster.toml"
    conf.write_text("[pipeline]\nbuckets = 4\n\n[streaming]\nmax_files_per_trigger = 1\n\n[monitor]\ntable_commit_seconds = 1.0\n",
                    encoding="utf-8")
    job = [*submit_command(standalone_cluster.url, tmp_path, cores=2), str(ROOT / "jobs" / "monitor.py"), "--conf", str(conf),
           "--lake", remote.root, "--cluster", remote.cluster]
    first_log = tmp_path / "monitor-1.log"
    first = subprocess.Popen([*job, "--trigger", "1"], stdout=first_log.open("wb"), stderr=subprocess.STDOUT,
                             env=spark_env(), cwd=tmp_path, start_new_session=True)
    try:
        done_first = _wait_rows(remote, "partition_transitions", 1, first, first_log)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its Python workers, mid-stream
        first.wait(timeout=60)
    assert remote.row_count("partition_transitions") < local.row_count("partition_transitions"), \
        "the first run drained it all"

    second_log = tmp_path / "monitor-2.log"
    second = subprocess.Popen([*job, "--available-now"], stdout=second_log.open("wb"), stderr=subprocess.STDOUT,
                              env=spark_env(), cwd=tmp_path)
    try:
        streamed = _wait_rows(remote, "partition_transitions", done_first + 1, second, second_log)
        assert streamed < local.row_count("partition_transitions"), "the restarted run drained it all before the kill"
        victim = standalone_cluster.workers[1]
        os.killpg(victim.pid, signal.SIGKILL)  # the worker and its executor
        victim.wait(timeout=60)
        assert second.wait(timeout=600) == 0, second_log.read_text(errors="replace")[-3000:]
    finally:
        if second.poll() is None:
            second.kill()
    assert_same_tables(remote, local)
    assert "ZOMBIE_CONTROLLER_WRITE" in {r["kind"] for r in remote.read_arrow("anomalies").to_pylist()}
