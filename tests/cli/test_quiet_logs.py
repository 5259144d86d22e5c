"""A command's terminal shows zkledger's lines only: Spark's own logs (log4j2, the JVM's stderr, the Python
workers' prints) go to ``<lake>/_logs/spark.log``; ``-v`` brings them back to the terminal."""

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
def test_spark_logs_go_to_the_lake_unless_verbose(tmp_path: Path) -> None:
    _zkledger(tmp_path, "simulate", "--offline", "--events", "200", "--partitions", "4")
    quiet = _zkledger(tmp_path, "rebuild")
    assert quiet.stdout.startswith("rebuilt "), quiet.stdout
    assert SPARK_NOISE.search(quiet.stderr) is None, quiet.stderr
    log_file = tmp_path / "lake" / SPARK_LOG
    logged = log_file.read_text()
    # the streaming query's warning (log4j2) and the stateful operator's Python worker (inherited stderr)
    assert re.search(r"^\d\d:\d\d:\d\d WARN ", logged, re.MULTILINE), logged[:2000]
    assert "TransformWithStateInPandas Python worker" in logged

    loud = _zkledger(tmp_path, "-v", "rebuild")
    assert re.search(r"^\d\d:\d\d:\d\d WARN ", loud.stderr, re.MULTILINE), loud.stderr[-3000:]
    assert " INFO zkledger" in loud.stderr or " INFO engine" in loud.stderr  # zkledger's own -v lines too
    assert log_file.read_text() == logged  # nothing more went to the file
