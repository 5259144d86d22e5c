"""Spark types of the lake's tables: each column type's pyarrow type from ``lakehouse.arrow_schema`` (the one
mapping of the ``models.tables`` vocabulary), translated by PySpark's own Arrow type mapping, so one vocabulary
serves delta-rs, the Delta connector and the pipelines' Spark jobs."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema

from lakehouse.arrow_schema import arrow_type, spec_for
from models.tables import Column, TableSpec


def spark_type(type_: str) -> T.DataType:
    """The Spark type of one column type of the models.tables vocabulary."""
    return from_arrow_type(arrow_type(type_))


def spark_struct(columns: Iterable[Column], *, nullable: bool = False) -> T.StructType:
    """The StructType of ``columns`` in order; ``nullable=True`` marks every column nullable."""
    return T.StructType([T.StructField(c.name, spark_type(c.type), nullable=nullable or c.nullable) for c in columns])


def spark_schema(spec: TableSpec | str, *, nullable: bool = False) -> T.StructType:
    """The StructType of a table; ``nullable=True`` marks every column nullable (what file readers give, and
    what the pipelines' Spark jobs use: Spark relaxes nullability anyway)."""
    return spark_struct((spec_for(spec) if isinstance(spec, str) else spec).columns, nullable=nullable)


def spark_arrow_schema(spec: TableSpec | str) -> pa.Schema:
    """The pyarrow schema Spark gives a table (``spark_schema(spec, nullable=True)`` through PySpark's
    ``to_arrow_schema``): every column nullable, list items named ``element`` where ``arrow_schema`` has
    ``item``. The pipelines' Arrow outputs, which go to and come from Spark, are cast to it."""
    return to_arrow_schema(spark_schema(spec, nullable=True))
