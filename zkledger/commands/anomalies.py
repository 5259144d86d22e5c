"""`zkledger anomalies`: STUB until issue 4 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("anomalies", help="list anomalies", description="List anomalies.")
    parser.add_argument("--since", metavar="TIME", default=None, help="only anomalies at or after this time")
    parser.add_argument("--kind", metavar="KIND", default=None, help="only this anomaly kind")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("anomalies", issue=4)
