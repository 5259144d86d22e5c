"""The lake's tables: names, columns and keys (docs/tables.md), as plain data.

This is the one source of truth for table schemas: ``lakehouse.arrow_schema`` turns a spec into a
pyarrow schema (the one type mapping), ``lakehouse.spark_schema`` into a Spark StructType from it. Column types
use a tiny vocabulary: string, int, bigint, double, boolean, timestamp (UTC, microseconds),
binary, array<int>, array<string>.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool = True


STATS_COLUMNS: Final = frozenset({"cluster", "zxid", "as_of_zxid", "start_zxid", "end_zxid", "event_time",
                                   "observed_at", "txn_time", "ts", "run_at", "start_time", "end_time"})
"""The columns whose per-file min/max Delta keeps (``delta.dataSkippingStatsColumns``): what reads filter on
(a cluster, a zxid or time range). Statistics on every column (Delta's default, the first 32) cost about 40% of
a connector write, mostly for the high-cardinality strings nobody filters by."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # columns that identify a row (used for dedup / quality checks)
    doc: str = ""

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def stats_columns(self) -> tuple[str, ...]:
        """The columns Delta keeps per-file statistics on (``STATS_COLUMNS`` that this table has)."""
        return tuple(c.name for c in self.columns if c.name in STATS_COLUMNS)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name!r}")


def _c(name: str, type_: str, nullable: bool = True) -> Column:
    return Column(name, type_, nullable)


ZNODE_EVENTS = TableSpec(
    "znode_events",
    (
        _c("cluster", "string", False),
        _c("zxid", "bigint", False),
        _c("path", "string", False),
        _c("op", "string", False),  # CREATE, SET, DELETE, CLOSE_SESSION, CREATE_SESSION, MULTI_FAILED, GAP
        _c("data", "binary"),
        _c("version", "int"),
        _c("czxid", "bigint"),
        _c("mzxid", "bigint"),
        _c("pzxid", "bigint"),
        _c("ephemeral_owner", "bigint"),
        _c("session_id", "bigint"),  # client session of the txn (txnlog) or of the collector (watch)
        _c("txn_time", "timestamp"),  # time ZooKeeper stamped on the transaction (txnlog only)
        _c("source", "string", False),  # watch, resync, txnlog
        _c("missed_versions", "int"),
        _c("detail", "string"),  # e.g. failed check path of a MULTI_FAILED, gap reason
        _c("observed_at", "timestamp", False),
        _c("event_id", "string", False),
    ),
    key=("cluster", "event_id"),
    doc="one observed change of one znode",
)

CONTROLLER_DECISIONS = TableSpec(
    "controller_decisions",
    (
        _c("cluster", "string", False),
        _c("ts", "timestamp"),
        _c("source_file", "string", False),
        _c("line_no", "bigint", False),
        _c("level", "string"),
        _c("logger", "string"),
        _c("controller_id", "int"),
        _c("controller_epoch", "int"),
        _c("broker_id", "int"),
        _c("kind", "string", False),
        _c("topic", "string"),
        _c("partition", "int"),
        _c("replica", "int"),
        _c("from_state", "string"),
        _c("to_state", "string"),
        _c("leader", "int"),
        _c("leader_epoch", "int"),
        _c("isr", "array<int>"),
        _c("success", "boolean"),
        _c("message", "string"),
        _c("event_id", "string", False),
    ),
    key=("cluster", "event_id"),
    doc="one parsed controller/broker log record",
)

QUARANTINE = TableSpec(
    "quarantine",
    (
        _c("cluster", "string", False),
        _c("source", "string", False),
        _c("raw", "string"),
        _c("reason", "string", False),
        _c("observed_at", "timestamp", False),
        _c("ref", "string"),  # where it came from: file:line, zxid/path
        _c("event_id", "string", False),
    ),
    key=("cluster", "event_id"),
    doc="one input a collector could not use (bronze: only collectors write it)",
)

