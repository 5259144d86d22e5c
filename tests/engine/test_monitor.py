"""The monitor and the rebuild share one checkpoint: the monitor continues where the rebuild ended, and a new
checkpoint is refused on derived tables it did not write. (Every way of running ending with the same tables:
tests/e2e/test_differential.py; a process killed at each commit: test_commit_points.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.local_run import run_local
from engine.monitor import drain_monitor
from engine.rebuild import rebuild
from lakehouse import Lake
from services.errors import UserError
from tests.conftest import assert_same_tables
from tests.history import zombie_offline_history


def _history() -> list[dict[str, Any]]:
    return zombie_offline_history().rows


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """The whole history in one batch: the tables every run here must end with."""
    lake = Lake(tmp_path_factory.mktemp("batch") / "lake", cluster="test")
    lake.append("znode_events", _history(), writer_id="t", batch_seq=1)
    run_local(lake)
    return lake


def test_the_monitor_continues_the_rebuild_and_a_new_checkpoint_is_refused(spark: Any, batch: Lake,
                                                                          tmp_path: Path) -> None:
    rows = _history()
    half = len(rows) // 2
    lake = Lake(tmp_path / "lake", cluster="test")
    lake.append("znode_events", rows[:half], writer_id="t", batch_seq=1)
    rebuild(spark, lake, buckets=4)
    lake.append("znode_events", rows[half:], writer_id="t", batch_seq=2)
    with pytest.raises(UserError, match="run `zkledger rebuild`"):  # would write the whole history again
        drain_monitor(spark, lake, str(tmp_path / "another-checkpoint"), buckets=4)
    assert drain_monitor(spark, lake, buckets=4) == 1  # the rebuild's checkpoint: only the new commit
    assert_same_tables(lake, batch)
