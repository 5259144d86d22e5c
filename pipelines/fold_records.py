"""The rows of the keyed fold: its input (events and seeds of touched keys) and its output records."""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from lakehouse.spark_schema import spark_struct
from models.tables import (
    METADATA_EVENTS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
    Column,
    TableSpec,
)


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


def _union(*specs: TableSpec) -> list[Column]:
    """The columns of ``specs``, each name once, in the order first seen (a name must have one type in all)."""
    seen: dict[str, Column] = {}
    for spec in specs:
        for c in spec.columns:
            if seen.setdefault(c.name, c).type != c.type:
                raise TypeError(f"{c.name}: {seen[c.name].type} in one table, {c.type} in {spec.name}")
    return list(seen.values())


def _picked(spec: TableSpec, *names: str) -> list[Column]:
    return [spec.column(n) for n in names]


FOLD_OUT = spark_struct([
    Column("rec", "string"),  # a FoldRecord
    # the rows of the four tables the fold writes, each in its table's columns
    *_union(REPLICA_TRANSITIONS, PARTITION_TRANSITIONS, PARTITION_STATE, REPLICA_STATE),
    # a WRITE's view before it and its cluster context, for the detectors (in no table)
    Column("prev_leader", "int"), Column("prev_leader_epoch", "int"), Column("prev_isr", "array<int>"),
    Column("prev_controller_epoch", "int"), Column("cur_controller_epoch", "int"),
    Column("leader_live", "boolean"), Column("deletion_pending", "boolean"),
], nullable=True)


FOLD_ARROW_SCHEMA: pa.Schema = to_arrow_schema(FOLD_OUT)


FOLD_INPUT = spark_struct([
    *_picked(METADATA_EVENTS, "cluster", "topic", "partition", "zxid"),
    Column("_seq", "int"), Column("ord", "int"),  # the order of one zxid's events; 0 for a seed, 1 for an event
    *_picked(METADATA_EVENTS, "event_time", "type", "leader", "leader_epoch", "controller_epoch", "isr",
             "replicas", "event_id"),
    # a seed's carried partition state and its replicas' states
    *_picked(PARTITION_STATE, "state"), Column("seed_replica_ids", "array<int>"),
    Column("seed_replica_states", "array<string>"),
    *_picked(METADATA_EVENTS, "broker"),
], nullable=True)
"""One row of the keyed fold: an event (ord 1) or a touched key's carried state (ord 0, type SEED)."""
FOLD_ORDER = ("topic", "partition", "ord", "zxid", "_seq", "event_id")
