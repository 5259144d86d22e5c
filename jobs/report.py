"""spark-submit entry point of `zkledger report` (reads with delta-rs; no Spark work, so any launcher fits).

    spark-submit --py-files dist/zkledger.zip jobs/report.py --lake /data/lake --cluster prod-1 --out report.html
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from conf.settings import load_settings
from jobs._args import job_parser
from lakehouse import Lake
from models.tables import ANOMALIES
from services.report import write_report

log = logging.getLogger(__name__)


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = job_parser("Write the zkledger HTML report.")
    p.add_argument("--out", required=True, help="where to write the report (FILE.html)")
    return p.parse_args(argv)



def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    settings = load_settings(args.conf, lake=args.lake, cluster=args.cluster)
    path, data = write_report(Lake(settings.lake.root, settings.lake.cluster), args.out)
    log.info("report written to %s (%d anomalies)", path, len(data.rows(ANOMALIES.name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
