"""spark-submit entry point of `zkledger report` (reads with delta-rs; no Spark work, so any launcher fits).

    spark-submit --py-files dist/zkledger.zip jobs/report.py --lake /data/lake --cluster prod-1 --out report.html
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from conf.settings import load_settings
from lakehouse import Lake
from zkledger.report import write_report

log = logging.getLogger(__name__)


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="write the zkledger HTML report")
    p.add_argument("--conf", default=None, help="TOML settings file")
    p.add_argument("--lake", default=None, help="root of the Delta tables")
    p.add_argument("--cluster", default=None, help="cluster name")
    p.add_argument("--out", required=True, help="where to write the report (FILE.html)")
    return p.parse_args(argv)


def _base_toml_on_disk() -> None:
    """conf.settings opens base.toml by path, which fails inside the --py-files zip: copy it out once.

    Workaround until conf.settings reads it with importlib.resources (reported to its owner).
    """
    import pkgutil
    import tempfile

    import conf.settings as cs

    if cs.BASE_TOML.is_file():
        return
    data = pkgutil.get_data("conf", "base.toml")
    if data is None:
        return
    path = Path(tempfile.mkdtemp(prefix="zkledger-conf-")) / "base.toml"
    path.write_bytes(data)
    cs.BASE_TOML = path


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    _base_toml_on_disk()
    settings = load_settings(args.conf, lake=args.lake, cluster=args.cluster)
    path, data = write_report(Lake(settings.lake.root, settings.lake.cluster), args.out)
    log.info("report written to %s (%d anomalies)", path, len(data.rows("anomalies")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
