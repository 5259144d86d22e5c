"""Rebuild throughput: `simulate --offline` history -> `zkledger rebuild` (the one engine), vs a Python replay.

    python -m benchmarks.batch_rebuild [--events 10000000] [--partitions 200000] [--repeat 3] [--batch-mb MB]

Phases (each timed separately): generate the bronze history with the same code `zkledger simulate --offline`
runs; Spark session start (the shipped settings, `local[*]`) and one unmeasured rebuild of a 10,000-event
history (the session's first query starts the Python workers); then ``--repeat`` alternating rounds on the same
history of

- the baseline: a single-threaded Python replay (delta-rs read -> json decode of every partition-state payload
  -> `models.reference_fold.apply_partition` in a dict; nothing written);
- the rebuild `zkledger rebuild` runs (`engine.rebuild.rebuild`: the Spark query from a fresh checkpoint, every
  derived Delta table emptied and written again); the engine's per-batch lines (its phases) are kept.

Then the Python work alone: the query's route and steps (``engine.local_run.LocalRunner``) in this process over
the same events, in as many batches as the rebuild's micro-batches, nothing stored or written. Its CPU time over
the cores bounds any run that routes and steps in Python on this machine, before Spark adds anything.

This machine's speed drifts between minutes, so each round measures both under the same conditions; the
medians count. Last, the I/O floor (`benchmarks.common.io_floor`): the same bronze reads through Delta's
streaming source and the same writes of the rebuild's outputs through the query's sink, with nothing computed
in between; and Arrow's C++ JSON reader over every partition-state payload, the cheapest general parse of them.
The rows the rebuild wrote, over all derived tables, are reported per bronze event (target: at most 0.6).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
from typing import Any

from benchmarks.common import (
    Timer,
    add_history_args,
    base_parser,
    build_session,
    engine_batch_log,
    io_floor,
    machine,
    offline_history,
    ratio,
    run_main,
    scratch,
)
from models.tables import CONTROLLER_DECISIONS, ZNODE_EVENTS

log = logging.getLogger(__name__)

NAME = "batch_rebuild"


def python_replay(lake: Any) -> dict[str, int]:
    """The baseline: one thread, one dict, every event folded in zxid order with the model's fold."""
    from models.reference_fold import apply_partition
    from models.states import PartitionState as P

    table = lake.read_arrow(ZNODE_EVENTS.name).select(["zxid", "path", "data"]).sort_by("zxid")
    state: dict[str, P] = {}
    last: dict[str, tuple[int, int]] = {}
    steps = illegal = 0
    for path, data in zip(table.column("path").to_pylist(), table.column("data").to_pylist(), strict=True):
        if not path.endswith("/state") or data is None:
            continue
        obj = json.loads(data)
        key = (obj["leader"], obj["leader_epoch"])
        if last.get(path) == key:  # ISR-only write: no partition step (docs/kafka-metadata.md, writers 3/4)
            continue
        last[path] = key
        if path not in state:
            state[path] = apply_partition(None, P.NEW).state  # the assignment precedes the first state write
        step = apply_partition(state[path], P.ONLINE if obj["leader"] >= 0 else P.OFFLINE)
        state[path] = step.state
        steps += 1
        illegal += step.violation is not None
    return {"events": table.num_rows, "partitions": len(state), "steps": steps, "illegal": illegal}


