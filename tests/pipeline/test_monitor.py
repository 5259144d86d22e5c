"""Differential: the streaming monitor (several micro-batches, random boundaries) == a batch rebuild."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from jobs._common import rebuild, start_monitor
from lakehouse import Lake
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
        # each run stops when caught up; the next one restarts from the checkpoint mid-stream
        q = start_monitor(spark, stream, ckpt, available_now=True, publish=published.extend)
        q.awaitTermination()

    for table in COMPARED:
        assert _table(stream, table) == _table(batch, table), table
    kinds = sorted(r["kind"] for r in batch.read_arrow("anomalies").to_pylist())
    assert "ZOMBIE_CONTROLLER_WRITE" in kinds and "OFFLINE_PARTITION" in kinds
    assert sorted(r["kind"] for r in published) == kinds
