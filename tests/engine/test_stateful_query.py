"""Differential: the Spark query (``engine.stateful``) == the same steps run in the driver (``engine.local_run``).

A few hundred partitions with controller failovers, broker churn, a reassignment and a topic deletion are
committed to bronze in several Delta commits. The driver-side run of all history at once (32 buckets) is the
reference; the streaming query (4 buckets)
runs from a fresh checkpoint with ``availableNow``, one micro-batch per commit (``maxFilesPerTrigger=1``),
restarted on its checkpoint. Every derived table must be equal row for row. (``tests/e2e/test_differential.py``
runs it on the scenarios too, in one micro-batch and in chunks; `zkledger rebuild` then `zkledger monitor` as
processes on one checkpoint: tests/engine/test_commit_points.py, whose killed rebuild the monitor finishes.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.local_run import run_local
from engine.stateful import start_stateful_query
from lakehouse import Lake
from simulator import payloads as zc
from tests.conftest import DERIVED, assert_same_tables
from tests.history import History

pytestmark = pytest.mark.spark

COMPARED = DERIVED
BROKERS = (1, 2, 3, 4, 5)
TOPICS = 4
PARTITIONS = 60  # per topic: 240 partitions


def _replicas(t: int, p: int) -> list[int]:
    first = (t + p) % len(BROKERS)
    return [BROKERS[(first + i) % len(BROKERS)] for i in range(3)]


def _history() -> list[list[dict[str, Any]]]:
    """The history as the bronze commits it arrives in (each commit one data file)."""
    h = History()
    commits: list[int] = []
    for b in BROKERS:
        h.broker(b)
    h.controller(1, 1)
    for t in range(TOPICS):
        h.topic(f"t{t}", {p: _replicas(t, p) for p in range(PARTITIONS)})
    for t in range(TOPICS):
        for p in range(PARTITIONS):
            r = _replicas(t, p)
            h.state(f"t{t}", p, r[0], 0, 1, r, op="CREATE")
    commits.append(len(h.rows))
    h.broker(3, "DELETE")  # every partition led by 3 moves; 3 leaves every ISR
    for t in range(TOPICS):
        for p in range(PARTITIONS):
            r = _replicas(t, p)
            if 3 in r:
                live = [x for x in r if x != 3]
                h.state(f"t{t}", p, live[0] if r[0] == 3 else r[0], 1 if r[0] == 3 else 0, 1, live)
    commits.append(len(h.rows))
    h.add("/controller", "DELETE").controller(2, 2)  # failover while broker 3 is away: re-seeds everywhere
    h.add("/brokers/topics/t1", "SET", zc.encode_topic_assignment(  # t1/0 loses a replica (reassignment)
        {p: ([1, 2] if p == 0 else _replicas(1, p)) for p in range(PARTITIONS)}, "2.0"))
    h.add("/admin/delete_topics/t3", "CREATE")
    commits.append(len(h.rows))
    for p in range(PARTITIONS):
        h.add(f"/brokers/topics/t3/partitions/{p}/state", "DELETE")
    h.add("/brokers/topics/t3", "DELETE")
    h.broker(3)  # back: replicas on 3 go online again
    for p in range(0, PARTITIONS, 7):
        r = _replicas(0, p)
        h.state("t0", p, r[0], 5, 2, r)
    h.state("t2", 1, -1, 6, 2, [])  # offline
    h.add("/controller", "DELETE").controller(4, 3)
    h.state("t2", 2, 1, 1, 2, [1])  # a zombie write with an old controller epoch
    commits.append(len(h.rows))
    return [h.rows[a:b] for a, b in zip([0, *commits[:-1]], commits, strict=True)]


def _lake(path: Path, commits: list[list[dict[str, Any]]]) -> Lake:
    lake = Lake(path, cluster="test")
    for i, rows in enumerate(commits):
        lake.append("znode_events", rows, writer_id="t", batch_seq=i + 1)
    return lake


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """The history rebuilt in the driver, in one batch."""
    lake = _lake(tmp_path_factory.mktemp("ref") / "lake", _history())
    run_local(lake)
    return lake


def test_micro_batches_and_restarts_equal_one_batch_in_the_driver(spark: Any, tmp_path: Path, reference: Lake) -> None:
    """One micro-batch per bronze commit (``maxFilesPerTrigger=1``); the query restarted on its checkpoint with
    nothing new writes nothing, and run again on new commits continues from its checkpointed state."""
    commits = _history()
    lake = _lake(tmp_path / "lake", commits[:2])
    ckpt = tmp_path / "ckpt"
    first = start_stateful_query(spark, lake, ckpt, buckets=4, available_now=True, max_files_per_trigger=1)
    first.awaitTermination()
    assert len([p for p in first.recentProgress if int(p["numInputRows"])]) == 2
    versions = {t: lake.version(t) for t in COMPARED}
    again = start_stateful_query(spark, lake, ckpt, buckets=4, available_now=True, max_files_per_trigger=1)
    again.awaitTermination()
    assert {t: lake.version(t) for t in COMPARED} == versions  # no batch, no commit
    for i, rows in enumerate(commits[2:], start=3):
        lake.append("znode_events", rows, writer_id="t", batch_seq=i)
    last = start_stateful_query(spark, lake, ckpt, buckets=4, available_now=True, max_files_per_trigger=1)
    last.awaitTermination()
    assert len([p for p in last.recentProgress if int(p["numInputRows"])]) == len(commits) - 2
    assert_same_tables(lake, reference, COMPARED)
    states = {r["state"] for r in lake.read_arrow("partition_state").to_pylist()}
    assert {"OnlinePartition", "OfflinePartition", "NonExistentPartition"} <= states  # the history reached them
    assert reference.row_count("partition_transitions") > 500
    # t1-0's replicas 3 and 4 left its assignment in the third micro-batch and keep their rows: the fold never
    # forgets a replica, so a bucket's state file keeps them
    kept = {r["replica"] for r in lake.read_arrow("replica_state").to_pylist() if (r["topic"], r["partition"]) == ("t1", 0)}
    assert {3, 4} <= kept


def test_spark_places_each_key_where_key_placement_says(spark: Any) -> None:
    """Spark's hash partitioning of (cluster, bucket), the state partitions of the query's keys, is what
    ``engine.key_placement.state_partition`` computes (names of every length, non-ASCII bytes, stage keys)."""
    from pyspark.sql import functions as F

    from engine.key_placement import state_partition

    clusters = ["local", "bench", "kafka-00", "prod-eu-west-1", "集群", "x" * 37, "é"]
    rows = [(c, k) for c in clusters for k in range(-2, 40)]
    for n in (2, 3, 7):
        frame = spark.createDataFrame(rows, "cluster string, bucket int").repartition(n, "cluster", "bucket")
        placed = frame.select("cluster", "bucket", F.spark_partition_id().alias("p")).collect()
        assert {(r.cluster, r.bucket): r.p for r in placed} == {(c, k): state_partition(c, k, n) for c, k in rows}
