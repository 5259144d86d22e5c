"""delta-rs and Delta's Spark connector on the same tables: each reads, streams and time-travels what the other
wrote, honours the other's app transactions and checkpoints, and neither loses a commit when both append at
once. Table features delta-rs cannot handle are measured here, kept off in Spark's session and refused."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from pyspark.sql import SparkSession

from lakehouse import Lake
from lakehouse.maintenance import (
    SHARED_FEATURES,
    UnsupportedTableFeatures,
    check_shared_protocol,
    maintain_table,
)
from lakehouse.spark_schema import spark_schema
from models.tables import ALL_TABLES
from services.spark_session import DELTA_FEATURE_DEFAULTS
from tests.lakehouse.delta_engines import (
    Connector,
    DeltaEngine,
    engine_named,
    sample_rows,
    tables_covering_every_column_type,
)

TABLE = "partition_transitions"
COVERING = tables_covering_every_column_type()
"""The tables the two engines' schema tests write: together they hold every column type of every table."""


def _rows(data: pa.Table) -> list[str]:
    """Rows as comparable text, order-free, whatever engine produced them (shaped to the spec first)."""
    return sorted(repr(sorted(r.items())) for r in Lake("unused", cluster="test").conform_read(TABLE, data).to_pylist())


def _commit_time(path: str, version: int) -> float:
    return os.stat(os.path.join(path, "_delta_log", f"{version:020d}.json")).st_mtime


def _drop_commits_before(path: str, version: int) -> None:
    """Delete the JSON commits below ``version`` (what log cleanup does): only a checkpoint can rebuild them."""
    for v in range(version):
        os.remove(os.path.join(path, "_delta_log", f"{v:020d}.json"))


# ------------------------------------------------------------------------------------------ batch and time travel
# each engine's own time travel is the contract (test_lake.py); here, each reads what the other wrote
@pytest.mark.spark
@pytest.mark.parametrize(("writer", "reader"), [("delta-rs", "connector"), ("connector", "delta-rs")])
def test_time_travel_by_version_and_timestamp(request: pytest.FixtureRequest, writer: str, reader: str,
                                              tmp_path: Path) -> None:
    writer_engine, reader_engine = engine_named(request, writer), engine_named(request, reader)
    path = str(tmp_path / TABLE)
    parts = [sample_rows(TABLE, 2, start=10 * i, tag=f"v{i}") for i in range(3)]
    for part in parts:
        writer_engine.append(path, part)
        time.sleep(1.1)  # commit times a second apart: a time between two commits selects the first
    assert _rows(reader_engine.read(path)) == _rows(pa.concat_tables(parts))
    assert _rows(reader_engine.read(path, version=1)) == _rows(pa.concat_tables(parts[:2]))
    between = (_commit_time(path, 1) + _commit_time(path, 2)) / 2
    as_of = datetime.fromtimestamp(between, tz=UTC)
    assert _rows(reader_engine.read(path, as_of=as_of)) == _rows(pa.concat_tables(parts[:2]))


def test_every_column_type_from_delta_rs_reads_in_the_connector(spark: SparkSession, lake: Lake) -> None:
    for table in COVERING:
        data = sample_rows(table, 3)
        lake.append(table, data, writer_id="w", batch_seq=0)
        df = spark.read.format("delta").load(lake.table_path(table))
        assert [(f.name, f.dataType) for f in df.schema] == [(f.name, f.dataType) for f in spark_schema(table)]
        got = lake.conform_read(table, df.toArrow())
        assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, data.to_pylist())), table


def test_every_column_type_from_the_connector_reads_in_delta_rs(spark: SparkSession, tmp_path: Path) -> None:
    from delta.tables import DeltaTable as SparkDeltaTable

    lake = Lake(tmp_path / "lake", cluster="test")
    for table in COVERING:
        path = lake.table_path(table)
        SparkDeltaTable.createIfNotExists(spark).location(path).addColumns(spark_schema(table)).execute()
        data = sample_rows(table, 3)
        spark.createDataFrame(data.to_pylist(), schema=spark_schema(table)).write.format("delta").mode("append").save(path)
        stored = pa.schema(DeltaTable(path).schema().to_arrow())
        spec = ALL_TABLES[table]
        assert [f.name for f in stored] == list(spec.column_names), table
        assert {f.name: f.nullable for f in stored} == {c.name: c.nullable for c in spec.columns}, table
        assert DeltaTable(path).protocol().min_reader_version == 1
        assert lake.read_arrow(table).sort_by("event_id" if "event_id" in spec.column_names else spec.key[-1]) \
            == data.sort_by("event_id" if "event_id" in spec.column_names else spec.key[-1]), table
        check_shared_protocol(path)  # Spark's table keeps the protocol both engines handle


