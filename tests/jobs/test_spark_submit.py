"""spark-submit of the batch jobs to a real Spark standalone master with two workers (1 core each), compared with
a local run: the quality check and the rebuild. The streaming monitor's kills: test_spark_submit_monitor.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from services.quality import run_quality
from tests import sample_data as sd
from tests.jobs.spark_submit import ROOT, submit_command
from tests.standalone_cluster import spark_env

pytestmark = pytest.mark.spark

TABLES = ("partition_transitions", "anomalies")


def test_submitted_check_equals_local_run(standalone: str, spark: Any, lake: Any, tmp_path: Path) -> None:
    tables = sd.all_tables()
    tables["anomalies"].append({**tables["anomalies"][0], "kind": "ALIENS", "anomaly_id": "alien-1"})
    sd.write_story(lake, {t: tables[t] for t in ("znode_events", *TABLES)})
    local = run_quality(spark, lake, tables=TABLES, write_results=False)

    argv = [*submit_command(standalone, tmp_path), str(ROOT / "jobs" / "check.py"),
            "--lake", lake.root, "--cluster", lake.cluster, "-v"]
    for t in TABLES:
        argv += ["--table", t]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=spark_env(), cwd=tmp_path)
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]  # the ALIENS kind fails the anomalies suite
    output = done.stdout + done.stderr
    assert f"Spark on master {standalone}" in output, output[-4000:]

    stored = lake.read_arrow("quality_results").to_pylist()
    remote = {(r["table_name"], r["expectation"], r["success"], r["observed"]) for r in stored}
    expected = {(r.table, r.expectation, r.success, r.observed) for s in local.suites for r in s.results}
    assert remote == expected
    assert ("anomalies", "in_set(kind)", False) in {k[:3] for k in remote}


def _failure(output: str) -> str:
    """A failed job's output for the assertion: its first exception lines (the cause; a JVM stack can be longer
    than the tail shown) and its last 2,000 characters."""
    causes = [line for line in output.splitlines() if "Exception" in line or "Error:" in line][:5]
    return "\n".join(causes) + "\n...\n" + output[-2000:]


def test_submitted_rebuild_equals_local_run(standalone: str, lake: Any, tmp_path: Path) -> None:
    """jobs/rebuild.py on the standalone cluster (decode and fold on the executors, 4 buckets from its --conf)
    writes the same derived tables as the same steps run in this process (32 buckets)."""
    from engine.local_run import run_local
    from lakehouse import Lake
    from tests.conftest import assert_same_tables
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
    run_local(lake)

    conf = tmp_path / "cluster.toml"
    conf.write_text("[pipeline]\nbuckets = 4\n", encoding="utf-8")
    argv = [*submit_command(standalone, tmp_path), str(ROOT / "jobs" / "rebuild.py"),
            "--conf", str(conf), "--lake", remote.root, "--cluster", remote.cluster]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=spark_env(), cwd=tmp_path)
    assert done.returncode == 0, _failure(done.stdout + done.stderr)

    assert remote.row_count("partition_transitions") > 0
    assert_same_tables(remote, lake)
    assert "ZOMBIE_CONTROLLER_WRITE" in {r["kind"] for r in remote.read_arrow("anomalies").to_pylist()}
