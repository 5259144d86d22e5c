"""`zkledger zk start|stop|status [--port] [--data-dir]`: the embedded ZooKeeper server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from services.errors import UserError
from services.zookeeper import EmbeddedZooKeeper, four_letter_word, running_state
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "zk",
        help="run the embedded ZooKeeper server (from PySpark's jars)",
        description="Start, stop or inspect a real standalone ZooKeeper 3.9 server on 127.0.0.1. Its data and "
        "transaction log live in --data-dir (default <lake>/_zookeeper); the server keeps running after "
        "`zk start` returns.",
    )
    parser.add_argument("action", choices=("start", "stop", "status"), help="what to do")
    parser.add_argument("--port", type=int, default=None, help="client port (start only; default: a free port)")
    parser.add_argument("--data-dir", default=None, help="ZooKeeper data dir (default: <lake>/_zookeeper)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    if not args.data_dir:
        ctx.check_lake_root()
    data_dir = Path(args.data_dir) if args.data_dir else Path(ctx.lake_root) / "_zookeeper"
    if args.action == "start":
        return _start(data_dir, args.port)
    if args.port is not None:
        raise UserError(f"--port applies to `zk start` only; `zk {args.action}` finds the server by --data-dir")
    return _stop(data_dir) if args.action == "stop" else _status(data_dir)


def _start(data_dir: Path, port: int | None) -> str:
    if port is not None and not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {port}")
    server = EmbeddedZooKeeper(data_dir, port or 0, stop_at_exit=False).start()
    return f"ZooKeeper started at {server.hosts} (pid {server.pid}, data {server.data_dir}, log {server.log_path})"


def _stop(data_dir: Path) -> str:
    server = EmbeddedZooKeeper.attach(data_dir)
    if server is None:
        return f"ZooKeeper not running (data {data_dir.absolute()})"
    hosts, pid = server.hosts, server.pid
    server.stop()
    return f"ZooKeeper stopped (was {hosts}, pid {pid})"


def _status(data_dir: Path) -> str:
    state = running_state(data_dir)
    if state is None:
        return f"ZooKeeper not running (data {data_dir.absolute()})"
    info = _srvr_fields(four_letter_word(state.port, "srvr"))
    detail = f", zxid {info['Zxid']}, {info['Node count']} znodes" if "Zxid" in info else ", not answering"
    return f"ZooKeeper running at {state.hosts} (pid {state.pid}, data {state.data_dir}{detail})"


def _srvr_fields(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            fields[key.strip()] = value.strip()
    return fields
