"""Version checksum files beside delta-rs commits (``lakehouse.checksums``): every version the lake writes gets
one, each says exactly what the log says (size, file count, protocol, metadata), a broken chain heals or stays
without checksums (never with a wrong one), and Delta's connector takes them as its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from lakehouse import Lake
from lakehouse.checksums import checksum_path, write_checksums
from lakehouse.files import write_data_file
from lakehouse.maintenance import maintain_table
from tests.lakehouse.delta_engines import sample_rows

EVENTS = "znode_events"
STATE = "partition_state"


def _log_state(path: str, version: int) -> tuple[int, int, dict[str, object], dict[str, object]]:
    """(size, files, metaData, protocol) at ``version`` by delta-rs's own replay and the log's own actions."""
    dt = DeltaTable(path, version=version)
    adds = pa.table(dt.get_add_actions(flatten=True))
    meta: dict[str, object] = {}
    protocol: dict[str, object] = {}
    for v in range(version + 1):
        for line in Path(path, "_delta_log", f"{v:020d}.json").read_text().splitlines():
            action = json.loads(line)
            meta = action.get("metaData", meta)
            protocol = action.get("protocol", protocol)
    return sum(adds.column("size_bytes").to_pylist()), adds.num_rows, meta, protocol


def _checksum(path: str, version: int) -> dict[str, object]:
    return json.loads(checksum_path(path, version).read_text())


def _assert_exact(path: str, version: int) -> None:
    crc = _checksum(path, version)
    size, files, meta, protocol = _log_state(path, version)
    assert (crc["tableSizeBytes"], crc["numFiles"]) == (size, files), f"version {version}"
    assert _set(crc["metadata"]) == _set(meta) and _set(crc["protocol"]) == _set(protocol), f"version {version}"


def _set(action: object) -> dict[str, object]:
    """An action's fields that are set (a null field and a missing one say the same)."""
    assert isinstance(action, dict)
    return {k: v for k, v in action.items() if v is not None}


def _busy_table(lake: Lake) -> str:
    """A table that has seen every kind of commit the lake makes: create, appends, an overwrite, file commits that
    replace keys, a compaction, a checkpoint and a vacuum."""
    lake.append(EVENTS, sample_rows(EVENTS, 30, tag="a"), writer_id="w", batch_seq=1)
    lake.append(EVENTS, sample_rows(EVENTS, 30, start=30, tag="b"), writer_id="w", batch_seq=2)
    lake.optimize(EVENTS)
    lake.append(EVENTS, sample_rows(EVENTS, 10, start=60, tag="c"), writer_id="w", batch_seq=3)
    lake.checkpoint(EVENTS)
    lake.overwrite(EVENTS, sample_rows(EVENTS, 5, start=70, tag="d"), writer_id="w", batch_seq=4)
    lake.vacuum(EVENTS, retention_hours=0)
    return lake.table_path(EVENTS)


def test_every_version_the_lake_writes_has_an_exact_checksum(lake: Lake) -> None:
    path = _busy_table(lake)
    last = DeltaTable(path).version()
    assert last >= 6
    for v in range(last + 1):
        _assert_exact(path, v)


def test_file_commits_that_replace_keys_keep_the_checksum_exact(lake: Lake) -> None:
    lake.ensure(STATE)
    path = lake.table_path(STATE)
    rows = lake.conform(STATE, sample_rows(STATE, 4, tag="s"))
    for seq in range(1, 4):
        files = [write_data_file(path, STATE, rows, key=("test", bucket)) for bucket in (0, 1)]
        lake.commit_files(STATE, files, writer_id="sink", batch_seq=seq, replace_keys=[("test", 0), ("test", 1)])
    maintain_table(lake, STATE, retention_hours=0, allow_short_retention=True)
    for v in range(DeltaTable(path).version() + 1):
        _assert_exact(path, v)


