"""The monitor on Delta's streaming source: the maintenance it schedules between micro-batches. (Admission
control and the start right after a rebuild end with the rebuild's tables: tests/e2e/test_differential.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.monitor import start_monitor
from lakehouse import Lake
from models.tables import ZNODE_EVENTS
from tests.history import clean_history

pytestmark = pytest.mark.spark


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
