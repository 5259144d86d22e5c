"""Detection latency: ZooKeeper write of a zombie controller -> its anomaly row committed in Delta.

    python -m benchmarks.detection_latency [--duration 60] [--rate 2000] [--zombies 20] [--partitions 2000]
        [--collector txnlog|watch] [--floor] [--trigger 1] [--conf FILE]

A real embedded ZooKeeper holds a ZK-mode Kafka layout (controller epoch 2, brokers 1..3, topics with partition
state znodes). Running as users run them: `zkledger collect txnlog --follow` (or `collect zk`, the watch
collector, with --collector watch) and `zkledger -v monitor --trigger 1` (the one engine, its per-batch lines kept).
A writer makes steady partition-state changes at --rate writes/s (kazoo async sets, current
controller_epoch, leader moves with a leader_epoch bump) and injects --zombies zombie writes (controller_epoch 1
< current, with a leader_epoch bump) on partitions the steady writer leaves alone (a one-shot watch only
delivers a znode's latest version, so a zombie overwritten before the re-read would never reach bronze). The anomalies table is polled with delta-rs every --poll seconds from a thread
running alongside the writer; latency = first poll that sees the ZOMBIE_CONTROLLER_WRITE row for that zxid - the
write's acknowledgement. Resolution is the poll interval. With --floor, the monitor's place is taken by
`benchmarks.streaming_floor`, the least a Spark streaming detector does (its latency bounds any such design).
--trigger sets the monitor's (or the floor's) trigger, --conf a settings file for the collector and the monitor
(e.g. a shorter ``collect.flush_seconds``).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    base_parser,
    batch_lines,
    batch_medians,
    machine,
    run_main,
    scratch,
    stop_processes,
)
from benchmarks.streaming_floor import FLOOR_TABLE
from models.anomalies import AnomalyKind
from models.tables import ANOMALIES, ZNODE_EVENTS

log = logging.getLogger(__name__)

NAME = "detection_latency"
KAFKA = "3.8"
BROKERS = (1, 2, 3)


def _seed_layout(client: Any, partitions: int) -> list[str]:
    """Controller, epoch, brokers, topics (100 partitions each) and their state znodes; returns the state paths."""
    from simulator import payloads

    client.ensure_path("/brokers/ids")
    client.ensure_path("/brokers/topics")
    for b in BROKERS:
        client.create(f"/brokers/ids/{b}", payloads.encode_broker_registration(b, "localhost", 9090 + b, KAFKA),
                      ephemeral=True)
    client.create("/controller_epoch", payloads.encode_controller_epoch(2))
    client.create("/controller", payloads.encode_controller(1, 1_767_225_600_000, KAFKA), ephemeral=True)
    paths = []
    for t in range((partitions + 99) // 100):
        count = min(100, partitions - t * 100)
        assign = {p: [BROKERS[(p + i) % 3] for i in range(3)] for p in range(count)}
        client.create(f"/brokers/topics/t{t:04d}", payloads.encode_topic_assignment(assign, KAFKA))
        for p in range(count):
            r = assign[p]
            path = f"/brokers/topics/t{t:04d}/partitions/{p}/state"
            client.create(path, payloads.encode_partition_state(r[0], 0, 2, r, KAFKA), makepath=True)
            paths.append(path)
    return paths


def _writer(client: Any, paths: list[str], rate: int, duration: float, zombies: int) -> tuple[dict[int, float], int]:
    """Steady writes; returns ({zxid: ack wall time} of the zombie writes, writes sent)."""
    from simulator import payloads

    # zombies go to partitions the steady writer never touches: a one-shot watch delivers only the latest
    # version, so a zombie overwritten before the re-read would be invisible to the watch collector (a gap)
    steady, quiet = paths[:-zombies] if zombies else paths, paths[-zombies:] if zombies else []
    epochs = dict.fromkeys(paths, 0)
    zombie_at = set(np.linspace(duration * 0.2, duration * 0.8, zombies).round(2).tolist())
    zombie_times: dict[int, float] = {}
    start = time.monotonic()
    sent = 0
    pending: list[Any] = []
    rng = np.random.default_rng(1)
    while (elapsed := time.monotonic() - start) < duration:
        due = min(int(elapsed * rate) - sent, max(rate // 20, 1))  # bounded bursts: zombies stay on schedule
        for _ in range(max(due, 0)):
            path = steady[int(rng.integers(len(steady)))]
            epochs[path] += 1
            leader = BROKERS[epochs[path] % 3]
            isr = [leader] + [b for b in BROKERS if b != leader]
            pending.append(client.set_async(path, payloads.encode_partition_state(leader, epochs[path], 2, isr, KAFKA)))
            sent += 1
        for at in [z for z in zombie_at if z <= elapsed]:
            zombie_at.discard(at)
            _zombie(client, quiet.pop(), epochs, zombie_times)
        if len(pending) > 5000:
            for p in pending:
                p.get(timeout=30)
            pending = []
        time.sleep(0.002)
    for _late in sorted(zombie_at):  # a writer that fell behind still injects every zombie
        _zombie(client, quiet.pop(), epochs, zombie_times)
    for p in pending:
        p.get(timeout=30)
    log.info("writer: %d writes in %.1f s", sent, time.monotonic() - start)
    return zombie_times, sent + len(zombie_times)


def _zombie(client: Any, path: str, epochs: dict[str, int], zombie_times: dict[int, float]) -> None:
    """A stale-epoch write (controller_epoch 1 < 2) that moves leadership: what a zombie controller does."""
    from simulator import payloads

    epochs[path] += 1
    leader = BROKERS[epochs[path] % 3]
    stat = client.set(path, payloads.encode_partition_state(leader, epochs[path], 1, [leader], KAFKA))
    zombie_times[stat.mzxid] = time.time()


def _process(argv: list[str], log_to: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdout=log_to.open("wb"), stderr=subprocess.STDOUT, env=os.environ.copy())


def _cli(lake: Path, *args: str, log_to: Path, conf: str | None = None) -> subprocess.Popen[bytes]:
    settings = ["--conf", conf] if conf else []
    return _process([sys.executable, "-m", "zkledger.cli", *settings, "--lake", str(lake), "--cluster", "bench", *args],
                    log_to)


def _log_digest(path: Path) -> str:
    """The error lines (first 20) and the last 600 characters of a command's output, for the result JSON."""
    text = path.read_text(errors="replace")
    errors = [ln for ln in text.splitlines() if "Error" in ln or "Exception" in ln or ln.startswith("error:")][:20]
    return "\n".join(errors) + "\n...\n" + text[-600:]


