"""Monitor soak: the monitor's memory over a long steady write load (is its RSS flat with uptime?).

    python -m benchmarks.monitor_soak [--minutes 30] [--rate 2000] [--elections 10] [--partitions 2000]
        [--maintain-every 0.1] [--sample 30] [--baseline-minute 2]

A real embedded ZooKeeper holds a ZK-mode Kafka layout (brokers 1..3, partition state znodes). Running as users
run them: `zkledger collect txnlog --follow` and `zkledger monitor --trigger 1 --maintain-every 0.1` (without
maintenance every table gains a file per commit, and both Delta engines hold per-file state in memory). A writer
makes --rate partition-state writes per second for --minutes: mostly ISR changes (the leader shrinks and expands
its ISR: same leader and leader_epoch), and about --elections per second clean leader changes (a leader_epoch
bump, the new leader from the full ISR), the mix of a cluster in steady operation: no anomaly is due. Every
--sample seconds the RSS of the monitor's driver (the Python process and its JVM) is recorded. The baseline is the
same run's RSS at --baseline-minute (after start-up and warm-up); the result is the RSS at the end against it, and
the least-squares slopes (MB per minute) of each process after it and over the run's second half.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import threading
import time
from typing import Any

import numpy as np

from benchmarks.common import base_parser, machine, run_main, scratch, stop_processes
from benchmarks.detection_latency import BROKERS, KAFKA, _cli, _log_digest, _seed_layout
from models.tables import ANOMALIES, ZNODE_EVENTS
from services import metadata_events

log = logging.getLogger(__name__)

NAME = "monitor_soak"


def _rss_mb(pid: int) -> float:
    """Resident set size of one process in MB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (the monitor's JVM is a child of its Python process)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    kids = [int(p) for p in out.split()]
    return kids + [g for k in kids for g in _children(k)]


def _sampler(pid: int, start: float, every: float, samples: list[dict[str, float]], stop: threading.Event) -> None:
    while not stop.wait(every):
        jvm = sum(_rss_mb(c) for c in _children(pid))
        py = _rss_mb(pid)
        samples.append({"minute": round((time.monotonic() - start) / 60, 2), "python_mb": round(py, 1),
                        "jvm_mb": round(jvm, 1), "total_mb": round(py + jvm, 1)})
        log.info("soak: %s", samples[-1])


def _writer(client: Any, paths: list[str], rate: int, elections: float, seconds: float) -> int:
    """Steady writes for ``seconds``: ISR shrink/expand at the current leadership, ``elections``/s leader moves."""
    from simulator import payloads

    leader_epoch = dict.fromkeys(paths, 0)
    shrunk = dict.fromkeys(paths, False)
    rng = np.random.default_rng(1)
    start, sent, elected = time.monotonic(), 0, 0
    pending: list[Any] = []
    while (elapsed := time.monotonic() - start) < seconds:
        due = min(int(elapsed * rate) - sent, max(rate // 20, 1))
        elect_due = int(elapsed * elections) - elected
        for i in range(max(due, 0)):
            path = paths[int(rng.integers(len(paths)))]
            if i < elect_due and not shrunk[path]:  # a clean leader change: the next leader is in the ISR
                leader_epoch[path] += 1
                elected += 1
            else:  # an ISR change by the leader: same leader and leader_epoch
                shrunk[path] = not shrunk[path]
            leader = BROKERS[leader_epoch[path] % 3]
            isr = [leader] if shrunk[path] else [leader] + [b for b in BROKERS if b != leader]
            data = payloads.encode_partition_state(leader, leader_epoch[path], 2, isr, KAFKA)
            pending.append(client.set_async(path, data))
            sent += 1
        if len(pending) > 5000:
            for p in pending:
                p.get(timeout=30)
            pending = []
        time.sleep(0.002)
    for p in pending:
        p.get(timeout=30)
    log.info("writer: %d writes (%d leader changes) in %.1f s", sent, elected, time.monotonic() - start)
    return sent


def _slope(samples: list[dict[str, float]], key: str, after: float) -> float | None:
    """Least-squares MB per minute of ``key`` over the samples from minute ``after`` on."""
    xs = [s["minute"] for s in samples if s["minute"] >= after]
    ys = [s[key] for s in samples if s["minute"] >= after]
    if len(xs) < 2:
        return None
    return float(np.polyfit(xs, ys, 1)[0])


def _at(samples: list[dict[str, float]], minute: float) -> dict[str, float] | None:
    """The first sample at or after ``minute``."""
    return next((s for s in samples if s["minute"] >= minute), None)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kazoo.client import KazooClient

    from lakehouse import Lake
    from services.zookeeper import EmbeddedZooKeeper

    samples: list[dict[str, float]] = []
    with scratch(args) as work:
        zk = EmbeddedZooKeeper(work / "zk").start()
        client = KazooClient(hosts=zk.hosts, timeout=15)
        client.start(timeout=15)
        procs: list[subprocess.Popen[bytes]] = []
        stop = threading.Event()
        try:
            paths = _seed_layout(client, args.partitions)
            lake_dir = work / "lake"
            procs.append(_cli(lake_dir, "collect", "txnlog", "--dir", str(zk.data_dir), "--follow",
                              log_to=work / "collect.log"))
            monitor = _cli(lake_dir, "-v", "monitor", "--trigger", "1", "--maintain-every", str(args.maintain_every),
                           log_to=work / "monitor.log")
            procs.append(monitor)
            start = time.monotonic()
            sampler = threading.Thread(target=_sampler, args=(monitor.pid, start, args.sample, samples, stop),
                                       daemon=True)
            sampler.start()
            sent = _writer(client, paths, args.rate, args.elections, args.minutes * 60)
            stop.set()
            sampler.join()
            running = monitor.poll() is None
            lake = Lake(lake_dir, cluster="bench")
            bronze = lake.row_count(ZNODE_EVENTS.name)
            events = metadata_events.read(lake, columns=["event_id"]).num_rows
            anomalies = lake.row_count(ANOMALIES.name)
        finally:
            stop.set()
            stop_processes(procs)
            client.stop()
            client.close()
            zk.stop()
        tails = {n: _log_digest(work / f"{n}.log") for n in ("collect", "monitor")}
    summary = [f"{args.rate:,} writes/s ({args.elections:g} leader changes/s) for {args.minutes:g} min over "
               f"{args.partitions:,} partitions; txnlog collector --follow, monitor trigger 1 s, maintenance every "
               f"{args.maintain_every:g} h",
               f"{sent:,} writes; the txnlog collector stored {bronze:,} rows ({bronze / max(sent, 1):.1%} of the "
               f"writes, {bronze / (args.minutes * 60):,.0f} rows/s); the monitor derived {events:,} metadata events "
               f"and {anomalies:,} anomalies; monitor {'running' if running else 'EXITED'} at the end"]
    rss = rss_figures(samples, args.baseline_minute, args.minutes)
    return {"benchmark": NAME, "machine": machine(), "params": vars(args) | {"out": None}, "writes_sent": sent,
            "bronze_rows": bronze, "metadata_events": events, "anomalies": anomalies, "monitor_running": running,
            "samples": samples, **rss, "log_tails": tails if not running else {}, "summary": summary + rss["rss_lines"]}


def rss_figures(samples: list[dict[str, float]], baseline_minute: float, minutes: float) -> dict[str, Any]:
    """The RSS at the baseline and at the end, and the slopes (MB/min) of each process after the baseline and
    over the run's second half (start-up and warm-up, e.g. the JVM sizing its heap, are over by then)."""
    base, end = _at(samples, baseline_minute), (samples[-1] if samples else None)
    if not base or not end or not base["total_mb"]:
        return {"baseline": base, "end": end, "rss_lines": ["monitor driver RSS: too few samples"]}
    change = end["total_mb"] / base["total_mb"] - 1
    keys = ("python_mb", "jvm_mb", "total_mb")
    after = {k: _slope(samples, k, baseline_minute) for k in keys}
    half = {k: _slope(samples, k, minutes / 2) for k in keys}

    def slopes(fig: dict[str, float | None]) -> str:
        return ", ".join(f"{k.removesuffix('_mb')} {v:+.2f}" for k, v in fig.items() if v is not None) + " MB/min"

    peaks = _peaks_by_third(samples, baseline_minute)
    lines = [f"monitor driver RSS (Python + JVM): {base['total_mb']:.0f} MB at minute {base['minute']:g} (baseline), "
             f"{end['total_mb']:.0f} MB at minute {end['minute']:g} ({change:+.1%})",
             f"slopes after the baseline: {slopes(after)}; over the second half (minute {minutes / 2:g} on): "
             f"{slopes(half)}",
             "peak RSS in each third after the baseline (the JVM's heap grows and shrinks between GC cycles): "
             + " / ".join(f"{p:.0f}" for p in peaks) + " MB"]
    return {"baseline": base, "end": end, "change": change, "slope_mb_per_min": after["total_mb"],
            "slopes_after_baseline": after, "slopes_second_half": half, "peak_mb_by_third": peaks,
            "rss_lines": lines}


def _peaks_by_third(samples: list[dict[str, float]], after_minute: float) -> list[float]:
    """The highest total RSS in each third of the samples after ``after_minute``: a bounded sawtooth keeps them level."""
    later = [s["total_mb"] for s in samples if s["minute"] >= after_minute]
    n = len(later)
    return [max(later[i * n // 3:(i + 1) * n // 3]) for i in range(3)] if n >= 3 else []


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--minutes", type=float, default=30.0, help="minutes of steady writes (default 30)")
    p.add_argument("--rate", type=int, default=2000, help="partition-state writes per second (default 2000)")
    p.add_argument("--elections", type=float, default=10.0,
                   help="of those, leader changes (leader_epoch bumps) per second (default 10)")
    p.add_argument("--partitions", type=int, default=2000, help="partition state znodes (default 2000)")
    p.add_argument("--maintain-every", type=float, default=0.1, metavar="HOURS",
                   help="the monitor's `--maintain-every` (default 0.1: compaction every 6 minutes, as a long-running "
                        "monitor is meant to run; 0 = off)")
    p.add_argument("--sample", type=float, default=30.0, help="seconds between RSS samples (default 30)")
    p.add_argument("--baseline-minute", type=float, default=2.0,
                   help="the same run's RSS at this minute is the baseline (default 2)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
