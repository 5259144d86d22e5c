"""The demo story, end to end on this machine.

Embedded ZooKeeper -> simulated ZK-mode Kafka cluster playing `simulator/scenarios/demo-story.json` (startup,
steady ISR churn, a broker crash and return, a controller failover, a zombie controller, an injected illegal
transition) -> the three collectors (live watches while the story plays, then the transaction log and the
controller/state-change logs) -> the pipeline -> quality checks -> HTML report. Every stage reports progress
on stderr; the lake is left behind for `zkledger state` / `zkledger anomalies`.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from models.anomalies import describe_group, findings, group_findings
from models.tables import ANOMALIES
from services.sanitize import terminal_safe
from zkledger.context import Context

log = logging.getLogger(__name__)

STORY = Path(__file__).resolve().parent.parent / "simulator" / "scenarios" / "demo-story.json"


@dataclass
class DemoResult:
    expected_kinds: set[str]
    found: list[dict[str, Any]]
    report_path: str
    quality_ok: bool | None
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def found_kinds(self) -> set[str]:
        return {str(a["kind"]) for a in self.found}

    @property
    def missing(self) -> set[str]:
        return self.expected_kinds - self.found_kinds

    @property
    def unexpected(self) -> set[str]:
        return self.found_kinds - self.expected_kinds


class _Stages:
    """Times each stage and prints `[n/N] what ... done in Xs` lines to stderr."""

    def __init__(self, total: int, err: TextIO) -> None:
        self.total, self.n, self.err = total, 0, err
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        self.n += 1
        print(f"[{self.n}/{self.total}] {name} ...", file=self.err, flush=True)
        t0 = time.monotonic()
        out = fn()
        self.seconds[name] = time.monotonic() - t0
        print(f"[{self.n}/{self.total}] {name}: done in {self.seconds[name]:.1f}s", file=self.err, flush=True)
        return out


def run_demo(ctx: Context, *, scenario: str | None = None, kafka_version: str = "2.0", seed: int = 7,
             report: str = "zkledger-report.html", port: int = 0, err: TextIO | None = None) -> DemoResult:
    """Play the story and run everything over it; returns what was expected and what was found."""
    from collectors.kafka_logs import collect_logs
    from collectors.txnlog import TxnLogCollector
    from collectors.zk_watch import ZkWatchCollector
    from engine.rebuild import rebuild
    from services.quality import run_quality
    from services.report import write_report
    from services.zookeeper import EmbeddedZooKeeper
    from simulator.scenarios import run_scenario

    err = err or sys.stderr
    lake = ctx.lake
    work = Path(lake.root) / "_demo"
    zk_dir, log_dir = work / "zookeeper", work / "kafka-logs"
    if zk_dir.exists() or log_dir.exists():
        raise FileExistsError(f"{work} already holds a demo run; use a fresh --lake (or delete {lake.root})")
    stages = _Stages(7, err)

    zk = stages.run("start an embedded ZooKeeper", lambda: EmbeddedZooKeeper(zk_dir, port=port).start())
    try:
        watcher = ZkWatchCollector(lake, zk.hosts, "")
        stop = threading.Event()

        def watch_then_play() -> Any:
            watcher.start()
            thread = threading.Thread(target=watcher.run, args=(stop,), name="demo-watch", daemon=True)
            thread.start()
            try:
                return run_scenario(scenario or str(STORY), zk.hosts, kafka_version, log_dir, seed, wall_clock=True)
            finally:
                time.sleep(1.0)  # let the last watch events arrive before stopping
                stop.set()
                thread.join(30)

        result = stages.run(f"play the story on a simulated Kafka {kafka_version} cluster (watch collector on)",
                            watch_then_play)

        def collect_rest() -> None:
            TxnLogCollector(lake, zk.data_dir).run(threading.Event())
            collect_logs(lake, str(log_dir))

        stages.run("collect the ZooKeeper transaction log and the controller/state-change logs", collect_rest)
    finally:
        zk.stop()

    spark = ctx.spark("zkledger-demo")
    stages.run("rebuild the state machines and detect anomalies (Spark)", lambda: rebuild(spark, lake))
    quality = stages.run("run the Great Expectations suites", lambda: run_quality(spark, lake))
    path = stages.run("write the HTML report", lambda: write_report(lake, report)[0])
    found = stages.run("read the anomalies", lambda: _anomalies(lake))
    return DemoResult({str(e["kind"]) for e in result.expected_anomalies}, found, str(path),
                      bool(quality.success), stages.seconds)


def _anomalies(lake: Any) -> list[dict[str, Any]]:
    if not lake.exists(ANOMALIES.name):
        return []
    rows: list[dict[str, Any]] = lake.read_arrow(ANOMALIES.name).to_pylist()
    return sorted(rows, key=lambda r: (r.get("zxid") or 0, str(r["kind"])))


def print_summary(res: DemoResult, out: TextIO) -> None:
    groups = group_findings(res.found)
    print(f"\n{len(res.found)} anomalies found ({len(findings(res.found))} findings, like ones grouped):", file=out)
    for group in groups:
        print("  " + terminal_safe(describe_group(group)), file=out)
    verdict = "all expected kinds found" if not res.missing else f"MISSING: {', '.join(sorted(res.missing))}"
    print(f"\nexpected kinds: {', '.join(sorted(res.expected_kinds))} -> {verdict}", file=out)
    if res.unexpected:
        print(f"also found: {', '.join(sorted(res.unexpected))}", file=out)
    print(f"quality checks: {'passed' if res.quality_ok else 'FAILED'}; report: {res.report_path}", file=out)
