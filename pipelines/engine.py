"""One increment of the pipeline: bronze rows in, every derived table out.

``run_increment`` is the only engine: ``zkledger rebuild`` runs it once from empty carried state over all
history, ``zkledger monitor`` runs it per micro-batch with the carried state (``Carried``, Arrow on the driver).
The per-key fold runs per key BUCKET (``repartition`` by (topic, partition), sorted by zxid, one ``mapInArrow``
call per bucket into ``pipelines.vector_fold``), seeded with each touched key's carried row.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from models.anomalies import AnomalyKind
from models.states import DEFAULT_KAFKA_VERSION
from models.tables import (
    ANOMALIES,
    CONTROLLER_DECISIONS,
    CONTROLLER_TENURE,
    METADATA_EVENTS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
)
from pipelines import detectors as D
from pipelines.controller import (
    DEFAULT_NO_CONTROLLER_THRESHOLD,
    GLOBAL_TYPES,
    no_active_controller,
    replay,
    resign_marks,
    zk_split_brain,
)
from pipelines.decode import decoded_znode_events, split_decoded
from pipelines.schemas import local_df, schema
from pipelines.state_machines import PARTITION_TYPES, SEED, GlobalContext
from pipelines.vector_fold import fold_table

log = logging.getLogger(__name__)

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
    T.StructField("leader_live", T.BooleanType()),
])

FOLD_ARROW_SCHEMA = to_arrow_schema(FOLD_OUT)

DERIVED_TABLES = ("metadata_events", "quarantine", "partition_transitions", "replica_transitions", "anomalies",
                  "controller_tenure", "replica_state", "partition_state")
"""Write order: state tables LAST, so a committed state means the whole increment is committed."""
APPEND_TABLES = frozenset({"metadata_events", "quarantine", "partition_transitions", "replica_transitions", "anomalies"})


@dataclass
class Carried:
    """What an increment continues from, held on the driver as Arrow (all empty for a rebuild).

    The monitor keeps it in memory between micro-batches (``jobs._common.MonitorCarry``), so a batch costs
    what it touches, not the whole history: only the touched keys' state is shipped to Spark as fold seeds.
    """

    partition_state: pa.Table
    replica_state: pa.Table
    log_terms: pa.Table  # controller_tenure rows with source 'logs'
    global_events: list[dict[str, Any]] = field(default_factory=list)  # committed global metadata events
    zk_writes: pa.Table | None = None  # committed state writes: topic, partition, leader, leader_epoch
    known_ids: Callable[[int, int], set[str]] | None = None  # committed metadata_events ids with zxid in [lo, hi]
    txnlog_max_zxid: int | None = None  # highest zxid the txnlog collector has delivered (gap suppression)
    txnlog_min_zxid: int | None = None  # lowest one: between both, the txnlog is the lossless history
    empty: bool = False
    known_anomaly_ids: set[str] | None = None  # ids already committed in anomalies: not found again
    resigns: list[dict[str, Any]] | None = None  # controller.resign_marks of the committed decisions


@dataclass
class Outputs:
    """Every derived table of one increment, collected to the driver ONCE as Arrow (small per increment)."""

    tables: dict[str, pa.Table]
    txnlog_bounds: tuple[int | None, int | None] = (None, None)  # this increment's txnlog zxid range
    resigns: list[dict[str, Any]] = field(default_factory=list)  # what the next increment carries as resigns

    def __getitem__(self, table: str) -> pa.Table:
        return self.tables[table]


def empty_carried() -> Carried:
    return Carried(_empty_arrow("partition_state"), _empty_arrow("replica_state"), _empty_arrow("controller_tenure"),
                   empty=True)


def run_increment(spark: SparkSession, znode_events: DataFrame, decisions: DataFrame, carried: Carried, *,
                  cluster: str, kafka_version: str = DEFAULT_KAFKA_VERSION,
                  no_controller_threshold: timedelta = DEFAULT_NO_CONTROLLER_THRESHOLD) -> Outputs:
    """Every derived table for one increment (deterministic: same inputs and carried state -> same rows).

    Each Spark stage runs once: decode, fold, decisions, log terms and anomalies are one collect each, and
    every table is split from those Arrow results on the driver (a Spark job costs ~0.3 s even when tiny).
    """
    committed = None if carried.txnlog_min_zxid is None or carried.txnlog_max_zxid is None \
        else (carried.txnlog_min_zxid, carried.txnlog_max_zxid)
    # decode and fold run once each in Spark, cached: the driver collects them for the output tables and the
    # next stages read them in the JVM (rebuilding a DataFrame from driver Arrow costs ~10 us per row here)
    decoded_df = decoded_znode_events(znode_events, committed).cache()
    decoded = decoded_df.toArrow()
    meta_t, quarantine_t = split_decoded(decoded)
    meta = decoded_df.filter("_ok").select(*META_SEQ.fieldNames())
    if carried.known_ids is not None and meta_t.num_rows:
        lo, hi = pc.min_max(meta_t["zxid"]).values()
        committed_ids = carried.known_ids(lo.as_py(), hi.as_py())
        known = pc.is_in(meta_t["event_id"], pa.array(sorted(committed_ids), pa.string()))
        if pc.any(known).as_py():  # the same change committed by an earlier batch (another collector)
            meta_t = meta_t.filter(pc.invert(known))
            meta = meta.filter(~F.col("event_id").isin(sorted(committed_ids)))
    txn_lo, txn_hi = _txnlog_bounds(znode_events)
    txn_max = max([v for v in (txn_hi, carried.txnlog_max_zxid) if v is not None], default=None)

    global_rows = _global_rows(meta_t)
    increment_ids = {r["event_id"] for r in global_rows}
    history = [e for e in carried.global_events if e["event_id"] not in increment_ids]
    timeline = replay(cluster, history + global_rows, no_controller_threshold)

    seeds = _touched_state(carried, meta_t)
    fold_df = _fold(spark, meta, seeds, timeline.ctx, kafka_version).cache()
    fold = fold_df.toArrow()
    pt_t = _rec(fold, "pt", PARTITION_TRANSITIONS.column_names)
    rt_t = _rec(fold, "rt", REPLICA_TRANSITIONS.column_names)
    ps_t = _merge_state(carried.partition_state, _rec(fold, "ps", PARTITION_STATE.column_names))
    rs_t = _merge_state(carried.replica_state, _rec(fold, "rs", REPLICA_STATE.column_names))

    dec_t = decisions.select(*CONTROLLER_DECISIONS.column_names).toArrow()
    decs = arrow_df(spark, dec_t, schema("controller_decisions"))
    carried_terms = arrow_df(spark, carried.log_terms, schema("controller_tenure"))
    log_terms_t = _merge_log_terms(carried_terms, decs, cluster).toArrow() if dec_t.num_rows or not carried.empty \
        else _empty_arrow("controller_tenure")
    zk_terms_t = _arrow_of(timeline.tenure, "controller_tenure")
    tenure_t = pa.concat_tables([zk_terms_t, log_terms_t.cast(zk_terms_t.schema)])

    global_anoms = [{k: v for k, v in a.items() if k != "_trigger"} for a in timeline.anomalies
                    if a["_trigger"] in increment_ids and not _covered_gap(a, txn_max)]
    pt, rt = _fold_rec(fold_df, "pt", schema("partition_transitions")), _fold_rec(fold_df, "rt", schema("replica_transitions"))
    writes = fold_df.filter(F.col("rec") == "w")
    parts = [
        D.detect_illegal_partition_transitions(pt),
        D.detect_illegal_replica_transitions(rt),
        *[det(writes) for det in D.WRITE_DETECTORS],
        D.detect_collection_gaps_in_bronze(znode_events, txn_max),
    ]
    if dec_t.num_rows:  # each detector costs Spark work even on empty input: skip them when idle
        zk_writes = writes.select("topic", "partition", "leader", "leader_epoch")
        if carried.zk_writes is not None:  # only the partitions the logs speak about
            logged = dec_t.select(["topic", "partition"]).drop_null()
            keys = carried.zk_writes.join(logged.group_by(["topic", "partition"]).aggregate([]), ["topic", "partition"],
                                          join_type="left semi")
            zk_writes = zk_writes.unionByName(arrow_df(spark, keys, _ZK_WRITES))
        log_terms = arrow_df(spark, log_terms_t, schema("controller_tenure"))
        parts += [
            *[det(decs) for det in D.DECISION_DETECTORS if det is not D.detect_illegal_logged_transitions],
            D.detect_illegal_logged_transitions(decs, kafka_version),
            D.detect_decision_zk_divergence(decs, zk_writes),
            D.detect_split_brain(log_terms).join(D.detect_split_brain(carried_terms).select("anomaly_id"),
                                                 "anomaly_id", "left_anti"),
        ]
    found_t = _union_all(parts).toArrow()
    decoded_df.unpersist()
    fold_df.unpersist()
    # controller findings on the driver: resignations vs the whole zk timeline, zombie writes vs zk terms
    resigns = resign_marks(dec_t, carried.resigns or [])
    zombies = found_t.filter(pc.equal(found_t["kind"], str(AnomalyKind.ZOMBIE_CONTROLLER_WRITE))).to_pylist()
    controller_anoms = [*no_active_controller(cluster, resigns, timeline.tenure, history + global_rows,
                                              no_controller_threshold),
                        *zk_split_brain(cluster, zombies, timeline.tenure)]
    anomalies_t = _dedupe(pa.concat_tables([_arrow_of(global_anoms, "anomalies"), found_t.cast(_arrow_schema("anomalies")),
                                            _arrow_of(controller_anoms, "anomalies")]))
    if carried.known_anomaly_ids:  # ids are deterministic: one committed by an earlier increment is not new
        anomalies_t = anomalies_t.filter(pc.invert(pc.is_in(anomalies_t["anomaly_id"],
                                                            pa.array(sorted(carried.known_anomaly_ids), pa.string()))))

    return Outputs({
        "metadata_events": meta_t.select(list(METADATA_EVENTS.column_names)), "quarantine": quarantine_t,
        "partition_transitions": pt_t, "replica_transitions": rt_t, "anomalies": anomalies_t,
        "controller_tenure": tenure_t, "partition_state": ps_t, "replica_state": rs_t,
    }, (txn_lo, txn_hi), resigns)


_ZK_WRITES = T.StructType([T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
                          T.StructField("leader", T.IntegerType()), T.StructField("leader_epoch", T.IntegerType())])
META_SEQ = T.StructType([*schema("metadata_events").fields, T.StructField("_seq", T.IntegerType())])


def _arrow_schema(table_or_struct: str | T.StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    struct = schema(table_or_struct) if isinstance(table_or_struct, str) else table_or_struct
    return to_arrow_schema(struct)


def _empty_arrow(table: str) -> pa.Table:
    return _arrow_schema(table).empty_table()


def _arrow_of(rows: list[dict[str, Any]], table: str) -> pa.Table:
    names = schema(table).fieldNames()
    return pa.Table.from_pylist([{c: r.get(c) for c in names} for r in rows], schema=_arrow_schema(table))


def arrow_df(spark: SparkSession, tbl: pa.Table, struct: T.StructType) -> DataFrame:
    """A driver-side Arrow table as a DataFrame with ``struct`` (an empty one is built in the JVM)."""
    if tbl.num_rows == 0:
        return local_df(spark, [], struct)
    return spark.createDataFrame(tbl.select(struct.fieldNames()).cast(_arrow_schema(struct)))


def _union_all(parts: Sequence[DataFrame]) -> DataFrame:
    """All detector outputs (each already shaped as ``anomalies``) as one positional union, built as a balanced
    tree: a chain of unions re-analyses the growing plan at every step (seconds per micro-batch)."""
    names = list(ANOMALIES.column_names)
    # a USING join (split brain's anti join) puts its key first: align by name before the positional union
    level = [p if p.columns == names else p.select(*names) for p in parts]
    while len(level) > 1:
        level = [level[i].union(level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def _fold_rec(fold: DataFrame, rec: str, struct: T.StructType) -> DataFrame:
    """One record kind of the (cached) fold output, shaped as its table (SQL text: few JVM round trips)."""
    cols = [f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`" for f in struct.fields]
    return fold.filter(f"rec = '{rec}'").selectExpr(*cols)


def _rec(fold: pa.Table, rec: str, cols: Sequence[str]) -> pa.Table:
    return fold.filter(pc.equal(fold["rec"], rec)).select(list(cols))


def _global_rows(meta: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = meta.filter(pc.is_in(meta["type"], pa.array(GLOBAL_TYPES))).to_pylist()
    return rows


def _key_of(table: pa.Table) -> pa.Array:
    """(topic, partition) as one string per row, for membership tests (Arrow joins refuse list columns)."""
    return pc.binary_join_element_wise(table["topic"], pc.cast(table["partition"], pa.string()), "\x1f")


def _merge_state(carried: pa.Table, new: pa.Table) -> pa.Table:
    """Carried state rows of untouched keys + the fold's new rows for touched keys (on the driver)."""
    if carried.num_rows == 0:
        return new
    kept = carried.filter(pc.invert(pc.is_in(_key_of(carried), pc.unique(_key_of(new)))))
    target = carried.schema
    return pa.concat_tables([kept.select(target.names).cast(target), new.select(target.names).cast(target)])


