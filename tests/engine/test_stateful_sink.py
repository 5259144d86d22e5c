"""The stateful sink's driver-side rule for anomalies two keys found: one row per id, its earliest finding."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from engine.stateful_sink import APPENDED, REPLACED, one_per_id
from lakehouse.spark_schema import spark_arrow_schema
from models.tables import ANOMALIES, DERIVED_TABLES


def _found(rows: list[dict[str, object]]) -> pa.Table:
    schema = spark_arrow_schema(ANOMALIES)
    return pa.Table.from_pylist([{"cluster": "c", "kind": "SPLIT_BRAIN", "severity": "critical", **r} for r in rows],
                                schema=schema)


def test_one_row_per_id_at_its_lowest_zxid_then_lowest_last_evidence() -> None:
    found = _found([
        {"anomaly_id": "a", "zxid": 9, "evidence": ["x", "e1"]},
        {"anomaly_id": "a", "zxid": 4, "evidence": ["e9"]},  # lowest zxid wins
        {"anomaly_id": "b", "zxid": None, "evidence": ["e1"]},  # a null zxid sorts last
        {"anomaly_id": "b", "zxid": 7, "evidence": []},
        {"anomaly_id": "c", "zxid": 3, "evidence": ["e5"]},
        {"anomaly_id": "c", "zxid": 3, "evidence": ["z", "e2"]},  # same zxid: the lower last evidence id
        {"anomaly_id": "d", "zxid": 1, "evidence": None},
    ])
    kept = {r["anomaly_id"]: (r["zxid"], r["evidence"]) for r in one_per_id(found).to_pylist()}
    assert kept == {"a": (4, ["e9"]), "b": (7, []), "c": (3, ["z", "e2"]), "d": (1, None)}
    assert one_per_id(found.slice(0, 0)).num_rows == 0


def test_the_sink_writes_every_derived_table_in_one_way() -> None:
    ways = [ANOMALIES, *APPENDED, *REPLACED]
    assert sorted(t.name for t in ways) == sorted(t.name for t in DERIVED_TABLES)


def test_a_rebuild_gives_an_older_release_s_anomalies_table_today_s_columns(tmp_path: object) -> None:
    from deltalake import DeltaTable, write_deltalake

    from engine.stateful_sink import reset_derived
    from lakehouse import Lake

    lake = Lake(str(tmp_path), "c")
    today = spark_arrow_schema(ANOMALIES)
    older = pa.schema([f for f in today if f.name not in ("episode_id", "ended_at", "ended_zxid", "duration_ms")])
    write_deltalake(lake.table_path(ANOMALIES.name), older.empty_table())  # as a release before them wrote it

    def columns() -> set[str]:
        return {f.name for f in DeltaTable(lake.table_path(ANOMALIES.name)).schema().fields}

    assert "episode_id" not in columns()
    reset_derived(lake, "rebuild")
    assert set(today.names) <= columns()


def test_a_rebuild_removes_the_metadata_events_table_an_older_release_stored(tmp_path: object) -> None:
    """``metadata_events`` is a view now: a stored copy would go stale beside it."""
    from deltalake import write_deltalake

    from engine.stateful_sink import reset_derived
    from lakehouse import Lake
    from models.tables import METADATA_EVENTS, RETIRED_TABLES

    lake = Lake(str(tmp_path), "c")
    assert METADATA_EVENTS.name in RETIRED_TABLES
    stored = os.path.join(lake.root, METADATA_EVENTS.name)
    write_deltalake(stored, spark_arrow_schema(METADATA_EVENTS).empty_table())
    write_deltalake(lake.table_path(ANOMALIES.name), spark_arrow_schema(ANOMALIES).empty_table())
    reset_derived(lake, "rebuild")
    assert not os.path.exists(stored) and lake.exists(ANOMALIES.name)



def _packed(table: str, cluster: str, n: int, first: int = 0) -> bytes:
    """``n`` rows of ``table`` (zxid ``first`` on) as a key's packed output: the required columns filled."""
    from datetime import UTC, datetime

    from lakehouse.arrow_schema import arrow_schema
    from pipelines.bucket_fold import ipc_bytes

    required = {f.name for f in arrow_schema(table) if not f.nullable}
    schema = spark_arrow_schema(table)
    filler = {pa.types.is_string: "x", pa.types.is_integer: 0, pa.types.is_boolean: False,
              pa.types.is_timestamp: datetime(2026, 1, 1, tzinfo=UTC)}
    cols = {f.name: pa.array([next(v for is_type, v in filler.items() if is_type(f.type))] * n, f.type)
            if f.name in required else pa.nulls(n, f.type) for f in schema}
    cols["cluster"] = pa.array([cluster] * n, pa.string())
    cols["zxid"] = pa.array(range(first, first + n), pa.int64())
    return ipc_bytes(pa.table(cols, schema=schema))


