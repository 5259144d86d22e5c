"""Streaming throughput in a failover storm: the full monitor vs a naive per-key transformWithStateInPandas.

    python -m benchmarks.streaming_storm [--partitions 200000] [--baseline-partitions 20000]

Input: `benchmarks.storm` (a legal storm after the cluster's preamble: every partition's leader moves, ISR
shrinks, epochs bump; RF 3). Measured in the same run: (1) the full monitor, `zkledger monitor --available-now`
on that lake (decode, both state machines, detectors, Delta outputs): the throughput figure; (2) the ratio, on a
storm of --baseline-partitions partitions (the whole storm when it is that small): the full monitor and the
naive baseline on the same lake. The naive baseline: the bronze stream (`lakehouse.spark_io.stream_table`),
payload JSON parsed in Spark, `groupBy(topic, partition).transformWithStateInPandas` with one key per
partition folding with `models.fold.apply_partition`, `availableNow`, noop sink. Nothing is extrapolated.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Timer,
    base_parser,
    build_session,
    machine,
    ratio,
    run_main,
    scratch,
)
from models.tables import ZNODE_EVENTS

log = logging.getLogger(__name__)

NAME = "streaming_storm"
STATE_SCHEMA = "state string, leader int, leader_epoch int"
OUT_SCHEMA = "topic string, partition int, zxid long, from_state string, to_state string, legal boolean"


def _processor_class() -> type:
    """Built lazily: the pyspark import stays out of module import (and out of --help)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

    from models.fold import apply_partition
    from models.states import PartitionState as P

    class NaiveFold(StatefulProcessor):
        """One key per (topic, partition): the state triple in a ValueState, one fold step per leader change."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.value = handle.getValueState("s", STATE_SCHEMA)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            topic, partition = key
            cur = self.value.get() if self.value.exists() else None
            state = P(cur[0]) if cur else None
            leader, epoch = (cur[1], cur[2]) if cur else (None, None)
            out = []
            for pdf in rows:
                for z, ld, le in zip(pdf["zxid"], pdf["leader"], pdf["leader_epoch"], strict=True):
                    if (ld, le) == (leader, epoch):
                        continue  # ISR-only write: no partition step
                    if state is None:
                        state = apply_partition(None, P.NEW).state
                    step = apply_partition(state, P.ONLINE if ld >= 0 else P.OFFLINE)
                    out.append((topic, int(partition), int(z), str(state), str(step.state), step.violation is None))
                    state, leader, epoch = step.state, int(ld), int(le)
            if state is not None:
                self.value.update((str(state), leader, epoch))
            yield pd.DataFrame(out, columns=["topic", "partition", "zxid", "from_state", "to_state", "legal"])

        def close(self) -> None:
            pass

    return NaiveFold


def naive_baseline(spark: Any, lake: Any, partitions: int, checkpoint: Path) -> dict[str, Any]:
    """Drain the bronze stream through the naive processor (only partitions < `partitions`)."""
    from pyspark.sql import functions as F

    from lakehouse.spark_io import stream_table

    src = stream_table(spark, lake, ZNODE_EVENTS.name).filter(F.col("path").endswith("/state"))
    topic = F.regexp_extract("path", r"^/brokers/topics/([^/]+)/partitions/(\d+)/state$", 1)
    part = F.regexp_extract("path", r"^/brokers/topics/([^/]+)/partitions/(\d+)/state$", 2).cast("int")
    data = F.col("data").cast("string")
    df = src.select(topic.alias("topic"), part.alias("partition"), "zxid",
                    F.get_json_object(data, "$.leader").cast("int").alias("leader"),
                    F.get_json_object(data, "$.leader_epoch").cast("int").alias("leader_epoch"))
    df = df.filter((F.regexp_extract("topic", r"(\d+)$", 1).cast("int") * 1000 + F.col("partition")) < partitions)
    out = df.groupBy("topic", "partition").transformWithStateInPandas(
        statefulProcessor=_processor_class()(), outputStructType=OUT_SCHEMA, outputMode="Append", timeMode="None")
    t0 = time.perf_counter()
    q = (out.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    rows = sum(int(p.get("numInputRows", 0)) for p in q.recentProgress)
    return {"wall_s": round(wall, 3), "input_rows": rows, "partitions": partitions}


def full_monitor(lake_dir: Path, cluster: str, local_max_rows: int | None = None) -> dict[str, Any]:
    """`zkledger monitor --available-now` as a user runs it (includes its own Spark session start).

    ``local_max_rows`` sets ``pipeline.local_max_rows`` through a conf file (None: the shipped default).
    """
    conf: list[str] = []
    if local_max_rows is not None:
        path = lake_dir.parent / "bench.toml"
        path.write_text(f"[pipeline]\nlocal_max_rows = {local_max_rows}\n", encoding="utf-8")
        conf = ["--conf", str(path)]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "zkledger.cli", *conf, "--lake", str(lake_dir), "--cluster", cluster,
                           "-v", "monitor", "--available-now"], capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - t0
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    err = (proc.stderr.strip().splitlines() or [""])[-1]
    batches = [ln.split("engine.monitor: ", 1)[1] for ln in proc.stderr.splitlines() if "micro-batch" in ln]
    return {"ok": proc.returncode == 0, "rc": proc.returncode, "wall_s_incl_session_start": round(wall, 3),
            "summary_line": last if proc.returncode == 0 else err, "micro_batches": batches}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.storm import write_storm
    from lakehouse import Lake

    t = Timer()
    with scratch(args) as work:
        lake = Lake(work / "lake", cluster="bench")
        with t.phase("generate"):
            events = write_storm(lake, args.partitions)
        runs = []
        with t.phase("monitor"):
            for i in range(args.repeat):  # each on a fresh copy of the storm lake: this machine's timings vary
                copy = work / f"lake-{i}"
                shutil.copytree(work / "lake", copy)
                runs.append(full_monitor(copy, "bench", args.local_max_rows))
                shutil.rmtree(copy)
        walls = sorted(r["wall_s_incl_session_start"] for r in runs)
        mon = dict(runs[0], ok=all(r["ok"] for r in runs), rc=max(r["rc"] for r in runs),
                   wall_s_incl_session_start=walls[len(walls) // 2], runs_wall_s=walls,
                   micro_batches=[b for r in runs for b in r["micro_batches"]])
        sub = min(args.baseline_partitions, args.partitions)
        if sub < args.partitions:  # the ratio on a smaller storm: the naive processor pays per key
            slice_lake = Lake(work / "slice", cluster="bench")
            with t.phase("generate_slice"):
                slice_events = write_storm(slice_lake, sub)
            with t.phase("monitor_slice"):
                copy = work / "slice-run"
                shutil.copytree(work / "slice", copy)
                slice_mon = full_monitor(copy, "bench", args.local_max_rows)
                shutil.rmtree(copy)
        else:
            slice_lake, slice_events, slice_mon = lake, events, mon
        with t.phase("spark_start"):
            spark = build_session("bench-streaming-storm", args.shuffle_partitions)
        with t.phase("naive_baseline"):
            base = naive_baseline(spark, slice_lake, sub, work / "ckpt-naive")
        spark.stop()
    start_s = t.wall["spark_start"]
    naive_rate = slice_events / base["wall_s"]
    mon_time = mon["wall_s_incl_session_start"] - start_s
    mon_rate = events / mon_time if mon["ok"] and mon_time > 0 else None
    slice_time = slice_mon["wall_s_incl_session_start"] - start_s
    slice_rate = slice_events / slice_time if slice_mon["ok"] and slice_time > 0 else None
    summary = [f"storm: {args.partitions:,} partitions (RF 3), {events:,} bronze events"]
    if mon["ok"]:
        summary += [*(f"  {b}" for b in mon["micro_batches"]),
                    f"full monitor (availableNow), median of {len(walls)} runs "
                    f"({', '.join(f'{w:.1f}' for w in walls)} s): {mon['wall_s_incl_session_start']:.1f} s incl. session start, "
                    f"~{mon_time:.1f} s after subtracting this run's session start ({start_s:.1f} s) "
                    f"= {mon_rate:,.0f} events/s"]
    else:
        summary.append(f"full monitor NOT MEASURED: `zkledger monitor --available-now` exited {mon['rc']}: "
                       f"{mon['summary_line']}")
    summary.append(f"same input for the ratio: a storm of {sub:,} partitions, {slice_events:,} bronze events")
    summary.append(f"  naive transformWithStateInPandas: {base['wall_s']:.1f} s ({base['input_rows']:,} rows) "
                   f"= {naive_rate:,.0f} events/s")
    if slice_rate:
        summary += [f"  full monitor: ~{slice_time:.1f} s after the session start = {slice_rate:,.0f} events/s",
                    f"ratio monitor/naive throughput on the same {sub:,} partitions: {ratio(slice_rate, naive_rate)}x"]
    return {
        "benchmark": NAME, "machine": machine(),
        "params": {"partitions": args.partitions, "replication_factor": 3, "baseline_partitions": sub,
                   "local_max_rows": args.local_max_rows, "repeat": args.repeat},
        "events": events, "wall_s": t.wall, "monitor": mon, "monitor_events_per_s": mon_rate,
        "ratio_input": {"partitions": sub, "events": slice_events, "monitor": slice_mon,
                        "monitor_events_per_s": slice_rate},
        "naive": base, "naive_events_per_s": round(naive_rate),
        "monitor_vs_naive": ratio(slice_rate, naive_rate) if slice_rate else None,
        "summary": summary,
    }


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--partitions", type=int, default=200_000, help="partitions in the storm (default 200,000)")
    p.add_argument("--baseline-partitions", type=int, default=20_000,
                   help="the ratio's storm: the monitor and the naive processor both run on a storm of this many "
                        "partitions (default 20,000; the whole storm when it is smaller)")
    p.add_argument("--shuffle-partitions", type=int, default=None, help="override spark.sql.shuffle.partitions")
    p.add_argument("--repeat", type=int, default=3, help="monitor runs, each on a fresh copy; the median counts (default 3)")
    p.add_argument("--local-max-rows", type=int, default=None,
                   help="the monitor's pipeline.local_max_rows (default: the shipped setting; 0 = always Spark)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