def _touched_state(carried: Carried, meta_t: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The carried partition and replica state of the keys this increment touches (and of deleted topics)."""
    ps, rs = carried.partition_state, carried.replica_state
    if ps.num_rows == 0 and rs.num_rows == 0:
        return ps, rs
    keyed = meta_t.filter(pc.is_in(meta_t["type"], pa.array(PARTITION_TYPES)))
    keys = pc.unique(_key_of(keyed.filter(pc.is_valid(keyed["partition"]))))
    deleted = pc.unique(keyed.filter(pc.and_(pc.equal(keyed["type"], "TOPIC_DELETED"),
                                             pc.is_null(keyed["partition"])))["topic"])

    def subset(state: pa.Table) -> pa.Table:
        return state.filter(pc.or_(pc.is_in(_key_of(state), keys), pc.is_in(state["topic"], deleted)))

    return subset(ps), subset(rs)


def _dedupe(tbl: pa.Table) -> pa.Table:
    """First row per anomaly_id (the same anomaly found by two detectors, or twice in history + increment)."""
    seen: set[str] = set()
    keep = []
    for i, aid in enumerate(tbl.column("anomaly_id").to_pylist()):
        if aid not in seen:
            seen.add(aid)
            keep.append(i)
    return tbl.take(pa.array(keep, pa.int64())) if len(keep) < tbl.num_rows else tbl


def _txnlog_bounds(znode_events: DataFrame) -> tuple[int | None, int | None]:
    """The lowest and highest zxid this increment's txnlog rows carry (the lossless collector's range)."""
    row = znode_events.filter(F.col("source") == "txnlog").agg(F.min("zxid").alias("lo"), F.max("zxid").alias("hi")).collect()[0]
    return row["lo"], row["hi"]


def _covered_gap(anomaly: dict[str, Any], txn_max: int | None) -> bool:
    """A watch collector's gap is noise when the txnlog has delivered that zxid (it holds the lossless history)."""
    if anomaly["kind"] != "COLLECTION_GAP" or txn_max is None or anomaly.get("zxid") is None:
        return False
    inner = json.loads(json.loads(anomaly["details"]).get("detail") or "{}")
    return inner.get("source") != "txnlog" and bool(anomaly["zxid"] <= txn_max)


