"""spark-submit entry point for the streaming monitor.

    spark-submit --py-files dist/zkledger.zip jobs/monitor.py --lake ./lake --cluster local [--available-now] [--engine stateful]
"""

from __future__ import annotations

from collections.abc import Sequence

from conf.settings import PipelineEngine
from engine.monitor import drain_monitor, monitor_checkpoint, start_monitor
from engine.stateful import start_stateful_query, stateful_checkpoint
from jobs._args import job_context, job_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("Run the pipeline as a Structured Streaming query (what `zkledger monitor` runs).")
    parser.add_argument("--trigger", metavar="SECONDS", type=float, default=None,
                        help="micro-batch interval (default: [streaming] trigger_seconds in the settings)")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--webhook", metavar="URL", default=None,
                        help="also POST each new anomaly as JSON to URL (default: settings monitor.webhook)")
    parser.add_argument("--quality", action="store_true",
                        help="run the quality suites on each micro-batch (default: settings monitor.quality_each_batch)")
    parser.add_argument("--engine", choices=tuple(PipelineEngine), default=None,
                        help="what runs it (default: settings pipeline.engine)")
    args = parser.parse_args(argv)
    settings, lake = job_context(args)
    from zkledger.alerts import AnomalyAlerter
    from zkledger.spark import build_spark

    alerter = AnomalyAlerter(args.webhook or settings.monitor.webhook or None)
    quality = args.quality or settings.monitor.quality_each_batch
    spark, checkpoint = build_spark(settings, "zkledger-monitor"), monitor_checkpoint(settings.streaming.checkpoint_root, settings.lake.root)
    try:
        if PipelineEngine(args.engine or settings.pipeline.engine) is PipelineEngine.STATEFUL:
            trigger = args.trigger if args.trigger is not None else settings.streaming.trigger_seconds
            start_stateful_query(spark, lake, stateful_checkpoint(settings.streaming.checkpoint_root, settings.lake.root),
                                 buckets=settings.pipeline.buckets, available_now=args.available_now,
                                 processing_time=None if args.available_now else f"{trigger} seconds",
                                 max_files_per_trigger=settings.streaming.max_files_per_trigger,
                                 publish=alerter.publish, quality=quality,
                                 maintain_every_s=3600 * settings.monitor.maintain_every_hours).awaitTermination()
        elif args.available_now:
            drain_monitor(spark, lake, checkpoint, publish=alerter.publish, quality=quality,
                          local_max_rows=settings.pipeline.local_max_rows,
                          max_files_per_trigger=settings.streaming.max_files_per_trigger)
        else:
            trigger = args.trigger if args.trigger is not None else settings.streaming.trigger_seconds
            start_monitor(spark, lake, checkpoint, trigger_seconds=trigger, publish=alerter.publish, quality=quality,
                          local_max_rows=settings.pipeline.local_max_rows,
                          max_files_per_trigger=settings.streaming.max_files_per_trigger,
                          maintain_every_s=3600 * settings.monitor.maintain_every_hours).awaitTermination()
    finally:
        alerter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
