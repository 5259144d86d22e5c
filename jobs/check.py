"""spark-submit entry point of `zkledger check`.

    spark-submit --master spark://HOST:7077 --py-files dist/zkledger.zip jobs/check.py --lake /data/lake \
        --cluster prod-1 [--table anomalies] [--kafka-version 2.8]

Exit code 1 when a suite fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from conf.settings import load_settings
from jobs._args import job_parser
from lakehouse import Lake
from services.quality import run_quality
from services.spark_session import build_spark

log = logging.getLogger(__name__)


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = job_parser("Great Expectations suites over the lake's tables")
    p.add_argument("--table", action="append", default=None, help="check only this table (repeatable)")
    p.add_argument("--kafka-version", default=None, help="Kafka version for replica legality")
    return p.parse_args(argv)




def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    settings = load_settings(args.conf, lake=args.lake, cluster=args.cluster)
    spark = build_spark(settings, "zkledger-check")
    log.info("check on master %s", spark.sparkContext.master)
    lake = Lake(settings.lake.root, settings.lake.cluster)
    report = run_quality(spark, lake, tables=args.table, kafka_version=args.kafka_version)
    for suite in report.suites:
        log.info("%s", suite.line())
    log.info("%s", report.summary())
    spark.stop()
    return 0 if report.success else 1


if __name__ == "__main__":
    sys.exit(main())
