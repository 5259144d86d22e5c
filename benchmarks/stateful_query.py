"""The stateful streaming query (``engine.stateful``) vs a plain per-partition transformWithStateInPandas, one storm.

    python -m benchmarks.stateful_query [--partitions 200000] [--baseline-partitions 20000] [--buckets 32]

Input: ``benchmarks.storm`` (a legal failover storm, RF 3: the preamble and every partition's first state in one
bronze commit, then a controller failover and a leader move with an ISR shrink for every partition in the next).
Measured in the same run, each from a fresh checkpoint with ``availableNow``:

1. ``engine.stateful`` with its sink on the storm of --partitions: decode (``mapInArrow``), both state machines
   and the detectors per key bucket and the cluster-wide work per cluster
   (``groupBy(cluster, bucket).transformWithStateInPandas``, state in RocksDB), every derived table written
   through Delta's connector in ``foreachBatch``;
2. the same query with a ``noop`` sink (what the query costs without the Delta writes);
3. for the ratio, on ONE input, a storm of --baseline-partitions (the same storm when --partitions is that
   small): 1 and 2 again, and the baseline ``benchmarks.streaming_storm.naive_baseline``: one key per (topic,
   partition), the payload parsed in Spark, one Python fold step per row, ``noop`` sink. Nothing is
   extrapolated.

Throughput is bronze events over the query's wall time (session start excluded; each query first runs once on a
100-partition storm, unmeasured, so none pays the Python workers' start and class loading alone). The driver's
peak RSS is the Python driver's (``ru_maxrss``) and, separately, the JVM's high-water mark (in ``local[*]`` that JVM also runs
the executors' tasks, so it is an upper bound of the driver's).
"""

from __future__ import annotations

import argparse
import logging
import resource
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Timer,
    base_parser,
    build_session,
    connector_floor,
    machine,
    ratio,
    run_main,
    scratch,
)
from models.tables import (
    CONTROLLER_DECISIONS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
    ZNODE_EVENTS,
)

log = logging.getLogger(__name__)

NAME = "stateful_query"