def _record(table: str, cluster: str, bucket: int, packed: bytes) -> dict[str, object]:
    return {"table": table, "cluster": cluster, "bucket": bucket, "packed": packed}


def test_a_task_writes_one_file_per_appended_table_and_one_per_key_of_a_state_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from engine import stateful_sink
    from models.tables import KRAFT_METADATA_EVENTS, PARTITION_STATE

    for table in (KRAFT_METADATA_EVENTS, PARTITION_STATE):  # the sink creates its tables first
        (tmp_path / table.name).mkdir()
    keys = [(c, b) for c in ("a", "b") for b in range(4)]
    outputs = [_record(KRAFT_METADATA_EVENTS.name, c, b, _packed(KRAFT_METADATA_EVENTS.name, c, 3, 10 * b)) for c, b in keys]
    outputs += [_record(PARTITION_STATE.name, c, b, _packed(PARTITION_STATE.name, c, 2)) for c, b in keys]
    outputs.append(_record(ANOMALIES.name, "a", 1, b"packed"))
    by_table: dict[str, list[dict[str, object]]] = {}
    for r in stateful_sink.output_files(str(tmp_path), outputs):
        by_table.setdefault(str(r["table"]), []).append(r)
    assert [r["rows"] for r in by_table[KRAFT_METADATA_EVENTS.name]] == [24]  # eight keys' rows, one file
    written = pq.read_table(f"{tmp_path}/{KRAFT_METADATA_EVENTS.name}/{by_table[KRAFT_METADATA_EVENTS.name][0]['path']}")
    assert sorted(zip(written["cluster"].to_pylist(), written["zxid"].to_pylist(), strict=True)) == sorted(
        (c, z) for c, b in keys for z in range(10 * b, 10 * b + 3))
    # a file per key: committed, it replaces that key's last one
    assert sorted((r["cluster"], r["bucket"]) for r in by_table[PARTITION_STATE.name]) == keys
    assert by_table[ANOMALIES.name] == [{"table": ANOMALIES.name, "cluster": "a", "bucket": 1, "packed": b"packed"}]

    monkeypatch.setattr(stateful_sink, "APPEND_FILE_ROWS", 7)
    files = [r for r in stateful_sink.output_files(str(tmp_path), outputs) if r["table"] == KRAFT_METADATA_EVENTS.name]
    assert [r["rows"] for r in files] == [9, 9, 6]  # written once a table's gathered rows reach the cap


