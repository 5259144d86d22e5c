"""The monitor on Delta's streaming source: admission control, the start right after a rebuild, and the
maintenance it schedules between micro-batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.monitor import START_MARKER, drain_monitor, start_monitor
from engine.rebuild import rebuild
from lakehouse import Lake
from models.tables import ZNODE_EVENTS
from tests.pipeline.history import clean_history

pytestmark = pytest.mark.spark

DERIVED = ("metadata_events", "partition_transitions", "replica_transitions", "partition_state", "replica_state",
           "anomalies", "controller_tenure")


def _table(lake: Lake, table: str) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in lake.read_arrow(table).to_pylist())


def _rows() -> list[dict[str, Any]]:
    h = clean_history()
    h.controller(2, 2)
    h.state("t", 0, 2, 1, 2, [2])
    h.state("t", 0, 1, 2, 1, [1, 2])  # a zombie write
    return h.rows


def _commits(lake: Lake, rows: list[dict[str, Any]], parts: int) -> None:
    size = -(-len(rows) // parts)
    for i in range(parts):
        lake.append(ZNODE_EVENTS.name, rows[i * size:(i + 1) * size], writer_id="fixture", batch_seq=i)


def test_one_file_per_trigger_gives_what_one_batch_gives(spark: Any, tmp_path: Path) -> None:
    rows = _rows()
    whole, capped = Lake(tmp_path / "whole", cluster="t"), Lake(tmp_path / "capped", cluster="t")
    for lake in (whole, capped):
        _commits(lake, rows, 4)
    assert drain_monitor(spark, whole, str(tmp_path / "ck-whole")) == 1
    assert drain_monitor(spark, capped, str(tmp_path / "ck-capped"), max_files_per_trigger=1) == 4
    for table in DERIVED:
        assert _table(capped, table) == _table(whole, table), table


def test_a_monitor_continues_right_after_a_rebuild(spark: Any, tmp_path: Path) -> None:
    rows = _rows()
    half = len(rows) // 2
    lake, reference = Lake(tmp_path / "lake", cluster="t"), Lake(tmp_path / "reference", cluster="t")
    lake.append(ZNODE_EVENTS.name, rows[:half], writer_id="fixture", batch_seq=0)
    rebuild(spark, lake)
    rebuilt = lake.version(ZNODE_EVENTS.name)
    # nothing new yet: Delta's source cannot start after the newest version, so an empty commit opens one
    assert drain_monitor(spark, lake, str(tmp_path / "ck")) == 0
    assert lake.version(ZNODE_EVENTS.name) == rebuilt + 1
    assert lake.last_batch_seq(ZNODE_EVENTS.name, START_MARKER) == rebuilt + 1
    lake.append(ZNODE_EVENTS.name, rows[half:], writer_id="fixture", batch_seq=1)
    drain_monitor(spark, lake, str(tmp_path / "ck"))
    reference.append(ZNODE_EVENTS.name, rows, writer_id="fixture", batch_seq=0)
    rebuild(spark, reference)
    for table in ("metadata_events", "partition_state", "replica_state", "anomalies"):
        assert _table(lake, table) == _table(reference, table), table


def test_the_monitor_schedules_maintenance_between_batches(spark: Any, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="t")
    _commits(lake, _rows(), 4)  # four small files
    query = start_monitor(spark, lake, str(tmp_path / "ck"), available_now=True, max_files_per_trigger=1,
                          maintain_every_s=1e-9)
    query.awaitTermination()
    operations = [c.get("operation") for c in lake.history(ZNODE_EVENTS.name)]
    assert "OPTIMIZE" in operations
    assert len(lake.snapshot(ZNODE_EVENTS.name).file_uris()) == 1  # compacted into one file
    assert lake.read_arrow("anomalies").num_rows > 0