KRAFT_RECORDS = TableSpec(
    "kraft_records",
    (
        _c("cluster", "string", False),
        _c("offset", "bigint", False),  # in a snapshot: the offset there (from 0); a gap row: its first missing one
        _c("batch_base_offset", "bigint", False),
        _c("batch_last_offset", "bigint", False),  # a gap row: its last missing offset
        _c("leader_epoch", "int"),  # the batch's partition leader epoch
        _c("batch_timestamp", "timestamp"),  # the batch's max timestamp
        _c("is_control", "boolean", False),
        _c("record_type", "string"),  # a MetadataRecordType or ControlRecordType name; null: undecodable
        _c("record_version", "int"),
        _c("key", "binary"),
        _c("value", "binary"),
        _c("source", "string", False),  # segment, snapshot, gap
        _c("snapshot_id", "string"),  # "<end offset>-<epoch>": the snapshot read, or the one covering a gap
        _c("file_name", "string", False),
        _c("detail", "string"),  # why a gap, why a record is undecodable
        _c("collected_at", "timestamp", False),
    ),
    key=("cluster", "source", "snapshot_id", "offset", "leader_epoch"),  # a rewritten tail: an offset at two epochs
    doc="one record of a KRaft metadata log segment or snapshot, or a gap in the log (bronze: collect kraft)",
)

DECODE_QUARANTINE = TableSpec(
    "decode_quarantine",
    QUARANTINE.columns,
    key=("cluster", "event_id"),
    doc="one bronze znode change the pipeline could not decode (derived: a rebuild rewrites it)",
)

METADATA_EVENTS = TableSpec(
    "metadata_events",
    (
        _c("cluster", "string", False),
        _c("zxid", "bigint", False),
        _c("event_time", "timestamp"),
        _c("type", "string", False),
        _c("topic", "string"),
        _c("partition", "int"),
        _c("broker", "int"),
        _c("controller_id", "int"),
        _c("controller_epoch", "int"),
        _c("leader", "int"),
        _c("leader_epoch", "int"),
        _c("isr", "array<int>"),
        _c("replicas", "array<int>"),
        _c("zk_version", "int"),
        _c("czxid", "bigint"),
        _c("path", "string"),
        _c("detail", "string"),  # JSON with type-specific extras
        _c("event_id", "string", False),
    ),
    key=("cluster", "event_id"),
    doc="one typed metadata change: a view, decoded from znode_events when read, with kraft_metadata_events",
)

KRAFT_METADATA_EVENTS = TableSpec(
    "kraft_metadata_events",
    METADATA_EVENTS.columns,
    key=("cluster", "event_id"),
    doc="one typed metadata change of a KRaft cluster, made from its metadata log (shown in metadata_events)",
)

PARTITION_TRANSITIONS = TableSpec(
    "partition_transitions",
    (
        _c("cluster", "string", False),
        _c("topic", "string", False),
        _c("partition", "int", False),
        _c("zxid", "bigint", False),
        _c("event_time", "timestamp"),
        _c("from_state", "string", False),
        _c("to_state", "string", False),
        _c("legal", "boolean", False),
        _c("cause", "string"),
        _c("event_id", "string", False),
    ),
    key=("cluster", "event_id"),
    doc="one partition state machine step",
)

REPLICA_TRANSITIONS = TableSpec(
    "replica_transitions",
    (
        _c("cluster", "string", False),
        _c("topic", "string", False),
        _c("partition", "int", False),
        _c("replica", "int", False),
        _c("zxid", "bigint", False),
        _c("event_time", "timestamp"),
        _c("from_state", "string", False),
        _c("to_state", "string", False),
        _c("legal", "boolean", False),
        _c("cause", "string"),
        _c("event_id", "string", False),
    ),
    key=("cluster", "event_id"),
    doc="one replica state machine step",
)

PARTITION_STATE = TableSpec(
    "partition_state",
    (
        _c("cluster", "string", False),
        _c("topic", "string", False),
        _c("partition", "int", False),
        _c("state", "string", False),
        _c("leader", "int"),
        _c("leader_epoch", "int"),
        _c("controller_epoch", "int"),
        _c("isr", "array<int>"),
        _c("replicas", "array<int>"),
        _c("as_of_zxid", "bigint", False),
        _c("event_time", "timestamp"),
    ),
    key=("cluster", "topic", "partition"),
    doc="latest state per partition",
)

REPLICA_STATE = TableSpec(
    "replica_state",
    (
        _c("cluster", "string", False),
        _c("topic", "string", False),
        _c("partition", "int", False),
        _c("replica", "int", False),
        _c("state", "string", False),
        _c("leader", "int"),
        _c("leader_epoch", "int"),
        _c("isr", "array<int>"),
        _c("replicas", "array<int>"),
        _c("as_of_zxid", "bigint", False),
        _c("event_time", "timestamp"),
    ),
    key=("cluster", "topic", "partition", "replica"),
    doc="latest state per replica",
)