def _fold(spark: SparkSession, meta: DataFrame, seeds_t: tuple[pa.Table, pa.Table], ctx: GlobalContext,
          kafka_version: str) -> DataFrame:
    """Seeded, bucketed, zxid-ordered fold of both state machines (see pipelines.state_machines)."""
    cols = ["cluster", "topic", "partition", "zxid", "_seq", "ord", "event_time", "type", "leader", "leader_epoch",
            "controller_epoch", "isr", "replicas", "event_id", "state", "seed_replica_ids", "seed_replica_states"]
    carried_ps = arrow_df(spark, seeds_t[0], schema("partition_state"))
    carried_rs = arrow_df(spark, seeds_t[1], schema("replica_state"))
    keyed = meta.filter(F.col("type").isin(*PARTITION_TYPES) & F.col("partition").isNotNull())
    known_keys = keyed.select("topic", "partition").unionByName(carried_ps.select("topic", "partition")).distinct()
    # a topic deletion seen without its state znodes: fan out to every partition known for the topic
    topic_deleted = (meta.filter((F.col("type") == "TOPIC_DELETED") & F.col("partition").isNull())
                     .drop("partition").join(known_keys, "topic")
                     .withColumn("_seq", F.col("_seq") + F.lit(1_000_000)))
    events = (keyed.unionByName(topic_deleted.select(*keyed.columns))
              .withColumn("ord", F.lit(1)).withColumn("state", F.lit(None).cast("string"))
              .withColumn("seed_replica_ids", F.lit(None).cast("array<int>"))
              .withColumn("seed_replica_states", F.lit(None).cast("array<string>")))
    touched = events.select("topic", "partition").distinct()
    reps = (carried_rs.groupBy("topic", "partition")
            .agg(F.sort_array(F.collect_list(F.struct("replica", "state"))).alias("_r"))
            .select("topic", "partition", F.col("_r.replica").alias("seed_replica_ids"),
                    F.col("_r.state").alias("seed_replica_states")))
    seeds = (carried_ps.join(touched, ["topic", "partition"], "left_semi")
             .join(reps, ["topic", "partition"], "left")
             .select("cluster", "topic", "partition", F.col("as_of_zxid").alias("zxid"), F.lit(0).alias("_seq"),
                     F.lit(0).alias("ord"), "event_time", F.lit(SEED).alias("type"), "leader", "leader_epoch",
                     "controller_epoch", "isr", "replicas", F.lit("").alias("event_id"), "state",
                     "seed_replica_ids", "seed_replica_states"))
    rows = events.select(*cols).unionByName(seeds.select(*cols))
    n = int(spark.conf.get("spark.sql.shuffle.partitions") or "2")
    ordered = rows.repartition(n, "topic", "partition").sortWithinPartitions(
        "topic", "partition", "ord", "zxid", "_seq", "event_id")
    return ordered.mapInArrow(_fold_fn(ctx, kafka_version), FOLD_OUT)


