"""Routing events to key buckets (``pipelines.bucket_fold.route``): the stateful fold's state is keyed by bucket,
so a key's bucket must not depend on the process, the run or the batch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa

from models.events import MetadataEventType
from pipelines.bucket_fold import BUCKET_COLUMN, CLUSTER_STAGE, EMIT_COLUMN, bucket_of, route, route_decisions

T = MetadataEventType


def test_a_keys_bucket_is_the_same_in_another_process() -> None:
    topics, parts = pa.array(["orders", "payments", "orders", "x" * 200]), pa.array([0, 7, 1, 3], pa.int32())
    here = bucket_of(topics, parts, 32).tolist()
    code = ("import pyarrow as pa; from pipelines.bucket_fold import bucket_of; "
            "print(bucket_of(pa.array(['orders', 'payments', 'orders', 'x' * 200]), pa.array([0, 7, 1, 3], pa.int32()), 32).tolist())")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert str(here) == there  # Python's own str hash is salted per process: it would differ
    assert all(0 <= b < 32 for b in here)


def test_keys_spread_over_the_buckets() -> None:
    n = 64_000
    counts = np.bincount(bucket_of(pa.array([f"t{i % 50}" for i in range(n)]), pa.array(np.arange(n) // 50, pa.int32()),
                                   32), minlength=32)
    assert counts.min() > 0.8 * n / 32 and counts.max() < 1.2 * n / 32


def test_a_partition_event_goes_to_its_bucket_and_a_cluster_wide_one_to_the_stage_and_every_bucket() -> None:
    meta = pa.table({"cluster": ["c", "c", "c", "c", "c"],
                     "type": [str(T.PARTITION_STATE_WRITTEN), str(T.CONTROLLER_ELECTED), str(T.TOPIC_DELETION_REQUESTED),
                              str(T.PARTITION_STATE_WRITTEN), str(T.CONFIG_CHANGED)],
                     "topic": ["t", None, "t", "t", "t"], "partition": pa.array([0, None, None, 0, None], pa.int32()),
                     "zxid": [1, 2, 3, 4, 5]})
    routed = route(meta, 4)
    by_zxid: dict[int, list[tuple[int, bool]]] = {}
    for z, b, e in zip(routed["zxid"].to_pylist(), routed[BUCKET_COLUMN].to_pylist(), routed[EMIT_COLUMN].to_pylist(),
                       strict=True):
        by_zxid.setdefault(z, []).append((b, e))
    own = bucket_of(pa.array(["t"]), pa.array([0], pa.int32()), 4)[0]
    assert by_zxid[1] == by_zxid[4] == [(own, True)]
    everywhere = sorted([(CLUSTER_STAGE, True), *((b, False) for b in range(4))])
    assert sorted(by_zxid[2]) == sorted(by_zxid[3]) == everywhere
    assert by_zxid[5] == [(CLUSTER_STAGE, True)]  # not folded: written by the stage only
    assert sum(routed[EMIT_COLUMN].to_pylist()) == meta.num_rows  # each event written once


def test_a_decision_goes_to_its_stage_and_to_its_partitions_bucket() -> None:
    decisions = pa.table({"cluster": ["c", "c"], "topic": ["t", None], "partition": pa.array([0, None], pa.int32()),
                          "line_no": [1, 2]})
    routed = route_decisions(decisions, 4)
    own = bucket_of(pa.array(["t"]), pa.array([0], pa.int32()), 4)[0]
    assert sorted(zip(routed["line_no"].to_pylist(), routed[BUCKET_COLUMN].to_pylist(), strict=True)) == [
        (1, CLUSTER_STAGE), (1, own), (2, CLUSTER_STAGE)]
