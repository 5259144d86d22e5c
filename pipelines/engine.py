"""One increment of the pipeline: bronze rows in, every derived table out.

``run_increment`` is the only engine: ``zkledger rebuild`` runs it once from empty carried state over all
history, ``zkledger monitor`` runs it per micro-batch with the state carried in the lake. The per-key fold
runs per key BUCKET (``repartition`` by (topic, partition), sorted by zxid, one ``mapInArrow`` call per
bucket), seeded with each touched key's carried row.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from models.states import DEFAULT_KAFKA_VERSION
from models.tables import (
    ANOMALIES,
    CONTROLLER_TENURE,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
)
from pipelines import detectors as D
from pipelines.controller import DEFAULT_NO_CONTROLLER_THRESHOLD, GLOBAL_TYPES, replay
from pipelines.decode import decode_znode_events
from pipelines.schemas import local_df, schema
from pipelines.state_machines import PARTITION_TYPES, SEED, BucketFolder, GlobalContext

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

DERIVED_TABLES = ("metadata_events", "quarantine", "partition_transitions", "replica_transitions", "anomalies",
                  "controller_tenure", "replica_state", "partition_state")
"""Write order: state tables LAST, so a committed state means the whole increment is committed."""
APPEND_TABLES = frozenset({"metadata_events", "quarantine", "partition_transitions", "replica_transitions", "anomalies"})


@dataclass
class Carried:
    """What an increment continues from (all empty for a rebuild)."""

    partition_state: DataFrame
    replica_state: DataFrame
    log_terms: DataFrame  # controller_tenure rows with source 'logs'
    global_events: list[dict[str, Any]] = field(default_factory=list)  # committed global metadata events
    zk_writes: DataFrame | None = None  # committed state writes: topic, partition, leader, leader_epoch
    known_event_ids: DataFrame | None = None  # committed metadata_events ids (cross-batch dedupe)


@dataclass
class Outputs:
    tables: dict[str, DataFrame]

    def __getitem__(self, table: str) -> DataFrame:
        return self.tables[table]


def empty_carried(spark: SparkSession) -> Carried:
    def empty(t: str) -> DataFrame:
        return local_df(spark, [], schema(t))

    return Carried(empty("partition_state"), empty("replica_state"), empty("controller_tenure"))


def run_increment(spark: SparkSession, znode_events: DataFrame, decisions: DataFrame, carried: Carried, *,
                  cluster: str, kafka_version: str = DEFAULT_KAFKA_VERSION,
                  no_controller_threshold: timedelta = DEFAULT_NO_CONTROLLER_THRESHOLD) -> Outputs:
    """Every derived table for one increment (deterministic: same inputs and carried state -> same rows)."""
    meta, quarantine = decode_znode_events(znode_events)
    if carried.known_event_ids is not None:
        meta = meta.join(carried.known_event_ids, "event_id", "left_anti")
    meta = meta.localCheckpoint()  # the Python decode runs once, not once per consumer below

    global_rows = [r.asDict() for r in meta.filter(F.col("type").isin(*GLOBAL_TYPES)).collect()]
    increment_ids = {r["event_id"] for r in global_rows}
    known = {e["event_id"] for e in global_rows}
    history = [e for e in carried.global_events if e["event_id"] not in known]
    timeline = replay(cluster, history + global_rows, no_controller_threshold)

    fold = _fold(spark, meta, carried, timeline.ctx, kafka_version).localCheckpoint()
    pt = fold.filter("rec = 'pt'").select(*PARTITION_TRANSITIONS.column_names)
    rt = fold.filter("rec = 'rt'").select(*REPLICA_TRANSITIONS.column_names)
    writes = fold.filter("rec = 'w'")
    new_ps = fold.filter("rec = 'ps'").select(*PARTITION_STATE.column_names)
    new_rs = fold.filter("rec = 'rs'").select(*REPLICA_STATE.column_names)

    touched = new_ps.select("topic", "partition")
    ps = carried.partition_state.join(touched, ["topic", "partition"], "left_anti").unionByName(new_ps)
    rs = carried.replica_state.join(touched, ["topic", "partition"], "left_anti").unionByName(new_rs)

    log_terms = _merge_log_terms(carried.log_terms, decisions, cluster)
    zk_terms = local_df(spark, timeline.tenure, schema("controller_tenure"))
    tenure = zk_terms.unionByName(log_terms).select(*CONTROLLER_TENURE.column_names)

    global_anoms = [{k: v for k, v in a.items() if k != "_trigger"} for a in timeline.anomalies
                    if a["_trigger"] in increment_ids]
    zk_writes = writes.select("topic", "partition", "leader", "leader_epoch")
    if carried.zk_writes is not None:
        zk_writes = zk_writes.unionByName(carried.zk_writes)
    parts = [
        local_df(spark, global_anoms, schema("anomalies")),
        D.detect_illegal_partition_transitions(pt),
        D.detect_illegal_replica_transitions(rt),
        *[det(writes) for det in D.WRITE_DETECTORS],
        D.detect_collection_gaps_in_bronze(znode_events),
    ]
    decisions = decisions.localCheckpoint()
    if not decisions.isEmpty():  # each detector costs Spark jobs even on empty input: skip them when idle
        parts += [
            *[det(decisions) for det in D.DECISION_DETECTORS if det is not D.detect_illegal_logged_transitions],
            D.detect_illegal_logged_transitions(decisions, kafka_version),
            D.detect_decision_zk_divergence(decisions, zk_writes),
            D.detect_split_brain(log_terms).join(D.detect_split_brain(carried.log_terms).select("anomaly_id"),
                                                 "anomaly_id", "left_anti"),
        ]
    anomalies = parts[0]
    for p in parts[1:]:
        anomalies = anomalies.unionByName(p.select(*ANOMALIES.column_names))
    anomalies = anomalies.dropDuplicates(["anomaly_id"])

    return Outputs({
        "metadata_events": meta.drop("_seq"), "quarantine": quarantine, "partition_transitions": pt,
        "replica_transitions": rt, "anomalies": anomalies, "controller_tenure": tenure,
        "partition_state": ps, "replica_state": rs,
    })


def _fold(spark: SparkSession, meta: DataFrame, carried: Carried, ctx: GlobalContext, kafka_version: str) -> DataFrame:
    """Seeded, bucketed, zxid-ordered fold of both state machines (see pipelines.state_machines)."""
    cols = ["cluster", "topic", "partition", "zxid", "_seq", "ord", "event_time", "type", "leader", "leader_epoch",
            "controller_epoch", "isr", "replicas", "event_id", "state", "seed_replica_ids", "seed_replica_states"]
    keyed = meta.filter(F.col("type").isin(*PARTITION_TYPES) & F.col("partition").isNotNull())
    known_keys = keyed.select("topic", "partition").unionByName(carried.partition_state.select("topic", "partition")).distinct()
    # a topic deletion seen without its state znodes: fan out to every partition known for the topic
    topic_deleted = (meta.filter((F.col("type") == "TOPIC_DELETED") & F.col("partition").isNull())
                     .drop("partition").join(known_keys, "topic")
                     .withColumn("_seq", F.col("_seq") + F.lit(1_000_000)))
    events = (keyed.unionByName(topic_deleted.select(*keyed.columns))
              .withColumn("ord", F.lit(1)).withColumn("state", F.lit(None).cast("string"))
              .withColumn("seed_replica_ids", F.lit(None).cast("array<int>"))
              .withColumn("seed_replica_states", F.lit(None).cast("array<string>")))
    touched = events.select("topic", "partition").distinct()
    reps = (carried.replica_state.groupBy("topic", "partition")
            .agg(F.sort_array(F.collect_list(F.struct("replica", "state"))).alias("_r"))
            .select("topic", "partition", F.col("_r.replica").alias("seed_replica_ids"),
                    F.col("_r.state").alias("seed_replica_states")))
    seeds = (carried.partition_state.join(touched, ["topic", "partition"], "left_semi")
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
    from pyspark.sql.pandas.types import to_arrow_schema

    out_schema = to_arrow_schema(FOLD_OUT)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        folder = BucketFolder(ctx, kafka_version)

        def rows() -> Iterator[dict[str, Any]]:
            for b in batches:
                yield from b.to_pylist()

        chunk: list[dict[str, Any]] = []
        for rec in folder.fold(rows()):
            rec.pop("src_event_id", None)
            chunk.append(rec)
            if len(chunk) >= 10_000:
                yield pa.RecordBatch.from_pylist(chunk, schema=out_schema)
                chunk = []
        if chunk:
            yield pa.RecordBatch.from_pylist(chunk, schema=out_schema)

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
