"""The Delta table layer: the only code that touches Delta (delta-rs, plus Spark read/stream/sink)."""

from lakehouse.arrow_schema import arrow_schema, arrow_type
from lakehouse.lake import Lake

__all__ = ["Lake", "arrow_schema", "arrow_type"]
