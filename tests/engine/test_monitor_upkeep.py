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
from models.tables import ANOMALIES, PARTITION_TRANSITIONS, QUALITY_RESULTS, REPLICA_TRANSITIONS, ZNODE_EVENTS
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
    assert {r["table_name"] for r in results} >= {PARTITION_TRANSITIONS.name, REPLICA_TRANSITIONS.name, ANOMALIES.name}
    assert len({r["run_id"] for r in results}) >= 2  # one run per batch with new rows
    failed = [(r["table_name"], r["expectation"], r["observed"]) for r in results if not r["success"]]
    assert failed == []  # the batches' rows are well formed
    assert lake.last_batch_seq(QUALITY_RESULTS.name, quality_writer) is not None


def test_maintain_between_batches_keeps_one_row_per_partition_in_the_state_tables(spark: Any, tmp_path: Path) -> None:
    """The state tables hold one file per key, which the key's next commit replaces by name: compacting them
    would leave a key's old rows beside its new file."""
    from engine.local_run import run_local
    from engine.monitor import drain_monitor
    from lakehouse.maintenance import maintain_tables
    from tests.conftest import assert_same_tables
    from tests.history import History

    h = History()
    h.broker(1).broker(2).controller(1, 1)
    h.topic("t", {p: [1, 2] for p in range(8)})  # partitions in several buckets: several state files
    for p in range(8):
        h.state("t", p, 1, 0, 1, [1, 2], op="CREATE")
    cut = len(h.rows)
    for p in range(8):  # each partition changes again after the maintenance
        h.state("t", p, 2, 1, 1, [2, 1])

    lake, clean = Lake(tmp_path / "lake", cluster="test"), Lake(tmp_path / "clean", cluster="test")
    lake.append(ZNODE_EVENTS.name, h.rows[:cut], writer_id="fixture", batch_seq=0)
    checkpoint = str(tmp_path / "ck")
    drain_monitor(spark, lake, checkpoint, buckets=4)
    assert len(lake.snapshot("partition_state").file_uris()) > 1
    maintain_tables(lake)
    lake.append(ZNODE_EVENTS.name, h.rows[cut:], writer_id="fixture", batch_seq=1)
    drain_monitor(spark, lake, checkpoint, buckets=4)

    clean.append(ZNODE_EVENTS.name, h.rows, writer_id="fixture", batch_seq=0)
    run_local(clean, buckets=4)
    assert lake.row_count("partition_state") == 8
    assert_same_tables(lake, clean, ["partition_state", "replica_state"])
