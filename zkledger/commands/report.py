"""`zkledger report --out FILE.html`: one self-contained HTML report (no Spark needed)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from models.tables import ANOMALIES, CONTROLLER_TENURE
from services.errors import UserError
from services.report import write_report
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write the HTML report with timelines and plots",
        description="Write ONE self-contained HTML file (inline CSS and SVG, no JavaScript): controller tenure "
        "timeline with overlaps in red, leader/ISR/state timelines of partitions with anomalies, counts over "
        "time and the anomaly list with evidence. Reads the tables with delta-rs.",
    )
    parser.add_argument("--out", metavar="FILE.html", required=True, help="where to write the report")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    if os.path.isdir(args.out):
        raise UserError(f"--out {args.out}: is a directory; give the report's file name (e.g. {args.out}/report.html)")
    ctx.require_table(ANOMALIES.name)
    path, data = write_report(ctx.lake, args.out)
    n = len(data.rows(ANOMALIES.name))
    return f"report written to {path} ({n} anomalies, {len(data.rows(CONTROLLER_TENURE.name))} controller terms)"