def test_a_commit_without_its_checksum_is_healed_by_the_next(lake: Lake) -> None:
    """A writer that stopped between its commit and its checksum leaves a gap the next commit fills."""
    lake.append(EVENTS, sample_rows(EVENTS, 3, tag="a"), writer_id="w", batch_seq=1)
    path = lake.table_path(EVENTS)
    checksum_path(path, 1).unlink()
    lake.append(EVENTS, sample_rows(EVENTS, 3, start=3, tag="b"), writer_id="w", batch_seq=2)
    for v in (1, 2):
        _assert_exact(path, v)


def test_a_table_without_checksums_starts_them_from_its_checkpoint(tmp_path: Path) -> None:
    """A table from a release that wrote none, its early commits gone to log cleanup: the checkpoint's state
    starts the chain."""
    lake = Lake(tmp_path / "lake", cluster="test", checkpoint_interval=3)
    for seq in range(1, 4):
        lake.append(EVENTS, sample_rows(EVENTS, 3, start=3 * seq, tag=str(seq)), writer_id="w", batch_seq=seq)
    path = lake.table_path(EVENTS)
    assert Path(path, "_delta_log", f"{3:020d}.checkpoint.parquet").exists()
    for crc in Path(path, "_delta_log").glob("*.crc"):
        crc.unlink()
    for v in range(3):
        os.remove(Path(path, "_delta_log", f"{v:020d}.json"))
    lake.append(EVENTS, sample_rows(EVENTS, 3, start=12, tag="4"), writer_id="w", batch_seq=4)
    assert [checksum_path(path, v).exists() for v in range(5)] == [False, False, False, True, True]
    for v in (3, 4):
        crc = _checksum(path, v)
        adds = pa.table(DeltaTable(path, version=v).get_add_actions(flatten=True))
        assert (crc["tableSizeBytes"], crc["numFiles"]) == (sum(adds.column("size_bytes").to_pylist()), adds.num_rows)
        meta = DeltaTable(path).metadata()
        assert (crc["metadata"]["id"], crc["metadata"]["configuration"]) == (meta.id, meta.configuration)
        assert crc["metadata"]["schemaString"] == DeltaTable(path).schema().to_json()


def test_a_remove_without_a_size_leaves_no_checksum(lake: Lake) -> None:
    lake.append(EVENTS, sample_rows(EVENTS, 3, tag="a"), writer_id="w", batch_seq=1)
    path = lake.table_path(EVENTS)
    actions = [json.loads(line) for line in Path(path, "_delta_log", f"{1:020d}.json").read_text().splitlines()]
    [added] = [a for a in actions if "add" in a]
    remove = {"remove": {"path": added["add"]["path"], "deletionTimestamp": 1, "dataChange": True}}
    Path(path, "_delta_log", f"{2:020d}.json").write_text(json.dumps(remove) + "\n")
    assert write_checksums(path, 2) == 0
    assert not checksum_path(path, 2).exists()


def test_an_unreadable_commit_leaves_no_checksum_and_fails_no_write(lake: Lake) -> None:
    """The commit is done when its checksum is written: a log that cannot be read costs the checksum only."""
    lake.append(EVENTS, sample_rows(EVENTS, 3, tag="a"), writer_id="w", batch_seq=1)
    path = lake.table_path(EVENTS)
    Path(path, "_delta_log", f"{2:020d}.json").write_text('{"add": {"path": "x.parquet"}}\n')  # no size
    assert write_checksums(path, 2) == 0
    Path(path, "_delta_log", f"{2:020d}.json").write_text("not json\n")
    assert write_checksums(path, 2) == 0
    assert not checksum_path(path, 2).exists()


@pytest.mark.spark
def test_the_connector_validates_and_uses_the_lake_checksums(spark: SparkSession, lake: Lake) -> None:
    """Delta's own check of a checksum against its replay of the log passes, and its snapshot carries it."""
    path = _busy_table(lake)
    jvm = spark._jvm  # type: ignore[attr-defined]
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]
    snapshot = delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    assert snapshot.version() == DeltaTable(path).version()
    assert snapshot.checksumOpt().isDefined()
    assert snapshot.validateChecksum(getattr(snapshot, "validateChecksum$default$1")())
    assert spark.read.format("delta").load(path).count() == 5
