"""`zkledger simulate`: STUB until issue 3 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("simulate", help="drive a simulated ZK-mode Kafka cluster against a real ZooKeeper (or write bronze offline)", description="Drive a simulated ZK-mode Kafka cluster against a real ZooKeeper (or write bronze offline).")
    parser.add_argument("--zk", metavar="HOST:PORT", help="ZooKeeper to write to (required unless --offline)")
    parser.add_argument("--scenario", metavar="NAME|FILE", default=None, help="scripted story to play")
    parser.add_argument("--kafka-version", metavar="V", default=None, help="Kafka version whose ZK layout to write")
    parser.add_argument("--log-dir", metavar="DIR", default=None, help="where to write controller/state-change logs")
    parser.add_argument("--seed", type=int, default=None, help="random seed")
    parser.add_argument("--offline", action="store_true", help="write a large synthetic history to the bronze tables")
    parser.add_argument("--events", type=int, default=None, help="--offline: number of events")
    parser.add_argument("--partitions", type=int, default=None, help="--offline: number of partitions")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("simulate", issue=3)
