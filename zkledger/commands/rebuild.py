"""`zkledger rebuild`: STUB until issue 4 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("rebuild", help="batch: bronze -> silver -> state machines -> anomalies, deterministic", description="Batch: bronze -> silver -> state machines -> anomalies, deterministic.")
    # no options of its own
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("rebuild", issue=4)
