"""Batch rebuild throughput: `simulate --offline` history -> the real batch rebuild, vs a Python replay.

    python -m benchmarks.batch_rebuild [--events 10000000] [--partitions 200000]

Phases (each timed separately): generate the bronze history with the same code `zkledger simulate --offline`
runs; a single-threaded Python replay baseline (delta-rs read -> json decode of every partition-state payload ->
`models.fold.apply_partition` in a dict); Spark session start; the rebuild `zkledger rebuild` runs
(`engine.rebuild.rebuild`: decode, both state machines, detectors, every derived Delta table).
With ``--repeat N`` the replay and the rebuild run in N alternating rounds on the same history (this
machine's speed drifts between minutes: each round measures both under the same conditions); the medians count.
Last, the I/O floor: the same chunked bronze reads and the same Delta writes of the rebuild's outputs, with no
compute in between: the throughput no rebuild that reads and writes these tables can pass on this machine;
and Arrow's C++ JSON reader over every partition-state payload, the cheapest general parse of them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
from typing import Any, Literal

from benchmarks.common import (
    Timer,
    add_history_args,
    base_parser,
    build_session,
    machine,
    offline_history,
    ratio,
    run_main,
    scratch,
)
from models.tables import ZNODE_EVENTS

log = logging.getLogger(__name__)

NAME = "batch_rebuild"


def python_replay(lake: Any) -> dict[str, int]:
    """The baseline: one thread, one dict, every event folded in zxid order with the model's fold."""
    from models.fold import apply_partition
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


def load_outputs(lake: Any) -> dict[str, Any]:
    """The rebuild's outputs, read back (untimed) for the I/O floor."""
    from engine.increment import DERIVED_TABLES

    return {table: lake.read_arrow(table) for table in DERIVED_TABLES}


