"""The one mapping from the column types of ``models.tables`` (the one source of truth for columns) to pyarrow
types, and the pyarrow schemas of the lake's tables built with it. Spark types are derived from this mapping
(``lakehouse.spark_schema``); no other module maps a column type by itself."""

from __future__ import annotations

import pyarrow as pa

from models.tables import ALL_TABLES, TableSpec

_SCALARS: dict[str, pa.DataType] = {
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    # Delta's `timestamp` is microseconds since the epoch, UTC-adjusted.
    "timestamp": pa.timestamp("us", tz="UTC"),
}


def arrow_type(type_: str) -> pa.DataType:
    """The pyarrow type of one column type of the models.tables vocabulary."""
    if type_ in _SCALARS:
        return _SCALARS[type_]
    if type_.startswith("array<") and type_.endswith(">"):
        return pa.list_(arrow_type(type_[len("array<") : -1]))
    raise ValueError(f"unknown column type {type_!r}")


def spec_for(table: str) -> TableSpec:
    """The TableSpec of a table name, with a clear error for unknown names."""
    try:
        return ALL_TABLES[table]
    except KeyError:
        raise ValueError(f"unknown table {table!r} (known: {', '.join(sorted(ALL_TABLES))})") from None


def arrow_schema(spec: TableSpec | str) -> pa.Schema:
    """The pyarrow schema of a table as delta-rs writes it (nullability as in the spec)."""
    s = spec_for(spec) if isinstance(spec, str) else spec
    return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in s.columns])
