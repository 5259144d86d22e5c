"""A failover storm through the one engine with every output written, vs a plain per-partition processor.

    python -m benchmarks.stateful_query [--partitions 200000] [--baseline-partitions 20000] [--repeat 3]

Input: ``benchmarks.storm`` (a legal failover storm, RF 3: the preamble and every partition's first state in one
bronze commit, then a controller failover and a leader move with an ISR shrink for every partition in the next).
One Spark session (the shipped settings, ``local[*]``); each query below runs from a fresh checkpoint with
``availableNow``, after an unmeasured run of each on a 100-partition storm (a session's first query starts the
Python workers and loads classes). Measured in the same run:

1. the monitor (``engine.monitor.start_monitor``, what ``zkledger monitor --available-now`` runs) on the storm of
   --partitions, every derived table written by its sink: ``--repeat`` runs, each on a fresh copy of the storm
   lake, the median counts. Target: 40,000 events/s;
2. the same query with a ``noop`` sink (``engine.stateful.stateful_stream``): the query without its writes;
3. the storm's I/O floor (``benchmarks.common.io_floor``): its bronze through Delta's streaming source and the
   outputs run 1 wrote, written again through the query's sink, nothing computed;
4. the ratio, on ONE input, a storm of --baseline-partitions (the same storm when --partitions is that small):
   1 and 2 once more, and the baseline ``naive_baseline``: one key per (topic, partition)
   (``groupBy(topic, partition).transformWithStateInPandas``), the payload parsed in Spark, one Python fold step
   per leader change (``models.reference_fold``), ``noop`` sink. Nothing is extrapolated.

Throughput is bronze events over the query's wall time (start to termination). Each run keeps the engine's
per-batch lines (Spark's phases, the sink's "query and files" and "commits"). The driver's peak RSS, taken
after the queries of 1 and 2 (before the floor reads the outputs back), is the Python driver's (``ru_maxrss``)
and, apart, the JVM's high-water mark (in ``local[*]`` that JVM also runs the executors' tasks, so it bounds
the driver's from above).
"""

from __future__ import annotations

