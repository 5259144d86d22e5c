"""spark-submit entry point of `zkledger monitor` (the same handler and options).

    spark-submit --py-files dist/zkledger.zip jobs/monitor.py --lake ./lake --cluster local [--available-now]
"""

from __future__ import annotations

from collections.abc import Sequence

from zkledger.cli import run_command


def main(argv: Sequence[str] | None = None) -> int:
    return run_command("monitor", argv)


if __name__ == "__main__":
    raise SystemExit(main())
