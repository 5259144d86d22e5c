"""`zkledger anomalies`: list what the pipeline found (reads the anomalies table with delta-rs, no Spark)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from models.anomalies import AnomalyKind, describe_group, findings, group_findings
from models.tables import ANOMALIES
from services.errors import UserError
from services.sanitize import terminal_safe
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("anomalies", help="list anomalies", description="List anomalies.")
    parser.add_argument("--since", metavar="TIME", default=None, help="only anomalies at or after this time (ISO 8601; naive = UTC)")
    parser.add_argument("--kind", metavar="KIND", default=None, help="only this anomaly kind")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="table: one line per group of like findings (an episode's start and end as one); "
                             "json: one row per anomaly")
    parser.set_defaults(handler=run)


def parse_time(text: str) -> datetime:
    """ISO 8601; a naive time is UTC."""
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"not a time: {text!r} (expected ISO 8601, e.g. 2024-01-01T00:00:00Z)") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def select(rows: list[dict[str, Any]], since: datetime | None, kind: str | None) -> list[dict[str, Any]]:
    out = [r for r in rows if (kind is None or r["kind"] == kind)
           and (since is None or (r["event_time"] is not None and r["event_time"] >= since))]
    return sorted(out, key=lambda r: (r["zxid"] is None, r["zxid"] or 0, r["event_time"] or datetime.min.replace(tzinfo=UTC), r["anomaly_id"]))


def run(args: argparse.Namespace, ctx: Context) -> str:
    if args.kind is not None and args.kind not in AnomalyKind.__members__:
        raise UserError(f"unknown kind {args.kind!r}; one of: {', '.join(AnomalyKind.__members__)}")
    since = parse_time(args.since) if args.since else None
    ctx.require_table(ANOMALIES.name)
    rows = select(ctx.lake.read_arrow(ANOMALIES.name).to_pylist(), since, args.kind)
    if args.format == "json":
        for r in rows:
            print(json.dumps(r, default=str, sort_keys=True))
        return f"{len(rows)} anomalies"
    groups = group_findings(rows)
    for group in groups:
        print(terminal_safe(describe_group(group)))  # details come from logs and znodes: no raw ESC/BEL
    if len(groups) == len(rows):
        return f"{len(rows)} anomalies"
    return f"{len(rows)} anomalies ({len(findings(rows))} findings, like ones grouped: {len(groups)} lines)"
