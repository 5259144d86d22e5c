"""A fleet in one lake: 20 clusters x 10,000 partitions against 1 cluster x 200,000, through the one engine.

    python -m benchmarks.fleet [--clusters 20] [--partitions 10000]

Each layout is a failover storm (``benchmarks.storm``, RF 3) in a lake of its own: the fleet lake holds one storm
per cluster (the ``cluster`` column tells them apart), the baseline lake one storm of clusters x partitions
partitions, so both hold the same number of partitions and nearly the same number of events. Each layout runs
in a process of its own (a fresh Spark session, so each peak RSS is its own): the monitor
(``benchmarks.stateful_query.stateful``: ``engine.monitor.start_monitor``) with its sink, keyed by (cluster,
bucket), from a fresh checkpoint with ``availableNow``, after an unmeasured warm-up on a 100-partition storm. The
checkpoint sizes each cluster's buckets by its partitions (``pipelines.bucket_fold.BucketLayout``, at most
``--buckets``). Reported for each: events/s over the query's wall time, the keys of the query (buckets and
stages), the Python driver's peak RSS and the JVM's (in ``local[*]`` it runs the executors' tasks too); the fleet
against the single cluster.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import base_parser, machine, ratio, run_main, scratch

log = logging.getLogger(__name__)

NAME = "fleet"
RESULT_PREFIX = "fleet-result: "


def one_layout(work: Path, clusters: int, partitions: int, buckets: int) -> dict[str, Any]:
    """One layout's storm, folded by the stateful query in this process (a fresh session)."""
    from benchmarks.common import build_session
    from benchmarks.stateful_query import _jvm_hwm_mib, _python_peak_mib, stateful
    from benchmarks.storm import write_storm
    from engine.stateful import BUCKETS_FILE
    from lakehouse import Lake
    from pipelines.bucket_fold import BucketLayout

    events = sum(write_storm(Lake(work / "lake", cluster=f"kafka-{i:02d}"), partitions) for i in range(clusters))
    spark = build_session(f"bench-fleet-{clusters}x{partitions}")
    small = Lake(work / "warm", cluster="warm")
    write_storm(small, 100)
    stateful(spark, small, work / "warm-ckpt", buckets, "delta")
    run = stateful(spark, Lake(work / "lake", cluster="kafka-00"), work / "ckpt", buckets, "delta")
    jvm = _jvm_hwm_mib(spark)
    spark.stop()
    layout = BucketLayout.from_json(json.loads((work / "ckpt" / BUCKETS_FILE).read_text()))
    keys = sum(layout.of(f"kafka-{i:02d}") + 1 for i in range(clusters))  # its buckets and its stage
    return {"clusters": clusters, "partitions_per_cluster": partitions, "events": events, "wall_s": run["wall_s"],
            "buckets_per_cluster": layout.of("kafka-00"), "keys": keys,
            "events_per_s": round(events / run["wall_s"]), "written": run["written"], "batch_log": run["batch_log"],
            "python_peak_mib": _python_peak_mib(), "jvm_peak_mib": jvm}


def _child(work: Path, clusters: int, partitions: int, buckets: int) -> dict[str, Any]:
    """``one_layout`` in a process of its own."""
    args = [sys.executable, "-m", "benchmarks.fleet", "--one", f"{clusters}x{partitions}", "--buckets", str(buckets),
            "--workdir", str(work)]
    out = subprocess.run(args, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"layout {clusters}x{partitions} failed (rc {out.returncode}): {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix(RESULT_PREFIX))
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    from conf.settings import load_settings

    if args.buckets is None:
        args.buckets = load_settings().pipeline.buckets  # what `zkledger monitor` runs with
    with scratch(args) as work:
        fleet = _child(work / "fleet", args.clusters, args.partitions, args.buckets)
        single = _child(work / "single", 1, args.clusters * args.partitions, args.buckets)
    summary = [f"the monitor (availableNow) with every derived table written, at most {args.buckets} buckets per "
               "cluster (sized by its partitions), failover storm (RF 3)"]
    for name, r in (("fleet", fleet), ("one cluster", single)):
        summary.append(f"  {name}: {r['clusters']} x {r['partitions_per_cluster']:,} partitions "
                       f"({r['buckets_per_cluster']} buckets each, {r['keys']} keys), {r['events']:,} "
                       f"events in {r['wall_s']:.1f} s = {r['events_per_s']:,} events/s; driver peak RSS Python "
                       f"{r['python_peak_mib']:,.0f} MiB, JVM {r['jvm_peak_mib']:,.0f} MiB")
    summary.append(f"fleet / one cluster: throughput {ratio(fleet['events_per_s'], single['events_per_s'])}x, "
                   f"Python peak {ratio(fleet['python_peak_mib'], single['python_peak_mib'])}x, "
                   f"JVM peak {ratio(fleet['jvm_peak_mib'], single['jvm_peak_mib'])}x")
    return {"benchmark": NAME, "machine": machine(),
            "params": {"clusters": args.clusters, "partitions": args.partitions, "buckets": args.buckets},
            "fleet": fleet, "single": single,
            "throughput_ratio": ratio(fleet["events_per_s"], single["events_per_s"]), "summary": summary}


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--clusters", type=int, default=20, help="clusters in the fleet lake (default 20)")
    p.add_argument("--partitions", type=int, default=10_000, help="partitions per fleet cluster (default 10,000)")
    p.add_argument("--buckets", type=int, default=None,
                   help="the most key buckets a cluster gets (default: the shipped setting, pipeline.buckets)")
    p.add_argument("--one", metavar="CLUSTERSxPARTITIONS", help=argparse.SUPPRESS)  # a child process: one layout
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.one:
        clusters, partitions = (int(x) for x in args.one.split("x"))
        work = Path(args.workdir)
        work.mkdir(parents=True, exist_ok=True)
        print(RESULT_PREFIX + json.dumps(one_layout(work, clusters, partitions, args.buckets)), flush=True)
        return 0
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
