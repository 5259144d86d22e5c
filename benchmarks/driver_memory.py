"""Driver memory against history length: the peak RSS of `zkledger rebuild` over 1 M, 10 M and 30 M events.

    python -m benchmarks.driver_memory [--events 1000000 10000000 30000000] [--partitions 200000]
                                       [--repeat 3] [--standalone]

Each size is its own lake: `zkledger simulate --offline` writes the history (the same 200,000 partitions for
every size, so only the length of the history differs), then `zkledger rebuild` runs in a process of its own,
as users run it, with the shipped settings (the one engine: the Spark query in `local[*]`). The peak resident
set of the whole process tree (the Python driver, its JVM, which in `local[*]` is the driver's and the
executors', and the executors' Python workers) is the highest sum of their VmRSS over samples taken every
0.25 s while it runs; each one's own high-water mark (VmHWM) is reported beside it (their sum, reached at
different moments, is an upper bound). A peak is the highest of many samples, so one rebuild's moves by several
percent from run to run: each size is rebuilt --repeat times on its lake (each from a fresh checkpoint) and its
median round reported. The baseline is the smallest size's, measured in the same run; flat means every larger
size stays within ±25% of it.

With ``--standalone`` the rebuild runs on a Spark standalone cluster started for the run on this machine (one
worker with every core), so the driver is a process apart from the executors: the driver's peak is then the
Python driver and its own JVM only, and the executors' (their JVMs with the state store, and their Python
workers) is reported beside it (``driver_memory_standalone.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Timer,
    base_parser,
    batch_lines,
    batch_medians,
    machine,
    ratio,
    run_main,
    scratch,
)
from models.tables import ZNODE_EVENTS
from tests.standalone_cluster import StandaloneCluster

log = logging.getLogger(__name__)

NAME = "driver_memory"
FLAT_WITHIN = 0.25


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    kids = [int(p) for p in out.split()]
    return kids + [g for k in kids for g in _children(k)]


def _sum_mib(pids: list[int], field: str = "VmHWM") -> float:
    """The sum of ``field`` (MiB; VmHWM: each one's high-water mark, VmRSS: resident now) of ``pids``."""
    return sum(_status_kb(p, field) for p in pids) / 1024


def _watch_peaks(pid: int, worker_pid: int | None, peaks: dict[str, float], stop: threading.Event) -> None:
    """Keep the highest VmHWM (MiB) seen of the process and of its descendants (its JVM and the Python workers)
    and, with a standalone ``worker_pid``, of the worker's descendants (its executors and their Python workers)
    until ``stop``; and the highest total resident set of the whole tree at one moment (``tree_mib``: the
    sum of VmRSS of the process and its descendants, sampled; the sum of high-water marks reached at different
    moments is only an upper bound of it)."""
    while not stop.wait(0.25):
        kids = _children(pid)
        peaks["python_mib"] = max(peaks["python_mib"], _sum_mib([pid]))
        peaks["jvm_mib"] = max(peaks["jvm_mib"], _sum_mib(kids))
        peaks["tree_mib"] = max(peaks["tree_mib"], _sum_mib([pid, *kids], "VmRSS"))
        java = [k for k in kids if _is_java(k)]  # where the tree's memory is: the JVM apart from the workers
        peaks["java_rss_mib"] = max(peaks["java_rss_mib"], _sum_mib(java, "VmRSS"))
        peaks["workers_rss_mib"] = max(peaks["workers_rss_mib"], _sum_mib([k for k in kids if k not in java], "VmRSS"))
        if worker_pid is not None:
            peaks["executors_mib"] = max(peaks["executors_mib"], _sum_mib(_children(worker_pid)))


def _is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


def _cli(*args: str, log_to: Path) -> subprocess.Popen[bytes]:
    with log_to.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "zkledger.cli", *args], stdout=out, stderr=subprocess.STDOUT)


