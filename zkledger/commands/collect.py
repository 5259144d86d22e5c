"""`zkledger collect`: STUB until issue 3 lands; the owner replaces this whole file."""

from __future__ import annotations

import argparse
from typing import Any

from zkledger.errors import NotImplementedYet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("collect", help="collect ZooKeeper changes, transaction logs or Kafka controller logs into the lake", description="Collect ZooKeeper changes, transaction logs or Kafka controller logs into the lake.")
    sub = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)
    zk = sub.add_parser("zk", help="live watch collector -> znode_events")
    zk.add_argument("--zk", metavar="HOST:PORT", required=True, help="ZooKeeper to watch")
    zk.add_argument("--chroot", metavar="PATH", default=None, help="subtree to watch (e.g. /kafka)")
    zk.add_argument("--duration", metavar="S", type=float, default=None, help="stop after S seconds")
    txn = sub.add_parser("txnlog", help="ZooKeeper transaction log reader -> znode_events")
    txn.add_argument("--dir", metavar="ZK_DATA_DIR", required=True, help="ZooKeeper data dir (holds version-2/)")
    txn.add_argument("--follow", action="store_true", help="keep reading as the log grows")
    logs = sub.add_parser("logs", help="Kafka controller.log / state-change.log parser -> controller_decisions")
    logs.add_argument("--path", metavar="FILE_OR_DIR", required=True, help="log file or folder of logs")
    logs.add_argument("--follow", action="store_true", help="keep reading as the logs grow")
    logs.add_argument("--broker-id", metavar="N", type=int, default=None, help="broker that wrote the logs")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Any) -> str:
    raise NotImplementedYet("collect", issue=3)
