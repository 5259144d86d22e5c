"""Key numbers that spread a cluster's buckets evenly over the query's state partitions
(``engine.key_placement``), and the routing that uses them (``pipelines.bucket_fold.BucketLayout.keys``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from engine.key_placement import place, placed_keys, state_partition
from engine.stateful import BUCKETS_FILE, checkpoint_buckets
from lakehouse import Lake
from models.events import MetadataEventType as T
from pipelines.bucket_fold import (
    BUCKET_COLUMN,
    CLUSTER_STAGE,
    BucketLayout,
    bucket_of,
    route,
    to_every_bucket,
)
from tests.history import History

# "local" (the shipped cluster name) keys 21 of its 33 keys to one of two partitions when numbered 0..31
CLUSTERS = ("local", "bench", "kafka-00", "prod-eu-west-1", "集群", "x" * 37)


@pytest.mark.parametrize("partitions", [2, 3, 8])
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_placed_keys_fill_every_partition_in_turn(cluster: str, partitions: int) -> None:
    keys = placed_keys(cluster, 32, partitions)
    assert len(set(keys)) == 32 and min(keys) >= 0
    load = Counter(state_partition(cluster, k, partitions) for k in keys)
    assert max(load.values()) - min(load.values()) <= 1 and len(load) == partitions
    # an odd bucket avoids the stage's partition
    odd = Counter(state_partition(cluster, k, 2) for k in placed_keys(cluster, 3, 2))
    assert odd[state_partition(cluster, CLUSTER_STAGE, 2)] == 1


def test_numbering_0_to_k_is_what_placement_mends() -> None:
    load = Counter(state_partition("local", k, 2) for k in [CLUSTER_STAGE, *range(32)])
    assert sorted(load.values()) == [12, 21]


def test_a_placed_layout_routes_each_bucket_to_its_key() -> None:
    layout = place(BucketLayout(32, {"local": 4}), 2)
    keys = layout.keys["local"]
    n = 200
    meta = pa.table({"cluster": ["local"] * n + ["later"] * n, "type": [str(T.PARTITION_STATE_WRITTEN)] * (2 * n),
                     "topic": ["t"] * (2 * n), "partition": pa.array(list(range(n)) * 2, pa.int32()),
                     "zxid": list(range(2 * n))})
    routed = route(meta, layout)
    own = routed.filter(pa.compute.equal(routed["cluster"], "local"))[BUCKET_COLUMN].to_pylist()
    assert own == [keys[b] for b in bucket_of(pa.array(["t"] * n), pa.array(range(n), pa.int32()), 4).tolist()]
    assert route(meta.slice(0, 0), layout).num_rows == 0  # a batch without events routes none
    # a cluster the layout does not list keeps its bucket numbers
    later = routed.filter(pa.compute.equal(routed["cluster"], "later"))[BUCKET_COLUMN].to_pylist()
    assert later == bucket_of(pa.array(["t"] * n), pa.array(range(n), pa.int32()), 32).tolist()
    copies = to_every_bucket(pa.table({"cluster": ["local", "later"], "lo": [1, 2], "hi": [3, 4]}), layout)
    assert sorted(zip(copies["cluster"].to_pylist(), copies[BUCKET_COLUMN].to_pylist(), strict=True)) == sorted(
        [*(("local", k) for k in keys), *(("later", b) for b in range(32))])


def test_layout_keys_are_checked_and_kept_in_json() -> None:
    layout = place(BucketLayout(32, {"a": 3, "b": 1}), 2)
    assert BucketLayout.from_json(json.loads(json.dumps(layout.to_json()))) == layout
    assert BucketLayout.from_json({"default": 32, "clusters": {"a": 3}}).keys == {}  # a layout kept before keys
    with pytest.raises(ValueError, match="3 distinct key numbers"):
        BucketLayout(32, {"a": 3}, {"a": (0, 0, 1)})
    with pytest.raises(ValueError, match="at least 0"):
        BucketLayout(32, {"a": 1}, {"a": (CLUSTER_STAGE,)})


def test_a_new_checkpoint_places_its_clusters_keys(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="local")
    h = History("local")
    h.broker(1).controller(1, 1).topic("t", {p: [1] for p in range(3)})
    for p in range(3):
        h.state("t", p, 1, 0, 1, [1], op="CREATE")
    lake.append("znode_events", h.rows, "w", 0)
    layout = checkpoint_buckets(lake, tmp_path / "ckpt", 32, state_partitions=2)
    assert layout.keys == {"local": placed_keys("local", 3, 2)}
    assert json.loads((tmp_path / "ckpt" / BUCKETS_FILE).read_text())["keys"] == {"local": list(layout.keys["local"])}
    assert checkpoint_buckets(lake, tmp_path / "ckpt", 32, state_partitions=4) == layout  # kept for its life