def rebuild_peak(lake_dir: Path, log_to: Path, conf: Path | None = None,
                 worker_pid: int | None = None) -> dict[str, Any]:
    """`zkledger rebuild` of ``lake_dir`` in its own process: wall time and peak RSS (Python, JVM; with a
    standalone ``worker_pid``, its executors too)."""
    peaks = {"python_mib": 0.0, "jvm_mib": 0.0, "executors_mib": 0.0, "tree_mib": 0.0, "java_rss_mib": 0.0,
             "workers_rss_mib": 0.0}
    stop = threading.Event()
    start = time.perf_counter()
    proc = _cli(*(("--conf", str(conf)) if conf else ()), "--lake", str(lake_dir), "--cluster", "bench", "-v", "rebuild",
                log_to=log_to)
    watcher = threading.Thread(target=_watch_peaks, args=(proc.pid, worker_pid, peaks, stop), daemon=True)
    watcher.start()
    rc = proc.wait()
    stop.set()
    watcher.join()
    if rc != 0:
        raise SystemExit(f"rebuild of {lake_dir} failed (rc {rc}); see {log_to}")
    out = {"wall_s": round(time.perf_counter() - start, 1), "python_peak_mib": round(peaks["python_mib"]),
           "jvm_peak_mib": round(peaks["jvm_mib"]), "peak_mib": round(peaks["python_mib"] + peaks["jvm_mib"]),
           "tree_peak_mib": round(peaks["tree_mib"]), "java_rss_peak_mib": round(peaks["java_rss_mib"]),
           "python_workers_rss_peak_mib": round(peaks["workers_rss_mib"])}
    if worker_pid is not None:
        out["executors_peak_mib"] = round(peaks["executors_mib"])
    return out


STANDALONE_EXECUTOR_MEMORY = "12g"


def _standalone_conf(work: Path, url: str) -> Path:
    """Settings that send the rebuild to the standalone master, every core to its one executor."""
    conf = work / "standalone.toml"
    conf.write_text(f'[spark]\nmaster = "{url}"\n\n[spark.extra]\n'
                    f'"spark.executor.memory" = "{STANDALONE_EXECUTOR_MEMORY}"\n'
                    f'"spark.cores.max" = "{os.cpu_count() or 2}"\n')
    return conf


