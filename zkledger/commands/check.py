"""`zkledger check`: Great Expectations suites over the lake's tables; exit code 1 when a suite fails."""

from __future__ import annotations

import argparse
import os
from typing import Any

from models.tables import READABLE
from services.spark_session import submitted_master
from zkledger.context import Context


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="run the Great Expectations suites over the tables (exit 1 when a suite fails)",
        description="Validate the current snapshot of every table with its Great Expectations suite (schema, "
        "keys, unique ids, state names, anomaly kinds, legal flags, known partitions...). Prints one line per "
        "suite, stores one row per expectation in quality_results, writes <lake>/_quality/index.html, and "
        "exits 1 when a suite fails. Absent tables are skipped. Tables of up to 500,000 rows are read with "
        "delta-rs and validated by GX's pandas engine (no Spark); larger ones with Spark.",
    )
    parser.add_argument("--table", action="append", choices=sorted(READABLE), metavar="TABLE",
                        help="check only this table (repeatable; default: all)")
    parser.add_argument("--kafka-version", default=None, metavar="V",
                        help="judge replica legal flags by this Kafka version's table (default: accept either "
                        "side of the 2.3 change)")
    parser.add_argument("--no-store", action="store_true", help="do not write quality_results nor the HTML page")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> tuple[str, int]:
    from services.quality import QUALITY_DIR, run_quality  # pyspark's modules: loaded by this command only

    ctx.require_lake()
    # Tables small enough for pandas are read with delta-rs: no JVM unless a table needs Spark. Under
    # spark-submit the driver is a Spark application already: its session is built (and its master logged).
    spark: Any = (ctx.spark("zkledger-check") if submitted_master() is not None
                  else lambda: ctx.spark("zkledger-check"))
    report = run_quality(spark, ctx.lake, tables=args.table, kafka_version=args.kafka_version,
                         write_results=not args.no_store)
    for suite in report.suites:
        print(suite.line(), flush=True)  # the per-suite lines are this command's output
    if report.skipped:
        print(f"skipped (absent): {', '.join(report.skipped)}", flush=True)
    docs = os.path.join(ctx.lake.root, QUALITY_DIR, "gx", "gx", "uncommitted", "data_docs", "local_site", "index.html")
    where = "" if args.no_store else (f"; results in {os.path.join(ctx.lake.root, QUALITY_DIR, 'index.html')}, "
                                      f"GX data docs in {docs}")
    return report.summary() + where, 0 if report.success else 1
