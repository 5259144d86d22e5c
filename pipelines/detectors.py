"""Anomaly detectors: one ``DataFrame -> DataFrame`` function per kind (rows shaped as ``anomalies``).

Inputs: ``writes`` = enriched partition-state writes from the fold (the write plus the partition's view
before it and the cluster context at its zxid), ``transitions`` from the fold, ``decisions`` from the logs.
Ids are ``models.ids.event_id(cluster, kind, *evidence)`` so reruns and replays produce the same rows.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from models.anomalies import SEVERITY, AnomalyKind
from models.decisions import FAILURE_KINDS, DecisionKind
from models.states import DEFAULT_KAFKA_VERSION, legal_pairs, partition_valid_previous, replica_valid_previous
from models.tables import ANOMALIES

K = AnomalyKind


_TYPED_COLUMNS = (("topic", "string"), ("partition", "int"), ("replica", "int"), ("broker", "int"),
                  ("controller_id", "int"), ("controller_epoch", "int"))


def _anomalies(df: DataFrame, kind: AnomalyKind, evidence: Column, details: Column, **cols: Column) -> DataFrame:
    """Shape detector output as anomalies rows; id = event_id(cluster, kind, *evidence) (sha1, 24 hex).

    The shaping is one ``selectExpr`` of SQL text: built from Column objects it cost ~500 JVM round trips
    per detector, and the monitor builds every detector on every micro-batch.
    """
    present = set(df.columns)  # each ``df.columns`` is a round trip to the JVM: ask once
    with_ev = df.withColumn("evidence", evidence) if "evidence" in present \
        else df.select("*", evidence.alias("evidence"))
    with_ev = with_ev.select("*", F.to_json(details).alias("_details"), *[v.alias(f"_o_{k}") for k, v in cols.items()])

    def src(name: str, default: str) -> str:
        return f"_o_{name}" if name in cols else (f"`{name}`" if name in present else default)

    exprs = {
        "cluster": "cluster",
        "anomaly_id": f"substring(sha1(encode(concat_ws(chr(31), cluster, '{kind}', concat_ws(chr(31), evidence)), "
                      "'UTF-8')), 1, 24)",
        "kind": f"'{kind}'", "severity": f"'{SEVERITY[kind]}'",
        "event_time": src("event_time", "event_time"), "detected_at": src("event_time", "event_time"),
        "zxid": f"CAST({src('zxid', 'NULL')} AS bigint)",
        **{c: f"CAST({src(c, 'NULL')} AS {t})" for c, t in _TYPED_COLUMNS},
        "details": "_details", "evidence": "evidence",
    }
    return with_ev.selectExpr(*[f"{exprs[c]} AS `{c}`" for c in ANOMALIES.column_names])


def _w_details() -> Column:
    return F.struct("leader", "leader_epoch", "controller_epoch", "isr", "replicas", "prev_leader",
                    "prev_leader_epoch", "prev_isr", "cur_controller_epoch")


def _ev_of(*names: str) -> Column:
    return F.array(*[F.col(n) for n in names])


def _changed_leadership() -> Column:
    return (F.col("prev_leader").isNull() | (F.col("leader") != F.col("prev_leader"))
            | (F.col("leader_epoch") > F.col("prev_leader_epoch")))


# --- from the fold --------------------------------------------------------------------------------------
def detect_illegal_partition_transitions(transitions: DataFrame) -> DataFrame:
    bad = transitions.filter(~F.col("legal"))
    return _anomalies(bad, K.ILLEGAL_PARTITION_TRANSITION, _ev_of("event_id"),
                      F.struct("from_state", "to_state", "cause", F.lit("zk").alias("source")))


def detect_illegal_replica_transitions(transitions: DataFrame) -> DataFrame:
    bad = transitions.filter(~F.col("legal"))
    return _anomalies(bad, K.ILLEGAL_REPLICA_TRANSITION, _ev_of("event_id"),
                      F.struct("from_state", "to_state", "cause", F.lit("zk").alias("source")))


# --- from enriched state writes -------------------------------------------------------------------------
def detect_zombie_writes(writes: DataFrame) -> DataFrame:
    """I3: leadership changed/epoch bumped by a write whose controller_epoch is older than /controller_epoch.

    A write at the same leader and leader_epoch that only changes the ISR is leader-originated (IBP < 2.7)
    and legitimately carries an old controller_epoch: not a zombie.
    """
    bad = writes.filter((F.col("controller_epoch") < F.col("cur_controller_epoch")) & _changed_leadership())
    return _anomalies(bad, K.ZOMBIE_CONTROLLER_WRITE, _ev_of("event_id"), _w_details())


def detect_leader_epoch_regression(writes: DataFrame) -> DataFrame:
    """I2, per topic incarnation (the fold resets the view on deletion)."""
    bad = writes.filter(F.col("leader_epoch") < F.col("prev_leader_epoch"))
    return _anomalies(bad, K.LEADER_EPOCH_REGRESSION, _ev_of("event_id"), _w_details())


def detect_leader_not_in_isr(writes: DataFrame) -> DataFrame:
    bad = writes.filter((F.col("leader") >= 0) & ~F.coalesce(F.array_contains("isr", F.col("leader")), F.lit(False)))
    return _anomalies(bad, K.LEADER_NOT_IN_ISR, _ev_of("event_id"), _w_details())


def detect_isr_not_subset(writes: DataFrame) -> DataFrame:
    """I4: ISR members outside the assigned replicas (the full set during reassignment), or duplicates."""
    outside = F.size(F.array_except("isr", "replicas")) > 0
    dupes = F.size(F.array_distinct("isr")) != F.size("isr")
    bad = writes.filter(F.col("isr").isNotNull() & ((F.col("replicas").isNotNull() & outside) | dupes))
    return _anomalies(bad, K.ISR_NOT_SUBSET_OF_REPLICAS, _ev_of("event_id"), _w_details())


def detect_leader_not_live(writes: DataFrame) -> DataFrame:
    """I4 liveness, allowing for the controller's reaction lag.

    Rule: only a write that ELECTS a leader (leader or leader_epoch changes) is checked: electing a broker
    that is not registered under /brokers/ids at that zxid is wrong. A write that keeps an existing leader
    (ISR-only) is not flagged: the controller may not have processed the broker's departure yet, and its
    reaction, when it comes, is itself an election and is checked.
    """
    bad = writes.filter((F.col("leader") >= 0) & (F.col("leader_live") == F.lit(False)) & _changed_leadership())
    return _anomalies(bad, K.LEADER_NOT_LIVE, _ev_of("event_id"), _w_details(), broker=F.col("leader"))


def detect_offline_partitions(writes: DataFrame) -> DataFrame:
    """A partition going to leader -1 (once per outage, not per write while offline)."""
    bad = writes.filter((F.col("leader") == -1) & (F.col("prev_leader").isNull() | (F.col("prev_leader") != -1)))
    return _anomalies(bad, K.OFFLINE_PARTITION, _ev_of("event_id"), _w_details())


def detect_unclean_elections(writes: DataFrame) -> DataFrame:
    """I6: a new leader that was not in the previous ISR."""
    bad = writes.filter((F.col("leader") >= 0) & F.col("prev_isr").isNotNull()
                        & (F.col("prev_leader").isNull() | (F.col("leader") != F.col("prev_leader")))
                        & ~F.array_contains("prev_isr", F.col("leader")))
    return _anomalies(bad, K.UNCLEAN_LEADER_ELECTION, _ev_of("event_id"), _w_details())


# --- from controller/broker logs ------------------------------------------------------------------------
def _decision_details() -> Column:
    return F.struct("kind", "from_state", "to_state", "leader", "leader_epoch", "message", "source_file", "line_no")


def _d(decisions: DataFrame) -> DataFrame:
    return decisions.withColumn("event_time", F.col("ts")).withColumn("zxid", F.lit(None).cast("bigint"))


FAILED_CHANGE_KINDS = tuple(sorted(str(k) for k in FAILURE_KINDS & {
    DecisionKind.PARTITION_TRANSITION_FAILED, DecisionKind.REPLICA_TRANSITION_FAILED, DecisionKind.INVALID_TRANSITION}))
"""A state change that did not take effect; an invalid-transition cause is ALSO an illegal transition."""


def detect_failed_state_changes(decisions: DataFrame) -> DataFrame:
    bad = _d(decisions).filter(F.col("kind").isin(*FAILED_CHANGE_KINDS))
    return _anomalies(bad, K.FAILED_STATE_CHANGE, _ev_of("event_id"), _decision_details())


def detect_stale_controller_requests(decisions: DataFrame) -> DataFrame:
    bad = _d(decisions).filter(F.col("kind") == str(DecisionKind.STALE_CONTROLLER_REQUEST))
    return _anomalies(bad, K.STALE_CONTROLLER_REQUEST, _ev_of("event_id"), _decision_details())


def _pair_col() -> Column:
    return F.concat_ws(">", "from_state", "to_state")


def detect_illegal_logged_transitions(decisions: DataFrame, kafka_version: str = DEFAULT_KAFKA_VERSION) -> DataFrame:
    """Logged transitions checked against the version-aware tables, plus logged invalid-transition errors."""
    p_ok = [f"{a}>{b}" for a, b in legal_pairs(partition_valid_previous(kafka_version))]  # type: ignore[arg-type]
    r_ok = [f"{a}>{b}" for a, b in legal_pairs(replica_valid_previous(kafka_version))]  # type: ignore[arg-type]
    d = _d(decisions)
    kind = F.col("kind")
    logged_p = d.filter((kind == str(DecisionKind.PARTITION_TRANSITION)) & F.col("from_state").isNotNull()
                        & ~_pair_col().isin(p_ok))
    logged_r = d.filter((kind == str(DecisionKind.REPLICA_TRANSITION)) & F.col("from_state").isNotNull()
                        & ~_pair_col().isin(r_ok))
    invalid = d.filter(kind == str(DecisionKind.INVALID_TRANSITION))
    parts = logged_p.unionByName(invalid.filter(F.col("replica").isNull()))
    reps = logged_r.unionByName(invalid.filter(F.col("replica").isNotNull()))
    return _anomalies(parts, K.ILLEGAL_PARTITION_TRANSITION, _ev_of("event_id"), _decision_details()).unionByName(
        _anomalies(reps, K.ILLEGAL_REPLICA_TRANSITION, _ev_of("event_id"), _decision_details()))


def detect_decision_zk_divergence(decisions: DataFrame, zk_writes: DataFrame) -> DataFrame:
    """The controller logged t-p -> OnlinePartition with leader L / epoch E, but ZK never held (L, E).

    ``zk_writes`` holds every known state write (topic, partition, leader, leader_epoch): the increment's and
    the committed history's.
    """
    logged = _d(decisions).filter((F.col("kind") == str(DecisionKind.PARTITION_TRANSITION)) & (F.col("to_state") == "OnlinePartition")
                                  & F.col("leader").isNotNull() & F.col("leader_epoch").isNotNull())
    seen = zk_writes.select("topic", "partition", "leader", "leader_epoch").distinct()
    bad = logged.join(seen, ["topic", "partition", "leader", "leader_epoch"], "left_anti")
    return _anomalies(bad, K.DECISION_ZK_DIVERGENCE, _ev_of("event_id"), _decision_details())


def detect_split_brain(terms: DataFrame) -> DataFrame:
    """Two controller ids acting in overlapping time with different epochs (logged-decision terms).

    ``terms``: controller_tenure rows with source 'logs'. The older epoch still acting after the newer one
    started is Kafka's soft-failure (zombie) shape.
    """
    a = terms.alias("a")
    b = terms.alias("b")
    pairs = a.join(b, (F.col("a.controller_id") != F.col("b.controller_id"))
                   & (F.col("a.controller_epoch") < F.col("b.controller_epoch"))
                   & (F.col("a.end_time") >= F.col("b.start_time")) & (F.col("b.end_time") >= F.col("a.start_time")))
    sel = pairs.select(
        F.col("a.cluster").alias("cluster"), F.col("b.start_time").alias("event_time"),
        F.col("a.controller_id").alias("controller_id"), F.col("a.controller_epoch").alias("controller_epoch"),
        F.col("b.controller_id").alias("other_id"), F.col("b.controller_epoch").alias("other_epoch"),
        F.col("a.end_time").alias("old_last_seen"),
    )
    ev = F.array(F.concat_ws(":", F.lit("term"), "controller_id", "controller_epoch"),
                 F.concat_ws(":", F.lit("term"), "other_id", "other_epoch"))
    return _anomalies(sel, K.SPLIT_BRAIN, ev, F.struct("controller_id", "controller_epoch", "other_id", "other_epoch",
                                                        "old_last_seen"))


def detect_collection_gaps_in_bronze(znode_events: DataFrame, txnlog_max_zxid: int | None = None) -> DataFrame:
    """znode rows whose collector saw a version jump (missed_versions > 0).

    Not when the txnlog collector has delivered that zxid (``txnlog_max_zxid`` >= it): the lossless history
    is in the lake, so the watch's gap lost nothing.
    """
    bad = znode_events.filter(F.col("missed_versions") > 0).withColumn("event_time", F.col("observed_at"))
    if txnlog_max_zxid is not None:
        bad = bad.filter(F.col("zxid") > F.lit(txnlog_max_zxid))
    return _anomalies(bad, K.COLLECTION_GAP, _ev_of("event_id"), F.struct("path", "missed_versions", "source"))


WRITE_DETECTORS: tuple[Callable[[DataFrame], DataFrame], ...] = (
    detect_zombie_writes, detect_leader_epoch_regression, detect_leader_not_in_isr, detect_isr_not_subset,
    detect_leader_not_live, detect_offline_partitions, detect_unclean_elections,
)
DECISION_DETECTORS: tuple[Callable[[DataFrame], DataFrame], ...] = (
    detect_failed_state_changes, detect_stale_controller_requests, detect_illegal_logged_transitions,
)
