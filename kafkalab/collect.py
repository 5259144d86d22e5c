"""The three zkledger collectors, run as a user runs them (`zkledger collect ...` processes) beside a lab cluster.

    with Collectors(lake_root, cluster_name, zk, "/lab", cluster.logs_root, work_dir):
        ...  # scenarios
    # on exit: SIGTERM, each collector flushes what it read and exits 0
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from kafkalab.cluster import die_with_parent
from services.errors import UserError

SETTLE_S = 1.5  # a txnlog / log collector polls every 0.2 s: let the last writes be read before stopping


@dataclass
class Collectors:
    lake_root: Path
    cluster: str
    zk_hosts: str
    zk_data_dir: Path
    chroot: str
    logs_root: Path
    work_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def commands(self) -> dict[str, list[str]]:
        base = [sys.executable, "-m", "zkledger.cli", "--lake", str(self.lake_root), "--cluster", self.cluster,
                "collect"]
        return {
            "watch": [*base, "zk", "--zk", self.zk_hosts, "--chroot", self.chroot],
            "txnlog": [*base, "txnlog", "--dir", str(self.zk_data_dir), "--follow", "--chroot", self.chroot],
            "logs": [*base, "logs", "--path", str(self.logs_root), "--follow"],
        }

    def start(self) -> Collectors:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.logs_root.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for name, cmd in self.commands().items():
            with (self.work_dir / f"collect-{name}.log").open("ab") as out:
                self.procs[name] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                                    stderr=subprocess.STDOUT, env=env,
                                                    preexec_fn=die_with_parent(signal.SIGTERM))
        time.sleep(SETTLE_S)
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise UserError(f"collector {name} exited at start: {self.output(name)[-400:]}")
        return self

    def stop(self) -> dict[str, int]:
        """SIGTERM each collector after a short settle, wait for its flush; the exit codes by name."""
        time.sleep(SETTLE_S)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, int] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait(10)
        self.procs.clear()
        return codes

    def output(self, name: str) -> str:
        try:
            return (self.work_dir / f"collect-{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> Collectors:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.procs:
            self.stop()
