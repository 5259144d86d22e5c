"""Cold `zkledger rebuild`s in alternating rounds, one settings file against another: the harness of the benchmarks
that compare a setting (``worker_allocator``, ``route_pool``, ``worker_daemon``, ``local_compiler``).

One history (`zkledger simulate --offline`); then ``--repeat`` rounds, each running `zkledger rebuild` once per
settings file (the order turns each round), each in a process of its own. Of each run: the query's time (its
micro-batches' ``triggerExecution``, summed) and the CPU-seconds of its process tree by kind (the PySpark workers,
the Spark driver's JVM, the command's Python), sampled from ``/proc``. The first file is the baseline, in the same
rounds; medians count.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.common import (
    PROGRESS_LINE,
    Timer,
    base_parser,
    batch_lines,
    machine,
    offline_history,
    ratio,
    scratch,
)
from benchmarks.suite_cpu import ProcessKind, Sampler

log = logging.getLogger(__name__)

K = TypeVar("K")
KINDS = {"workers_cpu_s": ProcessKind.PYSPARK_WORKER, "jvm_cpu_s": ProcessKind.SPARK_DRIVER_OF_COMMANDS,
         "command_cpu_s": ProcessKind.ZKLEDGER_COMMAND}
KIND_NAMES = {"workers_cpu_s": "PySpark workers", "jvm_cpu_s": "the driver's JVM", "command_cpu_s": "command"}


def spark_extra_conf(path: Path, key: str, value: object) -> Path:
    """A settings file giving Spark one setting under ``[spark.extra]``, as a user would."""
    path.write_text(f'[spark.extra]\n"{key}" = "{value}"\n')
    return path


def query_seconds(log_text: str) -> float:
    """The rebuild's micro-batches' wall time, summed (each one's ``triggerExecution`` in its ``-v`` line)."""
    return round(sum(float(m[2]) for ln in batch_lines(log_text) if (m := PROGRESS_LINE.match(ln))), 2)


def rebuild_cost(lake_dir: Path, conf: Path, log_to: Path) -> dict[str, float]:
    """`zkledger rebuild` of ``lake_dir`` with ``conf``, in a process of its own: its query's time and its tree's
    CPU by kind."""
    sampler = Sampler()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            sampler.sample()

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    with log_to.open("wb") as out:
        rc = subprocess.run([sys.executable, "-m", "zkledger.cli", "--conf", str(conf), "--lake", str(lake_dir),
                             "--cluster", "bench", "-v", "rebuild"], stdout=out, stderr=subprocess.STDOUT).returncode
    stop.set()
    watcher.join()
    sampler.sample()  # a process gone by now counts as last sampled (at most 0.5 s before it ended)
    if rc != 0:
        raise SystemExit(f"rebuild of {lake_dir} failed (rc {rc}); see {log_to}")
    totals = sampler.by_kind()
    return {"query_s": query_seconds(log_to.read_text(errors="replace")),
            **{name: round(totals.get(kind, (0, 0.0))[1], 1) for name, kind in KINDS.items()}}


def alternating_rebuilds(args: argparse.Namespace, confs: Callable[[Path], dict[K, Path]],
                         t: Timer) -> tuple[list[dict[K, dict[str, float]]], dict[K, dict[str, float]]]:
    """One history of ``args.events`` over ``args.partitions``; then ``args.repeat`` rounds of `rebuild_cost`
    once per settings file (``confs`` writes them into the work folder; the order turns each round). Returns the
    rounds and each file's medians."""
    rounds: list[dict[K, dict[str, float]]] = []
    with scratch(args) as work:
        with t.phase("generate"):
            lake_dir = Path(offline_history(work / "lake", args.events, args.partitions).root)
        files = confs(work)
        names = list(files)
        for i in range(args.repeat):
            order = names if i % 2 == 0 else names[::-1]
            rounds.append({n: rebuild_cost(lake_dir, files[n], work / f"rebuild-{names.index(n)}-{i}.log")
                           for n in order})
            log.info("round %d/%d: %s", i + 1, args.repeat, rounds[-1])
    medians = {n: {k: round(statistics.median(r[n][k] for r in rounds), 2) for k in ("query_s", *KINDS)}
               for n in names}
    return rounds, medians


def comparison_result(name: str, args: argparse.Namespace, t: Timer, rounds: list[dict[K, dict[str, float]]],
                      medians: dict[K, dict[str, float]], params: dict[str, Any], baseline: str,
                      label: Callable[[K], str], cpu: str) -> dict[str, Any]:
    """The result of a benchmark on `alternating_rebuilds`: ``params`` besides the history's, the summary with one
    line per settings file (``label`` names it, the first is the ``baseline``), ``cpu`` the kind each line leads
    with and sets against the baseline's."""
    names = list(medians)
    base = medians[names[0]]
    summary = [f"zkledger rebuild of {args.events:,} events over {args.partitions:,} partitions, one process per run, "
               f"median of {args.repeat} alternating rounds; baseline {baseline}"]
    for n in names:
        m = medians[n]
        rest = ", ".join(f"{KIND_NAMES[k]} {m[k]:.1f}" for k in KINDS if k != cpu)
        summary.append(f"  {label(n)}: query {m['query_s']:.1f} s ({ratio(base['query_s'], m['query_s'])}x the "
                       f"baseline's speed); {KIND_NAMES[cpu]} {m[cpu]:.1f} CPU-s ({ratio(m[cpu], base[cpu])}x), {rest}")
    return {"benchmark": name, "machine": machine(),
            "params": {"events": args.events, "partitions": args.partitions, **params, "repeat": args.repeat},
            "wall_s": t.wall, "rounds": [{str(k): v for k, v in r.items()} for r in rounds],
            "medians": {str(k): v for k, v in medians.items()}, "summary": summary}


def rebuild_parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The arguments of a benchmark on `alternating_rebuilds`: the history's size and the rounds."""
    p = base_parser(name, doc.splitlines()[0] if doc else name)
    p.add_argument("--events", type=int, default=1_000_000, help="bronze events (default 1,000,000)")
    p.add_argument("--partitions", type=int, default=50_000, help="partitions (default 50,000)")
    p.add_argument("--repeat", type=int, default=2, help="rounds (default 2)")
    return p
