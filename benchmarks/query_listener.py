"""What a Python streaming-query listener costs per micro-batch: PySpark's own bridge against the JSON one.

    python -m benchmarks.query_listener [--seconds 20] [--repeat 3] [--trigger 0.2]

One Spark session (``services.spark_session.build_spark``, ``local[2]``) and one running query: a micro-batch rate
source (``--rows-per-batch``) grouped into a stateful count (the session's RocksDB state store, so each progress carries a state operator's
custom metrics as a monitor's does) into the no-op sink, a micro-batch every ``--trigger`` seconds. In each of
``--repeat`` rounds (the order turns each round) the same query runs ``--seconds`` with no listener (the
baseline), with a listener on PySpark's bridge (``pyspark.sql.streaming.StreamingQueryListener``) and with one on
``engine.query_events.JsonQueryListener``; both read the same fields of every progress, as the monitor's do. The
CPU-seconds of this process and its JVM over each window, less the baseline's of that round, per progress event.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.common import Timer, base_parser, machine, run_main
from benchmarks.suite_cpu import read_process

log = logging.getLogger(__name__)

NAME = "query_listener"
NONE, PYSPARK, JSON = "none", "pyspark", "json"
VARIANTS = (NONE, PYSPARK, JSON)


def tree_cpu_s() -> float:
    """CPU-seconds of this process and every process below it that is alive (the JVM, its Python workers)."""
    own = os.times()
    parents: dict[int, list[tuple[int, float]]] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (read := read_process(pid)) is not None:
            parents.setdefault(read[1], []).append((int(pid), read[3]))
    total, stack = own.user + own.system, [os.getpid()]
    while stack:
        for child, cpu_s in parents.get(stack.pop(), ()):
            total += cpu_s
            stack.append(child)
    return total


def listeners() -> dict[str, Any]:
    """A listener of each bridge, reading the fields the monitor reads; ``.events`` counts its progress events."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from engine.query_events import JsonQueryListener

    def read(progress: Any) -> None:
        rows = sum(int(s.numInputRows) for s in progress.sources)
        log.debug("batch %d: %d rows in %d ms", progress.batchId, rows, progress.durationMs.get("triggerExecution", 0))

    class OnPySpark(StreamingQueryListener):
        events = 0

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            self.events += 1
            read(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    class OnJson(JsonQueryListener):
        events = 0

        def onQueryProgress(self, event: Any) -> None:
            self.events += 1
            read(event.progress)

    return {PYSPARK: OnPySpark(), JSON: OnJson()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from conf.settings import load_settings
    from services.spark_session import build_spark

    t = Timer()
    with t.phase("session"):
        spark = build_spark(load_settings(overrides={"spark.master": "local[2]", "spark.shuffle_partitions": 2}),
                            app_name="zkledger-bench-listener")
    by_variant = listeners()
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        counts = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", args.rows_per_batch).load()
                  .groupBy((F.col("value") % 1000).alias("key")).count())
        query = (counts.writeStream.format("noop").outputMode("update").trigger(processingTime=f"{args.trigger} seconds")
                 .start())
        time.sleep(args.warmup)
        for i in range(args.repeat):
            order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
            measured: dict[str, dict[str, float]] = {}
            for variant in order:
                listener = by_variant.get(variant)
                if listener is not None:
                    spark.streams.addListener(listener)
                events0, batch0, cpu0 = getattr(listener, "events", 0), _last_batch(query), tree_cpu_s()
                time.sleep(args.seconds)
                cpu, batches = tree_cpu_s() - cpu0, _last_batch(query) - batch0
                if listener is not None:
                    spark.streams.removeListener(listener)
                measured[variant] = {"cpu_s": round(cpu, 2), "batches": batches,
                                     "events": getattr(listener, "events", 0) - events0}
            rounds.append(measured)
            log.info("round %d/%d: %s", i + 1, args.repeat, measured)
        query.stop()
    finally:
        spark.stop()
    per_event = {v: round(statistics.median((r[v]["cpu_s"] - r[NONE]["cpu_s"]) / max(r[v]["events"], 1)
                                            for r in rounds), 4) for v in (PYSPARK, JSON)}
    # the window's CPU against the same round's without a listener: robust where a per-event figure is noise
    against_none = {v: round(statistics.median(r[v]["cpu_s"] / r[NONE]["cpu_s"] for r in rounds), 2)
                    for v in (PYSPARK, JSON)}
    summary = [f"one query (a rate source, a stateful count in RocksDB, no-op sink) every {args.trigger} s on "
               f"local[2]; {args.repeat} alternating rounds of {args.seconds} s per listener; the CPU of the driver's "
               "process tree against the same round's run without a listener (medians)",
               f"  PySpark's bridge: {against_none[PYSPARK]:.2f}x the CPU, {per_event[PYSPARK]:.3f} CPU-s more per "
               "progress event",
               f"  engine.query_events.JsonQueryListener: {against_none[JSON]:.2f}x the CPU, {per_event[JSON]:.3f} "
               "CPU-s more per progress event",
               f"  a monitor with a micro-batch every second has two listeners (its progress log, its metrics): "
               f"{2 * per_event[PYSPARK]:.2f} of a core on PySpark's bridge"]
    return {"benchmark": NAME, "machine": machine(),
            "params": {"seconds": args.seconds, "repeat": args.repeat, "trigger_s": args.trigger,
                       "rows_per_batch": args.rows_per_batch, "warmup_s": args.warmup},
            "wall_s": t.wall, "rounds": rounds, "cpu_s_per_event": per_event,
            "cpu_against_none": against_none, "summary": summary}


def _last_batch(query: Any) -> int:
    progress = query._jsq.lastProgress()  # one call: the field, not PySpark's whole conversion
    return int(progress.batchId()) if progress is not None else -1


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--seconds", type=float, default=20.0, help="seconds per listener per round (default 20)")
    p.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--trigger", type=float, default=0.2, help="the query's trigger in seconds (default 0.2)")
    p.add_argument("--rows-per-batch", type=int, default=1000, help="the source's rows per micro-batch (default 1,000)")
    p.add_argument("--warmup", type=float, default=30.0, help="seconds the query runs before measuring (default 30)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
