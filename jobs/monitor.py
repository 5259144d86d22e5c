"""spark-submit entry point for the streaming monitor.

    spark-submit --py-files dist/zkledger.zip jobs/monitor.py --lake ./lake --cluster local [--available-now]
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.monitor import start_monitor
from engine.stateful import stateful_checkpoint
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
    args = parser.parse_args(argv)
    settings, lake = job_context(args)
    from services.alerts import AnomalyAlerter
    from services.spark_session import build_spark

    alerter = AnomalyAlerter(args.webhook or settings.monitor.webhook or None)
    quality = args.quality or settings.monitor.quality_each_batch
    trigger = args.trigger if args.trigger is not None else settings.streaming.trigger_seconds
    try:
        start_monitor(build_spark(settings, "zkledger-monitor"), lake,
                      stateful_checkpoint(settings.streaming.checkpoint_root, settings.lake.root),
                      trigger_seconds=trigger, available_now=args.available_now, buckets=settings.pipeline.buckets,
                      publish=alerter.publish, quality=quality,
                      max_files_per_trigger=settings.streaming.max_files_per_trigger,
                      maintain_every_s=3600 * settings.monitor.maintain_every_hours).awaitTermination()
    finally:
        alerter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
