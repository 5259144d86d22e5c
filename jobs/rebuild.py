"""spark-submit entry point of `zkledger rebuild` (the same handler and options).

    spark-submit --py-files dist/zkledger.zip jobs/rebuild.py --lake ./lake --cluster local
"""

from __future__ import annotations

from collections.abc import Sequence

from zkledger.cli import run_command


def main(argv: Sequence[str] | None = None) -> int:
    return run_command("rebuild", argv)


if __name__ == "__main__":
    raise SystemExit(main())
