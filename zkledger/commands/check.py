"""`zkledger check`: STUB until issue 5 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("check", help="run the Great Expectations suites over the tables (exit 1 when a suite fails)", description="Run the Great Expectations suites over the tables (exit 1 when a suite fails).")
    # no options of its own
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("check", issue=5)
