"""`benchmarks.worker_daemon`: each run's daemon reaches the settings as a user's file would put it."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.worker_daemon import DAEMONS, PYSPARK_DAEMON, daemon_conf
from conf.settings import load_settings
from services.spark_session import PYTHON_DAEMON_CONF, WORKER_DAEMON


@pytest.mark.parametrize("module", DAEMONS)
def test_a_daemon_file_sets_the_session_s_daemon_through_spark_extra(tmp_path: Path, module: str) -> None:
    assert load_settings(daemon_conf(tmp_path / "daemon.toml", module)).spark.extra[PYTHON_DAEMON_CONF] == module


def test_the_baseline_is_pyspark_s_daemon() -> None:
    assert DAEMONS == (PYSPARK_DAEMON, WORKER_DAEMON)
