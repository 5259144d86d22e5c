"""The derived tables' writes: who wrote a commit (its writer), and one increment's tables, state last.

The derived tables have two writers, ``rebuild`` (batch, overwrites) and ``monitor`` (micro-batches, appends).
Each commit names its writer in the commit info; a rebuild also records the bronze versions it read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa

from engine.increment import APPEND_TABLES, DERIVED_TABLES, STATE_TABLES, Outputs
from lakehouse.lake import crash_point
from lakehouse.spark_io import write_batch
from models.tables import ANOMALIES

if TYPE_CHECKING:
    from lakehouse import Lake

REBUILD_WRITER = "rebuild"
MONITOR_WRITER = "monitor"
WRITER_KEY = "zkledger.writer"
BRONZE_VERSIONS_KEY = "zkledger.bronze_versions"


def writer_metadata(writer: str, bronze_versions: dict[str, int] | None = None) -> dict[str, str]:
    """Commit info naming the writer (and, for a rebuild, the bronze versions it read)."""
    meta = {WRITER_KEY: writer}
    if bronze_versions is not None:
        meta[BRONZE_VERSIONS_KEY] = json.dumps(bronze_versions, sort_keys=True)
    return meta


_WRITERS: ThreadPoolExecutor | None = None


COMMITTED = "committed_"
"""Crash hook stage after a table's commit: ``ZKLEDGER_LAKE_CRASH=committed_<table>:<batch>`` (tests)."""


def write_tables(write: Callable[[str], None], batch: int) -> None:
    """``write`` every derived table: the others concurrently, then ``replica_state``, then ``partition_state``
    alone, so a committed ``partition_state`` means the whole increment is committed. delta-rs encodes and
    commits outside the GIL, so the other writes overlap. ``batch`` names the increment for the crash hook."""
    global _WRITERS
    if _WRITERS is None:  # one pool for the process: starting threads per micro-batch showed in its latency
        _WRITERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="delta-write")

    def commit(table: str) -> None:
        write(table)
        crash_point(COMMITTED + table, batch)

    others = [t for t in DERIVED_TABLES if t not in STATE_TABLES]
    for done in [_WRITERS.submit(commit, t) for t in others]:
        done.result()
    for table in STATE_TABLES[::-1]:  # partition_state last: the marker of a finished increment
        commit(table)


def write_increment(out: Outputs, lake: Lake, writer_id: str, batch_seq: int) -> pa.Table:
    """Write one micro-batch's outputs exactly once (state tables last); returns its new anomalies."""
    meta = writer_metadata(writer_id)

    def write(table: str) -> None:
        lake.ensure(table)
        write_batch(out[table], lake, table, writer_id, batch_seq, mode="append" if table in APPEND_TABLES else "overwrite",
                    metadata=meta)

    write_tables(write, batch_seq)
    return out[ANOMALIES.name]
