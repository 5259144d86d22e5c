"""spark-submit entry point of `zkledger report` (the same handler and options; it reads with delta-rs, so any
launcher fits).

    spark-submit --py-files dist/zkledger.zip jobs/report.py --lake /data/lake --cluster prod-1 --out report.html
"""

from __future__ import annotations

from collections.abc import Sequence

from zkledger.cli import run_command


def main(argv: Sequence[str] | None = None) -> int:
    return run_command("report", argv)


if __name__ == "__main__":
    raise SystemExit(main())
