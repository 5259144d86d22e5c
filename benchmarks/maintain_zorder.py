"""zxid-range reads of a bronze table after compaction alone and after compaction + Z-order on zxid.

Two collectors append to ``znode_events`` at once: a live one at the top of the zxid range and a backfill from
the bottom (a txnlog backfill next to a watch collector), commit by commit. The same table is then maintained
three ways on copies: nothing, ``maintain_table(zorder=False)`` (compaction) and ``maintain_table(zorder=True)``;
each copy answers the same random zxid-range reads (files pruned by their statistics, then row groups).
The baseline (in the same run) is the unmaintained table.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable

from benchmarks.common import Timer, base_parser, machine, ratio, run_main, scratch
from models.tables import ZNODE_EVENTS

NAME = "maintain_zorder"


def _batch(start: int, n: int, source: str, seq: int) -> pa.Table:
    zxids = pa.array(range(start, start + n), pa.int64())
    now = datetime.now(UTC)
    return pa.table({
        "zxid": zxids, "path": pa.array([f"/brokers/topics/t{z % 997}" for z in range(start, start + n)]),
        "op": pa.array(["SET"] * n), "data": pa.array([b"x" * 64] * n, pa.binary()), "source": pa.array([source] * n),
        "observed_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        "event_id": pa.array([f"{source}-{seq}-{i}" for i in range(n)]),
    })


def _reads(path: str, ranges: list[tuple[int, int]]) -> dict[str, Any]:
    dt = DeltaTable(path)
    actions = pa.table(dt.get_add_actions(flatten=True))
    spans = list(zip(actions.column("min.zxid").to_pylist(), actions.column("max.zxid").to_pylist(), strict=True))
    dataset = dt.to_pyarrow_dataset()
    touched, times, rows = [], [], 0
    for lo, hi in ranges:
        touched.append(sum(1 for a, b in spans if a <= hi and b >= lo))
        t0 = time.perf_counter()
        rows += dataset.to_table(columns=["zxid", "path"], filter=(ds.field("zxid") >= lo) & (ds.field("zxid") <= hi)).num_rows
        times.append(time.perf_counter() - t0)
    return {"files": len(spans), "files_touched_mean": round(statistics.mean(touched), 2),
            "read_ms_median": round(1000 * statistics.median(times), 2), "rows": rows}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from lakehouse import Lake
    from lakehouse.maintenance import maintain_table, zxid_depth

    timer = Timer()
    with scratch(args) as work:
        lake = Lake(work / "base", cluster="bench", checkpoint_interval=0)
        half = args.rows // 2
        commits = max(1, half // args.batch)
        with timer.phase("append"):
            for seq in range(commits):
                lake.append(ZNODE_EVENTS.name, _batch(seq * args.batch, args.batch, "txnlog", seq), "backfill", seq)
                lake.append(ZNODE_EVENTS.name, _batch(half + seq * args.batch, args.batch, "watch", seq), "live", seq)
        rng = random.Random(7)
        width = max(1, int(2 * half * args.range_fraction))
        ranges = [(lo, lo + width - 1) for lo in (rng.randrange(0, 2 * half - width) for _ in range(args.reads))]
        variants: dict[str, dict[str, Any]] = {}
        for name, zorder in (("none", None), ("compact", False), ("zorder", True)):
            root = work / name
            shutil.copytree(work / "base", root)
            copy = Lake(root, cluster="bench")
            if zorder is not None:
                with timer.phase(f"maintain_{name}"):
                    report = maintain_table(copy, ZNODE_EVENTS.name, zorder=zorder, target_size=args.target_mb << 20)
            result = _reads(copy.table_path(ZNODE_EVENTS.name), ranges)
            result["zxid_depth"] = zxid_depth(DeltaTable(copy.table_path(ZNODE_EVENTS.name)))
            if zorder is not None:
                result["maintain_s"] = timer.wall[f"maintain_{name}"]
                result["rewritten"] = report.files_compacted
            variants[name] = result
    none, compact, zorder_ = variants["none"], variants["compact"], variants["zorder"]
    return {
        "machine": machine(),
        "params": {"rows": args.rows, "batch": args.batch, "target_mb": args.target_mb, "reads": args.reads,
                   "range_fraction": args.range_fraction},
        "variants": variants, "phases": timer.wall,
        "summary": [
            f"{args.rows:,} rows in {2 * commits} commits from two interleaved writers; {args.reads} reads of "
            f"{args.range_fraction:.1%} of the zxid range each",
            f"none:    {none['files']} files, depth {none['zxid_depth']:.2f}, {none['files_touched_mean']} files/read, "
            f"median {none['read_ms_median']} ms",
            f"compact: {compact['files']} files, depth {compact['zxid_depth']:.2f}, "
            f"{compact['files_touched_mean']} files/read, median {compact['read_ms_median']} ms "
            f"(maintenance {compact['maintain_s']} s)",
            f"zorder:  {zorder_['files']} files, depth {zorder_['zxid_depth']:.2f}, "
            f"{zorder_['files_touched_mean']} files/read, median {zorder_['read_ms_median']} ms "
            f"(maintenance {zorder_['maintain_s']} s)",
            f"read speedup vs unmaintained: compact {ratio(none['read_ms_median'], compact['read_ms_median'])}x, "
            f"zorder {ratio(none['read_ms_median'], zorder_['read_ms_median'])}x",
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(NAME, __doc__ or "")
    parser.add_argument("--rows", type=int, default=2_000_000, help="bronze rows (half per writer)")
    parser.add_argument("--batch", type=int, default=5_000, help="rows per commit")
    parser.add_argument("--target-mb", type=int, default=16, help="OPTIMIZE target file size in MiB")
    parser.add_argument("--reads", type=int, default=50, help="zxid-range reads per variant")
    parser.add_argument("--range-fraction", type=float, default=0.01, help="share of the zxid range one read covers")
    return run_main(NAME, parser, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
