"""`zkledger migration`: a ZooKeeper -> KRaft migration judged from the lake's two histories of one cluster:
its phases, where the stores disagree at each settled aligned point, its hazards, and whether finalizing is safe
(docs/migration.md)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from models.migration import MigrationPhase, MigrationReport, Verdict, check_migration, finalize_verdict
from models.tables import KRAFT_RECORDS, ZNODE_EVENTS
from services.sanitize import terminal_safe
from zkledger.context import Context

if TYPE_CHECKING:
    from lakehouse import Lake

SHOWN = 20  # divergences and findings printed per list in the text format (the JSON holds all)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migration", help="judge a ZooKeeper -> KRaft migration: phases, divergences, hazards, verdict",
        description="Read the cluster's ZooKeeper history (znode_events, from `collect txnlog`) and its KRaft "
        "metadata log (kraft_records, from `collect kraft` on the active controller's metadata log directory) "
        "and report: the migration's phases; at every settled point where ZooKeeper's /migration znode says "
        "which log offset it reflects, each topic, partition, broker and topic config on which the two stores "
        "disagree; the hazards (out-of-band ZooKeeper writes during dual-write, re-syncs that changed znodes, "
        "a stale /migration znode, a KRaft epoch ahead of /controller_epoch, finalization with brokers left "
        "behind); and whether finalizing is safe now. Reads the bronze tables only: no rebuild, no Spark.")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.add_argument("--require-safe", action="store_true",
                        help="exit 1 unless finalizing is safe (for a script that gates the finalization)")
    parser.add_argument("--chroot", default=None, metavar="PATH",
                        help="the Kafka cluster's ZooKeeper chroot, when it has one (e.g. /kafka)")
    parser.set_defaults(handler=run)


@dataclass(frozen=True)
class JudgedMigration:
    """A lake's migration as the rules judge it, what its history could not show, and whether ZooKeeper's side
    came from the transaction log (with sessions: what the report needs to call it a recorded migration)."""

    report: MigrationReport
    verdict: Verdict
    limits: tuple[str, ...]
    from_txnlog: bool


def judge_lake(lake: Lake, chroot: str | None = None) -> JudgedMigration:
    """Both bronze histories of the lake's cluster judged by ``models.migration`` (the tables must exist)."""
    from pipelines.migration_check import migration_history

    zk = lake.read_arrow(ZNODE_EVENTS.name)
    kraft = lake.read_arrow(KRAFT_RECORDS.name)
    zk = zk.filter(pc.equal(zk["cluster"], lake.cluster))
    kraft = kraft.filter(pc.equal(kraft["cluster"], lake.cluster))
    got = migration_history(zk, kraft, chroot=chroot)
    report = check_migration(got.history)
    return JudgedMigration(report, finalize_verdict(report),
                           tuple(_limits(got.watch_only_rows, got.kraft_gaps, got.undecodable)),
                           bool(got.history.zk) and got.watch_only_rows == 0)


def recorded_migration(lake: Lake, chroot: str | None = None) -> JudgedMigration | None:
    """The lake's migration when it recorded one (what `zkledger report` draws): ZooKeeper's history from
    `collect txnlog`, a metadata log from `collect kraft`, and a phase past ZooKeeper mode; else None."""
    if not (lake.exists(ZNODE_EVENTS.name) and lake.exists(KRAFT_RECORDS.name)):
        return None
    judged = judge_lake(lake, chroot)
    began = any(c.phase is not MigrationPhase.ZOOKEEPER for c in judged.report.timeline)
    return judged if judged.from_txnlog and began else None


