"""The monitor's checkpoint against the lake's rebuilds: a checkpoint older than a rebuild is refused, monitor
output without its checkpoint asks for a rebuild, an interrupted rebuild leaves nothing a monitor could start
from. (Every way of running ending with the rebuild's tables: tests/e2e/test_differential.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.monitor import drain_monitor
from engine.rebuild import rebuild
from lakehouse import Lake
from tests.conftest import assert_same_tables
from tests.history import zombie_offline_history

pytestmark = pytest.mark.spark


def _history() -> list[dict[str, Any]]:
    return zombie_offline_history().rows


@pytest.fixture(scope="module")
def batch(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """The history rebuilt in one increment: the tables every run here must end with."""
    lake = Lake(tmp_path_factory.mktemp("batch") / "lake", cluster="test")
    lake.append("znode_events", _history(), writer_id="t", batch_seq=1)
    rebuild(spark, lake)
    yield lake


def test_a_monitor_checkpoint_older_than_a_rebuild_is_refused_then_continued_from_it(spark: Any, batch: Lake,
                                                                                     tmp_path: Path) -> None:
    from zkledger.errors import UserError

    rows = _history()
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
    assert_same_tables(lake, batch)


def test_monitor_output_without_its_checkpoint_asks_for_a_rebuild(spark: Any, tmp_path: Path) -> None:
    from zkledger.errors import UserError

    lake = Lake(tmp_path / "lake", cluster="test")
    lake.append("znode_events", _history(), writer_id="t", batch_seq=1)
    drain_monitor(spark, lake, str(tmp_path / "ckpt"))
    with pytest.raises(UserError, match="run `zkledger rebuild`"):
        drain_monitor(spark, lake, str(tmp_path / "another-ckpt"))


def test_an_interrupted_chunked_rebuild_leaves_no_state_and_no_monitor_start(spark: Any, batch: Lake,
                                                                              tmp_path: Path) -> None:
    import engine.rebuild as engine_rebuild
    from engine.increment import run_increment
    from zkledger.errors import UserError

    rows = _history()
    lake = Lake(tmp_path / "lake", cluster="test")
    lake.append("znode_events", rows, writer_id="t", batch_seq=1)
    rebuild(spark, lake)  # a finished rebuild: its state is there
    assert lake.row_count("partition_state") > 0
    calls: list[int] = []

    def failing_third_chunk(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("driver lost")  # the process dies in the middle of the rebuild
        return run_increment(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_rebuild, "run_increment", failing_third_chunk)
        with pytest.raises(RuntimeError, match="driver lost"):
            rebuild(spark, lake, chunk_rows=len(rows) // 4)
    assert lake.row_count("partition_state") == 0  # not the old rebuild's state next to new transitions
    with pytest.raises(UserError, match="run `zkledger rebuild`"):
        drain_monitor(spark, lake, str(tmp_path / "ckpt"))
    rebuild(spark, lake, chunk_rows=len(rows) // 4)  # the rebuild run again ends as a whole one
    assert_same_tables(lake, batch)
