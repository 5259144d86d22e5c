"""`zkledger rebuild`: bronze -> metadata events -> state machines -> anomalies, as one deterministic batch."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rebuild", help="batch: bronze -> silver -> state machines -> anomalies, deterministic",
        description="Recompute every derived table from the bronze tables (znode_events, controller_decisions). "
                    "Running it twice on the same bronze gives identical tables.")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    from engine.rebuild import rebuild

    counts = rebuild(ctx.spark("zkledger-rebuild"), ctx.lake, ctx.settings.pipeline.local_max_rows,
                     ctx.settings.pipeline.rebuild_chunk_rows)
    return (f"rebuilt {counts['metadata_events']} metadata events, {counts['partition_transitions']} partition and "
            f"{counts['replica_transitions']} replica transitions, {counts['anomalies']} anomalies "
            f"({counts['decode_quarantine']} quarantined)")