def run(args: argparse.Namespace, ctx: Context) -> tuple[str, int]:
    ctx.require_table(ZNODE_EVENTS.name)
    ctx.require_table(KRAFT_RECORDS.name)
    judged = judge_lake(ctx.lake, args.chroot)
    report, verdict, limits = judged.report, judged.verdict, judged.limits
    if args.format == "json":
        print(json.dumps(_as_json(ctx.cluster, report, verdict, limits), default=str, sort_keys=True))
    else:
        print_text(ctx.cluster, report, verdict, limits)
    diverging = sum(1 for c in report.checks if c.divergences)
    summary = (f"{ctx.cluster}: phase {report.phase}, {len(report.checks)} settled points compared, "
               f"{diverging} with divergences, {len(report.findings)} findings; "
               + ("safe to finalize" if verdict.safe else f"not safe to finalize ({len(verdict.blockers)} reasons)"))
    return summary, 1 if args.require_safe and not verdict.safe else 0


def _limits(watch_only: int, kraft_gaps: int, undecodable: int) -> list[str]:
    """What the verdict could not see, in the user's words."""
    out = []
    if watch_only:
        out.append(f"ZooKeeper's history comes from watches only ({watch_only} rows): without `collect txnlog` "
                   "no write can be attributed to its session")
    if kraft_gaps:
        out.append(f"the metadata log has {kraft_gaps} gap row(s): offsets deleted before the collector read them")
    if undecodable:
        out.append(f"{undecodable} metadata log record(s) could not be decoded (see quarantine)")
    return out


def print_text(cluster: str, report: MigrationReport, verdict: Verdict, limits: Sequence[str] = ()) -> None:
    """The phases, the divergences at settled points, the findings and the verdict, to stdout."""
    print(f"migration of {terminal_safe(cluster)}: phase {report.phase}")
    for change in report.timeline:
        where = (f"offset {change.offset}" if change.offset is not None
                 else f"zxid {change.zxid:#x}" if change.zxid is not None else "")
        print(f"  {change.at or '-'!s:<32} {change.phase:<14} {where:<18} {change.signal}")
    settled = sum(1 for p in report.points if p.settled)
    print(f"aligned points: {len(report.points)} /migration writes, {settled} settled and compared")
    for check in [c for c in report.checks if c.divergences][:SHOWN]:
        p = check.point
        print(f"  zxid {p.zxid:#x} = offset {p.offset}: {len(check.divergences)} divergence(s)")
        for d in check.divergences[:SHOWN]:
            print(f"    {d.entity} {terminal_safe(d.key)} {terminal_safe(d.field)}: ZooKeeper {d.zk_value!r}, "
                  f"KRaft {d.kraft_value!r}")
    for f in report.findings[:SHOWN]:
        where = (f"zxid {f.zxid:#x}" if f.zxid is not None else f"offset {f.offset}" if f.offset is not None
                 else "")
        what = terminal_safe(json.dumps(f.details, default=str, sort_keys=True))
        print(f"  [{f.severity}] {f.kind} {where} {what}")
    if len(report.findings) > SHOWN:
        print(f"  ... {len(report.findings) - SHOWN} more findings (--format json lists them all)")
    for line in limits:
        print(f"note: {line}")
    if verdict.safe:
        print("verdict: safe to finalize")
    else:
        print("verdict: not safe to finalize")
        for b in verdict.blockers:
            print(f"  - {b.reason}: {terminal_safe(b.message)}")


def _as_json(cluster: str, report: MigrationReport, verdict: Verdict, limits: Sequence[str]) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "phase": str(report.phase),
        "timeline": [asdict(c) for c in report.timeline],
        "points": len(report.points),
        "settled_points": sum(1 for p in report.points if p.settled),
        "last_settled": ({"zxid": report.checks[-1].point.zxid, "offset": report.checks[-1].point.offset}
                         if report.checks else None),
        "divergences": [{"zxid": c.point.zxid, "offset": c.point.offset, "at": c.point.at,
                         "divergences": [asdict(d) for d in c.divergences]}
                        for c in report.checks if c.divergences],
        "findings": [{**asdict(f), "severity": f.severity} for f in report.findings],
        "brokers_not_on_kraft": {str(b): why for b, why in report.brokers_not_on_kraft.items()},
        "limits": list(limits),
        "verdict": {"safe": verdict.safe, "phase": str(verdict.phase),
                    "blockers": [{"reason": str(b.reason), "message": b.message} for b in verdict.blockers]},
    }
