"""`zkledger rebuild`: bronze -> metadata events -> state machines -> anomalies, as one deterministic batch."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from models.tables import (
    ANOMALIES,
    DECODE_QUARANTINE,
    PARTITION_TRANSITIONS,
    REPLICA_TRANSITIONS,
)
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rebuild", help="batch: bronze -> silver -> state machines -> anomalies, deterministic",
        description="Recompute every derived table from the bronze tables (znode_events, controller_decisions). "
                    "Running it twice on the same bronze gives identical tables; `monitor` then continues from it.")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    from engine.rebuild import batch_bytes, rebuild
    from engine.stateful import stateful_checkpoint

    counts = rebuild(ctx.spark("zkledger-rebuild"), ctx.lake,
                     stateful_checkpoint(ctx.settings.streaming.checkpoint_root, ctx.lake_root),
                     buckets=ctx.settings.pipeline.buckets,
                     max_bytes_per_trigger=batch_bytes(ctx.settings.pipeline.rebuild_batch_mb),
                     offline_blip=timedelta(milliseconds=ctx.settings.pipeline.offline_blip_ms))
    return (f"rebuilt {counts[PARTITION_TRANSITIONS.name]} partition and {counts[REPLICA_TRANSITIONS.name]} replica "
            f"transitions, {counts[ANOMALIES.name]} anomalies ({counts[DECODE_QUARANTINE.name]} quarantined)")