def test_every_table_keeps_statistics_on_its_filter_columns_only(writer_engine: DeltaEngine, tmp_path: Path) -> None:
    """Both engines honour the table's statistics columns: the data files' min/max/null counts cover the cluster
    and the zxid and time columns, and no other column (Delta's default would be the first 32). Every table as
    ``Lake`` writes it; the connector (which only a user's own Spark job would write with) on the covering ones."""
    lake = Lake(tmp_path / "lake", cluster="test")
    tables = ALL_TABLES if writer_engine.name == "delta-rs" else COVERING
    for table in tables:
        spec = ALL_TABLES[table]
        lake.ensure(table)
        writer_engine.append(lake.table_path(table), sample_rows(table, 3))
        adds = [a for a in _actions(lake.table_path(table)) if "add" in a]
        assert adds, table
        for add in adds:
            stats = json.loads(add["add"]["stats"])
            assert stats["numRecords"] > 0
            assert set(stats["nullCount"]) == set(spec.stats_columns), table
            assert set(stats.get("minValues", {})) <= set(spec.stats_columns), table


def _actions(path: str) -> list[dict[str, Any]]:
    log_dir = os.path.join(path, "_delta_log")
    return [json.loads(line) for name in sorted(os.listdir(log_dir)) if name.endswith(".json")
            for line in open(os.path.join(log_dir, name), encoding="utf-8") if line.strip()]


# ------------------------------------------------------------------------------------------ streaming
def test_connector_streams_a_delta_rs_table(spark: SparkSession, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="test", checkpoint_interval=0)
    for b in range(5):  # versions 1..5 (ensure makes version 0)
        lake.append("znode_events", sample_rows("znode_events", 3, start=10 * b, tag=f"b{b}"), "collector", b)
    path = lake.table_path("znode_events")
    batches: list[list[int]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append(sorted(r.zxid for r in df.select("zxid").collect()))

    def drain() -> None:
        query = (spark.readStream.format("delta").option("startingVersion", 3).option("maxFilesPerTrigger", 1)
                 .load(path).writeStream.foreachBatch(collect)
                 .option("checkpointLocation", str(tmp_path / "stream")).trigger(availableNow=True).start())
        query.awaitTermination()

    drain()
    assert batches == [[20, 21, 22], [30, 31, 32], [40, 41, 42]]  # one file per micro-batch, from version 3
    batches.clear()
    for b in (5, 6):
        lake.append("znode_events", sample_rows("znode_events", 3, start=10 * b, tag=f"b{b}"), "collector", b)
    DeltaTable(path).optimize.compact()  # delta-rs rewrites every file (dataChange=false): nothing new to emit
    lake.append("znode_events", sample_rows("znode_events", 3, start=70, tag="b7"), "collector", 7)
    drain()
    assert batches == [[50, 51, 52], [60, 61, 62], [70, 71, 72]]


# ------------------------------------------------------------------------------------------ app transactions
def test_app_transactions_both_ways(spark: SparkSession, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="test")
    path = lake.table_path(TABLE)
    connector = Connector(spark)
    connector.append(path, sample_rows(TABLE, 2, tag="a"), app_id="spark-job", txn_version=3)
    assert DeltaTable(path).transaction_version("spark-job") == 3  # delta-rs reads Spark's txn action
    assert lake.append(TABLE, sample_rows(TABLE, 2, tag="dup"), writer_id="spark-job", batch_seq=3) is False

    write_deltalake(path, sample_rows(TABLE, 2, tag="b"), mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction("collector", 7)]))
    version, rows = DeltaTable(path).version(), DeltaTable(path).to_pyarrow_table().num_rows
    connector.append(path, sample_rows(TABLE, 2, tag="again"), app_id="collector", txn_version=7)  # Spark skips it
    assert (DeltaTable(path).version(), DeltaTable(path).to_pyarrow_table().num_rows) == (version, rows)
    connector.append(path, sample_rows(TABLE, 2, tag="c"), app_id="collector", txn_version=8)
    assert DeltaTable(path).transaction_version("collector") == 8
    assert DeltaTable(path).to_pyarrow_table().num_rows == rows + 2


