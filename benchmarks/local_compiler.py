"""A local session's JIT compilers against a rebuild's time and CPU: the JVM's default tiers against C1 alone.

    python -m benchmarks.local_compiler [--events 1000000] [--partitions 50000] [--repeat 2]

One history (`zkledger simulate --offline`); then ``--repeat`` rounds, each running `zkledger rebuild` once per
``spark.local_compiler`` setting (the order turns each round), each in a process of its own with the setting in
a settings file, as a user would set it. Of each run, as ``benchmarks.alternating_rebuilds`` measures it: the query's
time (its micro-batches' ``triggerExecution``, summed) and the CPU-seconds of its process tree by kind (the
driver's JVM is where the compilers run). The baseline is ``c2`` (C1, then C2 for the hottest code) in the same
rounds; medians count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks.alternating_rebuilds import alternating_rebuilds, comparison_result, rebuild_parser
from benchmarks.common import Timer, run_main
from conf.settings import LocalCompiler

NAME = "local_compiler"
COMPILERS = (LocalCompiler.C2, LocalCompiler.C1)
"""The baseline (the JVM's default tiers) first."""


def compiler_conf(path: Path, compiler: LocalCompiler) -> Path:
    path.write_text(f'[spark]\nlocal_compiler = "{compiler}"\n')
    return path


def run(args: argparse.Namespace) -> dict[str, Any]:
    t = Timer()
    rounds, medians = alternating_rebuilds(
        args, lambda work: {str(c): compiler_conf(work / f"compiler-{c}.toml", c) for c in COMPILERS}, t)
    return comparison_result(NAME, args, t, rounds, medians, {"compilers": list(map(str, COMPILERS))},
                             "the JVM's default tiers (c2)", str, "jvm_cpu_s")


def parser() -> argparse.ArgumentParser:
    return rebuild_parser(NAME, __doc__)


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
