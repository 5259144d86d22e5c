"""The Python workers' mmap threshold against a rebuild's time and CPU: the shipped one against others.

    python -m benchmarks.worker_allocator [--events 1000000] [--partitions 50000]
                                          [--thresholds 1048576 131072 4194304] [--repeat 2]

One history (`zkledger simulate --offline`); then ``--repeat`` rounds, each running `zkledger rebuild` once per
threshold (the order turns each round), each in a process of its own with the threshold set the way a user would
set it: ``"spark.executorEnv.MALLOC_MMAP_THRESHOLD_"`` under ``[spark.extra]``. Of each run: the query's time (its
micro-batches' ``triggerExecution``, summed) and the CPU-seconds of its process tree by kind (the PySpark workers,
the Spark driver's JVM, the command's Python), sampled from ``/proc``. The baseline is the first threshold (the
shipped ``services.spark_session.WORKER_MMAP_THRESHOLD``) in the same rounds; medians count. Peak memory for a
threshold: ``benchmarks.driver_memory --conf FILE``.
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
from services.spark_session import WORKER_MMAP_THRESHOLD
from services.spark_session import WORKER_MMAP_THRESHOLD_CONF as MMAP_THRESHOLD_CONF

NAME = "worker_allocator"


def threshold_conf(path: Path, threshold: int) -> Path:
    return spark_extra_conf(path, MMAP_THRESHOLD_CONF, threshold)


def run(args: argparse.Namespace) -> dict[str, Any]:
    thresholds = list(dict.fromkeys(args.thresholds))
    t = Timer()
    rounds, medians = alternating_rebuilds(
        args, lambda work: {th: threshold_conf(work / f"mmap-{th}.toml", th) for th in thresholds}, t)
    return comparison_result(NAME, args, t, rounds, medians,
                             {"thresholds": thresholds, "shipped": int(WORKER_MMAP_THRESHOLD)},
                             f"the threshold {thresholds[0]:,} B", lambda th: f"MALLOC_MMAP_THRESHOLD_={th:>10,}",
                             "workers_cpu_s")


def parser() -> argparse.ArgumentParser:
    p = rebuild_parser(NAME, __doc__)
    p.add_argument("--thresholds", type=int, nargs="+",
                   default=[int(WORKER_MMAP_THRESHOLD), 128 * 1024, 4 * 1024 * 1024],
                   help=f"bytes; the first is the baseline (default: the shipped {int(WORKER_MMAP_THRESHOLD):,}, "
                        "then 128 KiB and 4 MiB)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
