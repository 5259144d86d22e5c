"""A command's terminal shows zkledger's lines only: Spark's own logs (log4j2, the JVM's stderr, the Python
workers' prints) go to ``<lake>/_logs/spark.log``; ``-v`` brings them back to the terminal (the session is then
built as tests and notebooks build it, with Spark's logs on stderr)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from services.spark_session import SPARK_LOG

# a log4j2 line of our pattern ("08:23:03 WARN ResolveWriteToStream: ..."), the JVM's own warning, Spark's
# default profile banner, the transformWithStateInPandas worker's prints
SPARK_NOISE = re.compile(r"^\d\d:\d\d:\d\d (WARN|ERROR|INFO) |log4j|Using incubator modules|TransformWithStateInPandas",
                         re.MULTILINE)


def _zkledger(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", "lake", *args], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.usefixtures("starts_spark")
def test_spark_logs_go_to_the_lake(tmp_path: Path) -> None:
    _zkledger(tmp_path, "simulate", "--offline", "--events", "200", "--partitions", "4")
    quiet = _zkledger(tmp_path, "rebuild")
    assert quiet.stdout.startswith("rebuilt "), quiet.stdout
    assert SPARK_NOISE.search(quiet.stderr) is None, quiet.stderr
    log_file = tmp_path / "lake" / SPARK_LOG
    logged = log_file.read_text()
    # the streaming query's warning (log4j2) and the stateful operator's Python worker (inherited stderr)
    assert re.search(r"^\d\d:\d\d:\d\d WARN ", logged, re.MULTILINE), logged[:2000]
    assert "TransformWithStateInPandas Python worker" in logged



def test_verbose_brings_spark_s_logs_back_to_the_terminal(tmp_path: Path) -> None:
    # the same switch as the quiet run above, without a second Spark process: -v leaves the session's logs alone
    from conf.settings import load_settings
    from services.spark_session import spark_log_file, spark_logs_to_file
    from zkledger.cli import _configure_logging

    settings = load_settings(None, lake=str(tmp_path / "lake"))
    try:
        _configure_logging(0)
        assert spark_log_file(settings) == tmp_path / "lake" / SPARK_LOG
        _configure_logging(1)
        assert spark_log_file(settings) is None
    finally:
        spark_logs_to_file(False)