def _zombie_anomalies(lake: Any) -> Callable[[], list[int]]:
    """The zxids of the ZOMBIE_CONTROLLER_WRITE rows in the anomalies table."""
    def found() -> list[int]:
        if not lake.exists(ANOMALIES.name):
            return []
        rows = lake.read_arrow(ANOMALIES.name).select(["kind", "zxid"]).to_pylist()
        return [r["zxid"] for r in rows if r["kind"] == AnomalyKind.ZOMBIE_CONTROLLER_WRITE and r["zxid"] is not None]
    return found


def _floor_hits(lake_dir: Path) -> Callable[[], list[int]]:
    """The zxids in the floor query's table."""
    from deltalake import DeltaTable

    path = lake_dir / FLOOR_TABLE

    def found() -> list[int]:
        if not (path / "_delta_log").is_dir():
            return []
        return [int(z) for z in DeltaTable(str(path)).to_pyarrow_table(columns=["zxid"]).column("zxid").to_pylist()]
    return found


def _first_batch(log_file: Path, procs: list[subprocess.Popen[bytes]], timeout: float) -> float:
    """Wait until the monitor has committed a micro-batch (its sink's line in its ``-v`` log); returns the wait."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if batch_lines(log_file.read_text(errors="replace")):
            return time.monotonic() - start
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"a process exited before the monitor's first micro-batch; see {log_file.parent}")
        time.sleep(0.5)
    raise SystemExit(f"the monitor committed no micro-batch within {timeout:.0f} s after the warm-up")


def _poll(found: Callable[[], list[int]], seen: dict[int, float], lock: threading.Lock, stop: threading.Event,
          every: float) -> None:
    """Record when each zombie write's zxid is first visible (runs alongside the writer: a detection made while
    writes continue is timed when it lands, not after the writer ends)."""
    while not stop.is_set():
        zxids = found()
        now = time.time()
        with lock:
            for z in zxids:
                seen.setdefault(z, now)
        stop.wait(every)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kazoo.client import KazooClient

    from lakehouse import Lake
    from services.zookeeper import EmbeddedZooKeeper

    with scratch(args) as work:
        zk = EmbeddedZooKeeper(work / "zk").start()
        client = KazooClient(hosts=zk.hosts, timeout=15)
        client.start(timeout=15)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            paths = _seed_layout(client, args.partitions)
            lake_dir = work / "lake"
            if args.collector == "txnlog":  # ZooKeeper's own log, tailed: every write, no watch to re-arm
                collect = ["collect", "txnlog", "--dir", str(zk.data_dir), "--follow"]
            else:
                collect = ["collect", "zk", "--zk", zk.hosts, "--chroot", "/"]
            procs.append(_cli(lake_dir, *collect, log_to=work / "collect.log", conf=args.conf))
            trigger = f"{args.trigger:g}"
            if args.floor:
                procs.append(_process([sys.executable, "-m", "benchmarks.streaming_floor", "--lake", str(lake_dir),
                                       "--trigger", trigger], log_to=work / "monitor.log"))
            else:
                procs.append(_cli(lake_dir, "-v", "monitor", "--trigger", trigger, log_to=work / "monitor.log",
                                  conf=args.conf))
            time.sleep(args.warmup)  # collector snapshot + monitor session start and first batches
            started = 0.0
            if not args.floor:  # a loaded machine starts slower: measure from the first batch on, never before
                started = _first_batch(work / "monitor.log", procs, args.start_timeout)
            lake = Lake(lake_dir, cluster="bench")
            seen_at: dict[int, float] = {}
            lock, stop_polling = threading.Lock(), threading.Event()
            found = _floor_hits(lake_dir) if args.floor else _zombie_anomalies(lake)
            poller = threading.Thread(target=_poll, args=(found, seen_at, lock, stop_polling, args.poll), daemon=True)
            poller.start()
            zombie_times, sent = _writer(client, paths, args.rate, args.duration, args.zombies)
            until = time.time() + args.drain
            while time.time() < until:
                with lock:
                    if set(zombie_times) <= set(seen_at):
                        break
                time.sleep(args.poll)
            stop_polling.set()
            poller.join()
            seen = {z: t for z, t in seen_at.items() if z in zombie_times}
            bronze = lake.read_arrow(ZNODE_EVENTS.name).select(["zxid", "missed_versions"])
            in_bronze = set(bronze.column("zxid").to_pylist()) & set(zombie_times)
            collected = {"bronze_rows": bronze.num_rows, "zombies_in_bronze": len(in_bronze),
                         "missed_versions": int(sum(v for v in bronze.column("missed_versions").to_pylist() if v))}
        finally:
            stop_processes(procs)
            client.stop()
            client.close()
            zk.stop()
        tails = {n: _log_digest(work / f"{n}.log") for n in ("collect", "monitor")}
        batches = [] if args.floor else batch_lines((work / "monitor.log").read_text(errors="replace"))
    lat = sorted(seen[z] - zombie_times[z] for z in seen)
    p50 = float(np.percentile(lat, 50)) if lat else None
    p95 = float(np.percentile(lat, 95)) if lat else None
    summary = [f"{args.rate:,} writes/s for {args.duration:.0f} s over {args.partitions:,} partitions, "
               f"{len(zombie_times)} zombie writes, "
               + ("the streaming floor (source, filter, one Delta append)" if args.floor else "monitor")
               + f" trigger {args.trigger:g} s, poll {args.poll}s"
               + (f", settings {Path(args.conf).name}" if args.conf else ""),
               f"{args.collector} collector: {collected['bronze_rows']:,} bronze rows for {sent:,} writes "
               f"({collected['missed_versions']:,} versions reported missed: one-shot watches coalesce); "
               f"zombie writes in bronze: {collected['zombies_in_bronze']}/{len(zombie_times)}",
               f"detected {len(seen)}/{len(zombie_times)}" + (f": p50 {p50:.2f} s, p95 {p95:.2f} s" if lat else "")]
    phases = batch_medians(batches)
    if phases["batches_with_input"]:
        summary.append(f"monitor: {phases['batches_with_input']} micro-batches with input, medians: "
                       + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.2f} s" for k, v in phases.items()
                                   if k.endswith("_s")))
    return {"benchmark": NAME, "machine": machine(), "params": vars(args) | {"out": None},
            "writes_sent": sent, "collector": collected, "zombies": len(zombie_times), "detected": len(seen), "latencies_s": [round(x, 3) for x in lat],
            "p50_s": p50, "p95_s": p95, "log_tails": tails if len(seen) < len(zombie_times) else {},
            "first_batch_wait_after_warmup_s": round(started, 1), "monitor_batch_medians": phases, "monitor_batches": batches,
            "summary": summary}


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of steady writes (default 60)")
    p.add_argument("--rate", type=int, default=2000, help="partition-state writes per second (default 2000)")
    p.add_argument("--zombies", type=int, default=20, help="zombie writes injected (default 20)")
    p.add_argument("--partitions", type=int, default=2000, help="partition state znodes (default 2000)")
    p.add_argument("--warmup", type=float, default=45.0, help="seconds for collector+monitor to start (default 45)")
    p.add_argument("--start-timeout", type=float, default=600.0,
                   help="after the warm-up, wait at most this long for the monitor's first micro-batch (default 600)")
    p.add_argument("--drain", type=float, default=120.0, help="max seconds to wait for detections (default 120)")
    p.add_argument("--poll", type=float, default=0.25, help="anomalies poll interval in seconds (default 0.25)")
    p.add_argument("--collector", choices=("watch", "txnlog"), default="txnlog",
                   help="`collect txnlog --follow` (ZooKeeper's transaction log, lossless; default) or `collect zk` "
                        "(live watches; lossy under load, reports what it missed)")
    p.add_argument("--trigger", type=float, default=1.0, help="the monitor's processing-time trigger, s (default 1)")
    p.add_argument("--conf", metavar="FILE", default=None,
                   help="a settings file for the collector and the monitor (default: the shipped settings)")
    p.add_argument("--floor", action="store_true",
                   help="instead of the monitor, the least a Spark streaming detector does (benchmarks.streaming_floor: "
                        "source, filter, one Delta append per batch); results go to detection_latency_floor.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    name = f"{NAME}_floor" if args.floor else NAME
    return run_main(name, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
