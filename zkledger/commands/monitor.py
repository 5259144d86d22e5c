"""`zkledger monitor`: the pipeline's Spark query on its checkpoint, a micro-batch per trigger."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "monitor", help="run the pipeline as Spark Structured Streaming queries with checkpoints",
        description="Stream znode_events and controller_decisions through the same query as `rebuild`, "
                    "printing each new anomaly as one line when its micro-batch commits. It continues on the "
                    "checkpoint `rebuild` left (or its own), where the last run ended.")
    parser.add_argument("--trigger", metavar="SECONDS", type=float, default=None,
                        help="micro-batch interval (default: [streaming] trigger_seconds in the settings, 1 s)")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--webhook", metavar="URL", default=None,
                        help="also POST each new anomaly as JSON to URL (retried, never blocks the stream; "
                             "default: settings monitor.webhook)")
    parser.add_argument("--quality", action="store_true",
                        help="run the quality suites on each micro-batch (default: settings monitor.quality_each_batch)")
    parser.add_argument("--maintain-every", metavar="HOURS", type=float, default=None,
                        help="run `zkledger maintain` between micro-batches this often "
                             "(default: settings monitor.maintain_every_hours; 0 = off)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    from engine.monitor import start_monitor
    from engine.stateful import stateful_checkpoint
    from services.alerts import AnomalyAlerter
    from services.errors import UserError

    url = args.webhook or ctx.settings.monitor.webhook or None
    try:
        alerter = AnomalyAlerter(url)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    quality = args.quality or ctx.settings.monitor.quality_each_batch
    trigger = args.trigger if args.trigger is not None else ctx.settings.streaming.trigger_seconds
    maintain_hours = args.maintain_every if args.maintain_every is not None else ctx.settings.monitor.maintain_every_hours
    if maintain_hours < 0:
        raise UserError("--maintain-every must be >= 0 hours")
    query = start_monitor(ctx.spark("zkledger-monitor"), ctx.lake,
                          stateful_checkpoint(ctx.settings.streaming.checkpoint_root, ctx.lake_root),
                          trigger_seconds=trigger, available_now=args.available_now,
                          buckets=ctx.settings.pipeline.buckets, publish=alerter.publish, quality=quality,
                          max_files_per_trigger=ctx.settings.streaming.max_files_per_trigger,
                          maintain_every_s=3600 * maintain_hours)
    _until_stopped(query, alerter)
    if args.available_now:
        return f"monitor caught up and stopped: {alerter.count} anomalies published"
    return f"monitor stopped: {alerter.count} anomalies published"


def _until_stopped(query: Any, alerter: Any) -> None:
    """Wait for the streaming query (Ctrl-C stops it), then let the alerter deliver what it holds."""
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        alerter.close()
