"""Spark StructTypes of the lake's tables: the pyarrow schemas of ``lakehouse.arrow_schema`` (themselves derived
from ``models.tables``), translated by PySpark's own Arrow type mapping, so one vocabulary serves both."""

from __future__ import annotations

from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type

from lakehouse.arrow_schema import arrow_schema, arrow_type
from models.tables import TableSpec


def spark_type(type_: str) -> T.DataType:
    """The Spark type of one column type of the models.tables vocabulary."""
    return from_arrow_type(arrow_type(type_))


def spark_schema(spec: TableSpec | str, *, nullable: bool = False) -> T.StructType:
    """The StructType of a table; ``nullable=True`` marks every column nullable (what file readers give)."""
    return T.StructType([T.StructField(f.name, from_arrow_type(f.type), nullable=nullable or f.nullable)
                         for f in arrow_schema(spec)])
