"""`zkledger monitor`: STUB until issue 4 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("monitor", help="run the pipeline as Spark Structured Streaming queries with checkpoints", description="Run the pipeline as Spark Structured Streaming queries with checkpoints.")
    parser.add_argument("--trigger", metavar="SECONDS", type=float, default=None, help="micro-batch interval")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("monitor", issue=4)
