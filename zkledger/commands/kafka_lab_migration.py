"""`zkledger kafka-lab migration`: a real ZooKeeper -> KRaft migration of Kafka 3.9 (`kafkalab.migration`) with
`collect txnlog`, `collect logs` and `collect kraft` writing into the command's lake, played as
`kafkalab.migration_story` tells it: a clean dual-write (a topic created, one deleted, a partition moved), the
brokers rolled to KRaft, then a plain ZooKeeper client writing a topic's config behind KRaft's back. It stops
there, before finalizing, and prints what `zkledger migration` says of it (the verdict: not safe to finalize)
and writes the HTML report with the migration's section.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from services.errors import UserError
from zkledger.context import Context

LAB_DIR = "migration-3.9"
"""The lab's folder under `--dir` (default `<lake>/_kafka_lab`)."""
REPORT_FILE = "zkledger-report.html"
"""The report's name in the lake's folder, as `kafka-lab run` writes it."""


def register_migration(sub: Any) -> None:
    """The `migration` action of `kafka-lab` (its subparsers)."""
    text = "a real Kafka 3.9 ZooKeeper -> KRaft migration with the collectors on, judged by `zkledger migration`"
    p = sub.add_parser(
        "migration", help=text,
        description=text + ". Three ZooKeeper-mode brokers and a KRaft controller started in migration mode; the "
        "brokers rolled into migration mode until the controller has loaded ZooKeeper's metadata and dual-writes; "
        "a topic created, one deleted and a partition moved during dual-write; the brokers rolled to KRaft; then "
        "a plain ZooKeeper client sets a topic's config (an out-of-band write KRaft never sees). Stops before "
        "finalizing, prints the phases, the divergences, the findings and the verdict, and writes the HTML "
        f"report to <lake>/{REPORT_FILE}. About two minutes; needs `make jars`.")
    p.add_argument("--dir", default=None, metavar="DIR",
                   help=f"where the lab lives (default <lake>/_kafka_lab; the lab is DIR/{LAB_DIR})")


def run_migration(args: argparse.Namespace, ctx: Context) -> str:
    from kafkalab.migration import MigrationLab
    from kafkalab.migration_story import (
        PLANTED_TOPIC,
        brokers_to_kraft,
        dual_write_actions,
        judge,
        plant_config_write,
    )
    from services.report import write_report
    from zkledger.commands.migration import judge_lake, print_text

    base = Path(args.dir) if args.dir else Path(ctx.lake_root) / "_kafka_lab"
    work = base / LAB_DIR
    if work.exists():
        raise UserError(f"{work} holds an earlier run; remove it or pass another --dir")
    ctx.check_lake_root()
    lab = MigrationLab(work, cluster_name=ctx.cluster, lake_root=Path(ctx.lake_root).absolute(), out=sys.stderr)
    with lab:
        brokers_to_kraft(lab, dual_write_actions)
        planted = plant_config_write(lab)
        print(f"[migration {time.strftime('%H:%M:%S')}] a plain ZooKeeper client set /config/topics/{PLANTED_TOPIC} (zxid {planted:#x})",
              file=sys.stderr, flush=True)
        judge(lab, settled_after_zxid=planted)  # until the collectors have the next settled point
    # the collectors have stopped (after a settle): judged again on everything they wrote
    judged = judge_lake(ctx.lake)
    print_text(ctx.cluster, judged.report, judged.verdict, judged.limits)
    path = write_report(ctx.lake, os.path.join(ctx.lake_root, REPORT_FILE), migration=judged.report)[0]
    print(f"\nreport: {path}")
    report, verdict = judged.report, judged.verdict
    diverging = sum(1 for c in report.checks if c.divergences)
    return (f"kafka-lab migration: Kafka 3.9 stopped in phase {report.phase} before finalizing; "
            f"{len(report.checks)} settled points compared, {diverging} with divergences, {len(report.findings)} "
            f"findings; " + ("safe to finalize" if verdict.safe else
                             f"not safe to finalize ({', '.join(str(b.reason) for b in verdict.blockers)})")
            + f"; lake {ctx.lake_root} (cluster {ctx.cluster})")
