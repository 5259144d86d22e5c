"""A Spark standalone cluster on this machine, from the pinned PySpark: a master and its workers, each a process
of its own. The spark-submit tests run the jobs on it, and `benchmarks.driver_memory --standalone` uses it to
measure the driver apart from the executors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import pyspark

from services.zookeeper import free_port

SPARK_HOME = Path(pyspark.__file__).parent


def spark_env() -> dict[str, str]:
    """The environment for Spark's launch scripts: this Python for drivers and workers, loopback only."""
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_HOME=str(SPARK_HOME),
               SPARK_LOCAL_IP="127.0.0.1")
    return env


def _daemon_env() -> dict[str, str]:
    """``spark_env`` for the master and the workers, whose executors inherit it: every JVM of the cluster with the
    JIT's C1 compiler only, as the tests' drivers (tests/conftest.py)."""
    return {**spark_env(), "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1"}


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{path.stem} exited: {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    raise TimeoutError(f"{text!r} not seen in {path} within {limit_s:.0f} s")


@dataclass
class StandaloneCluster:
    """``with StandaloneCluster(logs, workers=2, cores=1, memory="1g") as c: ... c.url ...``: started on enter
    (the master elected, every worker registered), stopped on exit. Workers run in sessions of their own, so
    killing one (``workers[i]``) leaves the rest."""

    logs: Path
    workers_n: int = 2
    cores: int = 1
    memory: str = "1g"
    url: str = ""
    master: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __enter__(self) -> StandaloneCluster:
        self.logs.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.url = f"spark://127.0.0.1:{port}"
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        try:
            master_log = self.logs / "master.log"
            self.master = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", "0"], stdout=master_log.open("wb"), stderr=subprocess.STDOUT, env=_daemon_env())
            _wait_for(master_log, "I have been elected leader", self.master)
            for n in range(1, self.workers_n + 1):
                worker_log = self.logs / f"worker-{n}.log"
                self.workers.append(subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", self.url, "--cores", str(self.cores),
                     "--memory", self.memory, "--webui-port", "0", "--host", "127.0.0.1",
                     "--work-dir", str(self.logs / f"work-{n}")],
                    stdout=worker_log.open("wb"), stderr=subprocess.STDOUT, env=_daemon_env(),
                    start_new_session=True))
                _wait_for(worker_log, "Successfully registered with master", self.workers[-1])
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        for p in [*reversed(self.workers), *([self.master] if self.master else [])]:
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
