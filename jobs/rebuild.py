"""spark-submit entry point for the batch rebuild.

    spark-submit --py-files dist/zkledger.zip jobs/rebuild.py --lake ./lake --cluster local [--engine stateful]
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from conf.settings import PipelineEngine
from engine.rebuild import rebuild
from engine.stateful import stateful_checkpoint, stateful_rebuild
from jobs._args import job_context, job_parser

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("Rebuild every derived table from the bronze tables.")
    parser.add_argument("--engine", choices=tuple(PipelineEngine), default=None,
                        help="what runs it (default: settings pipeline.engine)")
    args = parser.parse_args(argv)
    settings, lake = job_context(args)
    from zkledger.spark import build_spark

    spark = build_spark(settings, "zkledger-rebuild")
    if PipelineEngine(args.engine or settings.pipeline.engine) is PipelineEngine.STATEFUL:
        counts = stateful_rebuild(spark, lake, stateful_checkpoint(settings.streaming.checkpoint_root, settings.lake.root),
                                  buckets=settings.pipeline.buckets)
    else:
        counts = rebuild(spark, lake, settings.pipeline.local_max_rows, settings.pipeline.rebuild_chunk_rows)
    log.info("rebuilt: %s", counts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