# ------------------------------------------------------------------------------------------ checkpoints
def test_connector_reads_a_delta_rs_checkpoint(spark: SparkSession, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="test", checkpoint_interval=0)
    for b in range(5):
        lake.append(TABLE, sample_rows(TABLE, 2, start=10 * b), writer_id="collector", batch_seq=b)
    path = lake.table_path(TABLE)
    DeltaTable(path).create_checkpoint()  # at version 5
    lake.append(TABLE, sample_rows(TABLE, 2, start=50), writer_id="collector", batch_seq=5)
    _drop_commits_before(path, 5)
    assert spark.read.format("delta").load(path).count() == 12
    assert spark.read.format("delta").option("versionAsOf", 5).load(path).count() == 10
    connector = Connector(spark)  # the app transaction survives in the checkpoint: Spark still skips batch 5
    connector.append(path, sample_rows(TABLE, 2, tag="dup"), app_id="collector", txn_version=5)
    assert DeltaTable(path).version() == 6


def test_delta_rs_reads_a_connector_checkpoint(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / TABLE)
    connector = Connector(spark)
    connector.append(path, sample_rows(TABLE, 1, start=0), app_id="rebuild", txn_version=0)
    # a checkpoint every 2 commits (10 by default): the connector writes one at version 2
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    connector.append(path, sample_rows(TABLE, 1, start=1), app_id="rebuild", txn_version=1)
    assert os.path.exists(os.path.join(path, "_delta_log", f"{2:020d}.checkpoint.parquet"))
    _drop_commits_before(path, 2)
    dt = DeltaTable(path)
    assert dt.version() == 2 and dt.to_pyarrow_table().num_rows == 2
    assert dt.transaction_version("rebuild") == 1
    write_deltalake(path, sample_rows(TABLE, 1, start=2), mode="append")
    assert spark.read.format("delta").load(path).count() == 3


# ------------------------------------------------------------------------------------------ concurrency
def test_concurrent_appends_from_both_engines_lose_no_commit(spark: SparkSession, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="test", checkpoint_interval=0)
    lake.ensure(TABLE)
    path = lake.table_path(TABLE)
    per_writer, rows_each = 6, 3
    errors: list[BaseException] = []

    def delta_rs_writer(name: str) -> None:
        try:
            for b in range(per_writer):
                lake.append(TABLE, sample_rows(TABLE, rows_each, tag=f"{name}{b}"), writer_id=name, batch_seq=b)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=delta_rs_writer, args=(n,)) for n in ("rs-a", "rs-b")]
    for t in threads:
        t.start()
    connector = Connector(spark)
    for b in range(per_writer):
        connector.append(path, sample_rows(TABLE, rows_each, tag=f"spark{b}"), app_id="spark", txn_version=b)
    for t in threads:
        t.join()
    assert not errors
    commits = 3 * per_writer
    dt = DeltaTable(path)
    assert dt.version() == commits  # version 0 is the table's creation
    assert dt.to_pyarrow_table().num_rows == commits * rows_each
    assert spark.read.format("delta").load(path).count() == commits * rows_each
    assert {w: dt.transaction_version(w) for w in ("rs-a", "rs-b", "spark")} == dict.fromkeys(
        ("rs-a", "rs-b", "spark"), per_writer - 1)


