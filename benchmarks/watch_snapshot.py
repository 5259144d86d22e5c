"""Watch collector snapshot: a ZK-mode Kafka tree in a real ZooKeeper, snapshotted as `zkledger collect zk` does.

    python -m benchmarks.watch_snapshot [--partitions 200000] [--per-topic 3] [--sizes 2200,4400,8800]

An embedded ZooKeeper (services.zookeeper, with a heap that holds the tree) gets, per chroot, Kafka's layout:
/brokers/topics/T (assignment), /brokers/topics/T/partitions/P/state (leader and ISR) and /config/topics/T,
written with pipelined multi requests of creates (timed and reported). Then, each into its own lake:

* the full tree (--partitions; 200,000 partitions at 3 per topic = 600,005 znodes): the first snapshot (multiRead
  batches + SetWatches), wall and CPU-s of this process (the collector and its kazoo thread) and of the ZooKeeper
  server;
* the baselines, measured in the same run: the same snapshot at 1/10 of the partitions; linearity = (full time /
  tenth time) / (full znodes / tenth znodes), 1.0 for linear work; and the 1/10 tree read znode by znode (the
  path for servers without multiRead), for the CPU multiRead saves;
* CPU-s per znode at --sizes znodes (the issue's 2.2k / 4.4k / 8.8k), the median of 3 runs each;
* a restart on the full lake in a fresh process: peak RSS after reading the view back (`load_view`), after the
  whole restart (view + resync of the tree), and, as the baseline, after reading the table's view columns into
  Python rows (what a restart did before).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections import deque
from pathlib import Path
from typing import Any

from benchmarks.common import base_parser, machine, ratio, run_main, scratch

log = logging.getLogger(__name__)

NAME = "watch_snapshot"
ZK_HEAP = "-Xmx4g"
TXN_CREATES = 500  # creates per multi request while populating
TXNS_IN_FLIGHT = 8
_PARENTS = ("/brokers", "/brokers/topics", "/config", "/config/topics")
_STATE = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2,3]}'
_CONFIG = b'{"version":1,"config":{}}'


def _server(data_dir: Path) -> Any:
    """The project's embedded ZooKeeper with a heap for ~1M znodes and their watches (its default is 256 MB)."""
    from services.zookeeper import EmbeddedZooKeeper

    class BigZooKeeper(EmbeddedZooKeeper):
        def _command(self, cfg: Path) -> list[str]:
            return [ZK_HEAP if arg.startswith("-Xmx") else arg for arg in super()._command(cfg)]

    return BigZooKeeper(data_dir, max_session_timeout_ms=120_000).start()


def tree_znodes(topics: int, per_topic: int) -> int:
    """Znodes of the layout below a chroot (the chroot itself included)."""
    return 1 + len(_PARENTS) + topics * (3 + 2 * per_topic)


def topics_for_znodes(znodes: int, per_topic: int) -> int:
    return max(1, round((znodes - 1 - len(_PARENTS)) / (3 + 2 * per_topic)))


def populate(hosts: str, chroot: str, topics: int, per_topic: int) -> float:
    """Writes the layout under ``chroot`` with pipelined multi requests of ``TXN_CREATES`` creates (a session's
    requests, and a multi's ops, run in order, so a parent is created before its children); returns the seconds
    it took."""
    from kazoo.client import KazooClient

    t0 = time.perf_counter()
    client = KazooClient(hosts=hosts, timeout=60)
    client.start(timeout=60)
    try:
        client.create(chroot)
        inflight: deque[Any] = deque()
        batch = [client.transaction()]

        def settle(pending: Any) -> None:
            failed = [r for r in pending.get() if isinstance(r, Exception)]
            if failed:
                raise RuntimeError(f"populating {chroot} failed: {failed[0]!r}")

        def send() -> None:
            if len(inflight) >= TXNS_IN_FLIGHT:
                settle(inflight.popleft())
            inflight.append(batch[0].commit_async())
            batch[0] = client.transaction()

        def create(path: str, data: bytes = b"") -> None:
            batch[0].create(chroot + path, data)
            if len(batch[0].operations) >= TXN_CREATES:
                send()

        for parent in _PARENTS:
            create(parent)
        assignment = json.dumps({"version": 2, "partitions": {str(p): [1, 2, 3] for p in range(per_topic)},
                                 "adding_replicas": {}, "removing_replicas": {}}).encode()
        for t in range(topics):
            topic = f"/brokers/topics/t{t:06d}"
            create(topic, assignment)
            create(topic + "/partitions")
            for p in range(per_topic):
                create(f"{topic}/partitions/{p}")
                create(f"{topic}/partitions/{p}/state", _STATE)
            create(f"/config/topics/t{t:06d}", _CONFIG)
        if batch[0].operations:
            send()
        while inflight:
            settle(inflight.popleft())
    finally:
        client.stop()
        client.close()
    return time.perf_counter() - t0


