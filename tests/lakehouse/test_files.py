"""Data files written apart from their commit (``lakehouse.files``) and committed by ``Lake.commit_files``: what
the stateful query's executors write and its driver commits. Read back by delta-rs and by Delta's connector,
pruned by their statistics, replaced per key, and never committed twice."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from lakehouse import Lake
from lakehouse.files import cluster_tag, file_key, file_stats, write_data_file

TABLE = "partition_transitions"
STATE = "partition_state"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _transitions(lake: Lake, zxids: range) -> pa.Table:
    return lake.conform(TABLE, [{"topic": "t", "partition": z % 3, "zxid": z, "event_time": T0 + timedelta(microseconds=z),
                                 "from_state": "NewPartition", "to_state": "OnlinePartition", "legal": True,
                                 "cause": "test", "event_id": f"e{z}"} for z in zxids])


def _state(lake: Lake, partitions: range, epoch: int) -> pa.Table:
    return lake.conform(STATE, [{"topic": "t", "partition": p, "state": "OnlinePartition", "leader": 1,
                                 "leader_epoch": epoch, "isr": [1], "replicas": [1], "as_of_zxid": epoch}
                                for p in partitions])


def test_committed_files_are_the_tables_rows_once(lake: Lake) -> None:
    lake.ensure(TABLE)
    path = lake.table_path(TABLE)
    files = [write_data_file(path, TABLE, _transitions(lake, range(a, a + 5))) for a in (0, 5)]
    assert lake.commit_files(TABLE, files, "w", 0)
    stray = write_data_file(path, TABLE, _transitions(lake, range(100, 105)))  # a replay's first attempt
    assert not lake.commit_files(TABLE, [stray], "w", 0)  # the batch is in: nothing more
    assert sorted(lake.read_arrow(TABLE)["zxid"].to_pylist()) == list(range(10))
    assert lake.last_batch_seq(TABLE, "w") == 0
    assert lake.commit_files(TABLE, [], "w", 1)  # a batch with no rows still records that it is done
    assert lake.last_batch_seq(TABLE, "w") == 1 and lake.row_count(TABLE) == 10


def test_statistics_bound_every_row_and_prune_files(lake: Lake) -> None:
    rows = _transitions(lake, range(1, 2002, 1000))  # event times with microseconds: rounded outward
    stats = json.loads(file_stats(TABLE, rows))
    assert stats["numRecords"] == 3 and stats["nullCount"]["zxid"] == 0
    assert (stats["minValues"]["zxid"], stats["maxValues"]["zxid"]) == (1, 2001)
    assert stats["minValues"]["event_time"] == "2026-01-01T00:00:00.000Z"
    assert stats["maxValues"]["event_time"] == "2026-01-01T00:00:00.003Z"  # 2.001 ms rounded up
    lake.ensure(TABLE)
    path = lake.table_path(TABLE)
    lake.commit_files(TABLE, [write_data_file(path, TABLE, _transitions(lake, range(a, a + 10))) for a in (0, 10, 20)],
                      "w", 0)
    spans = lake.file_spans(TABLE, "zxid")
    assert spans is not None and sorted((s.low, s.high) for s in spans) == [(0, 9), (10, 19), (20, 29)]
    hit = lake.scan(TABLE, columns=["zxid"], where=ds.field("zxid") >= 25)
    assert sorted(hit["zxid"].to_pylist()) == [25, 26, 27, 28, 29]


def test_a_key_replaces_only_its_own_files(lake: Lake) -> None:
    lake.ensure(STATE)
    path = lake.table_path(STATE)
    lake.commit_files(STATE, [write_data_file(path, STATE, _state(lake, range(0, 4), 1), ("c", 0)),
                              write_data_file(path, STATE, _state(lake, range(4, 8), 1), ("c", 1))],
                      "w", 0, replace_all=True)
    newer = write_data_file(path, STATE, _state(lake, range(0, 4), 2), ("c", 0))
    assert file_key(newer.path) == (cluster_tag("c"), 0)
    lake.commit_files(STATE, [newer], "w", 1, replace_keys={(cluster_tag("c"), 0)})
    got = {r["partition"]: r["leader_epoch"] for r in lake.read_arrow(STATE).to_pylist()}
    assert got == {0: 2, 1: 2, 2: 2, 3: 2, 4: 1, 5: 1, 6: 1, 7: 1}


def test_a_writers_first_commit_replaces_what_others_left(lake: Lake) -> None:
    lake.append(STATE, _state(lake, range(0, 10), 1), writer_id="other", batch_seq=0)
    path = lake.table_path(STATE)
    lake.commit_files(STATE, [write_data_file(path, STATE, _state(lake, range(0, 2), 5), ("c", 3))], "w", 0,
                      replace_all=True)
    assert sorted((r["partition"], r["leader_epoch"]) for r in lake.read_arrow(STATE).to_pylist()) == [(0, 5), (1, 5)]


@pytest.mark.spark
def test_the_connector_reads_and_appends_to_committed_files(spark: Any, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="test")
    lake.ensure(TABLE)
    path = lake.table_path(TABLE)
    lake.commit_files(TABLE, [write_data_file(path, TABLE, _transitions(lake, range(10)))], "w", 0)
    frame = spark.read.format("delta").load(path)
    assert sorted(r["zxid"] for r in frame.filter("zxid >= 7").select("zxid").collect()) == [7, 8, 9]
    frame.filter("zxid < 2").write.format("delta").mode("append").save(path)  # the connector after delta-rs
    lake.commit_files(TABLE, [write_data_file(path, TABLE, _transitions(lake, range(20, 22)))], "w", 1)
    assert sorted(lake.read_arrow(TABLE)["zxid"].to_pylist()) == sorted([*range(10), 0, 1, 20, 21])


def test_scan_batches_reads_the_current_rows_by_either_reader(lake: Lake) -> None:
    from deltalake import write_deltalake

    rows = _transitions(lake, range(0, 30))
    lake.append(TABLE, rows.slice(0, 20), "w", 0)
    lake.overwrite(TABLE, rows.slice(10, 20), "w", 1)  # the first file is no longer a current one
    got = pa.Table.from_batches(list(lake.scan_batches(TABLE, ["zxid", "cluster"])))  # Arrow's reader, file by file
    assert got.column_names == ["zxid", "cluster"] and sorted(got["zxid"].to_pylist()) == list(range(10, 30))
    # a partitioned table's files lack their partition column: delta-rs' own scan reads it
    write_deltalake(lake.table_path(STATE), _state(lake, range(4), 1), partition_by=["cluster"])
    got = pa.Table.from_batches(list(lake.scan_batches(STATE, ["cluster", "partition"])))
    assert sorted(got.to_pylist(), key=lambda r: r["partition"]) == [
        {"cluster": lake.cluster, "partition": p} for p in range(4)]
