"""`zkledger monitor`: the rebuild pipeline as one Structured Streaming query (foreachBatch, checkpoints)."""

from __future__ import annotations

import argparse
from typing import Any

from conf.settings import PipelineEngine


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "monitor", help="run the pipeline as Spark Structured Streaming queries with checkpoints",
        description="Stream znode_events and controller_decisions through the same increment as `rebuild`, "
                    "printing each new anomaly as one line when its micro-batch commits. A new checkpoint on a "
                    "rebuilt lake continues where the rebuild ended; an existing one continues from itself.")
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
    parser.add_argument("--engine", choices=tuple(PipelineEngine), default=None,
                        help="what runs it (default: settings pipeline.engine): in-process increments, or the Spark "
                             "stateful streaming query (its own checkpoint)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    from engine.monitor import drain_monitor, monitor_checkpoint, start_monitor
    from zkledger.alerts import AnomalyAlerter
    from zkledger.errors import UserError

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
    if PipelineEngine(args.engine or ctx.settings.pipeline.engine) is PipelineEngine.STATEFUL:
        return _run_stateful(args, ctx, alerter, trigger, quality, 3600 * maintain_hours)
    checkpoint = monitor_checkpoint(ctx.settings.streaming.checkpoint_root, ctx.lake_root)
    if args.available_now:
        try:
            drain_monitor(ctx.spark("zkledger-monitor"), ctx.lake, checkpoint, publish=alerter.publish, quality=quality,
                          local_max_rows=ctx.settings.pipeline.local_max_rows,
                          max_files_per_trigger=ctx.settings.streaming.max_files_per_trigger)
        finally:
            alerter.close()
        return f"monitor caught up and stopped: {alerter.count} anomalies published"
    query = start_monitor(ctx.spark("zkledger-monitor"), ctx.lake, checkpoint, trigger_seconds=trigger,
                          publish=alerter.publish, quality=quality,
                          local_max_rows=ctx.settings.pipeline.local_max_rows,
                          max_files_per_trigger=ctx.settings.streaming.max_files_per_trigger,
                          maintain_every_s=3600 * maintain_hours)
    _until_stopped(query, alerter)
    return f"monitor stopped: {alerter.count} anomalies published"


def _run_stateful(args: argparse.Namespace, ctx: Any, alerter: Any, trigger: float, quality: bool,
                   maintain_every_s: float) -> str:
    from engine.stateful import start_stateful_query, stateful_checkpoint

    query = start_stateful_query(
        ctx.spark("zkledger-monitor"), ctx.lake,
        stateful_checkpoint(ctx.settings.streaming.checkpoint_root, ctx.lake_root), buckets=ctx.settings.pipeline.buckets,
        available_now=args.available_now, processing_time=None if args.available_now else f"{trigger} seconds",
        max_files_per_trigger=ctx.settings.streaming.max_files_per_trigger, publish=alerter.publish, quality=quality,
        maintain_every_s=maintain_every_s)
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
