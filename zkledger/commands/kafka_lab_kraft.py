"""`zkledger kafka-lab kraft [SCENARIO ...]`: scenarios on a real Kafka 4.x KRaft cluster (three combined nodes,
no ZooKeeper), with `zkledger collect kraft --follow` on one node's metadata log and the ground-truth recorder;
then `rebuild`, and zkledger's history compared with what Kafka reported: `state --at T` at every settled
sample, the controller tenures against the nodes' controller.log, the anomalies of each scenario grouped as
`zkledger anomalies` prints them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from services.errors import UserError
from zkledger.context import Context

if TYPE_CHECKING:
    from kafkalab.kraft_runner import KRaftLabResult
    from kafkalab.verify import StateCheck


def register_kraft(sub: Any) -> None:
    """The `kraft` action of `kafka-lab` (its subparsers)."""
    from kafkalab.kraft_scenarios import SCENARIOS

    text = "play scenarios on a Kafka 4.x KRaft cluster with `collect kraft` on, rebuild, compare with Kafka's view"
    p = sub.add_parser("kraft", help=text, description=text + ". Three combined nodes (broker and controller); "
                       "the collected node is never killed.")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help=f"scenarios in order (default: all): {', '.join(SCENARIOS)}")
    p.add_argument("--kafka-version", default="4.1", metavar="LINE", help="KRaft Kafka line: 4.1 (default)")
    p.add_argument("--dir", default=None, metavar="DIR", help="where the lab lives (default <lake>/_kafka_lab)")


def run_kraft(args: argparse.Namespace, ctx: Context) -> str:
    from kafkalab.kraft import kraft_line
    from kafkalab.kraft_runner import KRaftLabRun
    from kafkalab.kraft_scenarios import SCENARIOS

    kraft_line(args.kafka_version)
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise UserError(f"unknown KRaft scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    base = Path(args.dir) if args.dir else Path(ctx.lake_root) / "_kafka_lab"
    lab = base / f"kraft-{args.kafka_version}"
    if lab.exists():
        raise UserError(f"{lab} holds an earlier run; remove it or pass another --dir")
    lab_run = KRaftLabRun(lab, line=args.kafka_version, cluster_name=ctx.cluster, lake_root=Path(ctx.lake_root),
                          out=sys.stderr)
    with lab_run:
        lab_run.play(names)
    res = lab_run.finish()
    check = print_kraft_comparison(res, sys.stdout)
    return (f"kafka-lab kraft: {len(res.phases)} scenarios on Kafka {args.kafka_version} KRaft; state matched Kafka "
            f"at {check.points - len(check.mismatches)} of {check.points} points; {len(res.anomalies)} anomalies; "
            f"lake {ctx.lake_root} (cluster {ctx.cluster})")


def print_kraft_comparison(res: KRaftLabResult, out: TextIO) -> StateCheck:
    """Print zkledger's history against what Kafka reported; the state comparison."""
    from kafkalab.kraft_scenarios import EXPECTED
    from models.anomalies import describe_group, group_findings
    from services.sanitize import terminal_safe

    check = res.compare()
    print(f"state --at T vs Kafka: {check.points} settled points, {len(check.mismatches)} mismatches, "
          f"{check.lagged} lagged (Kafka's answer equal to zkledger's state a moment earlier), "
          f"{check.unsettled} in flux", file=out)
    for m in check.mismatches[:20]:
        print("  " + m, file=out)
    logged, tenures = res.logged_elections(), res.tenures()
    print(f"controller tenures (quorum leader, epoch): zkledger {sorted(tenures)}; nodes' controller.log "
          f"{sorted(logged)} -> {'match' if tenures == logged else 'DIFFER'}", file=out)
    for name, rows in res.by_phase().items():
        kind = next((p.kind for p in res.phases if p.name == name), "")
        groups = group_findings(rows)
        found = {str(r["kind"]) for r in rows}
        verdict = ""
        if name in EXPECTED:
            verdict = " (expected kinds: " + ", ".join(sorted(EXPECTED[name])) + \
                (" -> found exactly these)" if found == EXPECTED[name] else f" -> found {', '.join(sorted(found))})")
        print(f"\n{name} ({kind or 'start-up/between scenarios'}): {len(rows)} anomalies in {len(groups)} groups"
              f"{verdict}", file=out)
        for group in groups:
            print("  " + terminal_safe(describe_group(group, width=220)), file=out)
    return check
