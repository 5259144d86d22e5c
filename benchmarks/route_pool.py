"""The route's Arrow memory pool against a rebuild's time and CPU: the shipped one against the workers' own.

    python -m benchmarks.route_pool [--events 1000000] [--partitions 50000] [--pools mimalloc system] [--repeat 2]

One history (`zkledger simulate --offline`); then ``--repeat`` rounds, each running `zkledger rebuild` once per
pool (the order turns each round), each in a process of its own with the route's tasks on that pool, set in a
settings file as ``"spark.executorEnv.ZKLEDGER_ROUTE_ARROW_POOL"`` under ``[spark.extra]``. Of each run, as
``benchmarks.alternating_rebuilds`` measures it: the query's time (its micro-batches' ``triggerExecution``, summed)
and the CPU-seconds of its process tree by kind. The baseline is the first pool (the shipped
``engine.stateful.ROUTE_ARROW_POOL``) in the same rounds; medians count. ``system`` is the pool the operator's
steps use (``services.spark_session.WORKER_ARROW_POOL``).
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
from engine.stateful import ROUTE_ARROW_POOL, ROUTE_ARROW_POOL_ENV
from services.spark_session import WORKER_ARROW_POOL

NAME = "route_pool"


def pool_conf(path: Path, pool: str) -> Path:
    return spark_extra_conf(path, f"spark.executorEnv.{ROUTE_ARROW_POOL_ENV}", pool)


def run(args: argparse.Namespace) -> dict[str, Any]:
    pools = list(dict.fromkeys(args.pools))
    t = Timer()
    rounds, medians = alternating_rebuilds(
        args, lambda work: {p: pool_conf(work / f"route-pool-{p}.toml", p) for p in pools}, t)
    return comparison_result(NAME, args, t, rounds, medians, {"pools": pools, "shipped": ROUTE_ARROW_POOL},
                             f"the route on {pools[0]}", lambda p: f"route on {p:>8}", "workers_cpu_s")


def parser() -> argparse.ArgumentParser:
    p = rebuild_parser(NAME, __doc__)
    p.add_argument("--pools", nargs="+", default=[ROUTE_ARROW_POOL, WORKER_ARROW_POOL],
                   help=f"Arrow pools; the first is the baseline (default: the shipped {ROUTE_ARROW_POOL}, then the "
                        f"workers' {WORKER_ARROW_POOL})")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