def run(args: argparse.Namespace) -> dict[str, Any]:
    from lakehouse import Lake

    t = Timer()
    runs: list[dict[str, Any]] = []
    measure = "peak_mib" if args.standalone else "tree_peak_mib"  # the driver alone, or the whole tree
    with scratch(args) as work, contextlib.ExitStack() as stack:
        conf, worker_pid = (Path(args.conf) if args.conf else None), None
        if args.standalone:
            cluster = stack.enter_context(StandaloneCluster(work / "standalone", workers_n=1,
                                                            cores=os.cpu_count() or 2, memory="16g"))
            conf, worker_pid = _standalone_conf(work, cluster.url), cluster.workers[0].pid
        for events in sorted(args.events):
            lake_dir = work / f"lake-{events}"
            with t.phase(f"generate.{events}"):
                gen = _cli("--lake", str(lake_dir), "--cluster", "bench", "simulate", "--offline", "--events",
                           str(events), "--partitions", str(args.partitions), log_to=work / "simulate.log")
                if gen.wait() != 0:
                    raise SystemExit(f"simulate --offline failed; see {work / 'simulate.log'}")
            bronze = Lake(lake_dir, cluster="bench").row_count(ZNODE_EVENTS.name)
            rounds = []
            for i in range(max(1, args.repeat)):
                log_to = work / f"rebuild-{events}-{i}.log"
                rounds.append((rebuild_peak(lake_dir, log_to, conf, worker_pid), log_to))
                log.info("rebuild of %s events, round %d: %s", f"{events:,}", i + 1, rounds[-1][0])
            peak, log_to = sorted(rounds, key=lambda r: r[0][measure])[len(rounds) // 2]
            batches = batch_lines(log_to.read_text(errors="replace"))
            runs.append({"events": events, "bronze_rows": bronze, **peak, "batches": batches,
                         "micro_batches": sum(" done: " in ln for ln in batches),
                         "batch_medians": batch_medians(batches),
                         "rounds_peak_mib": [r[measure] for r, _ in rounds]})
            if not args.keep:  # the 30 M-event lake alone takes gigabytes
                shutil.rmtree(lake_dir, ignore_errors=True)
    base = runs[0]
    for r in runs:
        r["vs_baseline"] = ratio(r[measure], base[measure])
    flat = all(abs(r[measure] / base[measure] - 1) <= FLAT_WITHIN for r in runs)
    if args.standalone:
        summary = [f"zkledger rebuild on a standalone master (one worker, {os.cpu_count()} cores, "
                   f"executor memory {STANDALONE_EXECUTOR_MEMORY}), {args.partitions:,} partitions; peak RSS of the "
                   f"driver (Python + its own JVM) by history length, baseline = the {base['events']:,}-event run; "
                   f"the executors' beside it"]
        summary += [f"  {r['events']:>12,} events: driver {r['peak_mib']:,} MiB (Python {r['python_peak_mib']:,}, JVM "
                    f"{r['jvm_peak_mib']:,}), {r['vs_baseline']}x the baseline; executors {r['executors_peak_mib']:,} MiB; "
                    f"rebuild {r['wall_s']:.0f} s ({r['events'] / r['wall_s']:,.0f} events/s incl. process and session "
                    f"start); rounds {_rounds(r)}" for r in runs]
    else:
        settings = f"the settings of {args.conf}" if args.conf else "shipped settings"
        summary = [f"zkledger rebuild, {args.partitions:,} partitions, {settings}; peak RSS "
                   f"of the rebuild's whole process tree (Python driver + its JVM and Python workers, summed at each "
                   f"sample) by history length, baseline = the {base['events']:,}-event run"]
        summary += [f"  {r['events']:>12,} events: {r['tree_peak_mib']:,} MiB, {r['vs_baseline']}x the baseline "
                    f"(high-water marks: Python driver {r['python_peak_mib']:,}, JVM and workers "
                    f"{r['jvm_peak_mib']:,}; peak resident: JVM {r['java_rss_peak_mib']:,}, Python workers "
                    f"{r['python_workers_rss_peak_mib']:,}); rebuild {r['wall_s']:.0f} s ({r['events'] / r['wall_s']:,.0f} events/s "
                    f"incl. process and session start), {r['micro_batches']} micro-batch{'es' * (r['micro_batches'] != 1)}; "
                    f"rounds {_rounds(r)}" for r in runs]
    summary.append(f"flat within ±{FLAT_WITHIN:.0%}: {'yes' if flat else 'no'}")
    return {"benchmark": NAME, "machine": machine(), "params": {"events": sorted(args.events),
                                                              "partitions": args.partitions, "repeat": args.repeat},
            "standalone": args.standalone, "wall_s": t.wall, "runs": runs, "flat_within": FLAT_WITHIN, "flat": flat, "summary": summary}


def _rounds(r: dict[str, Any]) -> str:
    """A size's rounds, as the summary gives them (the median is the one reported)."""
    return " / ".join(f"{p:,}" for p in r["rounds_peak_mib"]) + " MiB"


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000, 30_000_000],
                   help="history lengths to rebuild (default 1 M, 10 M, 30 M); the smallest is the baseline")
    p.add_argument("--partitions", type=int, default=200_000, help="partitions in every history (default 200,000)")
    p.add_argument("--conf", metavar="FILE", default=None,
                   help="a settings file for the rebuilds (default: the shipped settings)")
    p.add_argument("--repeat", type=int, default=3, help="rebuilds of each size; its median is reported (default 3)")
    p.add_argument("--standalone", action="store_true",
                   help="run the rebuilds on a Spark standalone cluster started here, the driver apart from the executors")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    name = f"{NAME}_standalone" if args.standalone else NAME
    return run_main(name, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