CONTROLLER_TENURE = TableSpec(
    "controller_tenure",
    (
        _c("cluster", "string", False),
        _c("controller_id", "int", False),
        _c("controller_epoch", "int"),
        _c("start_zxid", "bigint"),
        _c("end_zxid", "bigint"),
        _c("start_time", "timestamp"),
        _c("end_time", "timestamp"),
        _c("source", "string"),  # zk or logs
    ),
    key=("cluster", "controller_id", "controller_epoch", "source"),
    doc="one controller's term",
)

ANOMALIES = TableSpec(
    "anomalies",
    (
        _c("cluster", "string", False),
        _c("anomaly_id", "string", False),
        _c("kind", "string", False),
        _c("severity", "string", False),
        _c("event_time", "timestamp"),
        _c("zxid", "bigint"),
        _c("detected_at", "timestamp", False),
        _c("topic", "string"),
        _c("partition", "int"),
        _c("replica", "int"),
        _c("broker", "int"),
        _c("controller_id", "int"),
        _c("controller_epoch", "int"),
        _c("details", "string"),  # JSON
        _c("evidence", "array<string>"),  # event ids
        # an episode (a finding with an end, models.anomalies.EPISODE_KINDS): the start row's anomaly_id on both
        # of its rows; the end row alone holds when it ended and how long it lasted (docs/tables.md)
        _c("episode_id", "string"),
        _c("ended_at", "timestamp"),
        _c("ended_zxid", "bigint"),
        _c("duration_ms", "bigint"),
    ),
    key=("cluster", "anomaly_id"),
    doc="one finding",
)

QUALITY_RESULTS = TableSpec(
    "quality_results",
    (
        _c("cluster", "string", False),
        _c("run_id", "string", False),
        _c("run_at", "timestamp", False),
        _c("table_name", "string", False),
        _c("expectation", "string", False),
        _c("column", "string"),
        _c("success", "boolean", False),
        _c("observed", "string"),
        _c("table_version", "bigint"),
    ),
    key=("cluster", "run_id", "table_name", "expectation", "column"),
    doc="one expectation result of one zkledger check run",
)

DERIVED_TABLES: Final[tuple[TableSpec, ...]] = (ANOMALIES, KRAFT_METADATA_EVENTS, DECODE_QUARANTINE,
                                                PARTITION_TRANSITIONS, REPLICA_TRANSITIONS, CONTROLLER_TENURE,
                                                REPLICA_STATE, PARTITION_STATE)
"""Every table the pipeline derives from bronze (``rebuild`` rewrites them; two runs of one history write them
identically)."""
KEYED_STATE_TABLES: Final[tuple[TableSpec, ...]] = (CONTROLLER_TENURE, REPLICA_STATE, PARTITION_STATE)
"""The derived tables held as one file per key bucket, named after it: a key's next commit replaces its file by
that name, so they are never compacted (their file count is bounded by the keys anyway)."""

ALL_TABLES: Final[dict[str, TableSpec]] = {
    t.name: t
    for t in (
        ZNODE_EVENTS,
        CONTROLLER_DECISIONS,
        QUARANTINE,
        KRAFT_RECORDS,
        DECODE_QUARANTINE,
        KRAFT_METADATA_EVENTS,
        PARTITION_TRANSITIONS,
        REPLICA_TRANSITIONS,
        PARTITION_STATE,
        REPLICA_STATE,
        CONTROLLER_TENURE,
        ANOMALIES,
        QUALITY_RESULTS,
    )
}

"""Every table stored in the lake, by name."""

VIEWS: Final[dict[str, TableSpec]] = {METADATA_EVENTS.name: METADATA_EVENTS}
"""What users read like a table and the lake does not store: ``metadata_events`` is made when read
(``services.metadata_events``)."""

RETIRED_TABLES: Final[tuple[str, ...]] = (METADATA_EVENTS.name,)
"""Derived tables older releases stored and this one does not: a rebuild removes them (a view has the name)."""

READABLE: Final[dict[str, TableSpec]] = {**ALL_TABLES, **VIEWS}
"""The stored tables and the views: what ``zkledger check`` validates."""