def io_floor(lake: Any, floor_lake: Any, outputs: dict[str, Any], chunk_rows: int) -> int:
    """The rebuild's I/O alone: each chunk's bronze rows read on one thread while the previous chunk's share of
    the outputs is written, the tables concurrently (as ``engine.writes`` does), no decode, fold or detectors.
    Returns the bronze rows read."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    from engine.chunks import ZnodeChunks, zxid_chunks
    from engine.increment import APPEND_TABLES, STATE_TABLES
    from lakehouse.spark_io import write_batch

    version = int(lake.version(ZNODE_EVENTS.name) or 0)
    ranges = zxid_chunks(lake, version, chunk_rows)
    n = len(ranges)
    chunks = ZnodeChunks(None, lake, version, local_max_rows=1 << 62)
    rows = 0
    with ThreadPoolExecutor(max_workers=1) as reader, ThreadPoolExecutor(max_workers=len(outputs)) as writers:
        reading = reader.submit(chunks.read, ranges[0])
        for i in range(n):
            chunk = reading.result()
            assert isinstance(chunk, pa.Table)  # local_max_rows above: every chunk is read locally, into Arrow
            rows += chunk.num_rows
            if i + 1 < n:
                reading = reader.submit(chunks.read, ranges[i + 1])

            def write(table: str, i: int = i) -> None:
                data = outputs[table]
                if table in STATE_TABLES:
                    if i + 1 < n:
                        return  # state tables: written once, by the last chunk
                else:
                    step = -(-data.num_rows // n)
                    data = data.slice(i * step, step)
                floor_lake.ensure(table)
                mode: Literal["append", "overwrite"] = "append" if table in APPEND_TABLES and i else "overwrite"
                write_batch(data, floor_lake, table, "io-floor", i + 1, mode=mode)

            list(writers.map(write, outputs))
    return rows


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
    from lakehouse import Lake

    t = Timer()
    with scratch(args) as work:
        with t.phase("generate"):
            lake = offline_history(work / "lake", args.events, args.partitions)
        with t.phase("spark_start"):
            spark = build_session("bench-batch-rebuild", args.shuffle_partitions)
        from engine.increment import LOCAL_MAX_ROWS
        from engine.rebuild import REBUILD_CHUNK_ROWS, rebuild

        local_max = LOCAL_MAX_ROWS if args.local_max_rows is None else args.local_max_rows
        chunk_rows = REBUILD_CHUNK_ROWS if args.chunk_rows is None else args.chunk_rows
        bronze = lake.row_count(ZNODE_EVENTS.name)
        per_chunk = bronze if chunk_rows <= 0 else min(bronze, chunk_rows)
        chunks = 1 if chunk_rows <= 0 else max(1, -(-bronze // chunk_rows))
        where = f"{'in process' if per_chunk <= local_max else 'through Spark'}, ~{chunks} chunk(s)"
        rounds: list[dict[str, float]] = []
        for i in range(args.repeat):
            with t.phase(f"python_replay.{i}"):
                replay = python_replay(lake)
            with t.phase(f"pipeline.{i}"):
                counts = rebuild(spark, lake, local_max, chunk_rows)
            rounds.append({k: t.wall[f"{k}.{i}"] for k in ("python_replay", "pipeline")})
            log.info("round %d/%d: replay %.1f s, rebuild %.1f s", i + 1, args.repeat, rounds[-1]["python_replay"],
                     rounds[-1]["pipeline"])
        spark.stop()
        outputs = load_outputs(lake)
        shutil.rmtree(work / "floor", ignore_errors=True)  # a kept --workdir: its commits would be skipped
        with t.phase("io_floor"):
            io_floor(lake, Lake(work / "floor", cluster="bench"), outputs, chunk_rows)
        output_rows = {table: data.num_rows for table, data in outputs.items()}
        del outputs
        payloads = state_payloads(lake)
        with t.phase("json_floor"):
            parsed = json_floor(payloads)
        del payloads
    for k in ("python_replay", "pipeline"):  # the medians are what the figures report
        t.wall[k] = statistics.median(r[k] for r in rounds)
    n = args.events
    rate = n / t.wall["pipeline"]
    replay_rate = n / t.wall["python_replay"]
    per_round = [ratio(r["python_replay"], r["pipeline"]) for r in rounds]
    floor_rate = n / t.wall["io_floor"]
    cores = os.cpu_count() or 1
    # the floor's CPU seconds spread perfectly over every core: what no scheduling of this I/O can beat
    floor_bound = n / (t.cpu["io_floor"] / cores)
    return {
        "benchmark": NAME, "machine": machine(),
        "params": {"events": n, "partitions": args.partitions, "shuffle_partitions": args.shuffle_partitions,
                   "local_max_rows": local_max, "rebuild_chunk_rows": chunk_rows, "repeat": args.repeat},
        "pipeline_path": where,
        "wall_s": t.wall, "main_process_cpu_s": t.cpu, "rounds_wall_s": rounds, "rounds_pipeline_vs_replay": per_round,
        "generate_events_per_s": round(n / t.wall["generate"]),
        "pipeline_events_per_s": round(rate), "python_replay_events_per_s": round(replay_rate),
        "pipeline_vs_replay": ratio(rate, replay_rate), "target_events_per_s": 1_000_000,
        "meets_target": rate >= 1_000_000, "rebuild_counts": counts, "replay": replay,
        "io_floor_events_per_s": round(floor_rate), "io_floor_output_rows": output_rows,
        "io_floor_all_cores_events_per_s": round(floor_bound),
        "json_floor_payloads": parsed, "json_floor_cpu_us_per_event": round(t.cpu["json_floor"] / parsed * 1e6, 3),
        "pipeline_vs_io_floor": ratio(rate, floor_rate),
        "summary": [
            f"simulate --offline: {n:,} events / {args.partitions:,} partitions in {t.wall['generate']:.1f} s "
            f"({n / t.wall['generate']:,.0f} events/s)",
            f"spark session start: {t.wall['spark_start']:.1f} s (not counted in pipeline time)",
            f"rebuild pipeline ({where}, {bronze:,} bronze rows, pipeline.local_max_rows {local_max:,}, "
            f"rebuild_chunk_rows {chunk_rows:,}): "
            f"{t.wall['pipeline']:.1f} s = {rate:,.0f} events/s (target 1,000,000)"
            f"{f' (median of {args.repeat} rounds)' if args.repeat > 1 else ''}",
            f"python replay baseline: {t.wall['python_replay']:.1f} s = {replay_rate:,.0f} events/s",
            f"ratio pipeline/replay throughput: {ratio(rate, replay_rate)}x"
            f"{f' (per round: {per_round})' if args.repeat > 1 else ''}",
            f"I/O floor (the same chunked reads and Delta writes of the {sum(output_rows.values()):,} output rows, "
            f"no compute): {t.wall['io_floor']:.1f} s = {floor_rate:,.0f} events/s; the rebuild runs at "
            f"{ratio(rate, floor_rate)}x of it; its {t.cpu['io_floor']:.1f} CPU-s spread perfectly over {cores} cores: "
            f"{floor_bound:,.0f} events/s",
            f"Arrow's C++ JSON reader over the {parsed:,} partition-state payloads alone: {t.wall['json_floor']:.1f} s, "
            f"{t.cpu['json_floor']:.1f} CPU-s = {t.cpu['json_floor'] / parsed * 1e6:.2f} CPU-us per event",
        ],
    }


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    add_history_args(p)
    p.add_argument("--shuffle-partitions", type=int, default=None, help="override spark.sql.shuffle.partitions")
    p.add_argument("--local-max-rows", type=int, default=None,
                   help="pipeline.local_max_rows for the rebuild (default: the shipped setting; 0 = always Spark)")
    p.add_argument("--chunk-rows", type=int, default=None,
                   help="pipeline.rebuild_chunk_rows (default: the shipped setting; 0 = one increment)")
    p.add_argument("--repeat", type=int, default=3,
                   help="alternating rounds of replay and rebuild on the same history; medians count (default 3)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
