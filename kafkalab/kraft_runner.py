"""One lab run on a KRaft cluster: three combined Kafka 4.x nodes, `zkledger collect kraft --follow` on one node's
metadata log (a process, as a user runs it), the ground-truth recorder, scenarios played in sequence, then
`zkledger rebuild` and the lake's tables read back for comparison (`kafkalab.runner.LabRun` for ZooKeeper mode).

    with KRaftLabRun(work_dir) as run:               # nodes + collector + recorder up
        run.play(["create", "controller-failover"])
    result = run.finish()                              # collector stopped, cluster stopped, rebuild, tables read
    check = result.compare()                           # state --at T against Kafka's answers
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from kafkalab import verify
from kafkalab.cluster import die_with_parent
from kafkalab.kraft import KRaftCluster
from kafkalab.kraft_scenarios import SCENARIOS, KRaftLab
from kafkalab.kraft_verify import KRAFT_VIEW, KRaftTruthRecorder, logged_elections, tenures
from kafkalab.runner import cli_rebuild
from kafkalab.scenarios import Phase
from kafkalab.truth import Sample
from models.tables import (
    ANOMALIES,
    CONTROLLER_TENURE,
    KRAFT_RECORDS,
    METADATA_EVENTS,
    PARTITION_TRANSITIONS,
    QUARANTINE,
)
from services.errors import UserError

SETTLE_S = 2.0
"""Before the collector is stopped: it polls every 0.2 s and commits at most every second."""
NODE_OVERRIDES = {"replica.fetch.max.bytes": "16384", "replica.fetch.response.max.bytes": "65536"}
"""Small fetches, so a follower's replication throttle (the unclean election's) holds from its first fetch."""
TABLES = tuple(t.name for t in (KRAFT_RECORDS, METADATA_EVENTS, PARTITION_TRANSITIONS, CONTROLLER_TENURE, ANOMALIES,
                                QUARANTINE))


@dataclass
class KRaftLabResult:
    line: str
    lake_root: Path
    cluster_name: str
    logs_root: Path
    collected_node: int
    phases: list[Phase]
    samples: list[Sample]
    tables: dict[str, list[dict[str, Any]]]
    collector_code: int
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def anomalies(self) -> list[dict[str, Any]]:
        return self.tables[ANOMALIES.name]

    def compare(self) -> verify.StateCheck:
        """zkledger's `state --at T` against Kafka's settled answer at every recorded T."""
        return verify.compare_state(self.tables[METADATA_EVENTS.name], self.tables[PARTITION_TRANSITIONS.name],
                                    self.samples, KRAFT_VIEW)

    def logged_elections(self) -> set[tuple[int, int]]:
        return logged_elections(self.logs_root)

    def tenures(self) -> set[tuple[int, int]]:
        return tenures(self.tables[CONTROLLER_TENURE.name])

    def by_phase(self) -> dict[str, list[dict[str, Any]]]:
        return verify.anomalies_by_phase(self.anomalies, self.phases)


class KRaftLabRun:
    """Everything one run needs, under `work_dir`: `lake/` (unless `lake_root`), `kraft/` (nodes, logs), the
    collector's output in `collect-kraft.log`."""

    def __init__(self, work_dir: Path, *, line: str = "4.1", cluster_name: str | None = None,
                 lake_root: Path | None = None, out: TextIO | None = None) -> None:
        self.work_dir = Path(work_dir).absolute()
        self.line = line
        self.cluster_name = cluster_name or f"kraft-{line}"
        self.lake_root = Path(lake_root).absolute() if lake_root is not None else self.work_dir / "lake"
        if (self.work_dir / "kraft").exists():
            raise UserError(f"{self.work_dir} already holds a lab run; use a fresh directory")
        if (self.lake_root / KRAFT_RECORDS.name).exists():
            raise UserError(f"the lake {self.lake_root} already holds a KRaft history; use a fresh --lake")
        self.cluster = KRaftCluster(self.work_dir / "kraft", line=line, overrides=NODE_OVERRIDES)
        self.recorder = KRaftTruthRecorder(self.cluster.bootstrap(), list(self.cluster.broker_ids))
        self.out = out
        self.keep: int | None = None
        self.lab: KRaftLab | None = None
        self.collector: subprocess.Popen[bytes] | None = None
        self.collector_code: int | None = None
        self.timings: dict[str, float] = {}

    def _say(self, text: str) -> None:
        if self.out is not None:
            print(text, file=self.out, flush=True)

    @property
    def collector_log(self) -> Path:
        return self.work_dir / "collect-kraft.log"

    def start(self) -> KRaftLabRun:
        t0 = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.cluster.start()
            leader, epoch = self.cluster.wait_quorum_leader()
            # a bystander: the quorum's leader is the first to be killed, the others only where needed
            self.keep = max(n for n in self.cluster.controller_ids if n != leader)
            self._start_collector(self.keep)
        except BaseException:
            self.cluster.stop()
            raise
        self.recorder.start()
        self.lab = KRaftLab(self.cluster, self.recorder, self.keep)
        self.timings["start"] = time.monotonic() - t0
        self._say(f"kafka {self.cluster.kline.version} KRaft: {len(self.cluster.nodes)} combined nodes up in "
                  f"{self.timings['start']:.1f}s, quorum leader {leader} (epoch {epoch}); collecting node "
                  f"{self.keep}'s metadata log")
        return self

    def _start_collector(self, node: int) -> None:
        cmd = [sys.executable, "-m", "zkledger.cli", "--lake", str(self.lake_root), "--cluster", self.cluster_name,
               "collect", "kraft", "--dir", str(self.cluster.metadata_log_dir(node)), "--follow"]
        with self.collector_log.open("ab") as out:
            self.collector = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                              env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                              preexec_fn=die_with_parent(signal.SIGTERM))
        time.sleep(SETTLE_S)
        if self.collector.poll() is not None:
            raise UserError(f"collect kraft exited at start: {self._collector_output()[-400:]}")

    def _collector_output(self) -> str:
        try:
            return self.collector_log.read_text(errors="replace")
        except OSError:
            return ""

    def play(self, names: list[str]) -> list[Phase]:
        if self.lab is None:
            raise UserError("the lab run is not started")
        phases = []
        for name in names:
            if name not in SCENARIOS:
                raise UserError(f"unknown KRaft scenario {name!r}; known: {', '.join(SCENARIOS)}")
            t0 = time.monotonic()
            self._say(f"scenario {name} ...")
            ph = SCENARIOS[name](self.lab)
            self.timings[name] = time.monotonic() - t0
            self._say(f"scenario {name}: done in {self.timings[name]:.1f}s {ph.notes or ''}")
            phases.append(ph)
        return phases

    def stop(self) -> None:
        """The recorder, then the collector (so the history ends with the last scenario), then the nodes."""
        self.recorder.stop()
        try:
            self._stop_collector()
        finally:
            self.cluster.stop()

    def _stop_collector(self) -> None:
        proc, self.collector = self.collector, None
        if proc is None:
            return
        time.sleep(SETTLE_S)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            self.collector_code = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.collector_code = proc.wait(10)
        tail = self._collector_output().strip().splitlines()
        self._say(tail[-1] if tail else f"collect kraft exited with {self.collector_code}")

    def __enter__(self) -> KRaftLabRun:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def finish(self, rebuild: Callable[[Path, str], str] | None = None) -> KRaftLabResult:
        """Rebuild and read the tables back. ``rebuild(lake_root, cluster)`` returns its summary line; by default
        `zkledger rebuild` as a process (as a user would)."""
        if self.collector is not None:
            self.stop()
        if self.collector_code != 0:
            raise UserError(f"collect kraft exited with {self.collector_code}: {self._collector_output()[-600:]}")
        t0 = time.monotonic()
        self._say("rebuild ...")
        summary = (rebuild or cli_rebuild)(self.lake_root, self.cluster_name)
        self.timings["rebuild"] = time.monotonic() - t0
        self._say(summary)
        assert self.keep is not None and self.lab is not None
        return KRaftLabResult(self.line, self.lake_root, self.cluster_name, self.cluster.logs_root, self.keep,
                              self.lab.phases, list(self.recorder.samples),
                              read_tables(self.lake_root, self.cluster_name), self.collector_code, dict(self.timings))


def read_tables(lake_root: Path, cluster: str) -> dict[str, list[dict[str, Any]]]:
    from lakehouse import Lake
    from services.metadata_events import read_any

    lake = Lake(lake_root, cluster=cluster)
    return {t: (rows.to_pylist() if (rows := read_any(lake, t)) is not None else []) for t in TABLES}
