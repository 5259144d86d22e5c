"""A checkpoint's bucket layout (``engine.stateful.checkpoint_buckets``): each cluster sized by its partitions when
the checkpoint begins, then kept for the checkpoint's life whatever the lake or the settings become."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.stateful import BUCKETS_FILE, WRITER_FILE, checkpoint_buckets, cluster_partitions
from lakehouse import Lake
from pipelines import bucket_fold
from pipelines.bucket_fold import BucketLayout
from tests.history import History


def _write(lake: Lake, cluster: str, partitions: int, batch: int, chroot: str = "") -> None:
    h = History(cluster)
    h.broker(1).controller(1, 1).topic("t", {p: [1] for p in range(partitions)})
    for p in range(partitions):
        h.state("t", p, 1, 0, 1, [1], op="CREATE")
        h.state("t", p, 1, 1, 1, [1])  # a second write of the same znode is not a second partition
    for row in h.rows:
        row["path"] = chroot + row["path"]
    lake.append("znode_events", h.rows, f"w-{cluster}", batch)


@pytest.fixture(autouse=True)
def four_partitions_a_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bucket_fold, "PARTITIONS_PER_BUCKET", 4)  # small clusters stand for large ones


def test_a_new_checkpoint_sizes_each_cluster_and_keeps_the_layout(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="small")
    _write(lake, "small", 3, 0)
    _write(lake, "large", 5, 1, chroot="/kafka")  # a chroot before the path
    assert cluster_partitions(lake) == {"small": 3, "large": 5}
    checkpoint = tmp_path / "ckpt"
    layout = checkpoint_buckets(lake, checkpoint, 32)
    assert layout == BucketLayout(32, {"small": 1, "large": 2})
    assert json.loads((checkpoint / BUCKETS_FILE).read_text()) == {"default": 32, "clusters": {"large": 2, "small": 1}}
    _write(lake, "small", 12, 2)  # the cluster grows; the state stays keyed as it began
    assert checkpoint_buckets(lake, checkpoint, 8) == layout


def test_a_checkpoint_begun_without_a_layout_keeps_every_cluster_at_the_setting(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="small")
    _write(lake, "small", 3, 0)
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / WRITER_FILE).write_text("stateful-query-older")
    (checkpoint / "offsets" / "0").write_text("v1")  # a batch ran: its state is keyed by 32 buckets a cluster
    assert checkpoint_buckets(lake, checkpoint, 32) == BucketLayout(32)
    assert checkpoint_buckets(lake, checkpoint, 32).of("small") == 32


def test_a_checkpoint_no_batch_ran_on_is_sized(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="small")
    _write(lake, "small", 3, 0)
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "offsets").mkdir(parents=True)  # a query started and stopped with nothing to read
    (checkpoint / WRITER_FILE).write_text("stateful-query-new")  # `rebuild` names the writer before it starts
    assert checkpoint_buckets(lake, checkpoint, 32) == BucketLayout(32, {"small": 1})


def test_an_empty_lake_gives_every_cluster_the_setting(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="c")
    assert cluster_partitions(lake) == {}
    assert checkpoint_buckets(lake, tmp_path / "ckpt", 16) == BucketLayout(16)
