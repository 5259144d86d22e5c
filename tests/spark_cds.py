"""A class-data-sharing archive for the tests' Spark drivers (JDK 17's dynamic CDS archive).

The suite starts dozens of short-lived Spark JVMs (the session of each pytest worker, every `zkledger` process
and submitted driver a test runs), and each one loads and verifies the same tens of thousands of classes.
Mapped from an archive they cost about a tenth less CPU per Spark test file on 2 cores. `make test` builds the
archive beside lint, from a rebuild of a small history; `tests/conftest.py` hands it to every driver it starts
when it is there. A JVM whose class path or JDK does not match the archive runs without it, silently.

    python -m tests.spark_cds .jvm/spark-cds/driver.jsa
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from services.jvm import archive_at_exit_options, class_sharing_options

ARCHIVE = Path(__file__).resolve().parents[1] / ".jvm" / "spark-cds" / "driver.jsa"
"""Where `make test` builds it."""
BUILD_TIMEOUT_S = 300
JIT = "-XX:TieredStopAtLevel=1"
"""The tests' drivers run with the JIT's quick compiler only (tests/conftest.py)."""

# What the archived JVM runs: a session as the tests build it, and a rebuild of a small history (Delta reads
# and writes, the streaming query with its state store and Python workers).
WARM_UP = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from pyspark import SparkContext
from conf.settings import load_settings
from engine.rebuild import rebuild
from lakehouse import Lake
from services.spark_session import build_spark
from tests.history import clean_history

spark = build_spark(load_settings(overrides={"spark.master": "local[2]", "spark.shuffle_partitions": 2}), "cds")
lake = Lake(Path(tempfile.mkdtemp()) / "lake", cluster="cds")
lake.append("znode_events", clean_history().rows, writer_id="cds", batch_seq=1)
rebuild(spark, lake)
jvm = SparkContext._gateway.proc  # the driver writes the archive as it exits: wait for it
spark.stop()
jvm.stdin.close()  # Spark's gateway exits at the end of its stdin
jvm.wait(timeout=600)
"""


def driver_opts(archive: Path = ARCHIVE) -> str:
    """The JVM options of a test's Spark driver: the archive's when it was built."""
    return " ".join([JIT, *class_sharing_options(archive)])


def build(archive: Path) -> None:
    """Run the warm-up in a driver that writes the classes it loaded into ``archive`` as it exits."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    part = archive.with_name(archive.name + ".part")
    part.unlink(missing_ok=True)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "SPARK_TESTING": "1",
           "SPARK_SUBMIT_OPTS": " ".join([JIT, *archive_at_exit_options(part)])}
    started = time.monotonic()
    log = archive.with_name(archive.name + ".log")
    with log.open("w") as out:
        warm = subprocess.Popen([sys.executable, "-c", WARM_UP, str(root)], env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = warm.wait(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(warm.pid, signal.SIGKILL)  # the driver's JVM and Python workers with it
            warm.wait()
            raise SystemExit(f"spark_cds: no archive after {BUILD_TIMEOUT_S}s (see {log})") from None
    if code or not part.is_file():
        raise SystemExit(f"spark_cds: the driver exited without writing {part} (exit {code}; see {log})")
    part.replace(archive)
    print(f"spark_cds: {archive} ({archive.stat().st_size / 2**20:.0f} MiB) in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if len(sys.argv) == 2 else 2)
    build(Path(sys.argv[1]))
