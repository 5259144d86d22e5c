"""The rows of the keyed fold: its input (events and seeds of touched keys) and its output records."""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema


class FoldRecord(StrEnum):
    """The kind of a fold output record (its ``rec`` column); the transition kinds are also the machine part of
    their step ids (``models.ids.step_id``)."""

    PARTITION_TRANSITION = "pt"
    REPLICA_TRANSITION = "rt"
    WRITE = "w"  # a partition state write with the view before it and the cluster context, for the detectors
    PARTITION_STATE = "ps"
    REPLICA_STATE = "rs"


FOLD_RECORDS = tuple(FoldRecord)
"""The record kinds in output order."""


FOLD_OUT = T.StructType([
    T.StructField("rec", T.StringType()), T.StructField("cluster", T.StringType()),
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("replica", T.IntegerType()), T.StructField("zxid", T.LongType()),
    T.StructField("event_time", T.TimestampType()), T.StructField("from_state", T.StringType()),
    T.StructField("to_state", T.StringType()), T.StructField("legal", T.BooleanType()),
    T.StructField("cause", T.StringType()), T.StructField("event_id", T.StringType()),
    T.StructField("state", T.StringType()), T.StructField("leader", T.IntegerType()),
    T.StructField("leader_epoch", T.IntegerType()), T.StructField("controller_epoch", T.IntegerType()),
    T.StructField("isr", T.ArrayType(T.IntegerType())), T.StructField("replicas", T.ArrayType(T.IntegerType())),
    T.StructField("as_of_zxid", T.LongType()), T.StructField("prev_leader", T.IntegerType()),
    T.StructField("prev_leader_epoch", T.IntegerType()), T.StructField("prev_isr", T.ArrayType(T.IntegerType())),
    T.StructField("prev_controller_epoch", T.IntegerType()), T.StructField("cur_controller_epoch", T.IntegerType()),
    T.StructField("leader_live", T.BooleanType()), T.StructField("deletion_pending", T.BooleanType()),
])


FOLD_ARROW_SCHEMA: pa.Schema = to_arrow_schema(FOLD_OUT)


FOLD_INPUT = T.StructType([
    T.StructField("cluster", T.StringType()), T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()), T.StructField("zxid", T.LongType()),
    T.StructField("_seq", T.IntegerType()), T.StructField("ord", T.IntegerType()),
    T.StructField("event_time", T.TimestampType()), T.StructField("type", T.StringType()),
    T.StructField("leader", T.IntegerType()), T.StructField("leader_epoch", T.IntegerType()),
    T.StructField("controller_epoch", T.IntegerType()), T.StructField("isr", T.ArrayType(T.IntegerType())),
    T.StructField("replicas", T.ArrayType(T.IntegerType())), T.StructField("event_id", T.StringType()),
    T.StructField("state", T.StringType()), T.StructField("seed_replica_ids", T.ArrayType(T.IntegerType())),
    T.StructField("seed_replica_states", T.ArrayType(T.StringType())), T.StructField("broker", T.IntegerType()),
])
"""One row of the keyed fold: an event (ord 1) or a touched key's carried state (ord 0, type SEED)."""
FOLD_ORDER = ("topic", "partition", "ord", "zxid", "_seq", "event_id")
