"""zkledger check: GX suites over real Delta tables read by real Spark."""

from __future__ import annotations

import argparse
import os
from typing import Any

import pytest
from pyspark.sql import functions as F

from lakehouse.spark_io import read_table
from models.quality import SUITES
from services import metadata_events
from services.quality import run_quality, run_quality_on_batch
from tests import sample_data as sd
from zkledger.commands import check as check_command
from zkledger.context import Context

pytestmark = pytest.mark.spark


def _corrupted() -> dict[str, list[dict[str, Any]]]:
    """The sample story with one or more deliberate defects per table."""
    tables = sd.all_tables()
    zn = tables["znode_events"]
    zn.append({**zn[0], "zxid": 99})  # same event_id as row 0
    zn.append({**zn[1], "op": "TELEPORT", "event_id": "bad-op"})
    zn.append({**zn[1], "zxid": -5, "event_id": "neg-zxid"})  # decodes to a metadata event at zxid -5
    pt = tables["partition_transitions"]
    pt.append(sd._transition("orders", 1, 80, 250, "OnlinePartition", "HalfOnlinePartition", legal=False))
    pt.append(sd._transition("orders", 1, 81, 251, "OnlinePartition", "NonExistentPartition", legal=True))
    pt.append(sd._transition("ghost", 7, 82, 252, "NonExistentPartition", "NewPartition"))
    tables["replica_transitions"][0]["legal"] = False  # NonExistentReplica -> NewReplica is legal
    an = tables["anomalies"]
    an.append({**an[0], "kind": "ALIENS", "severity": "meh"})  # also duplicates anomaly_id
    tables["controller_tenure"][0]["end_zxid"] = 0  # ends before it starts (start_zxid 1)
    return tables


EXPECTED_FAILURES = {
    "znode_events": {"unique(event_id)", "in_set(op)"},
    "metadata_events": {"min_value(zxid)"},
    "partition_transitions": {"in_set(to_state)", "legal_flag_consistent", "partition_known"},
    "replica_transitions": {"legal_flag_consistent"},
    "anomalies": {"in_set(kind)", "in_set(severity)", "unique(anomaly_id)"},
    "controller_tenure": {"tenure_ordered"},
}


def test_clean_story_passes_and_results_are_stored(spark: Any, lake: Any) -> None:
    sd.write_story(lake)
    report = run_quality(spark, lake)
    assert report.success, [s.line() for s in report.failed_suites]
    assert {s.table for s in report.suites} == {*sd.all_tables(), "metadata_events"}  # the view, made from bronze
    assert "quarantine" in report.skipped
    for s in report.suites:
        assert [r.expectation for r in s.results] == [e.name for e in SUITES[s.table].expectations]
    stored = lake.read_arrow("quality_results").to_pylist()
    assert len(stored) == sum(len(s.results) for s in report.suites)
    assert {r["run_id"] for r in stored} == {report.run_id}
    assert all(r["success"] for r in stored)
    versions = {r["table_name"]: r["table_version"] for r in stored}
    assert versions["anomalies"] == lake.version("anomalies")
    page = open(os.path.join(lake.root, "_quality", "index.html"), encoding="utf-8").read()
    assert "anomalies_suite: PASS" in page
    # GX's own data docs, built by the checkpoints' UpdateDataDocsAction in a file context
    site = os.path.join(lake.root, "_quality", "gx", "gx", "uncommitted", "data_docs", "local_site")
    validations = [f for _, _, files in os.walk(os.path.join(site, "validations")) for f in files]
    assert os.path.isfile(os.path.join(site, "index.html")) and validations


def test_each_corrupted_table_fails_naming_the_broken_expectation(spark: Any, lake: Any) -> None:
    sd.write_story(lake, _corrupted())
    report = run_quality(spark, lake, tables=list(EXPECTED_FAILURES), write_results=False)
    assert not report.success
    for table, expected in EXPECTED_FAILURES.items():
        suite = report.suite(table)
        assert {r.expectation for r in suite.failed} == expected, suite.line()
        line = suite.line()
        assert line.startswith(f"{table}_suite: FAIL")
        assert all(name in line for name in expected)
    assert "HalfOnlinePartition" in report.suite("partition_transitions").line()


