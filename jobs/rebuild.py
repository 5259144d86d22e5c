"""spark-submit entry point for the batch rebuild.

    spark-submit --py-files dist/zkledger.zip jobs/rebuild.py --lake ./lake --cluster local
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from engine.rebuild import rebuild
from engine.stateful import stateful_checkpoint
from jobs._args import job_context, job_parser

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("Rebuild every derived table from the bronze tables.")
    args = parser.parse_args(argv)
    settings, lake = job_context(args)
    from services.spark_session import build_spark

    spark = build_spark(settings, "zkledger-rebuild")
    counts = rebuild(spark, lake, stateful_checkpoint(settings.streaming.checkpoint_root, settings.lake.root),
                     buckets=settings.pipeline.buckets)
    log.info("rebuilt: %s", counts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
