"""`zkledger simulate`: a simulated ZK-mode Kafka cluster against a real ZooKeeper, or an offline bronze history."""

from __future__ import annotations

import argparse
from typing import Any

from services.errors import UserError
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="drive a simulated ZK-mode Kafka cluster against a real ZooKeeper (or write bronze offline)",
        description="Drive a simulated ZK-mode Kafka cluster against a real ZooKeeper, writing exactly what Kafka "
        "of --kafka-version writes plus its controller.log/state-change.log lines (stamped with the wall clock like a real broker; "
        "--deterministic-clock for byte-identical logs per seed); "
        "or, with --offline, write a large synthetic history straight into znode_events.",
    )
    parser.add_argument("--zk", metavar="HOST:PORT[/chroot]", help="ZooKeeper to write to (required unless --offline/--list)")
    parser.add_argument("--scenario", metavar="NAME|FILE", default="startup", help="scenario name or JSON file (default startup)")
    parser.add_argument("--kafka-version", metavar="V", default="3.8", help="Kafka version to imitate (1.1 .. 3.9; default 3.8)")
    parser.add_argument("--log-dir", metavar="DIR", default=None, help="write DIR/broker-<id>/{controller,state-change}.log")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--deterministic-clock", action="store_true",
                        help="stamp log lines with a seed-derived clock (reproducible) instead of the wall clock")
    parser.add_argument("--list", action="store_true", help="list the built-in scenarios")
    parser.add_argument("--brokers", type=int, default=None, help="number of brokers (scenario override / offline)")
    parser.add_argument("--offline", action="store_true", help="write a large synthetic history to the bronze tables")
    parser.add_argument("--events", type=int, default=None, help="--offline: number of partition-state writes (broker, controller, topic-assignment and "
                        "failover rows are extra)")
    parser.add_argument("--partitions", type=int, default=None, help="--offline: partitions; scenario: size override")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    from simulator.scenarios import SCENARIOS, list_scenarios, run_scenario

    if args.list:
        return "scenarios: " + ", ".join(list_scenarios()) + f" ({len(SCENARIOS)})"
    if args.offline:
        return _offline(args, ctx)
    if not args.zk:
        raise UserError("simulate needs --zk HOST:PORT (or --offline / --list)")
    try:
        result = run_scenario(args.scenario, args.zk, args.kafka_version, args.log_dir, args.seed,
                              brokers=args.brokers, partitions=args.partitions,
                              wall_clock=not args.deterministic_clock)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    kinds = ",".join(sorted({e["kind"] for e in result.expected_anomalies})) or "none"
    return (f"simulated {result.name} on Kafka {result.kafka_version} (seed {result.seed}): "
            f"{len(result.znode_writes)} znode writes, {len(result.log_files)} log files, expected anomalies: {kinds}")


def _offline(args: argparse.Namespace, ctx: Context) -> str:
    from services.progress import Progress
    from simulator.offline import write_offline

    if not args.events or not args.partitions or args.events <= 0 or args.partitions <= 0:
        raise UserError("--offline needs --events N and --partitions P (both > 0)")
    with Progress(total=args.events, label="events") as progress:
        n = write_offline(ctx.lake, args.events, args.partitions, brokers=args.brokers or 5, seed=args.seed, progress=progress)
    return f"wrote {n} synthetic events over {args.partitions} partitions to znode_events (writer offline-sim:{args.seed})"
