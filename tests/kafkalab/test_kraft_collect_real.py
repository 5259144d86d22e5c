"""`zkledger collect kraft --follow` on a real Kafka 4.1 KRaft node's live metadata log while the cluster works,
then a catch-up pass once the node is stopped: every record Kafka's own reader (DumpLogSegments) finds in the
segments is in kraft_records exactly once, with the same batch, epoch and metadata record type.

In the longer matrix (`KAFKA_MATRIX=1`): in CI the KRaft lab (tests/kafkalab/test_kraft_lab.py) follows a live
node with the collector through every scenario, and tests/kafkalab/test_kraft_cluster.py holds the decoder to
Kafka's reader record by record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kafkalab.kraft import KRaftCluster, dump_metadata_log, metadata_log_options
from lakehouse import Lake
from tests.collectors.conftest import wait_for

pytestmark = pytest.mark.skipif(os.environ.get("KAFKA_MATRIX") != "1", reason="the longer matrix: KAFKA_MATRIX=1")

ROOT = Path(__file__).resolve().parents[2]
TABLE = "kraft_records"


def _collect(lake: Lake, log_dir: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "zkledger.cli", "--lake", lake.root, "--cluster", lake.cluster, "collect", "kraft",
           "--dir", str(log_dir), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_collect_kraft_follows_a_live_node_and_matches_kafkas_reader(
    tmp_path: Path, starts_kraft: None, takes_minutes: None
) -> None:
    lake = Lake(tmp_path / "lake", cluster="kraft")
    options = metadata_log_options(segment_bytes=16 * 1024, segment_ms=5_000, snapshot_bytes=8 * 1024,
                                   snapshot_interval_ms=5_000)
    with KRaftCluster(tmp_path / "cluster", overrides=options) as cluster:
        log_dir = cluster.metadata_log_dir(1)
        follower = _collect(lake, log_dir, "--follow")
        try:
            wait_for(lambda: (lake.exists(TABLE) and lake.row_count(TABLE) > 0) or follower.poll() is not None,
                     limit=120)
            admin = cluster.admin(request_timeout_ms=15_000)
            try:
                admin.create_topics({f"t{i}": {"num_partitions": 3, "replication_factor": 3} for i in range(4)},
                                    timeout_ms=15_000)
            finally:
                admin.close()
            cluster.wait_for(lambda: len(list(log_dir.glob("*.log"))) >= 2, "a second segment on node 1", 60)
        finally:
            follower.send_signal(signal.SIGTERM)
            _out, err = follower.communicate(timeout=60)
        assert follower.returncode == 0, err[-2000:]
        cluster.stop_node(1)
        catch_up = _collect(lake, log_dir)
        out, err = catch_up.communicate(timeout=120)
        assert catch_up.returncode == 0, err[-2000:]
        assert out.strip().splitlines()[-1].startswith("collect kraft: ")
        kafka = [r for r in dump_metadata_log(sorted(log_dir.glob("*.log"))) if "error" not in r]

    rows = lake.read_arrow(TABLE).to_pylist()
    segment = [r for r in rows if r["source"] == "segment"]
    offsets = Counter(r["offset"] for r in segment)
    assert max(offsets.values()) == 1, "a record stored twice"
    assert sorted(offsets) == sorted(int(r["offset"]) for r in kafka)
    ours: dict[int, dict[str, Any]] = {r["offset"]: r for r in segment}
    for theirs in kafka:
        mine = ours[int(theirs["offset"])]
        assert (mine["batch_base_offset"], mine["batch_last_offset"], mine["leader_epoch"], mine["is_control"]) == (
            int(theirs["batch_base_offset"]), int(theirs["batch_last_offset"]), int(theirs["leader_epoch"]),
            bool(theirs["is_control"])), theirs
        if not theirs["is_control"]:
            assert (mine["record_type"], mine["record_version"]) == (theirs["type"], theirs["version"]), theirs
    assert {r["record_type"] for r in segment} >= {"TOPIC_RECORD", "PARTITION_RECORD", "LEADER_CHANGE"}
    assert not [r for r in rows if r["source"] == "gap"]
    assert not (lake.exists("quarantine") and lake.row_count("quarantine"))
