"""A run of the query whose first micro-batch misses Spark's fixed 10 s for a Python process on the driver to
connect back (a loaded machine) is started again from its checkpoint (`engine.stateful.run_stateful_query`).

The delay is real: the session's Python for UDFs becomes a script that waits 12 s before it runs the stateful
operator's driver-side worker the first time (or every time), then runs this interpreter."""

from __future__ import annotations

import logging
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from engine import stateful
from engine.local_run import run_local
from engine.monitor import drain_monitor
from lakehouse import Lake
from tests.conftest import assert_same_tables
from tests.history import clean_history

DRIVER_WORKER = "transform_with_state_driver_worker"


def slow_python(folder: Path, *, every_time: bool) -> Path:
    """A Python that starts the operator's driver-side worker 12 s late: once, or every time."""
    marker = folder / "delayed"
    script = folder / "python"
    delay = "sleep 12" if every_time else f'[ -e "{marker}" ] || {{ : > "{marker}"; sleep 12; }}'
    script.write_text(f'#!/bin/sh\ncase "$*" in *{DRIVER_WORKER}*) {delay};; esac\nexec "{sys.executable}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _lakes(tmp_path: Path) -> tuple[Lake, Lake]:
    rows = clean_history().rows
    lake, reference = Lake(tmp_path / "lake", cluster="test"), Lake(tmp_path / "reference", cluster="test")
    for each in (lake, reference):
        each.append("znode_events", rows, writer_id="t", batch_seq=1)
    run_local(reference)
    return lake, reference


def test_a_run_whose_first_batch_could_not_start_python_is_started_again(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    lake, reference = _lakes(tmp_path)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(slow_python(tmp_path, every_time=False)))
    with caplog.at_level(logging.WARNING, logger=stateful.__name__):
        assert drain_monitor(spark, lake, str(tmp_path / "checkpoint")) == 1
    assert (tmp_path / "delayed").exists()
    assert "starting it again from its checkpoint (2 of 3)" in caplog.text
    assert_same_tables(lake, reference)


def test_the_last_attempt_fails_with_sparks_error(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake, _ = _lakes(tmp_path)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(slow_python(tmp_path, every_time=True)))
    monkeypatch.setattr(stateful, "SPAWN_ATTEMPTS", 1)
    with pytest.raises(StreamingQueryException, match=stateful.SPAWN_TIMED_OUT):
        drain_monitor(spark, lake, str(tmp_path / "checkpoint"))