def python_work(lake: Any, buckets: int, batches: int) -> dict[str, int]:
    """The one composition's Python work alone: ``engine.local_run.LocalRunner``, the query's route and steps run in
    this process (nothing packed, stored or written), over the history in zxid order in ``batches`` batches."""
    from engine.local_run import LocalRunner, history_batches
    from engine.stateful import cluster_partitions
    from pipelines.bucket_fold import BucketLayout

    runner = LocalRunner(BucketLayout.sized(buckets, cluster_partitions(lake)))
    done = rows = 0
    for batch in history_batches(lake, -(-lake.row_count(ZNODE_EVENTS.name) // max(batches, 1))):
        rows += sum(t.num_rows for _, _, _, t in runner.step(*batch))
        done += 1
    return {"batches": done, "output_rows": rows}


def state_payloads(lake: Any) -> bytes:
    """Every partition-state payload of the history, one per line (built untimed, for ``json_floor``)."""
    import pyarrow.compute as pc

    bronze = lake.scan(ZNODE_EVENTS.name, ["path", "data"])
    return b"\n".join(bronze.filter(pc.ends_with(bronze["path"], "/state"))["data"].drop_null().to_pylist()) + b"\n"


def json_floor(payloads: bytes) -> int:
    """Arrow's C++ JSON reader (multi-threaded) over the payloads; returns the rows parsed."""
    import io

    import pyarrow.json as pj

    options = pj.ReadOptions(block_size=1 << 24)
    return int(pj.read_json(io.BytesIO(payloads), read_options=options).num_rows)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from conf.settings import load_settings
    from engine.rebuild import batch_bytes, rebuild

    shipped = load_settings().pipeline  # what `zkledger rebuild` runs with
    buckets = shipped.buckets
    batch_mb = shipped.rebuild_batch_mb if args.batch_mb is None else args.batch_mb
    t = Timer()
    with scratch(args) as work:
        with t.phase("generate"):
            lake = offline_history(work / "lake", args.events, args.partitions)
        n = lake.row_count(ZNODE_EVENTS.name)
        query_rows = n + (lake.row_count(CONTROLLER_DECISIONS.name) if lake.exists(CONTROLLER_DECISIONS.name) else 0)
        with t.phase("spark_start"):
            spark = build_session("bench-batch-rebuild", args.shuffle_partitions)
        with t.phase("warm_up"):  # the first query of a session starts the Python workers: not measured
            rebuild(spark, offline_history(work / "warm", 10_000, 1_000), str(work / "warm-checkpoint"),
                    buckets=buckets)
        rounds: list[dict[str, float]] = []
        batches: list[list[str]] = []
        counts: dict[str, int] = {}
        for i in range(args.repeat):
            with t.phase(f"python_replay.{i}"):
                replay = python_replay(lake)
            with engine_batch_log(query_rows) as lines, t.phase(f"pipeline.{i}"):
                counts = rebuild(spark, lake, str(work / "checkpoint"), buckets=buckets,
                                 max_bytes_per_trigger=batch_bytes(batch_mb))
            batches.append(lines)
            rounds.append({k: t.wall[f"{k}.{i}"] for k in ("python_replay", "pipeline")})
            log.info("round %d/%d: replay %.1f s, rebuild %.1f s", i + 1, args.repeat, rounds[-1]["python_replay"],
                     rounds[-1]["pipeline"])
        with engine_batch_log() as floor_lines, t.phase("io_floor"):
            floor = io_floor(spark, lake, work / "floor", buckets)
        spark.stop()
        with t.phase("python_work"):
            work_done = python_work(lake, buckets, len(batches[-1]))
        payloads = state_payloads(lake)
        with t.phase("json_floor"):
            parsed = json_floor(payloads)
        del payloads
    for k in ("python_replay", "pipeline"):  # the medians are what the figures report
        t.wall[k] = statistics.median(r[k] for r in rounds)
    rate = n / t.wall["pipeline"]
    replay_rate = n / t.wall["python_replay"]
    per_round = [ratio(r["python_replay"], r["pipeline"]) for r in rounds]
    floor_rate = n / floor["s"]
    cores = os.cpu_count() or 1
    written = sum(counts.values())
    work_cpu = t.cpu["python_work"]
    work_ceiling = n * cores / work_cpu  # every core on the Python work, nothing else
    hop_ceiling = n / (floor["read_to_python_s"] + work_cpu / cores)  # bronze into the workers first, not overlapped
    return {
        "benchmark": NAME, "machine": machine(),
        "params": {"events": args.events, "partitions": args.partitions, "shuffle_partitions": args.shuffle_partitions,
                   "buckets": buckets, "batch_mb": batch_mb, "repeat": args.repeat,
                   "spark_master": f"local[{cores}]"},
        "bronze_events": n,
        "wall_s": t.wall, "main_process_cpu_s": t.cpu, "rounds_wall_s": rounds, "rounds_pipeline_vs_replay": per_round,
        "generate_events_per_s": round(n / t.wall["generate"]),
        "pipeline_events_per_s": round(rate), "python_replay_events_per_s": round(replay_rate),
        "pipeline_vs_replay": ratio(rate, replay_rate), "rebuild_counts": counts, "replay": replay,
        "output_rows": written, "output_rows_per_event": round(written / n, 3),
        "rebuild_batches": batches,
        "io_floor": floor, "io_floor_batches": floor_lines, "io_floor_events_per_s": round(floor_rate),
        "pipeline_vs_io_floor": ratio(rate, floor_rate),
        "python_work": {**work_done, "cpu_s": round(work_cpu, 3),
                        "cpu_us_per_event": round(work_cpu / n * 1e6, 3),
                        "ceiling_events_per_s": round(work_ceiling), "with_hop_ceiling_events_per_s": round(hop_ceiling)},
        "json_floor_payloads": parsed, "json_floor_cpu_us_per_event": round(t.cpu["json_floor"] / parsed * 1e6, 3),
        "summary": [
            f"simulate --offline: {n:,} bronze events / {args.partitions:,} partitions in {t.wall['generate']:.1f} s",
            f"spark session start {t.wall['spark_start']:.1f} s and warm-up {t.wall['warm_up']:.1f} s "
            f"(not counted in the rebuild)",
            f"rebuild (engine.rebuild.rebuild: the Spark query from a fresh checkpoint, local[{cores}], {buckets} "
            f"buckets, {f'micro-batches of {batch_mb} MB of bronze' if batch_mb else 'one micro-batch'}): "
            f"{t.wall['pipeline']:.1f} s = {rate:,.0f} events/s"
            f"{f' (median of {args.repeat} rounds)' if args.repeat > 1 else ''}",
            *(f"  round {i + 1}: {line}" for i, lines in enumerate(batches) for line in lines),
            f"rows written: {written:,} = {written / n:.3f} per bronze event (the derived tables; metadata_events is "
            f"a view over znode_events)",
            f"python replay baseline (one thread, same events): {t.wall['python_replay']:.1f} s = "
            f"{replay_rate:,.0f} events/s",
            f"ratio rebuild/replay throughput: {ratio(rate, replay_rate)}x"
            f"{f' (per round: {per_round})' if args.repeat > 1 else ''}",
            f"I/O floor (no compute): bronze through Delta's streaming source {floor['read_s']:.1f} s + the "
            f"{floor['output_rows']:,} output rows ({floor['output_files']:,} keyed files) through the query's sink "
            f"{floor['write_s']:.1f} s = {floor['s']:.1f} s = {floor_rate:,.0f} events/s; the rebuild runs at "
            f"{ratio(rate, floor_rate)}x of it (bronze into the Python workers, dropped there: "
            f"{floor['read_to_python_s']:.1f} s)",
            f"the Python work alone (engine.local_run.LocalRunner: the query's route and steps in this process, "
            f"{work_done['batches']} batches, nothing stored or written): {t.wall['python_work']:.1f} s, "
            f"{work_cpu:.1f} CPU-s = {work_cpu / n * 1e6:.2f} CPU-us per event; on all {cores} cores with nothing "
            f"else: at most {work_ceiling:,.0f} events/s; with bronze into the Python workers as above before it, "
            f"not overlapped: {hop_ceiling:,.0f} events/s",
            f"Arrow's C++ JSON reader over the {parsed:,} partition-state payloads alone: {t.wall['json_floor']:.1f} s, "
            f"{t.cpu['json_floor']:.1f} CPU-s = {t.cpu['json_floor'] / parsed * 1e6:.2f} CPU-us per event",
        ],
    }


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    add_history_args(p)
    p.add_argument("--shuffle-partitions", type=int, default=None, help="override spark.sql.shuffle.partitions")
    p.add_argument("--batch-mb", type=int, default=None,
                   help="the rebuild's micro-batch cap in MB of bronze Parquet (default: the shipped "
                        "pipeline.rebuild_batch_mb; 0: all history in one micro-batch)")
    p.add_argument("--repeat", type=int, default=3,
                   help="alternating rounds of replay and rebuild on the same history; medians count (default 3)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
