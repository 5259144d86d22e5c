"""Both Delta engines behind one small interface (raw Delta on a path: what the interop tests pair across
engines), and sample rows of every table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from lakehouse.arrow_schema import arrow_schema
from models.tables import ALL_TABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


ENGINES = ("delta-rs", "connector")


class DeltaEngine(Protocol):
    name: str

    def append(self, path: str, data: pa.Table, app_id: str | None = None, txn_version: int | None = None) -> None:
        """Append ``data`` (the table is created on the first append), once per (app_id, txn_version)."""

    def read(self, path: str, version: int | None = None, as_of: datetime | None = None) -> pa.Table:
        """The table now, at a version or at a time."""


class DeltaRs:
    name = "delta-rs"

    def append(self, path: str, data: pa.Table, app_id: str | None = None, txn_version: int | None = None) -> None:
        txns = None
        if app_id is not None and txn_version is not None:
            txns = [Transaction(app_id, txn_version)]
            last = DeltaTable(path).transaction_version(app_id) if DeltaTable.is_deltatable(path) else None
            if last is not None and last >= txn_version:  # delta-rs does not skip a repeat by itself
                return
        write_deltalake(path, data, mode="append", commit_properties=CommitProperties(app_transactions=txns))

    def read(self, path: str, version: int | None = None, as_of: datetime | None = None) -> pa.Table:
        dt = DeltaTable(path)
        if version is not None:
            dt.load_as_version(version)
        if as_of is not None:
            dt.load_as_version(as_of)
        return dt.to_pyarrow_table()


class Connector:
    name = "connector"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def append(self, path: str, data: pa.Table, app_id: str | None = None, txn_version: int | None = None) -> None:
        writer = self.spark.createDataFrame(data).write.format("delta").mode("append")
        if app_id is not None and txn_version is not None:
            writer = writer.option("txnAppId", app_id).option("txnVersion", txn_version)
        writer.save(path)

    def read(self, path: str, version: int | None = None, as_of: datetime | None = None) -> pa.Table:
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        if as_of is not None:
            reader = reader.option("timestampAsOf", as_of.strftime("%Y-%m-%d %H:%M:%S.%f"))
        return reader.load(path).toArrow()


def tables_covering_every_column_type() -> tuple[str, ...]:
    """The fewest tables (picked greedily, largest gain first) whose columns together hold every (Arrow type,
    nullability) of every table: what a schema test across the two engines needs, each Spark job costing
    seconds."""
    kinds = {name: {(str(f.type), f.nullable) for f in arrow_schema(name)} for name in sorted(ALL_TABLES)}
    left, picked = set().union(*kinds.values()), []
    while left:
        best = max(kinds, key=lambda name: len(kinds[name] & left))
        picked.append(best)
        left -= kinds[best]
    return tuple(picked)


def sample_rows(table: str, n: int, start: int = 0, tag: str = "r") -> pa.Table:
    """``n`` rows of a models.tables table with every column filled from its type (ints count up from start)."""
    schema = arrow_schema(table)
    columns: dict[str, Sequence[Any]] = {}
    for f in schema:
        columns[f.name] = [_value(f.type, f.name, start + i, tag) for i in range(n)]
    return pa.table(columns, schema=schema)


def _value(t: pa.DataType, name: str, i: int, tag: str) -> Any:
    if pa.types.is_list(t):
        return [_value(t.value_type, name, i, tag), _value(t.value_type, name, i + 1, tag)]
    if pa.types.is_string(t):
        return f"{tag}-{name}-{i}"
    if pa.types.is_integer(t):
        return i
    if pa.types.is_floating(t):
        return i / 2
    if pa.types.is_boolean(t):
        return i % 2 == 0
    if pa.types.is_binary(t):
        return f"{tag}{i}".encode()
    if pa.types.is_timestamp(t):
        return datetime.fromtimestamp(1_700_000_000 + i, tz=UTC)
    raise AssertionError(f"no sample value for {t}")


def engine_named(request: pytest.FixtureRequest, name: str) -> DeltaEngine:
    """``delta-rs`` or ``connector`` (the latter on the session's ``spark`` fixture, started on first use)."""
    if name == "delta-rs":
        return DeltaRs()
    return Connector(request.getfixturevalue("spark"))
