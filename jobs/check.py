"""spark-submit entry point of `zkledger check` (the same handler and options; exit code 1 when a suite fails).

    spark-submit --master spark://HOST:7077 --py-files dist/zkledger.zip jobs/check.py --lake /data/lake \
        --cluster prod-1 [--table anomalies] [--kafka-version 2.8]
"""

from __future__ import annotations

from collections.abc import Sequence

from zkledger.cli import run_command


def main(argv: Sequence[str] | None = None) -> int:
    return run_command("check", argv)


if __name__ == "__main__":
    raise SystemExit(main())
