"""spark-submit of jobs/check.py to a real Spark standalone master + worker, compared with a local run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from tests import sample_data as sd
from zkledger.quality import run_quality

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
PACKAGES = ("zkledger", "models", "collectors", "pipelines", "engine", "jobs", "conf", "lakehouse", "simulator")
TABLES = ("partition_transitions", "anomalies")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_HOME=str(SPARK_HOME),
               SPARK_LOCAL_IP="127.0.0.1")
    return env


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"{proc.args} exited: {path.read_text(errors='replace')[-2000:]}"
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not seen in {path}: {path.read_text(errors='replace')[-2000:]}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real standalone master and one worker (1 core, 1g) from the pinned PySpark; stopped at the end."""
    logs = tmp_path_factory.mktemp("standalone")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = logs / "master.log"
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", "0"], stdout=master_log.open("wb"), stderr=subprocess.STDOUT, env=_env()))
        _wait_for(master_log, "I have been elected leader", procs[0])
        worker_log = logs / "worker.log"
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--cores", "1", "--memory", "1g",
             "--webui-port", "0", "--host", "127.0.0.1", "--work-dir", str(logs / "work")],
            stdout=worker_log.open("wb"), stderr=subprocess.STDOUT, env=_env()))
        _wait_for(worker_log, "Successfully registered with master", procs[1])
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _archive(dest: Path) -> Path:
    """The project archive for --py-files (what `make dist` builds)."""
    out = dest / "zkledger.zip"
    with zipfile.ZipFile(out, "w") as zf:
        for pkg in PACKAGES:
            for f in (ROOT / pkg).rglob("*"):
                if f.is_file() and "__pycache__" not in f.parts:
                    zf.write(f, f.relative_to(ROOT))
    return out


def _submit(master: str, tmp_path: Path) -> list[str]:
    """spark-submit as the README shows a cluster user: the project archive, Delta's pinned jars and its confs."""
    from zkledger.jvm import DELTA, installed_jars
    from zkledger.spark import DELTA_CATALOG, DELTA_EXTENSION

    return [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, "--total-executor-cores", "1",
            "--executor-memory", "512m", "--py-files", str(_archive(tmp_path)),
            "--jars", ",".join(str(j) for j in installed_jars(DELTA)),
            "--conf", f"spark.sql.extensions={DELTA_EXTENSION}",
            "--conf", f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}"]


def test_submitted_check_equals_local_run(standalone: str, spark: Any, lake: Any, tmp_path: Path) -> None:
    tables = sd.all_tables()
    tables["anomalies"].append({**tables["anomalies"][0], "kind": "ALIENS", "anomaly_id": "alien-1"})
    sd.write_story(lake, {t: tables[t] for t in ("metadata_events", *TABLES)})
    local = run_quality(spark, lake, tables=TABLES, write_results=False)

    argv = [*_submit(standalone, tmp_path), str(ROOT / "jobs" / "check.py"),
            "--lake", lake.root, "--cluster", lake.cluster]
    for t in TABLES:
        argv += ["--table", t]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path)
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]  # the ALIENS kind fails the anomalies suite
    output = done.stdout + done.stderr
    assert f"check on master {standalone}" in output, output[-4000:]

    stored = lake.read_arrow("quality_results").to_pylist()
    remote = {(r["table_name"], r["expectation"], r["success"], r["observed"]) for r in stored}
    expected = {(r.table, r.expectation, r.success, r.observed) for s in local.suites for r in s.results}
    assert remote == expected
    assert ("anomalies", "in_set(kind)", False) in {k[:3] for k in remote}


def test_submitted_rebuild_equals_local_run(standalone: str, spark: Any, lake: Any, tmp_path: Path) -> None:
    """jobs/rebuild.py on the standalone cluster writes the same derived tables as a local rebuild."""
    from engine.rebuild import rebuild
    from lakehouse import Lake
    from tests.history import History

    h = History(cluster=lake.cluster)
    h.broker(1).broker(2).broker(3).controller(1, 1)
    h.topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
    h.state("t", 0, 1, 0, 1, [1, 2, 3], op="CREATE").state("t", 1, 2, 0, 1, [2, 3, 1], op="CREATE")
    h.controller(2, 2)
    h.state("t", 0, 2, 1, 2, [2, 3])  # the new controller moves the leader
    h.state("t", 1, 3, 1, 1, [3, 1])  # a zombie write: leader change by controller epoch 1 < 2
    remote = Lake(str(tmp_path / "remote-lake"), lake.cluster)
    for target in (lake, remote):
        target.append("znode_events", h.rows, writer_id="fixture", batch_seq=0)
    rebuild(spark, lake)

    # the local rebuild ran in process (a small history); on the cluster, decode and fold run on the executor
    conf = tmp_path / "through-spark.toml"
    conf.write_text("[pipeline]\nlocal_max_rows = 0\n", encoding="utf-8")
    argv = [*_submit(standalone, tmp_path), str(ROOT / "jobs" / "rebuild.py"),
            "--conf", str(conf), "--lake", remote.root, "--cluster", remote.cluster]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    def rows(target: Any, table: str) -> list[tuple[Any, ...]]:
        data = target.read_arrow(table).to_pylist()
        return sorted(tuple(sorted((k, repr(v)) for k, v in r.items())) for r in data)

    for table in ("metadata_events", "partition_transitions", "replica_transitions", "partition_state",
                  "controller_tenure", "anomalies"):
        assert rows(remote, table) == rows(lake, table), table
    assert "ZOMBIE_CONTROLLER_WRITE" in {r["kind"] for r in remote.read_arrow("anomalies").to_pylist()}
