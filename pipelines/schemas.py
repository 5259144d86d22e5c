"""Spark StructTypes derived from ``models.tables`` (the one source of truth for columns)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from models.tables import ALL_TABLES, TableSpec

_SCALARS: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "bigint": T.LongType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
    "binary": T.BinaryType(),
    "array<int>": T.ArrayType(T.IntegerType()),
    "array<string>": T.ArrayType(T.StringType()),
}


def spark_type(type_name: str) -> T.DataType:
    """The Spark type of one column type of the models.tables vocabulary."""
    return _SCALARS[type_name]


def struct_of(spec: TableSpec) -> T.StructType:
    """StructType with the spec's columns in order (nullability kept loose: Spark relaxes it anyway)."""
    return T.StructType([T.StructField(c.name, spark_type(c.type), True) for c in spec.columns])


def schema(table: str) -> T.StructType:
    """StructType of a lake table by name."""
    return struct_of(ALL_TABLES[table])


def arrow_schema(table: str) -> Any:
    """The Arrow schema Spark gives a lake table (what the engine's Arrow outputs are cast to)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema(table))


def empty_df(spark: SparkSession, struct: T.StructType) -> DataFrame:
    """An empty DataFrame of ``struct`` built in the JVM by ONE SQL statement (a py4j call per column otherwise)."""
    cols = ", ".join(f"CAST(NULL AS {f.dataType.simpleString()}) AS `{f.name}`" for f in struct.fields)
    return spark.sql(f"SELECT {cols} WHERE false")


def local_df(spark: SparkSession, rows: list[dict[str, Any]], struct: T.StructType) -> DataFrame:
    """A small driver-side list as a DataFrame; an empty one is built in the JVM (no Python round trip)."""
    if not rows:
        return empty_df(spark, struct)
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(struct)
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in struct.fields} for r in rows], schema=arrow)
    return spark.createDataFrame(table)
