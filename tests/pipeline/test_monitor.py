"""Differential: the streaming monitor (several micro-batches, random boundaries) == a batch rebuild."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.monitor import drain_monitor
from engine.rebuild import rebuild
from lakehouse import Lake
from lakehouse.lake import CRASH_ENV
from tests.pipeline.history import clean_history

pytestmark = pytest.mark.spark

COMPARED = ("metadata_events", "partition_transitions", "replica_transitions", "partition_state",
            "replica_state", "anomalies", "controller_tenure")


def _table(lake: Any, table: str) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in lake.read_arrow(table).to_pylist())


def _history() -> list[dict[str, Any]]:
    h = clean_history()
    h.controller(2, 2)
    h.state("t", 0, 2, 1, 2, [2])
    h.state("t", 0, 1, 2, 1, [1, 2])  # zombie write
    h.state("t", 0, -1, 3, 2, [1])  # offline
    return h.rows


def test_monitor_equals_rebuild(spark: Any, tmp_path: Path) -> None:
    rows = _history()
    batch = Lake(tmp_path / "batch", cluster="test")
    batch.append("znode_events", rows, writer_id="t", batch_seq=1)
    rebuild(spark, batch)

    stream = Lake(tmp_path / "stream", cluster="test")
    cuts = sorted(random.Random(7).sample(range(1, len(rows)), 2))
    published: list[dict[str, Any]] = []
    ckpt = str(tmp_path / "ckpt")
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(rows)], strict=True)):
        stream.append("znode_events", rows[a:b], writer_id="t", batch_seq=i + 1)
        # each drain stops when caught up; the next one restarts from the checkpoint mid-stream
        drain_monitor(spark, stream, ckpt, publish=published.extend)

    for table in COMPARED:
        assert _table(stream, table) == _table(batch, table), table
    kinds = sorted(r["kind"] for r in batch.read_arrow("anomalies").to_pylist())
    assert "ZOMBIE_CONTROLLER_WRITE" in kinds and "OFFLINE_PARTITION" in kinds
    assert sorted(r["kind"] for r in published) == kinds


def _monitor_available_now(lake: Lake, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash:
        env[CRASH_ENV] = crash
    cmd = [sys.executable, "-m", "zkledger.cli", "--lake", str(lake.root), "--cluster", lake.cluster, "monitor",
           "--available-now"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_available_now_after_a_crash_also_processes_what_arrived_while_down(spark: Any, tmp_path: Path) -> None:
    # Spark runs a single micro-batch per availableNow query on a Python source, and after a crash that batch
    # is the replayed one: without draining, rows that arrived while the monitor was down stayed unprocessed.
    rows = _history()
    batch = Lake(tmp_path / "batch", cluster="test")
    batch.append("znode_events", rows, writer_id="t", batch_seq=1)
    rebuild(spark, batch)

    stream = Lake(tmp_path / "stream", cluster="test")
    cut = len(rows) // 2
    stream.append("znode_events", rows[:cut], writer_id="t", batch_seq=1)
    # killed in micro-batch 0 before its first Delta commit: Spark's offset log has batch 0, nothing else does
    crashed = _monitor_available_now(stream, crash="before_commit:0")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert stream.last_batch_seq("metadata_events", "monitor") is None
    stream.append("znode_events", rows[cut:], writer_id="t", batch_seq=2)  # arrives while the monitor is down

    done = _monitor_available_now(stream)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "caught up" in done.stdout
    for table in COMPARED:
        assert _table(stream, table) == _table(batch, table), table


def _rebuilt(spark: Any, tmp_path: Path, rows: list[dict[str, Any]]) -> Lake:
    batch = Lake(tmp_path / "batch", cluster="test")
    batch.append("znode_events", rows, writer_id="t", batch_seq=1)
    rebuild(spark, batch)
    return batch


def test_a_new_monitor_continues_where_the_rebuild_ended(spark: Any, tmp_path: Path) -> None:
    rows = _history()
    batch = _rebuilt(spark, tmp_path, rows)
    lake = Lake(tmp_path / "lake", cluster="test")
    a, b = len(rows) // 3, 2 * len(rows) // 3
    lake.append("znode_events", rows[:a], writer_id="t", batch_seq=1)
    rebuild(spark, lake)
    before = {r["anomaly_id"] for r in lake.read_arrow("anomalies").to_pylist()}
    lake.append("znode_events", rows[a:b], writer_id="t", batch_seq=2)  # arrives after the rebuild
    published: list[dict[str, Any]] = []
    drain_monitor(spark, lake, str(tmp_path / "ckpt"), publish=published.extend)
    lake.append("znode_events", rows[b:], writer_id="t", batch_seq=3)
    drain_monitor(spark, lake, str(tmp_path / "ckpt"), publish=published.extend)
    for table in COMPARED:
        assert _table(lake, table) == _table(batch, table), table
    # the monitor publishes exactly what the rebuild had not found
    rebuilt_ids = {r["anomaly_id"] for r in batch.read_arrow("anomalies").to_pylist()}
    assert sorted(r["anomaly_id"] for r in published) == sorted(rebuilt_ids - before)


def test_a_monitor_checkpoint_older_than_a_rebuild_is_refused_then_continued_from_it(spark: Any,
                                                                                     tmp_path: Path) -> None:
    from zkledger.errors import UserError

    rows = _history()
    batch = _rebuilt(spark, tmp_path, rows)
    lake = Lake(tmp_path / "lake", cluster="test")
    half = len(rows) // 2
    ckpt = tmp_path / "ckpt"
    lake.append("znode_events", rows[:half], writer_id="t", batch_seq=1)
    drain_monitor(spark, lake, str(ckpt))
    rebuild(spark, lake)
    lake.append("znode_events", rows[half:], writer_id="t", batch_seq=2)
    with pytest.raises(UserError, match="rebuilt after this monitor's checkpoint"):
        drain_monitor(spark, lake, str(ckpt))
    ckpt.rename(tmp_path / "old-ckpt")  # what the message tells the user to do
    drain_monitor(spark, lake, str(ckpt))
    for table in COMPARED:
        assert _table(lake, table) == _table(batch, table), table


def test_monitor_output_without_its_checkpoint_asks_for_a_rebuild(spark: Any, tmp_path: Path) -> None:
    from zkledger.errors import UserError

    lake = Lake(tmp_path / "lake", cluster="test")
    lake.append("znode_events", _history(), writer_id="t", batch_seq=1)
    drain_monitor(spark, lake, str(tmp_path / "ckpt"))
    with pytest.raises(UserError, match="run `zkledger rebuild`"):
        drain_monitor(spark, lake, str(tmp_path / "another-ckpt"))


def test_an_interrupted_chunked_rebuild_leaves_no_state_and_no_monitor_start(spark: Any, tmp_path: Path) -> None:
    import engine.rebuild as engine_rebuild
    from zkledger.errors import UserError

    rows = _history()
    batch = _rebuilt(spark, tmp_path, rows)
    lake = Lake(tmp_path / "lake", cluster="test")
    lake.append("znode_events", rows, writer_id="t", batch_seq=1)
    rebuild(spark, lake)  # a finished rebuild: its state is there
    assert lake.row_count("partition_state") > 0
    real, calls = engine_rebuild.run_increment, []

    def failing_third_chunk(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("driver lost")  # the process dies in the middle of the rebuild
        return real(*args, **kwargs)

    engine_rebuild.run_increment = failing_third_chunk  # type: ignore[assignment]
    try:
        with pytest.raises(RuntimeError, match="driver lost"):
            rebuild(spark, lake, chunk_rows=len(rows) // 4)
    finally:
        engine_rebuild.run_increment = real
    assert lake.row_count("partition_state") == 0  # not the old rebuild's state next to new transitions
    with pytest.raises(UserError, match="run `zkledger rebuild`"):
        drain_monitor(spark, lake, str(tmp_path / "ckpt"))
    rebuild(spark, lake, chunk_rows=len(rows) // 4)  # the rebuild run again ends as a whole one
    for table in COMPARED:
        assert _table(lake, table) == _table(batch, table), table
