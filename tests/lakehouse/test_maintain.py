"""`zkledger maintain` and `lakehouse.maintenance` on real Delta tables: compaction, zxid Z-order where files
overlap, checkpoints, VACUUM of orphans with a safe retention that a running stream's versions survive."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from lakehouse import Lake
from lakehouse.maintenance import (
    DEFAULT_RETENTION_HOURS,
    maintain_table,
    maintain_tables,
    stream_floors,
    zxid_depth,
)
from tests.lakehouse.delta_engines import Connector, sample_rows
from zkledger.cli import main

DAY = 86400


def _age(path: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _append_batches(lake: Lake, table: str, batches: int, rows: int = 3, *, start: int = 0, step: int = 10,
                    writer: str = "w") -> None:
    for b in range(batches):
        lake.append(table, sample_rows(table, rows, start=start + b * step, tag=f"{writer}{b}"), writer, b)


def _orphan(table_dir: str, name: str, age_s: float) -> str:
    """A Parquet data file in the table folder that no commit mentions (a writer killed before its commit)."""
    path = os.path.join(table_dir, name)
    pq.write_table(pa.table({"zxid": pa.array([1], pa.int64())}), path)
    _age(path, age_s)
    return path


def test_maintain_compacts_checkpoints_and_vacuums_only_old_orphans(lake: Lake) -> None:
    _append_batches(lake, "znode_events", 6)
    path = lake.table_path("znode_events")
    old = _orphan(path, "part-00000-killed-writer.snappy.parquet", 8 * DAY)
    fresh = _orphan(path, "part-00000-writer-in-flight.snappy.parquet", 60)
    before = DeltaTable(path).version()

    report = maintain_table(lake, "znode_events")

    assert (report.files_before, report.files_after, report.files_compacted) == (6, 1, 6)
    assert not report.zordered and report.zxid_depth == 1.0  # one writer in zxid order: nothing to cluster
    assert report.checkpoint_version == before + 1
    assert os.path.exists(os.path.join(path, "_delta_log", f"{before + 1:020d}.checkpoint.parquet"))
    assert not os.path.exists(old) and os.path.exists(fresh) and report.vacuumed == 1
    assert lake.read_arrow("znode_events", version=before).num_rows == 18  # compacted files are within retention
    assert lake.read_arrow("znode_events").num_rows == 18


def test_short_retention_needs_an_explicit_flag_and_then_drops_old_versions(lake: Lake) -> None:
    _append_batches(lake, "znode_events", 3)
    with pytest.raises(ValueError, match="below Delta's default"):
        maintain_table(lake, "znode_events", retention_hours=1)
    report = maintain_table(lake, "znode_events", retention_hours=0, allow_short_retention=True)
    assert report.vacuumed == 3  # the three compacted small files
    with pytest.raises(Exception):  # noqa: B017 - delta-rs raises its own error for a missing file
        lake.read_arrow("znode_events", version=3)
    assert lake.read_arrow("znode_events").num_rows == 9


def test_interleaved_writers_get_z_ordered_on_zxid(lake: Lake) -> None:
    # a backfill from zxid 0 next to a live collector from 10,000: compaction alone mixes both ranges in a file
    for b in range(8):
        lake.append("znode_events", sample_rows("znode_events", 50, start=b * 50, tag=f"t{b}"), "backfill", b)
        lake.append("znode_events", sample_rows("znode_events", 50, start=10_000 + b * 50, tag=f"w{b}"), "live", b)
    path = lake.table_path("znode_events")
    small = 20_000  # bytes (files here are ~6 kB): several output files, as a large table has by default
    report = maintain_table(lake, "znode_events", target_size=small)
    assert report.zordered and report.zxid_depth is not None and report.zxid_depth > 1.5
    assert zxid_depth(DeltaTable(path)) == 1.0  # sorted on zxid: files no longer overlap
    assert lake.read_arrow("znode_events").num_rows == 800


def test_connector_reads_a_table_delta_rs_maintained(spark: SparkSession, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="test")
    path = lake.table_path("partition_transitions")
    connector = Connector(spark)
    for b in range(4):
        connector.append(path, sample_rows("partition_transitions", 2, start=b * 10), app_id="monitor", txn_version=b)
    report = maintain_table(lake, "partition_transitions")
    assert report.files_compacted == report.files_before >= 4 and report.files_after == 1
    assert spark.read.format("delta").load(path).count() == 8
    assert spark.read.format("delta").option("versionAsOf", 3).load(path).count() == 8
    connector.append(path, sample_rows("partition_transitions", 2, tag="dup"), app_id="monitor", txn_version=3)
    assert spark.read.format("delta").load(path).count() == 8  # the app transaction survived maintenance


def test_vacuum_keeps_what_a_stream_still_has_to_read(spark: SparkSession, tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="test", checkpoint_interval=0)
    _append_batches(lake, "znode_events", 3)
    path = lake.table_path("znode_events")
    checkpoints = tmp_path / "_checkpoints"
    seen: list[int] = []

    def drain() -> None:
        query = (spark.readStream.format("delta").load(path).writeStream
                 .foreachBatch(lambda df, _: seen.extend(r.zxid for r in df.select("zxid").collect()))
                 .option("checkpointLocation", str(checkpoints / "monitor")).trigger(availableNow=True).start())
        query.awaitTermination()

    drain()
    assert sorted(seen) == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    _append_batches(lake, "znode_events", 3, start=100, writer="late")  # versions 4-6, not streamed yet
    for name in os.listdir(path):  # the whole history is old: only the stream's offset protects versions 4-6
        if name.endswith(".parquet"):
            _age(os.path.join(path, name), 30 * DAY)
    for name in os.listdir(os.path.join(path, "_delta_log")):
        _age(os.path.join(path, "_delta_log", name), 30 * DAY)
    floors = stream_floors(lake, [str(checkpoints)])
    assert floors == {"znode_events": 4}

    report = maintain_tables(lake, ["znode_events"], retention_hours=0, allow_short_retention=True,
                             checkpoint_dirs=[str(checkpoints)]).tables[0]

    assert report.retention_hours > 30 * 24 and report.vacuumed == 0
    seen.clear()
    drain()  # the stream reads versions 4-6 from their original files
    assert sorted(seen) == [100, 101, 102, 110, 111, 112, 120, 121, 122]


def test_maintain_tables_skips_a_refused_table_and_maintains_the_rest(spark: SparkSession, lake: Lake) -> None:
    _append_batches(lake, "znode_events", 2)
    path = lake.table_path("anomalies")
    spark.sql(f"CREATE TABLE delta.`{path}` (zxid BIGINT) USING delta TBLPROPERTIES ('delta.enableRowTracking'='true')")
    seen: list[str] = []
    report = maintain_tables(lake, on_table=lambda t: seen.append(t.table))
    assert seen == ["znode_events", "anomalies"]
    by_name = {t.table: t for t in report.tables}
    assert not by_name["znode_events"].skipped and "rowTracking" in by_name["anomalies"].skipped
    assert by_name["anomalies"].refused
    assert main(["--lake", lake.root, "maintain"]) == 1  # the CLI fails when a table was refused
    assert report.summary().endswith("; 1 skipped")


def test_cli_maintain(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    _append_batches(lake, "znode_events", 3)
    _append_batches(lake, "quarantine", 2)
    root = lake.root
    assert main(["--lake", root, "maintain"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == ("maintained 2 tables: 5 files compacted, 0 z-ordered on zxid, 2 checkpoints, "
                           "0 files vacuumed")
    assert "znode_events: 3 -> 1 files (3 rewritten, zxid depth 1.00), checkpoint at version 4" in err
    assert "quarantine: 2 -> 1 files" in err

    assert main(["--lake", root, "maintain", "quarantine", "--retention-hours", "1"]) == 1
    assert "--allow-short-retention" in capsys.readouterr().err
    assert main(["--lake", root, "maintain", "nope"]) == 1
    assert "unknown table(s) nope" in capsys.readouterr().err
    assert main(["--lake", root, "maintain", "anomalies"]) == 1
    assert "no table anomalies" in capsys.readouterr().err
    assert main(["--lake", root, "maintain", "quarantine", "--retention-hours", "0", "--allow-short-retention"]) == 0
    out, err = capsys.readouterr()
    assert "warning: VACUUM retention 0 h" in err and "2 files vacuumed" in out
    with pytest.raises(SystemExit) as help_exit:
        main(["maintain", "--help"])
    assert help_exit.value.code == 0
    assert "Z-order" in capsys.readouterr().out
    assert DEFAULT_RETENTION_HOURS == 168


def test_vacuum_keeps_the_files_a_stopped_monitor_staged(lake: Lake, tmp_path: Path) -> None:
    """A monitor killed with staged batches commits them at its next start: until then their files are in no
    table, and VACUUM must not take them for a killed writer's."""
    from lakehouse.files import STAGED_DIR

    _append_batches(lake, "partition_transitions", 2)
    path = lake.table_path("partition_transitions")
    staged_file = _orphan(path, "part-00000-staged-by-a-monitor.snappy.parquet", 9 * DAY)
    checkpoint = tmp_path / "ckpt" / "stateful"
    entry = checkpoint / STAGED_DIR / f"{7:020d}.json"
    entry.parent.mkdir(parents=True)
    entry.write_text("[]")
    _age(str(entry), 9 * DAY)

    kept = maintain_tables(lake, ["partition_transitions"], checkpoint_dirs=[str(tmp_path / "ckpt")])
    assert os.path.exists(staged_file) and kept.tables[0].retention_hours >= 9 * 24

    entry.unlink()  # committed: its files are in the table, or deleted as superseded
    gone = maintain_tables(lake, ["partition_transitions"], checkpoint_dirs=[str(tmp_path / "ckpt")])
    assert not os.path.exists(staged_file) and gone.tables[0].retention_hours == DEFAULT_RETENTION_HOURS
