"""``zkledger rebuild``: all bronze history through ``run_increment`` in zxid-ordered chunks, from empty state."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
from pyspark.sql import DataFrame

from engine.carry import MonitorCarry
from engine.chunks import Chunk, ZnodeChunks, read_or_empty, txnlog_range, zxid_chunks
from engine.increment import (
    APPEND_TABLES,
    DERIVED_TABLES,
    LOCAL_MAX_ROWS,
    STATE_TABLES,
    STREAMED_TABLES,
    Outputs,
    committed_txnlog_range,
    run_increment,
)
from engine.writes import REBUILD_WRITER, write_tables, writer_metadata
from lakehouse.spark_io import write_batch
from models.tables import CONTROLLER_DECISIONS, METADATA_EVENTS, ZNODE_EVENTS
from pipelines.decode import decode_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse import Lake


log = logging.getLogger(__name__)


REBUILD_CHUNK_ROWS = 1_000_000
"""Default of settings ``pipeline.rebuild_chunk_rows``: a longer history is rebuilt in zxid-ordered chunks."""


def rebuild(spark: SparkSession, lake: Lake, local_max_rows: int = LOCAL_MAX_ROWS,
            chunk_rows: int = REBUILD_CHUNK_ROWS) -> dict[str, int]:
    """Batch: all bronze history from empty state; overwrites every derived table.

    The history goes through ``run_increment`` in chunks of about ``chunk_rows`` bronze rows, in zxid order,
    each continuing from the state the previous one left (as the monitor's micro-batches do), so the driver
    holds one chunk's rows and outputs, never the whole history's. Controller decisions go with the last chunk,
    when every znode write they are checked against is known. A chunk of at most ``local_max_rows`` rows is
    read with delta-rs and computed in this process, a larger one through Spark.
    The state tables are written by the last chunk only (the first empties them, marking a rebuild in
    progress); the bronze versions read are recorded with the last commits, so a new monitor continues right
    after them (an interrupted rebuild leaves no such record: the monitor asks for a rebuild).
    """
    for table in STREAMED_TABLES:
        lake.ensure(table)
    versions = {t: int(lake.version(t) or 0) for t in STREAMED_TABLES}  # one snapshot, even while collectors write
    ranges = zxid_chunks(lake, versions[ZNODE_EVENTS.name], chunk_rows)
    carry = MonitorCarry.fresh(lake, txnlog_range(lake, versions[ZNODE_EVENTS.name]))
    counts = dict.fromkeys(DERIVED_TABLES, 0)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="rebuild-io") as io:
        _rebuild_chunks(spark, lake, versions, ranges, carry, counts, io, local_max_rows)
    return counts


def _rebuild_chunks(spark: SparkSession, lake: Lake, versions: dict[str, int], ranges: list[Chunk], carry: MonitorCarry,
                    counts: dict[str, int], io: ThreadPoolExecutor, local_max_rows: int) -> None:
    """The chunks of ``rebuild``, overlapped: while chunk i folds, chunk i+1 is read and decoded and
    chunk i-1's tables are written (delta-rs reads and writes outside the GIL, on the core the kernels leave);
    chunk i's commits start only after chunk i-1's are done, so the commit order stays the chunk order."""
    # the whole history's txnlog range (MonitorCarry.fresh): what every chunk's decode uses, so the next chunk
    # can be decoded ahead, before this one's state is known (decode is row-local)
    committed = committed_txnlog_range(carry.carried)

    chunks = ZnodeChunks(spark, lake, versions[ZNODE_EVENTS.name], local_max_rows)

    def read(chunk: Chunk) -> tuple[DataFrame | pa.Table, pa.Table | None]:
        znodes = chunks.read(chunk)
        return znodes, decode_table(znodes, committed) if isinstance(znodes, pa.Table) else None

    reading = io.submit(read, ranges[0])
    writing: Future[None] | None = None
    for i, chunk in enumerate(ranges):
        last = i == len(ranges) - 1
        znodes, decoded = reading.result()
        if not last:
            reading = io.submit(read, ranges[i + 1])
        decisions = _decision_rows(spark, lake, versions[CONTROLLER_DECISIONS.name], local_max_rows, last)
        out = run_increment(spark, znodes, decisions, carry.carried, cluster=lake.cluster, decoded=decoded)
        meta = writer_metadata(REBUILD_WRITER, versions if last else None)

        def write(table: str, first: bool = i == 0, last: bool = last, out: Outputs = out,
                  meta: dict[str, str] = meta) -> None:
            data = out[table]
            if table in STATE_TABLES and not last:
                if not first:
                    return  # the state is written once, by the last chunk
                data = data.slice(0, 0)  # the old state goes; the commit marks a rebuild in progress
            lake.ensure(table)
            seq = (lake.last_batch_seq(table, REBUILD_WRITER) or 0) + 1
            mode: Literal["append", "overwrite"] = "append" if table in APPEND_TABLES and not first else "overwrite"
            write_batch(data, lake, table, REBUILD_WRITER, seq, mode=mode, metadata=meta)

        if writing is not None:
            writing.result()  # the previous chunk is committed (or its error raised here)
        writing = io.submit(write_tables, write, i)
        carry.advance(out)
        for table in DERIVED_TABLES:
            counts[table] = out[table].num_rows + (counts[table] if table in APPEND_TABLES else 0)
        if len(ranges) > 1:
            log.info("rebuild chunk %d/%d: zxid [%s, %s), %d bronze rows, %d metadata events", i + 1, len(ranges),
                     chunk[0], chunk[1], chunk[2], out[METADATA_EVENTS.name].num_rows)
    if writing is not None:
        writing.result()


def _decision_rows(spark: SparkSession, lake: Lake, version: int, local_max_rows: int,
                   last_chunk: bool) -> DataFrame | pa.Table:
    if not last_chunk:
        empty = lake.scan(CONTROLLER_DECISIONS.name, version=version).slice(0, 0)
        return lake.conform_read(CONTROLLER_DECISIONS.name, empty)
    if lake.row_count(CONTROLLER_DECISIONS.name, version) <= local_max_rows:
        return lake.read_arrow(CONTROLLER_DECISIONS.name, version)
    return read_or_empty(spark, lake, CONTROLLER_DECISIONS.name, version)
