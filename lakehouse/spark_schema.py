"""Spark StructTypes of the lake's tables, derived from ``models.tables`` (pipelines may import this)."""

from __future__ import annotations

from pyspark.sql import types as T

from models.tables import ALL_TABLES, TableSpec

_SCALARS: dict[str, T.DataType] = {
    "string": T.StringType(),
    "bigint": T.LongType(),
    "int": T.IntegerType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "binary": T.BinaryType(),
    "timestamp": T.TimestampType(),  # UTC instant, microseconds: what Delta stores
}


def spark_type(type_: str) -> T.DataType:
    """The Spark type of one column type of the models.tables vocabulary."""
    if type_ in _SCALARS:
        return _SCALARS[type_]
    if type_.startswith("array<") and type_.endswith(">"):
        return T.ArrayType(spark_type(type_[len("array<") : -1]), containsNull=True)
    raise ValueError(f"unknown column type {type_!r}")


def spark_schema(spec: TableSpec | str, *, nullable: bool = False) -> T.StructType:
    """The StructType of a table; ``nullable=True`` marks every column nullable (what file readers give)."""
    s = ALL_TABLES[spec] if isinstance(spec, str) else spec
    return T.StructType(
        [T.StructField(c.name, spark_type(c.type), nullable=nullable or c.nullable) for c in s.columns]
    )
