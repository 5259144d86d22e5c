"""`zkledger maintain`: compact, cluster on zxid, checkpoint and VACUUM the lake's tables (delta-rs, no JVM)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from services.errors import UserError
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "maintain", help="compact, checkpoint and vacuum the Delta tables",
        description="For each table: OPTIMIZE (compaction of small files; Z-order on zxid when the files' zxid "
                    "ranges overlap), a checkpoint, then VACUUM of the files no version within the retention needs "
                    "(including orphans a killed writer left). Files a streaming query (the monitor) has still to "
                    "read are kept whatever the retention. Runs with delta-rs: no Spark.")
    parser.add_argument("tables", nargs="*", metavar="TABLE",
                        help="tables to maintain (default: every table of the lake)")
    parser.add_argument("--retention-hours", metavar="H", type=int, default=None,
                        help="VACUUM keeps files older versions need for this long (default 168: Delta's 7 days)")
    parser.add_argument("--allow-short-retention", action="store_true",
                        help="accept a retention below 168 h: time travel and slow readers of older versions "
                             "lose their files")
    zorder = parser.add_mutually_exclusive_group()
    zorder.add_argument("--zorder", dest="zorder", action="store_true", default=None,
                        help="Z-order every table with a zxid column, even when its files do not overlap")
    zorder.add_argument("--no-zorder", dest="zorder", action="store_false", help="compaction only")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> tuple[str, int]:
    from engine.stateful import stateful_checkpoint
    from lakehouse.maintenance import DEFAULT_RETENTION_HOURS, TableReport, check_retention, maintain_tables
    from models.tables import ALL_TABLES

    retention = DEFAULT_RETENTION_HOURS if args.retention_hours is None else args.retention_hours
    try:
        check_retention(retention, args.allow_short_retention)
    except ValueError as exc:
        raise UserError(f"{exc} (--allow-short-retention)") from None
    if retention < DEFAULT_RETENTION_HOURS:
        print(f"warning: VACUUM retention {retention} h is below Delta's default of {DEFAULT_RETENTION_HOURS} h: "
              f"versions older than that can no longer be read", file=sys.stderr, flush=True)
    unknown = [t for t in args.tables if t not in ALL_TABLES]
    if unknown:
        raise UserError(f"unknown table(s) {', '.join(unknown)} (known: {', '.join(sorted(ALL_TABLES))})")
    missing = [t for t in args.tables if not ctx.lake.exists(t)]
    if missing:
        raise UserError(f"no table {', '.join(missing)} under {ctx.lake_root}")

    def progress(report: TableReport) -> None:
        print(report.line(), file=sys.stderr, flush=True)

    checkpoint = stateful_checkpoint(ctx.settings.streaming.checkpoint_root, ctx.lake_root)
    report = maintain_tables(ctx.lake, args.tables or None, retention_hours=retention,
                             allow_short_retention=args.allow_short_retention, checkpoint_dirs=[checkpoint],
                             zorder=args.zorder, on_table=progress)
    return report.summary(), 1 if any(t.refused for t in report.tables) else 0
