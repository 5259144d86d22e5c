"""spark-submit entry point for the batch rebuild.

    spark-submit --py-files dist/zkledger.zip jobs/rebuild.py --lake ./lake --cluster local
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from engine.rebuild import rebuild
from jobs._args import job_context, job_parser

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    args = job_parser("Rebuild every derived table from the bronze tables.").parse_args(argv)
    settings, lake = job_context(args)
    from zkledger.spark import build_spark

    counts = rebuild(build_spark(settings, "zkledger-rebuild"), lake, settings.pipeline.local_max_rows,
                     settings.pipeline.rebuild_chunk_rows)
    log.info("rebuilt: %s", counts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