import argparse
import logging
import resource
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Timer,
    base_parser,
    build_session,
    engine_batch_log,
    io_floor,
    machine,
    progress_line,
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
TARGET_EVENTS_PER_S = 40_000
STATE_SCHEMA = "state string, leader int, leader_epoch int"
OUT_SCHEMA = "topic string, partition int, zxid long, from_state string, to_state string, legal boolean"


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
    """The engine over the whole lake, availableNow: ``sink`` "delta" (the monitor, its sink writing every
    derived table) or "noop" (the same query, its rows dropped)."""
    from engine.monitor import start_monitor
    from engine.stateful import stateful_stream
    from lakehouse.spark_io import stream_table

    with engine_batch_log() as lines:
        t0 = time.perf_counter()
        if sink == "delta":
            q = start_monitor(spark, lake, str(checkpoint), available_now=True, buckets=buckets)
        else:
            bronze, decisions = (stream_table(spark, lake, t.name) for t in (ZNODE_EVENTS, CONTROLLER_DECISIONS))
            q = (stateful_stream(bronze, decisions, buckets=buckets).writeStream.format("noop")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        q.awaitTermination()
        wall = time.perf_counter() - t0
    rows = sum(int(p.get("numInputRows", 0)) for p in q.recentProgress)
    lines += [progress_line(p) for p in q.recentProgress if p.get("numInputRows", 0)]
    out = {"wall_s": round(wall, 3), "input_rows": rows, "sink": sink, "buckets": buckets, "batch_log": lines,
           "batches": [{k: p[k] for k in ("batchId", "numInputRows", "durationMs")} for p in q.recentProgress]}
    if sink == "delta":
        out["written"] = {t: lake.row_count(t, lake.version(t)) for t in
                          (PARTITION_TRANSITIONS.name, REPLICA_TRANSITIONS.name, PARTITION_STATE.name, REPLICA_STATE.name)}
    return out


def _processor_class() -> type:
    """Built lazily (pickled by value for the Python workers; pyspark stays out of module import)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

    from models.reference_fold import apply_partition
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


def naive_baseline(spark: Any, lake: Any, checkpoint: Path) -> dict[str, Any]:
    """Drain the storm's partition-state writes through the per-partition processor, noop sink."""
    from pyspark.sql import functions as F

    from lakehouse.spark_io import stream_table

    state_path = r"^/brokers/topics/([^/]+)/partitions/(\d+)/state$"
    src = stream_table(spark, lake, ZNODE_EVENTS.name).filter(F.col("path").endswith("/state"))
    data = F.col("data").cast("string")
    df = src.select(F.regexp_extract("path", state_path, 1).alias("topic"),
                    F.regexp_extract("path", state_path, 2).cast("int").alias("partition"), "zxid",
                    F.get_json_object(data, "$.leader").cast("int").alias("leader"),
                    F.get_json_object(data, "$.leader_epoch").cast("int").alias("leader_epoch"))
    out = df.groupBy("topic", "partition").transformWithStateInPandas(
        statefulProcessor=_processor_class()(), outputStructType=OUT_SCHEMA, outputMode="Append", timeMode="None")
    t0 = time.perf_counter()
    q = (out.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    rows = sum(int(p.get("numInputRows", 0)) for p in q.recentProgress)
    return {"wall_s": round(wall, 3), "input_rows": rows}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.storm import write_storm
    from conf.settings import load_settings
    from lakehouse import Lake

    if args.buckets is None:
        args.buckets = load_settings().pipeline.buckets  # what `zkledger monitor` runs with
    t = Timer()
    sub = min(args.baseline_partitions, args.partitions)
    with scratch(args) as work:
        for old in ("lake", "slice", "warm", "runs", "ckpt"):  # a kept --workdir: start clean
            shutil.rmtree(work / old, ignore_errors=True)
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
            for sink in ("noop", "delta"):
                stateful(spark, small, work / "ckpt" / f"warm-{sink}", args.buckets, sink)
            naive_baseline(spark, small, work / "ckpt" / "warm-naive")
        rss_after_start = _python_peak_mib()

        def monitor_on_copy(source: Path, name: str) -> tuple[dict[str, Any], Any]:
            copy = work / "runs" / name  # the storm alone, as written: every run starts from the same lake
            shutil.copytree(source, copy)
            target = Lake(copy, cluster="bench")
            with t.phase(name):
                return stateful(spark, target, work / "ckpt" / name, args.buckets, "delta"), target

        runs, last = [], lake
        for i in range(args.repeat):
            got, last = monitor_on_copy(work / "lake", f"stateful_delta.{i}")
            runs.append(got)
            log.info("monitor run %d/%d: %.1f s", i + 1, args.repeat, got["wall_s"])
        full_wall = statistics.median(r["wall_s"] for r in runs)
        with t.phase("stateful_noop"):
            noop = stateful(spark, lake, work / "ckpt" / "noop", args.buckets, "noop")
        # the peaks so far are the queries' own: the floor below reads every output back into the driver
        py_peak, jvm_hwm = _python_peak_mib(), _jvm_hwm_mib(spark)
        with t.phase("io_floor"):  # the outputs the last monitor run wrote
            floor = io_floor(spark, last, work / "floor", args.buckets)
        if slice_lake is lake:
            slice_delta, slice_noop = runs[-1], noop
        else:
            slice_delta, _ = monitor_on_copy(work / "slice", "slice_stateful_delta")
            with t.phase("slice_stateful_noop"):
                slice_noop = stateful(spark, slice_lake, work / "ckpt" / "slice-noop", args.buckets, "noop")
        with t.phase("naive_baseline"):
            base = naive_baseline(spark, slice_lake, work / "ckpt" / "naive")
        spark.stop()
    rates = {"delta": events / full_wall, "noop": events / noop["wall_s"], "io_floor": events / floor["s"]}
    same = {name: slice_events / r["wall_s"] for name, r in (("delta", slice_delta), ("noop", slice_noop),
                                                                ("naive", base))}
    walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
    summary = [
        f"storm: {args.partitions:,} partitions (RF 3), {events:,} bronze events, {args.buckets} buckets, "
        f"shuffle partitions {args.shuffle_partitions or 'shipped'}; session start {t.wall['spark_start']:.1f} s and "
        f"warm-up {t.wall['warm_up']:.1f} s not counted",
        f"monitor (availableNow) with its sink writing every derived table: {full_wall:.1f} s = "
        f"{rates['delta']:,.0f} events/s (target {TARGET_EVENTS_PER_S:,})"
        + (f", median of {args.repeat} runs ({walls} s)" if args.repeat > 1 else ""),
        *(f"  run {i + 1}: {line}" for i, r in enumerate(runs) for line in r["batch_log"]),
        f"the same query, noop sink: {noop['wall_s']:.1f} s = {rates['noop']:,.0f} events/s",
        f"I/O floor (no compute): the storm through Delta's streaming source {floor['read_s']:.1f} s + its "
        f"{floor['output_rows']:,} output rows through the query's sink {floor['write_s']:.1f} s = "
        f"{rates['io_floor']:,.0f} events/s; the monitor with its writes runs at "
        f"{ratio(rates['delta'], rates['io_floor'])}x of it",
        f"same input for the ratio: a storm of {sub:,} partitions ({slice_events:,} events): the monitor "
        f"{slice_delta['wall_s']:.1f} s = {same['delta']:,.0f} events/s with its writes, noop {same['noop']:,.0f}; "
        f"per-partition transformWithStateInPandas, noop sink: {base['wall_s']:.1f} s = {same['naive']:,.0f} "
        f"events/s ({base['input_rows']:,} rows)",
        f"ratio monitor/per-partition: {ratio(same['delta'], same['naive'])}x with its writes, "
        f"{ratio(same['noop'], same['naive'])}x noop vs noop",
        f"driver peak RSS through the queries (before the floor): Python {py_peak:,.0f} MiB (after session start and "
        f"warm-up {rss_after_start:,.0f} MiB)"
        + (f"; driver JVM (also the local executors) {jvm_hwm:,.0f} MiB" if jvm_hwm is not None else ""),
    ]
    return {
        "benchmark": NAME, "machine": machine(),
        "params": {"partitions": args.partitions, "baseline_partitions": sub, "replication_factor": 3,
                   "buckets": args.buckets, "shuffle_partitions": args.shuffle_partitions, "repeat": args.repeat},
        "events": events, "slice_events": slice_events, "wall_s": t.wall, "stateful_delta_runs": runs,
        "stateful_delta_wall_s": full_wall, "stateful_noop": noop, "io_floor": floor,
        "slice_stateful_delta": slice_delta, "slice_stateful_noop": slice_noop, "naive": base,
        "events_per_s": {k: round(v) for k, v in rates.items()},
        "target_events_per_s": TARGET_EVENTS_PER_S, "meets_target": rates["delta"] >= TARGET_EVENTS_PER_S,
        "slice_events_per_s": {k: round(v) for k, v in same.items()},
        "stateful_vs_naive": ratio(same["delta"], same["naive"]),
        "stateful_noop_vs_naive": ratio(same["noop"], same["naive"]),
        "stateful_vs_io_floor": ratio(rates["delta"], rates["io_floor"]),
        "driver_python_peak_rss_mib": py_peak, "driver_jvm_peak_rss_mib": jvm_hwm, "summary": summary,
    }


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--partitions", type=int, default=200_000,
                   help="partitions in the storm the throughput is measured on (default 200,000)")
    p.add_argument("--baseline-partitions", type=int, default=20_000,
                   help="the per-partition processor and the ratio run on a storm of this many partitions (default "
                        "20,000; the monitor runs on it too)")
    p.add_argument("--repeat", type=int, default=3,
                   help="monitor runs on the full storm, each on a fresh copy; the median counts (default 3)")
    p.add_argument("--buckets", type=int, default=None, help="key buckets per cluster (default: the shipped setting)")
    p.add_argument("--shuffle-partitions", type=int, default=None, help="override spark.sql.shuffle.partitions")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