def _jvm_hwm_mib(spark: Any) -> float | None:
    """The driver JVM's peak resident set (VmHWM), MiB."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def _python_peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def stateful(spark: Any, lake: Any, checkpoint: Path, buckets: int, sink: str) -> dict[str, Any]:
    """The stateful query over the whole storm: ``sink`` "delta" (the query's own writes) or "noop"."""
    from engine.stateful import start_stateful_query, stateful_stream
    from lakehouse.spark_io import stream_table

    t0 = time.perf_counter()
    if sink == "delta":
        q = start_stateful_query(spark, lake, checkpoint, buckets=buckets, available_now=True)
    else:
        bronze, decisions = (stream_table(spark, lake, t.name) for t in (ZNODE_EVENTS, CONTROLLER_DECISIONS))
        q = (stateful_stream(bronze, decisions, buckets).writeStream.format("noop")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    rows = sum(int(p.get("numInputRows", 0)) for p in q.recentProgress)
    out = {"wall_s": round(wall, 3), "input_rows": rows, "sink": sink, "buckets": buckets,
           "batches": [{k: p[k] for k in ("batchId", "numInputRows", "durationMs")} for p in q.recentProgress]}
    if sink == "delta":
        out["written"] = {t: lake.row_count(t, lake.version(t)) for t in
                          (PARTITION_TRANSITIONS.name, REPLICA_TRANSITIONS.name, PARTITION_STATE.name, REPLICA_STATE.name)}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.storm import write_storm
    from benchmarks.streaming_storm import naive_baseline
    from lakehouse import Lake

    t = Timer()
    sub = min(args.baseline_partitions, args.partitions)
    with scratch(args) as work:
        lake = Lake(work / "lake", cluster="bench")
        with t.phase("generate"):
            events = write_storm(lake, args.partitions)
            slice_lake = lake if sub == args.partitions else Lake(work / "slice", cluster="bench")
            slice_events = events if sub == args.partitions else write_storm(slice_lake, sub)
        with t.phase("spark_start"):
            spark = build_session("bench-stateful-query", args.shuffle_partitions)
        with t.phase("warm_up"):  # each query's first run starts Python workers and loads classes: not measured
            small = Lake(work / "warm", cluster="bench")
            write_storm(small, 100)
            for sink in ("delta", "noop"):
                stateful(spark, small, work / f"warm-{sink}", args.buckets, sink)
            naive_baseline(spark, small, 100, work / "warm-naive")
        rss_after_start = _python_peak_mib()
        with t.phase("stateful_delta"):
            full = stateful(spark, lake, work / "ckpt-delta", args.buckets, "delta")
        with t.phase("stateful_noop"):
            noop = stateful(spark, lake, work / "ckpt-noop", args.buckets, "noop")
        with t.phase("connector_floor"):  # the storm's own outputs, written by the run above
            floor_read_s, floor_write_s, floor_rows = connector_floor(spark, lake, work / "floor")
        if slice_lake is lake:
            slice_delta, slice_noop = full, noop
        else:
            with t.phase("slice_stateful_delta"):
                slice_delta = stateful(spark, slice_lake, work / "ckpt-slice-delta", args.buckets, "delta")
            with t.phase("slice_stateful_noop"):
                slice_noop = stateful(spark, slice_lake, work / "ckpt-slice-noop", args.buckets, "noop")
        with t.phase("naive_baseline"):
            base = naive_baseline(spark, slice_lake, sub, work / "ckpt-naive")
        jvm_hwm = _jvm_hwm_mib(spark)
        spark.stop()
    rates = {"delta": events / full["wall_s"], "noop": events / noop["wall_s"],
             "connector_floor": events / (floor_read_s + floor_write_s)}
    same = {name: slice_events / r["wall_s"] for name, r in (("delta", slice_delta), ("noop", slice_noop),
                                                                ("naive", base))}
    py_peak = _python_peak_mib()
    summary = [
        f"storm: {args.partitions:,} partitions (RF 3), {events:,} bronze events, {args.buckets} buckets, "
        f"shuffle partitions {spark_partitions(args)}",
        f"stateful query + Delta writes (every derived table): {full['wall_s']:.1f} s = "
        f"{rates['delta']:,.0f} events/s",
        f"stateful query, noop sink: {noop['wall_s']:.1f} s = {rates['noop']:,.0f} events/s",
        f"connector floor (the storm through Delta's streaming source {floor_read_s:.1f} s, its {floor_rows:,} output "
        f"rows written again by Delta's connector {floor_write_s:.1f} s, no compute): "
        f"{rates['connector_floor']:,.0f} events/s; the query with its writes runs at "
        f"{ratio(rates['delta'], rates['connector_floor'])}x of it",
        f"same input for the ratio: a storm of {sub:,} partitions ({slice_events:,} events): stateful "
        f"{same['delta']:,.0f} events/s with Delta writes, {same['noop']:,.0f} noop; naive per-partition "
        f"transformWithStateInPandas, noop sink: {base['wall_s']:.1f} s = {same['naive']:,.0f} events/s "
        f"({base['input_rows']:,} rows)",
        f"ratio stateful/naive: {ratio(same['delta'], same['naive'])}x with Delta writes, "
        f"{ratio(same['noop'], same['naive'])}x noop vs noop",
        f"driver peak RSS: Python {py_peak:,.0f} MiB (after session start and warm-up {rss_after_start:,.0f} MiB); "
        f"driver JVM (also the local executors) {jvm_hwm:,.0f} MiB" if jvm_hwm is not None else
        f"driver peak RSS: Python {py_peak:,.0f} MiB",
    ]
    return {
        "benchmark": NAME, "machine": machine(),
        "params": {"partitions": args.partitions, "baseline_partitions": sub, "replication_factor": 3,
                   "buckets": args.buckets, "shuffle_partitions": args.shuffle_partitions},
        "events": events, "slice_events": slice_events, "wall_s": t.wall, "stateful_delta": full,
        "stateful_noop": noop, "connector_floor": {"bronze_read_s": round(floor_read_s, 1),
                                                    "writes_s": round(floor_write_s, 1), "output_rows": floor_rows},
        "slice_stateful_delta": slice_delta, "slice_stateful_noop": slice_noop, "naive": base,
        "events_per_s": {k: round(v) for k, v in rates.items()},
        "slice_events_per_s": {k: round(v) for k, v in same.items()},
        "stateful_vs_naive": ratio(same["delta"], same["naive"]),
        "stateful_noop_vs_naive": ratio(same["noop"], same["naive"]),
        "driver_python_peak_rss_mib": py_peak, "driver_jvm_peak_rss_mib": jvm_hwm, "summary": summary,
    }


def spark_partitions(args: argparse.Namespace) -> str:
    return str(args.shuffle_partitions) if args.shuffle_partitions is not None else "default"


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--partitions", type=int, default=200_000,
                   help="partitions in the storm the stateful query's throughput is measured on (default 200,000)")
    p.add_argument("--baseline-partitions", type=int, default=20_000,
                   help="the naive processor and the ratio run on a storm of this many partitions (default 20,000; "
                        "the stateful query runs on it too)")
    p.add_argument("--buckets", type=int, default=32, help="key buckets per cluster of the stateful query (default 32)")
    p.add_argument("--shuffle-partitions", type=int, default=None, help="override spark.sql.shuffle.partitions")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
