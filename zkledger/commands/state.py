"""`zkledger state`: STUB until issue 4 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("state", help="the cluster's metadata as of a point in time (time travel)", description="The cluster's metadata as of a point in time (time travel).")
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", metavar="TIME", help="ISO-8601 UTC time")
    when.add_argument("--zxid", metavar="N", type=int, help="ZooKeeper transaction id")
    parser.add_argument("--topic", metavar="T", default=None, help="only this topic")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("state", issue=4)
