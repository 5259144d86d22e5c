"""A monitor's upkeep between and inside its micro-batches: the lake's scheduled maintenance
(``--maintain-every``) and the quality suites on each batch's new rows (``--quality``). (Admission control and
the start right after a rebuild end with the rebuild's tables: tests/e2e/test_differential.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.monitor import start_monitor
from engine.stateful import checkpoint_writer
from lakehouse import Lake
from models.anomalies import AnomalyKind
from models.tables import ANOMALIES, METADATA_EVENTS, PARTITION_TRANSITIONS, QUALITY_RESULTS, ZNODE_EVENTS
from tests.history import clean_history


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


def test_the_monitor_maintains_the_lake_and_checks_each_batch(spark: Any, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="t")
    _commits(lake, _rows(), 2)  # two small files, one micro-batch each
    checkpoint = tmp_path / "ck"
    query = start_monitor(spark, lake, str(checkpoint), available_now=True, buckets=2, max_files_per_trigger=1,
                          quality=True, maintain_every_s=1e-9)
    query.awaitTermination()
    quality_writer = f"{checkpoint_writer(checkpoint)}-quality"

    operations = [c.get("operation") for c in lake.history(ZNODE_EVENTS.name)]
    assert "OPTIMIZE" in operations
    assert len(lake.snapshot(ZNODE_EVENTS.name).file_uris()) == 1  # compacted into one file
    found = lake.read_arrow(ANOMALIES.name).to_pylist()
    assert AnomalyKind.ZOMBIE_CONTROLLER_WRITE in {r["kind"] for r in found}

    results = lake.read_arrow(QUALITY_RESULTS.name).to_pylist()
    assert {r["table_name"] for r in results} >= {METADATA_EVENTS.name, PARTITION_TRANSITIONS.name, ANOMALIES.name}
    assert len({r["run_id"] for r in results}) >= 2  # one run per batch with new rows
    failed = [(r["table_name"], r["expectation"], r["observed"]) for r in results if not r["success"]]
    assert failed == []  # the batches' rows are well formed
    assert lake.last_batch_seq(QUALITY_RESULTS.name, quality_writer) is not None
