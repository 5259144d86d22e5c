"""Every write boundary is safe: a real process killed right after each derived table's commit, restarted,
leaves every derived table equal to a clean rebuild's.

The kill is the crash hook ``committed_<table>:<batch>`` (``engine.stateful_sink``): SIGKILL right after that
table's commit, with the batch's other tables committed or not (the anomalies first, the appended tables side by
side, then controller_tenure and replica_state, partition_state last). The restart is the monitor on the same
checkpoint: Spark replays the unfinished batch, and each table skips what it already holds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.local_run import run_local
from engine.monitor import drain_monitor, start_monitor, stop_monitor
from engine.stateful import checkpoint_writer, stateful_checkpoint
from engine.stateful_sink import COMMITTED, DERIVED, STAGED
from lakehouse import Lake
from lakehouse.files import StagedFiles
from lakehouse.lake import CRASH_ENV
from tests.conftest import assert_same_tables
from tests.history import clean_history, decision

# The boundaries: after the anomalies, after any table of the side-by-side group, after partition_state. By
# default a group table stands for every boundary before the last, and the last (every table holds the batch, the
# checkpoint does not) is the killed rebuild's, finished by a monitor (a real process per case costs a minute on
# 2 cores); ZKLEDGER_ALL_COMMIT_POINTS=1 kills the monitor after every table's commit.
GROUP_REPRESENTATIVE = "partition_transitions"
DERIVED_TABLES = tuple(spec.name for spec in DERIVED)
ALL_POINTS = bool(os.environ.get("ZKLEDGER_ALL_COMMIT_POINTS"))
# a ZooKeeper history writes every derived table but the KRaft clusters' events
KILL_POINTS = tuple(t for t in DERIVED_TABLES if t != "kraft_metadata_events") if ALL_POINTS else (GROUP_REPRESENTATIVE,)
# a killed rebuild is finished the way a killed monitor is (its batch replayed); by default only the case where
# every table holds the batch and the checkpoint does not
REBUILD_KILL_POINTS = KILL_POINTS if ALL_POINTS else ("partition_state",)


def _history() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Bronze rows touching every derived table: a zombie write, an offline partition, an undecodable payload,
    a controller's log decisions (tenure from logs)."""
    h = clean_history()
    h.controller(2, 2)
    h.state("t", 0, 2, 1, 2, [2])
    h.add("/brokers/topics/t/partitions/0/state", "SET", b"{not json")
    h.state("t", 0, 1, 2, 1, [1, 2])  # zombie write
    h.state("t", 0, -1, 3, 2, [1])  # offline
    decisions = [decision(30, "PARTITION_TRANSITION", controller_id=2, controller_epoch=2, topic="t", partition=0,
                          from_state="OnlinePartition", to_state="OfflinePartition")]
    return h.rows, decisions


