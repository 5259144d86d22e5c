"""spark-submit entry point for the streaming monitor.

    spark-submit --py-files dist/zkledger.zip jobs/monitor.py --lake ./lake --cluster local [--available-now]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from jobs._common import drain_monitor, job_args, job_context, start_monitor


def main(argv: Sequence[str] | None = None) -> int:
    args = job_args(argv, "Run the pipeline as a Structured Streaming query.")
    settings, lake = job_context(args)
    from zkledger.alerts import AnomalyAlerter
    from zkledger.spark import build_spark

    alerter = AnomalyAlerter(settings.monitor.webhook or None)
    root = settings.streaming.checkpoint_root or os.path.join(settings.lake.root, "_checkpoints")
    spark, checkpoint = build_spark(settings, "zkledger-monitor"), os.path.join(root, "monitor")
    if args.available_now:
        drain_monitor(spark, lake, checkpoint, publish=alerter.publish, local_max_rows=settings.pipeline.local_max_rows)
    else:
        start_monitor(spark, lake, checkpoint, trigger_seconds=args.trigger or settings.streaming.trigger_seconds,
                      publish=alerter.publish, local_max_rows=settings.pipeline.local_max_rows).awaitTermination()
    alerter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
