"""Declarative data-quality expectations per lake table, as plain data (no GX, no Spark).

``services.quality`` turns each :class:`Expectation` into a Great Expectations expectation.
The vocabulary (states, anomaly kinds, znode ops, severities) comes from the other model
modules so a new state or kind is checked as soon as it is added there. Cross-row or
cross-table rules ("the legal flag agrees with Kafka's table", "a transition names a known
partition") are *derived* checks: the runner computes a boolean column before validation
and the suite expects it to be true on every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from models.anomalies import SEVERITY, AnomalyKind
from models.events import MetadataEventType, Source, TenureSource, ZnodeOp
from models.states import PartitionState, ReplicaState
from models.tables import (
    ANOMALIES,
    CONTROLLER_DECISIONS,
    CONTROLLER_TENURE,
    DECODE_QUARANTINE,
    KRAFT_METADATA_EVENTS,
    METADATA_EVENTS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    QUALITY_RESULTS,
    QUARANTINE,
    READABLE,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
    ZNODE_EVENTS,
    TableSpec,
)


class Check(StrEnum):
    """What an expectation asserts (one GX expectation type each)."""

    COLUMNS_PRESENT = "columns_present"  # every declared column exists (extra columns allowed)
    COLUMN_TYPE = "column_type"  # a column has its declared type (models.tables vocabulary)
    NOT_NULL = "not_null"
    UNIQUE = "unique"  # one column
    COMPOUND_UNIQUE = "compound_unique"  # a tuple of columns
    IN_SET = "in_set"  # non-null values are in ``values``
    MIN_VALUE = "min_value"  # non-null values are >= ``min_value``
    ALL_TRUE = "all_true"  # a derived boolean column is true on every row


class Derived(StrEnum):
    """Derived boolean columns the runner computes before validation (name = column name)."""

    LEGAL_FLAG_CONSISTENT = "_legal_flag_consistent"  # legal == (from, to) in validPreviousStates; a re-seed: True
    PARTITION_KNOWN = "_partition_known"  # (cluster, topic, partition) appears in metadata_events
    TENURE_ORDERED = "_tenure_ordered"  # end_zxid >= start_zxid when both are known


Value = str | int | bool


@dataclass(frozen=True)
class Expectation:
    """One rule about one table."""

    check: Check
    column: str | None = None
    columns: tuple[str, ...] = ()
    values: tuple[Value, ...] = ()
    min_value: int | None = None
    type_name: str | None = None  # models.tables type vocabulary, for COLUMN_TYPE
    doc: str = ""

    @property
    def name(self) -> str:
        """Stable, human-readable id, e.g. ``in_set(state)``; stored in quality_results.expectation."""
        if self.check is Check.COLUMN_TYPE:
            return f"column_type({self.column}={self.type_name})"
        if self.check is Check.ALL_TRUE and self.column is not None:
            return self.column.lstrip("_")
        target = ",".join(self.columns) if self.columns else (self.column or "")
        return f"{self.check.value}({target})"


@dataclass(frozen=True)
class Suite:
    table: str
    expectations: tuple[Expectation, ...]
    derived: tuple[Derived, ...] = ()  # derived columns the runner must add first

    @property
    def name(self) -> str:
        return f"{self.table}_suite"


PARTITION_STATES: Final = tuple(str(s) for s in PartitionState)
REPLICA_STATES: Final = tuple(str(s) for s in ReplicaState)
ANOMALY_KINDS: Final = tuple(str(k) for k in AnomalyKind)
SEVERITIES: Final = tuple(sorted(set(SEVERITY.values())))
ZNODE_OPS: Final = tuple(str(o) for o in ZnodeOp)
SOURCES: Final = tuple(str(s) for s in Source)
METADATA_EVENT_TYPES: Final = tuple(str(t) for t in MetadataEventType)
TENURE_SOURCES: Final = tuple(str(s) for s in TenureSource)
NO_LEADER: Final = -1  # Kafka writes leader -1 when a partition has no leader


def _schema(spec: TableSpec) -> tuple[Expectation, ...]:
    """Columns present, their types, and non-null on every non-nullable column."""
    out = [Expectation(Check.COLUMNS_PRESENT, columns=spec.column_names)]
    out += [Expectation(Check.COLUMN_TYPE, column=c.name, type_name=c.type) for c in spec.columns]
    out += [Expectation(Check.NOT_NULL, column=c.name) for c in spec.columns if not c.nullable]
    return tuple(out)


def _key(spec: TableSpec) -> Expectation:
    return Expectation(Check.COMPOUND_UNIQUE, columns=spec.key, doc="the table's key identifies one row")


def _in(column: str, values: tuple[Value, ...]) -> Expectation:
    return Expectation(Check.IN_SET, column=column, values=values)


def _min(column: str, value: int) -> Expectation:
    return Expectation(Check.MIN_VALUE, column=column, min_value=value)


def _true(derived: Derived, doc: str) -> Expectation:
    return Expectation(Check.ALL_TRUE, column=derived.value, doc=doc)


def _unique(column: str) -> Expectation:
    return Expectation(Check.UNIQUE, column=column)


_METADATA_EVENT_RULES: Final = (
    (
        _unique("event_id"),
        _min("zxid", 0),
        _in("type", METADATA_EVENT_TYPES),
        _min("partition", 0),
        _min("leader", NO_LEADER),
        _min("leader_epoch", 0),
        _min("controller_epoch", 0),
    ),
    (),
)

_SPECIFIC: Final[dict[str, tuple[tuple[Expectation, ...], tuple[Derived, ...]]]] = {
    ZNODE_EVENTS.name: (
        (
            _unique("event_id"),
            # the event id is derived from these: two rows here mean the same change was stored twice
            Expectation(Check.COMPOUND_UNIQUE, columns=("cluster", "source", "zxid", "path", "op")),
            _in("op", ZNODE_OPS),
            _in("source", SOURCES),
            _min("missed_versions", 0),
        ),
        (),
    ),
    CONTROLLER_DECISIONS.name: (
        (
            _unique("event_id"),
            Expectation(Check.COMPOUND_UNIQUE, columns=("cluster", "source_file", "line_no")),
            _min("line_no", 0),
            _in("from_state", PARTITION_STATES + REPLICA_STATES),
            _in("to_state", PARTITION_STATES + REPLICA_STATES),
        ),
        (),
    ),
    QUARANTINE.name: ((_unique("event_id"),), ()),
    DECODE_QUARANTINE.name: ((_unique("event_id"),), ()),
    METADATA_EVENTS.name: _METADATA_EVENT_RULES,
    KRAFT_METADATA_EVENTS.name: _METADATA_EVENT_RULES,
    PARTITION_TRANSITIONS.name: (
        (
            _unique("event_id"),
            _in("from_state", PARTITION_STATES),
            _in("to_state", PARTITION_STATES),
            _min("partition", 0),
            _true(Derived.LEGAL_FLAG_CONSISTENT, "legal agrees with Kafka's PartitionStateMachine table"),
            _true(Derived.PARTITION_KNOWN, "every transition names a partition seen in metadata_events"),
        ),
        (Derived.LEGAL_FLAG_CONSISTENT, Derived.PARTITION_KNOWN),
    ),
    REPLICA_TRANSITIONS.name: (
        (
            _unique("event_id"),
            _in("from_state", REPLICA_STATES),
            _in("to_state", REPLICA_STATES),
            _min("partition", 0),
            _min("replica", 0),
            _true(Derived.LEGAL_FLAG_CONSISTENT, "legal agrees with Kafka's ReplicaStateMachine table"),
            _true(Derived.PARTITION_KNOWN, "every transition names a partition seen in metadata_events"),
        ),
        (Derived.LEGAL_FLAG_CONSISTENT, Derived.PARTITION_KNOWN),
    ),
    PARTITION_STATE.name: (
        (_in("state", PARTITION_STATES), _min("partition", 0), _min("leader", NO_LEADER), _min("as_of_zxid", 0)),
        (),
    ),
    REPLICA_STATE.name: (
        (_in("state", REPLICA_STATES), _min("partition", 0), _min("replica", 0), _min("as_of_zxid", 0)),
        (),
    ),
    CONTROLLER_TENURE.name: (
        (
            _min("controller_id", 0),
            _min("controller_epoch", 0),
            _in("source", TENURE_SOURCES),
            _true(Derived.TENURE_ORDERED, "a term ends after it starts"),
        ),
        (Derived.TENURE_ORDERED,),
    ),
    ANOMALIES.name: (
        (_unique("anomaly_id"), _in("kind", ANOMALY_KINDS), _in("severity", SEVERITIES), _min("duration_ms", 0),
         _min("ended_zxid", 0)),
        (),
    ),
    QUALITY_RESULTS.name: ((_in("table_name", tuple(READABLE)),), ()),
}


def suite_for(table: str) -> Suite:
    """The full suite of one table: schema, key uniqueness, then the table's own rules."""
    spec = READABLE[table]
    specific, derived = _SPECIFIC.get(table, ((), ()))
    key = _key(spec)
    # (cluster, <id>) is implied by unique(<id>): skip it, every expectation costs Spark jobs
    if len(spec.key) == 2 and spec.key[0] == "cluster" and _unique(spec.key[1]) in specific:
        return Suite(table, (*_schema(spec), *specific), derived)
    return Suite(table, (*_schema(spec), key, *specific), derived)


SUITES: Final[dict[str, Suite]] = {name: suite_for(name) for name in READABLE}