def _cli(lake: Lake, *args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash:
        env[CRASH_ENV] = crash
    cmd = [sys.executable, "-m", "zkledger.cli", "--lake", str(lake.root), "--cluster", lake.cluster, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """The whole history in one batch: the derived tables every recovery must end with."""
    znodes, decisions = _history()
    lake = Lake(tmp_path_factory.mktemp("clean") / "lake", cluster="test")
    lake.append("znode_events", znodes, writer_id="t", batch_seq=1)
    lake.append("controller_decisions", decisions, writer_id="t", batch_seq=1)
    run_local(lake)
    assert all(lake.row_count(t) for t in ("decode_quarantine", "anomalies", "controller_tenure"))
    return lake


@pytest.fixture(scope="module")
def first_batch(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Lake:
    """A lake whose monitor committed micro-batch 0 over the first half of the history (in this process: the
    killed process is the next batch's)."""
    znodes, _ = _history()
    lake = Lake(tmp_path_factory.mktemp("first") / "lake", cluster="test")
    lake.append("znode_events", znodes[: len(znodes) // 2], writer_id="t", batch_seq=1)
    assert drain_monitor(spark, lake, stateful_checkpoint(None, lake.root)) == 1
    return lake


@pytest.mark.parametrize("table", KILL_POINTS)
def test_monitor_killed_after_each_commit_recovers(spark: Any, clean: Lake, first_batch: Lake, tmp_path: Path,
                                                   table: str) -> None:
    shutil.copytree(first_batch.root, tmp_path / "lake")  # the lake and the monitor's checkpoint in it
    lake = Lake(tmp_path / "lake", cluster="test")
    znodes, decisions = _history()
    lake.append("znode_events", znodes[len(znodes) // 2:], writer_id="t", batch_seq=2)
    lake.append("controller_decisions", decisions, writer_id="t", batch_seq=1)
    killed = _cli(lake, "monitor", "--available-now", crash=f"{COMMITTED}{table}:1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    checkpoint = stateful_checkpoint(None, lake.root)
    writer = checkpoint_writer(checkpoint)
    assert lake.last_batch_seq(table, writer) == 1  # killed right after this table's commit of batch 1
    assert table == "partition_state" or lake.last_batch_seq("partition_state", writer) == 0

    drain_monitor(spark, lake, checkpoint)  # the restart
    assert_same_tables(lake, clean, DERIVED_TABLES)


@pytest.mark.parametrize("table", REBUILD_KILL_POINTS)
def test_rebuild_killed_after_each_commit_is_finished_by_the_monitor(spark: Any, clean: Lake, tmp_path: Path,
                                                                     table: str) -> None:
    lake = Lake(tmp_path / "lake", cluster="test")
    znodes, decisions = _history()
    lake.append("znode_events", znodes, writer_id="t", batch_seq=1)
    lake.append("controller_decisions", decisions, writer_id="t", batch_seq=1)
    killed = _cli(lake, "rebuild", crash=f"{COMMITTED}{table}:0")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    written = _data_files(lake)
    drain_monitor(spark, lake)  # the restart: the rebuild's checkpoint, its batch replayed
    assert_same_tables(lake, clean, DERIVED_TABLES)
    if table == "partition_state":  # every table held the batch: its replay wrote no file either
        assert _data_files(lake) == written


def _data_files(lake: Lake) -> set[str]:
    """The derived tables' data files, committed or not (the Delta logs apart)."""
    return {str(f.relative_to(lake.root)) for spec in DERIVED for f in Path(lake.table_path(spec.name)).glob("*.parquet")}


@pytest.mark.parametrize("crash", [f"{STAGED}:1", f"{COMMITTED}{GROUP_REPRESENTATIVE}:1"])
def test_monitor_killed_with_staged_batches_recovers(spark: Any, clean: Lake, first_batch: Lake, tmp_path: Path,
                                                     crash: str) -> None:
    """A running monitor commits the anomalies in its micro-batch and stages the rest: killed after staging,
    or while committing what it staged, its restart commits the staged batch and replays nothing."""
    shutil.copytree(first_batch.root, tmp_path / "lake")
    lake = Lake(tmp_path / "lake", cluster="test")
    znodes, decisions = _history()
    lake.append("znode_events", znodes[len(znodes) // 2:], writer_id="t", batch_seq=2)
    lake.append("controller_decisions", decisions, writer_id="t", batch_seq=1)
    conf = tmp_path / "staged.toml"
    conf.write_text("[monitor]\ntable_commit_seconds = 0.5\n")
    killed = _cli(lake, "--conf", str(conf), "monitor", crash=crash)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    checkpoint = stateful_checkpoint(None, lake.root)
    writer = checkpoint_writer(checkpoint)
    assert lake.last_batch_seq("anomalies", writer) == 1  # committed in its micro-batch
    assert lake.last_batch_seq("partition_state", writer) == 0  # the rest staged, or half committed
    assert [b for b, _ in StagedFiles(checkpoint).batches()] == [1]
    written = _data_files(lake)

    drain_monitor(spark, lake, checkpoint)  # the restart: commits the staged batch first, replays nothing
    assert_same_tables(lake, clean, DERIVED_TABLES)
    assert StagedFiles(checkpoint).batches() == []
    assert _data_files(lake) == written


def test_a_running_monitor_commits_its_anomalies_at_once_and_the_rest_when_due(
        spark: Any, clean: Lake, first_batch: Lake, tmp_path: Path) -> None:
    shutil.copytree(first_batch.root, tmp_path / "lake")
    lake = Lake(tmp_path / "lake", cluster="test")
    znodes, decisions = _history()
    lake.append("znode_events", znodes[len(znodes) // 2:], writer_id="t", batch_seq=2)
    lake.append("controller_decisions", decisions, writer_id="t", batch_seq=1)
    checkpoint = stateful_checkpoint(None, lake.root)
    writer = checkpoint_writer(checkpoint)
    query = start_monitor(spark, lake, checkpoint, trigger_seconds=0.5, table_commit_s=3600)
    try:
        deadline = time.monotonic() + 300
        while lake.last_batch_seq("anomalies", writer) != 1:
            assert time.monotonic() < deadline and query.isActive, "the monitor's batch 1 never committed"
            time.sleep(0.2)
        # its one Delta commit: the other tables hold batch 0 at most until what is staged is committed
        assert all(lake.last_batch_seq(name, writer) in (None, 0) for name in DERIVED_TABLES if name != "anomalies")
        assert [b for b, _ in StagedFiles(checkpoint).batches()] == [1]
    finally:
        stop_monitor(query)
    assert StagedFiles(checkpoint).batches() == []
    assert lake.last_batch_seq("partition_state", writer) == 1
    assert_same_tables(lake, clean, DERIVED_TABLES)
