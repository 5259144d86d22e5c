"""The bronze reads of a rebuild: zxid-ordered chunks of znode_events, each data file read once."""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.arrow_schema import arrow_schema
from lakehouse.lake import read_data_files
from lakehouse.spark_io import read_table
from models.events import Source
from models.tables import ZNODE_EVENTS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse import Lake


def read_or_empty(spark: SparkSession, lake: Lake, table: str, version: int | None = None) -> DataFrame:
    lake.ensure(table)
    return read_table(spark, lake, table, version=version)


Chunk = tuple[int | None, int | None, int]
"""[lo, hi) zxid range of a rebuild chunk (None: open end) and its bronze row count."""


def zxid_chunks(lake: Lake, version: int, chunk_rows: int) -> list[Chunk]:
    """Ranges of about ``chunk_rows`` bronze rows each; a zxid is never split, so the rows of one change seen by
    several collectors are deduplicated together (rows without a zxid go with the first chunk)."""
    total = lake.row_count(ZNODE_EVENTS.name, version)
    if chunk_rows <= 0 or total <= chunk_rows:
        return [(None, None, total)]
    zxids = lake.scan(ZNODE_EVENTS.name, ["zxid"], version=version)["zxid"]
    nulls = zxids.null_count
    ordered = np.sort(zxids.drop_null().to_numpy())
    cuts = [int(c) for c in np.unique(ordered[chunk_rows::chunk_rows]) if c > ordered[0]]
    starts = np.searchsorted(ordered, cuts)  # rows below each cut
    sizes = np.diff([0, *starts, len(ordered)])
    sizes[0] += nulls
    bounds: list[int | None] = [None, *cuts, None]
    return [(lo, hi, int(n)) for (lo, hi), n in zip(pairwise(bounds), sizes, strict=True)]


def txnlog_range(lake: Lake, version: int) -> tuple[int | None, int | None]:
    """The whole history's txnlog zxid range: every chunk drops the watch rows it covers, as one increment would."""
    import pyarrow.dataset as ds

    txn = lake.scan(ZNODE_EVENTS.name, ["zxid"], where=ds.field("source") == str(Source.TXNLOG), version=version)["zxid"]
    lo, hi = (v.as_py() for v in pc.min_max(txn).values())
    return lo, hi


class ZnodeChunks:
    """The bronze znode rows of consecutive rebuild chunks: read with delta-rs when a chunk is small enough to
    compute here, else as a DataFrame.

    Read each data file once: a chunk takes the files whose zxid range (the Delta log's statistics) meets
    its own, and a file that reaches into the next chunk is kept for it, so no file a cut passes through is read
    twice and no row filter runs. Chunks must be read in zxid order.
    """

    def __init__(self, spark: SparkSession | None, lake: Lake, version: int, local_max_rows: int) -> None:
        self.spark, self.lake, self.version, self.local_max_rows = spark, lake, version, local_max_rows
        spans = lake.file_spans(ZNODE_EVENTS.name, "zxid", version)
        # a compacted file far larger than a chunk would be held whole while its chunks run: scan those
        self.spans = None if spans is None or any(s.rows > 2 * local_max_rows for s in spans) else spans
        self._kept: dict[str, pa.Table] = {}  # files read for a chunk that reach into the next one

    def read(self, chunk: Chunk) -> DataFrame | pa.Table:
        lo, hi, rows = chunk
        if rows > self.local_max_rows:
            return self._frame(lo, hi)
        if self.spans is None:
            return self._scan(lo, hi)
        parts, kept = [], {}
        for span in self.spans:
            has_nulls = lo is None and span.nulls > 0  # rows without a zxid go with the first chunk
            in_range = (span.low is not None and span.high is not None and (lo is None or span.high >= lo)
                        and (hi is None or span.low < hi))
            if not (has_nulls or in_range):
                continue
            data = self._kept.get(span.path)
            if data is None:
                data = read_data_files(ZNODE_EVENTS.name, [span.path])
            if hi is not None and span.high is not None and span.high >= hi:
                kept[span.path] = data
            whole = ((lo is None or (span.low is not None and span.low >= lo and span.nulls == 0))
                     and (hi is None or (span.high is not None and span.high < hi)))
            parts.append(data if whole else _zxid_rows(data, lo, hi))
        self._kept = kept
        data = pa.concat_tables(parts) if parts else arrow_schema(ZNODE_EVENTS.name).empty_table()
        return self.lake.conform_read(ZNODE_EVENTS.name, data)

    def _scan(self, lo: int | None, hi: int | None) -> pa.Table:
        where = None if lo is None and hi is None else _zxid_where(lo, hi)
        return self.lake.conform_read(ZNODE_EVENTS.name, self.lake.scan(ZNODE_EVENTS.name, where=where,
                                                                        version=self.version))

    def _frame(self, lo: int | None, hi: int | None) -> DataFrame:
        assert self.spark is not None, "a chunk above local_max_rows needs a Spark session"
        df = read_or_empty(self.spark, self.lake, ZNODE_EVENTS.name, self.version)
        if lo is not None:
            df = df.filter(F.col("zxid") >= lo)
        if hi is not None:
            df = df.filter((F.col("zxid") < hi) | F.col("zxid").isNull() if lo is None else F.col("zxid") < hi)
        return df


def _zxid_rows(data: pa.Table, lo: int | None, hi: int | None) -> pa.Table:
    """The rows of ``data`` in [lo, hi) (with the null zxids when lo is None): a zero-copy slice when the
    zxids are in order (as collectors write them), else a filter, which copies every column."""
    zxid = data.column("zxid")
    if zxid.null_count == 0:
        values = zxid.to_numpy()
        if len(values) < 2 or bool(np.all(values[1:] >= values[:-1])):
            start = 0 if lo is None else int(np.searchsorted(values, lo, "left"))
            stop = len(values) if hi is None else int(np.searchsorted(values, hi, "left"))
            return data.slice(start, max(stop - start, 0))
    return data.filter(_zxid_where(lo, hi))


def _zxid_where(lo: int | None, hi: int | None) -> pc.Expression:
    """[lo, hi) of zxid, both ends set or one; an open low end also takes the rows without a zxid."""
    zxid = pc.field("zxid")
    if lo is None:
        return (zxid < hi) | zxid.is_null()
    return zxid >= lo if hi is None else (zxid >= lo) & (zxid < hi)