# ------------------------------------------------------------------------------------------ table features
@pytest.mark.parametrize("key", sorted(k for k in DELTA_FEATURE_DEFAULTS if "Version" not in k))
def test_spark_session_keeps_delta_feature_defaults_off(spark: SparkSession, tmp_path: Path, key: str) -> None:
    turned_on = {"enableDeletionVectors": ("true", "deletionVectors"), "columnMapping.mode": ("name", "columnMapping"),
                 "checkpointPolicy": ("v2", "v2Checkpoint"), "enableRowTracking": ("true", "rowTracking"),
                 "enableTypeWidening": ("true", "typeWidening"),
                 "enableInCommitTimestamps": ("true", "inCommitTimestamp")}
    on, feature = turned_on[key.rsplit("defaults.", 1)[1]]
    assert spark.conf.get(key) == DELTA_FEATURE_DEFAULTS[key]
    off_path, on_path = str(tmp_path / "off"), str(tmp_path / "on")
    spark.sql(f"CREATE TABLE delta.`{off_path}` (zxid BIGINT) USING delta")
    spark.conf.set(key, on)
    try:  # the conf is a real Delta default: turned on, a new table gets the feature
        spark.sql(f"CREATE TABLE delta.`{on_path}` (zxid BIGINT) USING delta")
    finally:
        spark.conf.set(key, DELTA_FEATURE_DEFAULTS[key])
    off, turned = DeltaTable(off_path).protocol(), DeltaTable(on_path).protocol()
    assert (off.min_reader_version, off.min_writer_version) == (1, 2)
    check_shared_protocol(off_path)
    assert feature in (turned.writer_features or [])
    with pytest.raises(UnsupportedTableFeatures, match=feature):
        check_shared_protocol(on_path)


# (table DDL, statement run after the first insert, feature, delta-rs reads it, delta-rs appends to it)
FEATURE_CASES = {
    "deletionVectors": ("TBLPROPERTIES ('delta.enableDeletionVectors'='true')",
                        "DELETE FROM delta.`{p}` WHERE zxid = 1", False, True),
    "v2Checkpoint": ("TBLPROPERTIES ('delta.checkpointPolicy'='v2')", None, False, True),
    "typeWidening": ("TBLPROPERTIES ('delta.enableTypeWidening'='true')", None, False, False),
    "vacuumProtocolCheck": ("TBLPROPERTIES ('delta.feature.vacuumProtocolCheck'='supported')", None, False, False),
    "clustering": ("CLUSTER BY (zxid)", None, True, False),
    "domainMetadata": ("TBLPROPERTIES ('delta.feature.domainMetadata'='supported')", None, True, False),
    "rowTracking": ("TBLPROPERTIES ('delta.enableRowTracking'='true')", None, True, False),
    "inCommitTimestamp": ("TBLPROPERTIES ('delta.enableInCommitTimestamps'='true')", None, True, False),
    "checkpointProtection": ("TBLPROPERTIES ('delta.feature.checkpointProtection'='supported')", None, True, False),
    "columnMapping": ("TBLPROPERTIES ('delta.columnMapping.mode'='name')", None, True, True),  # no OPTIMIZE
}


@pytest.mark.parametrize("feature", list(FEATURE_CASES))
def test_features_delta_rs_cannot_handle_are_refused(spark: SparkSession, tmp_path: Path, feature: str) -> None:
    ddl, after, rs_reads, rs_appends = FEATURE_CASES[feature]
    lake = Lake(tmp_path / "lake", cluster="test")
    path = lake.table_path("znode_events")
    spark.sql(f"CREATE TABLE delta.`{path}` (zxid BIGINT, path STRING) USING delta {ddl}")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1, '/a'), (2, '/b'), (3, '/c')")
    if after:
        spark.sql(after.format(p=path))
    dt = DeltaTable(path)
    assert feature in set(dt.protocol().writer_features or []) - SHARED_FEATURES

    def reads() -> bool:
        try:
            DeltaTable(path).to_pyarrow_table()
        except Exception:
            return False
        return True

    def appends() -> bool:
        try:
            write_deltalake(path, pa.table({"zxid": pa.array([9], pa.int64()), "path": ["/z"]}), mode="append")
        except Exception:
            return False
        return True

    assert reads() is rs_reads  # what delta-rs 1.6.6 can do: the reason the guard exists
    version = DeltaTable(path).version()
    with pytest.raises(UnsupportedTableFeatures, match=feature):
        maintain_table(lake, "znode_events")
    assert DeltaTable(path).version() == version  # refused before anything was written
    assert appends() is rs_appends