def _server_cpu(pid: int | None) -> float:
    """User + system CPU-s the ZooKeeper server process has used so far."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapshot(lake_dir: Path, hosts: str, server_pid: int | None, *, per_znode: bool = False) -> dict[str, float]:
    """One first snapshot of ``hosts`` (with chroot) into a fresh lake: wall, CPU-s here, CPU-s of the server.
    ``per_znode``: read znode by znode (the path for servers without multiRead) instead of multiRead batches."""
    from collectors.zk_watch import ZkWatchCollector
    from lakehouse import Lake

    collector = ZkWatchCollector(Lake(lake_dir, cluster="bench"), hosts, timeout=60)
    if per_znode:
        collector.batched = False
    w0, c0, s0 = time.perf_counter(), time.process_time(), _server_cpu(server_pid)
    collector.start()  # connect, read the tree, commit its rows
    wall, cpu, server = time.perf_counter() - w0, time.process_time() - c0, _server_cpu(server_pid) - s0
    znodes = len(collector.view)
    rows = collector.writer.rows_written
    collector.stop()
    result = {"znodes": znodes, "rows": rows, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
              "cpu_ms_per_znode": round(1000 * cpu / znodes, 3) if znodes else 0.0,
              "server_cpu_s": round(server, 2), "znodes_per_s": round(znodes / wall) if wall else 0}
    mode = "per-znode" if per_znode else "multiRead"
    print(f"snapshot {hosts} ({mode}): {result}", file=sys.stderr, flush=True)  # each figure as soon as it is measured
    return result


_RESTART = textwrap.dedent(
    """
    import json, sys, time
    from lakehouse import Lake
    from collectors.zk_watch import ZkWatchCollector, load_view
    from models.tables import ZNODE_EVENTS
    root, hosts, mode = sys.argv[1:4]
    lake = Lake(root, cluster="bench")
    def rss():  # this process's own peak (ru_maxrss would include the parent's peak, inherited through fork)
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
        return 0
    out = {"rss_start_mib": rss()}
    t0 = time.perf_counter()
    if mode == "rows":
        rows = lake.read_arrow(ZNODE_EVENTS.name).select(
            ["cluster", "source", "zxid", "path", "op", "version", "mzxid", "czxid"]).to_pylist()
        out.update(rows=len(rows), read_s=round(time.perf_counter() - t0, 2), rss_read_mib=rss())
    else:
        view, _ = load_view(lake)
        out.update(view=len(view), load_view_s=round(time.perf_counter() - t0, 2), rss_load_view_mib=rss())
        del view
        collector = ZkWatchCollector(lake, hosts, timeout=60)
        t1 = time.perf_counter()
        collector.start()
        out.update(restart_s=round(time.perf_counter() - t1, 2), restart_rows=collector.writer.rows_written)
        collector.stop()
        out["rss_restart_mib"] = rss()
    print(json.dumps(out))
    """
)


def restart(lake_dir: Path, hosts: str, mode: str) -> dict[str, Any]:
    """A fresh process restarting on the lake (``view``) or reading the table's rows into Python (``rows``)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", _RESTART, str(lake_dir), hosts, mode], env=env, check=True,
                          capture_output=True, text=True, timeout=1800)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"restart ({mode}): {result}", file=sys.stderr, flush=True)
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    per_topic = args.per_topic
    full_topics = max(1, round(args.partitions / per_topic))
    tenth_topics = max(1, round(full_topics / 10))
    small = [int(s) for s in args.sizes.split(",") if s]
    result: dict[str, Any] = {"machine": machine(), "partitions": full_topics * per_topic, "per_topic": per_topic}
    with scratch(args) as work:
        server = _server(work / "zookeeper")
        try:
            populate_s: dict[str, float] = {}
            trees = [("full", full_topics), ("tenth", tenth_topics)]
            trees += [(f"z{n}", topics_for_znodes(n, per_topic)) for n in small]
            for name, topics in trees:
                populate_s[name] = round(populate(server.hosts, f"/{name}", topics, per_topic), 1)
                print(f"populated /{name}: {tree_znodes(topics, per_topic)} znodes in {populate_s[name]} s",
                      file=sys.stderr, flush=True)
            result["populate_s"] = populate_s
            full = snapshot(work / "lake-full", f"{server.hosts}/full", server.pid)
            tenth = snapshot(work / "lake-tenth", f"{server.hosts}/tenth", server.pid)
            tenth_per_znode = snapshot(work / "lake-tenth-per-znode", f"{server.hosts}/tenth", server.pid,
                                       per_znode=True)
            per_znode: dict[str, dict[str, float]] = {}
            for n in small:
                runs = [snapshot(work / f"lake-z{n}-{i}", f"{server.hosts}/z{n}", server.pid) for i in range(3)]
                cpu = statistics.median(r["cpu_s"] for r in runs)
                per_znode[str(runs[0]["znodes"])] = {"cpu_s": cpu, "cpu_ms_per_znode": round(1000 * cpu / runs[0]["znodes"], 3),
                                                     "wall_s": statistics.median(r["wall_s"] for r in runs)}
            view_restart = restart(work / "lake-full", f"{server.hosts}/full", "view")
            rows_baseline = restart(work / "lake-full", f"{server.hosts}/full", "rows")
        finally:
            server.stop()
    linearity = ratio(full["wall_s"] / tenth["wall_s"], full["znodes"] / tenth["znodes"]) if tenth["wall_s"] else None
    cpu_linearity = ratio(full["cpu_s"] / tenth["cpu_s"], full["znodes"] / tenth["znodes"]) if tenth["cpu_s"] else None
    speedup = ratio(tenth_per_znode["cpu_s"], tenth["cpu_s"]) if tenth["cpu_s"] else None
    result.update(full=full, tenth=tenth, tenth_per_znode=tenth_per_znode, multiread_cpu_speedup=speedup,
                  linearity_wall=linearity, linearity_cpu=cpu_linearity,
                  cpu_per_znode=per_znode, restart=view_restart, restart_baseline_rows=rows_baseline)
    sizes = ", ".join(f"{k}: {v['cpu_s']} CPU-s ({v['cpu_ms_per_znode']} ms/znode)" for k, v in per_znode.items())
    result["summary"] = [
        f"populate: {populate_s['full']} s for {full['znodes']:,} znodes (pipelined multi requests of creates)",
        f"snapshot {full['znodes']:,} znodes ({result['partitions']:,} partitions): {full['wall_s']} s wall, "
        f"{full['cpu_s']} CPU-s collector ({full['cpu_ms_per_znode']} ms/znode), {full['server_cpu_s']} CPU-s "
        f"ZooKeeper, {full['znodes_per_s']:,} znodes/s",
        f"baseline 1/10 ({tenth['znodes']:,} znodes): {tenth['wall_s']} s wall, {tenth['cpu_s']} CPU-s; "
        f"time ratio / size ratio = {linearity} wall, {cpu_linearity} CPU (1.0 = linear)",
        f"baseline 1/10 read znode by znode (servers without multiRead): {tenth_per_znode['wall_s']} s wall, "
        f"{tenth_per_znode['cpu_s']} CPU-s ({tenth_per_znode['cpu_ms_per_znode']} ms/znode); "
        f"multiRead uses {speedup}x less collector CPU",
        f"CPU-s per snapshot (median of 3): {sizes}",
        f"restart on the full lake: view read back in {view_restart['load_view_s']} s "
        f"(peak RSS {view_restart['rss_load_view_mib']} MiB), restart with resync {view_restart['restart_s']} s "
        f"(peak RSS {view_restart['rss_restart_mib']} MiB, {view_restart['restart_rows']} rows written)",
        f"baseline: the table's view columns as Python rows: peak RSS {rows_baseline['rss_read_mib']} MiB "
        f"({rows_baseline['rows']:,} rows, {rows_baseline['read_s']} s)",
    ]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(NAME, __doc__ or NAME)
    parser.add_argument("--partitions", type=int, default=200_000, help="partitions of the full tree")
    parser.add_argument("--per-topic", type=int, default=3, help="partitions per topic")
    parser.add_argument("--sizes", default="2200,4400,8800", help="tree sizes (znodes) for CPU-s per znode")
    return run_main(NAME, parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
