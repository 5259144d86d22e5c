"""Routing events to key buckets (``pipelines.bucket_fold.route``): the stateful fold's state is keyed by bucket,
so a key's bucket must not depend on the process, the run or the batch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from models.events import MetadataEventType
from pipelines.bucket_fold import (
    BUCKET_COLUMN,
    CLUSTER_STAGE,
    PARTITIONS_PER_BUCKET,
    BucketLayout,
    bucket_of,
    route,
    route_decisions,
    to_every_bucket,
)

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
    by_zxid: dict[int, list[int]] = {}
    for z, b in zip(routed["zxid"].to_pylist(), routed[BUCKET_COLUMN].to_pylist(), strict=True):
        by_zxid.setdefault(z, []).append(b)
    own = bucket_of(pa.array(["t"]), pa.array([0], pa.int32()), 4)[0]
    assert by_zxid[1] == by_zxid[4] == [own]
    everywhere = sorted([CLUSTER_STAGE, *range(4)])
    assert sorted(by_zxid[2]) == sorted(by_zxid[3]) == everywhere
    assert by_zxid[5] == [CLUSTER_STAGE]  # not folded: only the stage has it


def test_a_decision_goes_to_its_stage_and_to_its_partitions_bucket() -> None:
    decisions = pa.table({"cluster": ["c", "c"], "topic": ["t", None], "partition": pa.array([0, None], pa.int32()),
                          "line_no": [1, 2]})
    routed = route_decisions(decisions, 4)
    own = bucket_of(pa.array(["t"]), pa.array([0], pa.int32()), 4)[0]
    assert sorted(zip(routed["line_no"].to_pylist(), routed[BUCKET_COLUMN].to_pylist(), strict=True)) == [
        (1, CLUSTER_STAGE), (1, own), (2, CLUSTER_STAGE)]


def test_a_cluster_gets_buckets_by_its_partitions_at_most_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines import bucket_fold

    monkeypatch.setattr(bucket_fold, "PARTITIONS_PER_BUCKET", PARTITIONS_PER_BUCKET)  # as shipped (tests/conftest.py)
    layout = BucketLayout.sized(32, {"big": 200_000, "small": 10_000, "tiny": 3, "none": 0})
    assert dict(layout.clusters) == {"big": 32, "small": 2, "tiny": 1, "none": 1}
    assert layout.of("small") == 2 and layout.of("unseen") == 32  # a cluster that came later gets the default
    assert layout.counts(pa.array(["tiny", "unseen", "small", "tiny"])).tolist() == [1, 32, 2, 1]
    assert BucketLayout.sized(8, {"c": 8 * PARTITIONS_PER_BUCKET + 1}).of("c") == 8
    assert BucketLayout.from_json(layout.to_json()) == layout
    with pytest.raises(ValueError, match="at least 1"):
        BucketLayout(0)


def test_each_cluster_s_events_spread_over_its_own_buckets() -> None:
    layout = BucketLayout(32, {"small": 2})
    n = 400
    meta = pa.table({"cluster": ["small"] * n + ["big"] * n, "type": [str(T.PARTITION_STATE_WRITTEN)] * (2 * n),
                     "topic": ["t"] * (2 * n), "partition": pa.array(list(range(n)) * 2, pa.int32()),
                     "zxid": list(range(2 * n))})
    routed = route(meta, layout)
    small = set(routed.filter(pa.compute.equal(routed["cluster"], "small"))[BUCKET_COLUMN].to_pylist())
    big = routed.filter(pa.compute.equal(routed["cluster"], "big"))[BUCKET_COLUMN].to_numpy()
    assert small == {0, 1}
    assert big.tolist() == bucket_of(pa.array(["t"] * n), pa.array(range(n), pa.int32()), 32).tolist()
    # a cluster-wide row goes to every bucket of its own cluster
    ranges = pa.table({"cluster": ["small", "big"], "lo": [1, 5], "hi": [2, 9]})
    copies = to_every_bucket(ranges, layout)
    assert sorted(zip(copies["cluster"].to_pylist(), copies[BUCKET_COLUMN].to_pylist(), strict=True)) == sorted(
        [("small", 0), ("small", 1), *(("big", b) for b in range(32))])
