"""One lab run: a ZooKeeper-mode cluster of real brokers, the three collectors and the ground-truth recorder,
scenarios played in sequence, then `zkledger rebuild` and the lake's tables read back for comparison.

    with LabRun("3.9", work_dir, zk) as run:      # brokers + collectors + recorder up
        run.play(["create", "controller-failover"])
    result = run.finish()                          # collectors stopped, rebuild, tables read
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from kafkalab.cluster import KafkaCluster
from kafkalab.collect import Collectors
from kafkalab.scenarios import SCENARIOS, Lab, Phase
from kafkalab.truth import GroundTruthRecorder, Sample
from models.tables import (
    ANOMALIES,
    CONTROLLER_DECISIONS,
    CONTROLLER_TENURE,
    METADATA_EVENTS,
    PARTITION_TRANSITIONS,
    QUARANTINE,
    ZNODE_EVENTS,
)
from services.errors import UserError
from services.zookeeper import EmbeddedZooKeeper


@dataclass
class LabResult:
    line: str
    lake_root: Path
    cluster_name: str
    logs_root: Path
    phases: list[Phase]
    samples: list[Sample]
    tables: dict[str, list[dict[str, Any]]]
    collector_codes: dict[str, int]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def anomalies(self) -> list[dict[str, Any]]:
        return self.tables[ANOMALIES.name]


TABLES = tuple(t.name for t in (METADATA_EVENTS, PARTITION_TRANSITIONS, CONTROLLER_TENURE, ANOMALIES, CONTROLLER_DECISIONS,
                                ZNODE_EVENTS, QUARANTINE))


class LabRun:
    """Everything one run needs, under `work_dir`: `lake/`, `kafka/` (brokers, logs), collector output."""

    def __init__(self, line: str, work_dir: Path, zk: EmbeddedZooKeeper, *, size: int = 3,
                 cluster_name: str | None = None, lake_root: Path | None = None, out: Any = None) -> None:
        self.line = line
        self.work_dir = Path(work_dir).absolute()
        self.zk = zk
        self.chroot = f"/kafkalab-{line.replace('.', '')}-{uuid.uuid4().hex[:8]}"
        self.cluster_name = cluster_name or f"kafka-{line}"
        self.lake_root = Path(lake_root).absolute() if lake_root is not None else self.work_dir / "lake"
        if (self.work_dir / "kafka").exists():
            raise UserError(f"{self.work_dir} already holds a lab run; use a fresh directory")
        if (self.lake_root / ZNODE_EVENTS.name).exists():
            raise UserError(f"the lake {self.lake_root} already holds a history; use a fresh --lake")
        self.cluster = KafkaCluster(line, zk.hosts, self.chroot, self.work_dir / "kafka", size=size)
        self.collectors = Collectors(self.lake_root, self.cluster_name, zk.hosts, zk.data_dir, self.chroot,
                                     self.cluster.logs_root, self.work_dir / "collectors")
        self.recorder = GroundTruthRecorder(self.cluster.bootstrap, list(self.cluster.brokers))
        self.lab = Lab(self.cluster, self.recorder)
        self.out = out
        self.timings: dict[str, float] = {}
        self._codes: dict[str, int] = {}

    def _say(self, text: str) -> None:
        if self.out is not None:
            print(text, file=self.out, flush=True)

    def start(self) -> LabRun:
        t0 = time.monotonic()
        self.collectors.start()  # watching before the first broker writes anything
        try:
            self.cluster.start()
        except BaseException:
            self.cluster.stop()
            self.collectors.stop()
            raise
        self.recorder.start()
        self.timings["start"] = time.monotonic() - t0
        self._say(f"kafka {self.cluster.kline.version}: {self.cluster.size} brokers up in "
                  f"{self.timings['start']:.1f}s, controller {self.cluster.controller()} (chroot {self.chroot})")
        return self

    def play(self, names: list[str]) -> list[Phase]:
        phases = []
        for name in names:
            if name not in SCENARIOS:
                raise UserError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
            t0 = time.monotonic()
            self._say(f"scenario {name} ...")
            ph = SCENARIOS[name](self.lab)
            self.timings[name] = time.monotonic() - t0
            self._say(f"scenario {name}: done in {self.timings[name]:.1f}s {ph.notes or ''}")
            phases.append(ph)
        return phases

    def stop(self) -> None:
        self.recorder.stop()
        try:
            self.cluster.stop()
        finally:
            self._codes = self.collectors.stop() if self.collectors.procs else self._codes

    def __enter__(self) -> LabRun:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def finish(self, rebuild: Callable[[Path, str], str] | None = None) -> LabResult:
        """Rebuild and read the tables back. ``rebuild(lake_root, cluster)`` returns its summary line; by default
        `zkledger rebuild` as a process (as a user would)."""
        t0 = time.monotonic()
        self._say("rebuild ...")
        summary = (rebuild or cli_rebuild)(self.lake_root, self.cluster_name)
        self.timings["rebuild"] = time.monotonic() - t0
        self._say(summary)
        return LabResult(self.line, self.lake_root, self.cluster_name, self.cluster.logs_root, self.lab.phases,
                         list(self.recorder.samples), read_tables(self.lake_root, self.cluster_name),
                         dict(self._codes), dict(self.timings))


def cli_rebuild(lake_root: Path, cluster: str) -> str:
    """`zkledger rebuild` as a process; its summary line."""
    proc = subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", str(lake_root), "--cluster", cluster,
                           "rebuild"], capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise UserError(f"zkledger rebuild failed: {(proc.stderr or proc.stdout).strip()[-600:]}")
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "rebuilt"


def read_tables(lake_root: Path, cluster: str) -> dict[str, list[dict[str, Any]]]:
    from lakehouse import Lake
    from services.metadata_events import read_any

    lake = Lake(lake_root, cluster=cluster)
    return {t: (rows.to_pylist() if (rows := read_any(lake, t)) is not None else []) for t in TABLES}
