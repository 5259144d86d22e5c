"""`benchmarks.batch_rebuild`'s Python-work bound: the query's route and steps, outside Spark, over a history cut
into the rebuild's number of micro-batches."""

from __future__ import annotations

from pathlib import Path

from benchmarks.batch_rebuild import python_work
from benchmarks.common import offline_history
from engine.local_run import run_local


def test_the_python_work_runs_every_event_in_the_batches_asked(tmp_path: Path) -> None:
    lake = offline_history(tmp_path / "lake", 20_000, 500)
    one, three = python_work(lake, 32, 1), python_work(lake, 32, 3)
    assert (one["batches"], three["batches"]) == (1, 3)
    counts = run_local(lake)  # the same steps, written: one batch's outputs are those tables
    appended = counts["partition_transitions"] + counts["replica_transitions"]
    assert one["output_rows"] == appended + counts["partition_state"] + counts["replica_state"] \
        + counts["controller_tenure"] + counts["anomalies"] + counts["decode_quarantine"]
    assert three["output_rows"] > one["output_rows"]  # each batch also gives its touched keys' state
