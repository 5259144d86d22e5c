"""The Python workers' daemon against a rebuild's time and CPU: PySpark's own against ``services.worker_daemon``.

    python -m benchmarks.worker_daemon [--events 1000000] [--partitions 50000] [--repeat 2]

One history (`zkledger simulate --offline`); then ``--repeat`` rounds, each running `zkledger rebuild` once per
daemon (the order turns each round), each in a process of its own with the daemon set the way a user would set it:
``"spark.python.daemon.module"`` under ``[spark.extra]``. Of each run, as ``benchmarks.alternating_rebuilds`` measures
it: the query's time (its micro-batches' ``triggerExecution``, summed) and the CPU-seconds of its process tree by
kind. The baseline is PySpark's daemon (``pyspark.daemon``) in the same rounds; medians count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks.alternating_rebuilds import (
    alternating_rebuilds,
    comparison_result,
    rebuild_parser,
    spark_extra_conf,
)
from benchmarks.common import Timer, run_main
from services.spark_session import PYTHON_DAEMON_CONF, WORKER_DAEMON

NAME = "worker_daemon"
PYSPARK_DAEMON = "pyspark.daemon"
DAEMONS = (PYSPARK_DAEMON, WORKER_DAEMON)
"""The baseline first."""


def daemon_conf(path: Path, module: str) -> Path:
    return spark_extra_conf(path, PYTHON_DAEMON_CONF, module)


def run(args: argparse.Namespace) -> dict[str, Any]:
    t = Timer()
    # files named apart from their module: a command line naming pyspark.daemon is a worker's to the sampler
    rounds, medians = alternating_rebuilds(
        args, lambda work: {d: daemon_conf(work / f"daemon-{i}.toml", d) for i, d in enumerate(DAEMONS)}, t)
    return comparison_result(NAME, args, t, rounds, medians, {"daemons": list(DAEMONS)}, "PySpark's daemon",
                             lambda d: f"{d:>22}", "workers_cpu_s")


def parser() -> argparse.ArgumentParser:
    return rebuild_parser(NAME, __doc__)


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