def _fold_fn(ctx: GlobalContext, kafka_version: str) -> Any:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # one bucket = one sorted run of whole keys: fold it in one vectorised pass
        got = list(batches)
        rows = pa.Table.from_batches(got) if got else None
        if rows is not None and rows.num_rows:
            yield from fold_table(rows, ctx, kafka_version).to_batches(max_chunksize=100_000)

    return run


def _merge_log_terms(carried_terms: DataFrame, decisions: DataFrame, cluster: str) -> DataFrame:
    """Controller terms seen in logs: (controller id, epoch) -> first and last time it acted."""
    acting = decisions.filter(F.col("controller_id").isNotNull() & F.col("controller_epoch").isNotNull()
                              & F.col("ts").isNotNull())
    new = acting.select(F.lit(cluster).alias("cluster"), "controller_id", "controller_epoch",
                        F.lit(None).cast("bigint").alias("start_zxid"), F.lit(None).cast("bigint").alias("end_zxid"),
                        F.col("ts").alias("start_time"), F.col("ts").alias("end_time"), F.lit("logs").alias("source"))
    both = carried_terms.select(*CONTROLLER_TENURE.column_names).unionByName(new)
    return (both.groupBy("cluster", "controller_id", "controller_epoch", "source")
            .agg(F.min("start_zxid").alias("start_zxid"), F.max("end_zxid").alias("end_zxid"),
                 F.min("start_time").alias("start_time"), F.max("end_time").alias("end_time"))
            .select(*CONTROLLER_TENURE.column_names))