def test_a_key_writes_its_state_and_its_large_appended_rows_itself_and_packs_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from engine import stateful_sink
    from lakehouse.files import cluster_tag, file_key
    from models.tables import KRAFT_METADATA_EVENTS, PARTITION_STATE, PARTITION_TRANSITIONS
    from pipelines.bucket_fold import ipc_table

    for table in (KRAFT_METADATA_EVENTS, PARTITION_STATE, PARTITION_TRANSITIONS):
        (tmp_path / table.name).mkdir()
    monkeypatch.setattr(stateful_sink, "KEY_FILE_ROWS", 5)
    tables = [(KRAFT_METADATA_EVENTS.name, ipc_table(_packed(KRAFT_METADATA_EVENTS.name, "a", 5))),  # a file's worth
              (PARTITION_TRANSITIONS.name, ipc_table(_packed(PARTITION_TRANSITIONS.name, "a", 4))),  # too few
              (PARTITION_STATE.name, ipc_table(_packed(PARTITION_STATE.name, "a", 1))),  # state: always
              (ANOMALIES.name, pa.table({"anomaly_id": ["x"]}))]
    records = {r["table"]: r for r in stateful_sink.key_outputs(str(tmp_path), "a", 3, tables)}
    assert records[KRAFT_METADATA_EVENTS.name]["rows"] == 5 and "packed" not in records[KRAFT_METADATA_EVENTS.name]
    assert records[PARTITION_STATE.name]["rows"] == 1
    assert file_key(str(records[PARTITION_STATE.name]["path"])) == (cluster_tag("a"), 3)
    assert pq.read_table(tmp_path / KRAFT_METADATA_EVENTS.name / str(records[KRAFT_METADATA_EVENTS.name]["path"])).num_rows == 5
    assert "path" not in records[PARTITION_TRANSITIONS.name] and "path" not in records[ANOMALIES.name]

    # the task's writer passes the written files on and writes the packed rows
    out = stateful_sink.output_files(str(tmp_path), list(records.values()))
    by_table = {r["table"]: r for r in out}
    assert by_table[KRAFT_METADATA_EVENTS.name] == records[KRAFT_METADATA_EVENTS.name]
    assert by_table[PARTITION_TRANSITIONS.name]["rows"] == 4 and by_table[ANOMALIES.name] == records[ANOMALIES.name]
    assert sorted(p.name for p in (tmp_path / PARTITION_TRANSITIONS.name).iterdir()) == [
        by_table[PARTITION_TRANSITIONS.name]["path"]]


def test_staged_batches_commit_as_one_every_appended_file_and_each_key_s_newest_state(tmp_path: Path) -> None:
    from engine.stateful_sink import newest_per_key
    from lakehouse.files import DataFile, StagedFiles
    from models.tables import KRAFT_METADATA_EVENTS, PARTITION_STATE

    def f(table: str, name: str) -> DataFile:
        return DataFile(table, name, 10, 1, "{}", 0)

    staged = StagedFiles(tmp_path / "ckpt")
    assert staged.batches() == [] and not staged.holds(3)
    staged.add(4, [(KRAFT_METADATA_EVENTS, None, f(KRAFT_METADATA_EVENTS.name, "m4")),
                   (PARTITION_STATE, ("c", 1), f(PARTITION_STATE.name, "s4-1"))])
    staged.add(3, [(KRAFT_METADATA_EVENTS, None, f(KRAFT_METADATA_EVENTS.name, "m3")),
                   (PARTITION_STATE, ("c", 1), f(PARTITION_STATE.name, "s3-1")),
                   (PARTITION_STATE, ("c", 2), f(PARTITION_STATE.name, "s3-2"))])
    assert staged.holds(3) and [b for b, _ in staged.batches()] == [3, 4]  # oldest first, read back whole

    files, superseded = newest_per_key(staged.batches())
    assert sorted((spec.name, key, df.path) for spec, key, df in files) == [
        (KRAFT_METADATA_EVENTS.name, None, "m3"), (KRAFT_METADATA_EVENTS.name, None, "m4"),
        (PARTITION_STATE.name, ("c", 1), "s4-1"), (PARTITION_STATE.name, ("c", 2), "s3-2")]
    assert [df.path for df in superseded] == ["s3-1"]  # never committed: deleted after the commit
    staged.remove([3, 4])
    assert staged.batches() == [] and not staged.holds(4)


def test_the_age_of_the_oldest_staged_batch(tmp_path: Path) -> None:
    import os

    from lakehouse.files import StagedFiles

    staged = StagedFiles(tmp_path / "ckpt")
    assert staged.oldest_age_s() == 0.0
    staged.add(1, [])
    staged.add(2, [])
    os.utime(staged.folder / f"{1:020d}.json", (1000.0, 1000.0))
    os.utime(staged.folder / f"{2:020d}.json", (1030.0, 1030.0))
    assert staged.oldest_age_s(now=1060.0) == 60.0
    staged.remove([1, 2])
    assert staged.oldest_age_s(now=1060.0) == 0.0
