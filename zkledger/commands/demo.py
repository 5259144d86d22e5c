"""`zkledger demo`: STUB until issue 5 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="run the end-to-end story on an embedded ZooKeeper and print the anomalies", description="Run the end-to-end story on an embedded ZooKeeper and print the anomalies.")
    parser.add_argument("--port", type=int, default=None, help="embedded ZooKeeper port (default: a free port)")
    parser.add_argument("--scenario", default=None, help="scenario name or JSON file (default: settings demo.scenario)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: settings demo.seed)")
    parser.add_argument("--report", metavar="FILE.html", default=None, help="where to write the HTML report")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("demo", issue=5)
