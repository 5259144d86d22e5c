"""`zkledger demo`: the whole product on one machine, on a scripted story with injected faults."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from services.errors import UserError
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the end-to-end story on an embedded ZooKeeper and print the anomalies",
        description="Start an embedded ZooKeeper, drive a simulated ZK-mode Kafka cluster through a scripted "
        "story with injected faults (broker crash, controller failover, zombie controller, illegal transition), "
        "run the three collectors, the pipeline and the quality checks, print the anomalies found and write the "
        "HTML report. The lake is left behind for `zkledger state` and `zkledger anomalies`.")
    parser.add_argument("--port", type=int, default=None, help="embedded ZooKeeper port (default: a free port)")
    parser.add_argument("--scenario", default=None,
                        help="scenario name or JSON file (default: simulator/scenarios/demo-story.json)")
    parser.add_argument("--kafka-version", default=None, metavar="V",
                        help="Kafka version to simulate (default 2.0: zombie writes land; 2.1+ shows fencing)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: settings demo.seed)")
    parser.add_argument("--report", metavar="FILE.html", default=None,
                        help="where to write the HTML report (default: <lake>/zkledger-report.html)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    import os

    from zkledger.demo import print_summary, run_demo

    ds = ctx.settings.demo
    report = args.report or os.path.join(ctx.lake_root, os.path.basename(ds.report))
    try:
        res = run_demo(ctx, scenario=args.scenario if args.scenario not in (None, "default") else None,
                       kafka_version=args.kafka_version or ds.kafka_version,
                       seed=args.seed if args.seed is not None else ds.seed, report=report,
                       port=args.port if args.port is not None else ds.zk_port)
    except FileExistsError as exc:
        raise UserError(str(exc)) from exc
    print_summary(res, sys.stdout)
    took = sum(res.stage_seconds.values())
    return (f"demo: {len(res.found)} anomalies ({len(res.found_kinds)} kinds, "
            f"{'all' if not res.missing else len(res.expected_kinds - res.missing)} of {len(res.expected_kinds)} "
            f"expected kinds) in {took:.0f}s; report {res.report_path}; explore with "
            f"`zkledger --lake {ctx.lake_root} anomalies` and `state --at`")
