"""Small Spark DataFrames of a StructType, built without a Python round trip where possible. The StructTypes of
the lake's tables come from ``lakehouse.spark_schema`` (derived from ``models.tables``)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T


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
