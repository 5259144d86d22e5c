"""`zkledger kafka-lab start|stop|run SCENARIO...`: real ZooKeeper-mode Kafka brokers on this machine (`kraft`:
KRaft nodes, `kafka_lab_kraft.py`; `migration`: a ZooKeeper -> KRaft migration, `kafka_lab_migration.py`).

`start` leaves a ZooKeeper and N brokers running under `<lake>/_kafka_lab/` (state in `lab.json`) for a user to
point zkledger's collectors at; `stop` stops them. `run` plays scenarios on a fresh cluster with the three
collectors and the ground-truth recorder, rebuilds, and prints how zkledger's history compares with Kafka's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.tables import CONTROLLER_TENURE, METADATA_EVENTS, PARTITION_TRANSITIONS
from services.errors import UserError
from zkledger.context import Context

if TYPE_CHECKING:
    from kafkalab.verify import StateCheck

STATE = "lab.json"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "kafka-lab", help="real ZooKeeper-mode Kafka brokers: start/stop a cluster, or run scenarios against it",
        description="Run pinned Apache Kafka brokers (installed by `make jars`) in ZooKeeper mode on an embedded "
        "ZooKeeper, each writing server.log, controller.log and state-change.log.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("start", "start ZooKeeper and the brokers and leave them running"),
                       ("run", "play scenarios with the collectors on, rebuild, compare with Kafka's own view")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--kafka-version", default="3.9", metavar="LINE", help="Kafka line: 3.9 (default), 2.8")
        p.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers (default 3)")
        p.add_argument("--dir", default=None, metavar="DIR", help="where the lab lives (default <lake>/_kafka_lab)")
        if name == "run":
            from kafkalab.scenarios import SCENARIOS

            p.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                           help=f"scenarios in order (default: all): {', '.join(SCENARIOS)}")
    stop = sub.add_parser("stop", help="stop the brokers and ZooKeeper that `start` left running")
    stop.add_argument("--dir", default=None, metavar="DIR", help="the lab's directory (default <lake>/_kafka_lab)")
    from zkledger.commands.kafka_lab_kraft import register_kraft
    from zkledger.commands.kafka_lab_migration import register_migration

    register_kraft(sub)
    register_migration(sub)
    parser.set_defaults(handler=run)


def _lab_dir(args: argparse.Namespace, ctx: Context) -> Path:
    return Path(args.dir) if args.dir else Path(ctx.lake_root) / "_kafka_lab"


def run(args: argparse.Namespace, ctx: Context) -> str:
    if args.action == "start":
        return _start(args, ctx)
    if args.action == "kraft":
        from zkledger.commands.kafka_lab_kraft import run_kraft

        return run_kraft(args, ctx)
    if args.action == "migration":
        from zkledger.commands.kafka_lab_migration import run_migration

        return run_migration(args, ctx)
    if args.action == "stop":
        return _stop(args, ctx)
    return _run(args, ctx)


def _check(args: argparse.Namespace) -> None:
    from kafkalab.cluster import kafka_line

    kafka_line(args.kafka_version)
    if not 1 <= args.brokers <= 9:
        raise UserError(f"--brokers must be 1..9, got {args.brokers}")


def _start(args: argparse.Namespace, ctx: Context) -> str:
    from kafkalab.cluster import KafkaCluster
    from services.zookeeper import EmbeddedZooKeeper

    _check(args)
    lab = _lab_dir(args, ctx)
    if (lab / STATE).exists():
        raise UserError(f"a lab is already recorded in {lab}: run `zkledger kafka-lab stop` first")
    zk = EmbeddedZooKeeper(lab / "zookeeper", stop_at_exit=False).start()
    cluster = KafkaCluster(args.kafka_version, zk.hosts, "/kafka", lab / "kafka", size=args.brokers,
                           die_with_parent=False)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        zk.stop()
        raise
    state = {"zk_pid": zk.pid, "zk_data_dir": str(zk.data_dir), "zookeeper": zk.hosts + "/kafka",
             "bootstrap": ",".join(cluster.bootstrap), "logs": str(cluster.logs_root),
             "brokers": {str(b.broker_id): b.proc.pid for b in cluster.brokers.values() if b.proc is not None}}
    (lab / STATE).write_text(json.dumps(state, indent=2))
    print(f"zookeeper.connect {state['zookeeper']}\nbootstrap.servers {state['bootstrap']}\nlogs {state['logs']}\n"
          f"collect with: zkledger collect zk --zk {zk.hosts} --chroot /kafka; collect txnlog --dir {zk.data_dir} "
          f"--chroot /kafka --follow; collect logs --path {state['logs']} --follow")
    return (f"kafka-lab: Kafka {cluster.kline.version}, {args.brokers} brokers up, controller {cluster.controller()}; "
            f"stop with `zkledger kafka-lab stop`")


def _stop(args: argparse.Namespace, ctx: Context) -> str:
    from services.zookeeper import EmbeddedZooKeeper, terminate

    lab = _lab_dir(args, ctx)
    try:
        state = json.loads((lab / STATE).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"no running lab recorded in {lab}") from exc
    stopped = 0
    for pid in state["brokers"].values():
        if _is_broker(int(pid)):
            terminate(int(pid), timeout_s=60)
            stopped += 1
    zk = EmbeddedZooKeeper.attach(state["zk_data_dir"])
    if zk is not None:
        zk.stop()
    (lab / STATE).unlink()
    return f"kafka-lab: stopped {stopped} brokers and ZooKeeper"


def _is_broker(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ProcessLookupError):
        return False


def _run(args: argparse.Namespace, ctx: Context) -> str:
    from kafkalab.runner import LabRun
    from kafkalab.scenarios import SCENARIOS
    from services.zookeeper import EmbeddedZooKeeper

    _check(args)
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise UserError(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    lab = _lab_dir(args, ctx) / f"run-{args.kafka_version}"
    if lab.exists():
        raise UserError(f"{lab} holds an earlier run; remove it or pass another --dir")
    zk = EmbeddedZooKeeper(lab / "zookeeper").start()
    try:
        lab_run = LabRun(args.kafka_version, lab, zk, size=args.brokers, cluster_name=ctx.cluster,
                         lake_root=Path(ctx.lake_root), out=sys.stderr)
        with lab_run:
            lab_run.play(names)
    finally:
        zk.stop()
    res = lab_run.finish()
    check = print_comparison(res, sys.stdout)
    from services.report import write_report

    report = write_report(ctx.lake, os.path.join(ctx.lake_root, "zkledger-report.html"))[0]
    print(f"\nreport: {report}", file=sys.stdout)
    return (f"kafka-lab: {len(res.phases)} scenarios on Kafka {args.kafka_version}; state matched Kafka at "
            f"{check.points - len(check.mismatches)} of {check.points} points; {len(res.anomalies)} anomalies; lake "
            f"{ctx.lake_root}")


def print_comparison(res: Any, out: Any) -> StateCheck:
    """Print zkledger's history against what Kafka reported; the state comparison (a `verify.StateCheck`)."""
    from kafkalab import verify
    from kafkalab.cluster import kafka_line
    from models.anomalies import describe_group, group_findings
    from services.sanitize import terminal_safe

    check = verify.compare_state(res.tables[METADATA_EVENTS.name], res.tables[PARTITION_TRANSITIONS.name], res.samples,
                                 kafka_line(res.line))
    logged, tenures = verify.logged_elections(res.logs_root), verify.tenures(res.tables[CONTROLLER_TENURE.name])
    print(f"state --at T vs Kafka: {check.points} settled points, {len(check.mismatches)} mismatches, "
          f"{check.unsettled} in flux, {check.pending_deletion} partitions of topics being deleted (Kafka omits them)",
          file=out)
    for m in check.mismatches[:20]:
        print("  " + m, file=out)
    print(f"controller tenures (controller, epoch): zkledger {sorted(tenures)}; brokers' controller.log "
          f"{sorted(logged)} -> {'match' if tenures == logged else 'DIFFER'}", file=out)
    for name, rows in verify.anomalies_by_phase(res.anomalies, res.phases).items():
        kind = next((p.kind for p in res.phases if p.name == name), "")
        groups = group_findings(rows)
        print(f"\n{name} ({kind or 'start-up/shutdown'}): {len(rows)} anomalies in {len(groups)} groups", file=out)
        for group in groups:
            print("  " + terminal_safe(describe_group(group, width=220)), file=out)
    return check
