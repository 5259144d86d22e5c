"""`zkledger report`: STUB until issue 5 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("report", help="write the HTML report with timelines and plots", description="Write the HTML report with timelines and plots.")
    parser.add_argument("--out", metavar="FILE.html", required=True, help="where to write the report")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("report", issue=5)