def test_null_key_in_a_batch_fails_not_null(spark: Any, lake: Any) -> None:
    sd.write_story(lake, {"znode_events": sd.znode_events(), "partition_transitions": sd.partition_transitions()})
    pt = read_table(spark, lake, "partition_transitions")
    broken = pt.withColumn("event_id", F.when(F.col("zxid") == 20, F.lit(None)).otherwise(F.col("event_id")))
    report = run_quality_on_batch(spark, {"partition_transitions": broken},
                                  reference={"metadata_events": metadata_events.frame(spark, lake)})
    failed = {r.expectation for r in report.suite("partition_transitions").failed}
    assert failed == {"not_null(event_id)"}
    # without a reference table the cross-table check is left out, not failed
    alone = run_quality_on_batch(spark, {"partition_transitions": pt})
    names = [r.expectation for r in alone.suite("partition_transitions").results]
    assert alone.success and "partition_known" not in names and "legal_flag_consistent" in names


def test_check_command_exits_1_and_prints_suite_lines(spark: Any, lake: Any, settings: Any,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    sd.write_story(lake, {"anomalies": _corrupted()["anomalies"]})
    ctx = Context(settings, lake=lake.root, cluster=lake.cluster)
    ctx._spark = spark  # the session fixture; ctx.close() is not called so it stays up
    args = argparse.Namespace(table=None, kafka_version=None, no_store=False)
    summary, code = check_command.run(args, ctx)
    out = capsys.readouterr().out
    assert code == 1
    assert "check FAILED (anomalies)" in summary
    assert "anomalies_suite: FAIL" in out and "in_set(kind)" in out
    assert lake.exists("quality_results")


def test_check_runs_twice_on_the_same_lake(spark: Any, lake: Any, settings: Any,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    # GX's file context under <lake>/_quality/gx keeps the data sources of the run before (after `make demo`)
    tables = {"anomalies": sd.anomalies(), "controller_tenure": sd.controller_tenure()}
    sd.write_story(lake, tables)
    ctx = Context(settings, lake=lake.root, cluster=lake.cluster)
    ctx._spark = spark
    args = argparse.Namespace(table=sorted(tables), kafka_version=None, no_store=False)
    gx_root = os.path.join(lake.root, "_quality", "gx", "gx")
    runs = []
    for _ in range(2):
        summary, code = check_command.run(args, ctx)
        assert code == 0, summary
        runs.append(sorted(os.listdir(os.path.join(gx_root, "checkpoints"))))
    assert len({r["run_id"] for r in lake.read_arrow("quality_results").to_pylist()}) == 2
    # the second run replaced the first one's GX objects instead of piling up beside them
    assert len(runs[1]) == len(runs[0]) == 2 and not set(runs[0]) & set(runs[1])
    assert "check passed" in summary


# the tables whose checks depend on the Kafka version (the legal-transition flag): a version's run checks those
VERSIONED = ("partition_transitions", "replica_transitions")


@pytest.mark.parametrize(("kafka_version", "tables"), [(None, None), ("2.0", VERSIONED)],
                         ids=["default-every-table", "2.0-versioned-tables"])
def test_delta_rs_path_gives_the_spark_paths_results(spark: Any, lake: Any, kafka_version: str | None,
                                                     tables: tuple[str, ...] | None) -> None:
    """`check` reads small tables with delta-rs and computes the derived columns on Arrow; the same tables read
    by Spark, derived by Spark (``pandas_max_rows=-1`` sends every table there) give the same result rows."""
    sd.write_story(lake, _corrupted())
    arrow = run_quality(None, lake, tables=tables, kafka_version=kafka_version, write_results=False)
    built: list[Any] = []
    via_spark = run_quality(lambda: built.append(spark) or spark, lake, tables=tables, kafka_version=kafka_version,
                            write_results=False, pandas_max_rows=-1)
    assert built == [spark]  # the session was asked for once, because tables needed it

    def rows(report: Any) -> list[tuple[Any, ...]]:
        return [(r.table, r.expectation, r.column, r.success, r.observed) for s in report.suites for r in s.results]

    assert rows(arrow) == rows(via_spark)
    assert [(s.table, s.rows, s.table_version) for s in arrow.suites] == \
        [(s.table, s.rows, s.table_version) for s in via_spark.suites]
    failed = {(r.table, r.expectation) for s in arrow.suites for r in s.failed}
    assert {(t, e) for t, names in EXPECTED_FAILURES.items() if t in (tables or EXPECTED_FAILURES)
            for e in names} <= failed


def test_small_tables_need_no_spark(lake: Any) -> None:
    """Without a session (None) a lake of small tables is checked all the same: delta-rs and pandas only."""
    sd.write_story(lake, _corrupted())
    report = run_quality(None, lake, tables=list(EXPECTED_FAILURES), write_results=False)
    for table, expected in EXPECTED_FAILURES.items():
        assert {r.expectation for r in report.suite(table).failed} == expected
