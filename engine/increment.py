"""One increment of the pipeline: bronze rows in, every derived table out.

``run_increment`` is the only engine: ``zkledger rebuild`` runs it over all history in zxid-ordered chunks from
empty carried state (``engine.rebuild``), ``zkledger monitor`` runs it per micro-batch with the carried state
(``Carried``, Arrow on the driver; ``engine.carry``). Given DataFrames, decode and the keyed fold
(``pipelines.keyed_fold``) run in Spark; given Arrow tables (a small increment), the same kernels run in this
process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.spark_schema import spark_schema
from models.events import Source
from models.states import DEFAULT_KAFKA_VERSION
from models.tables import (
    ANOMALIES,
    CONTROLLER_DECISIONS,
    CONTROLLER_TENURE,
    DECODE_QUARANTINE,
    METADATA_EVENTS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    REPLICA_STATE,
    REPLICA_TRANSITIONS,
    ZNODE_EVENTS,
)
from pipelines import detectors as D
from pipelines.bucket_fold import merged_state, touched_seeds
from pipelines.controller import (
    DEFAULT_NO_CONTROLLER_THRESHOLD,
    GLOBAL_TYPES,
    ZOMBIE_WRITE_COLUMNS,
    covered_gap,
    merge_log_terms,
    no_active_controller,
    replay,
    resign_marks,
    zk_split_brain,
)
from pipelines.decode import decode_table, decoded_znode_events, split_decoded
from pipelines.detectors import ZK_WRITE_COLUMNS
from pipelines.fanout import fanout_rows
from pipelines.fold_records import FOLD_RECORDS, FoldRecord
from pipelines.keyed_fold import fold_local, fold_spark

log = logging.getLogger(__name__)


DERIVED_TABLES = tuple(t.name for t in (METADATA_EVENTS, DECODE_QUARANTINE, PARTITION_TRANSITIONS, REPLICA_TRANSITIONS,
                                          ANOMALIES, CONTROLLER_TENURE, REPLICA_STATE, PARTITION_STATE))
"""The state tables are written LAST, partition_state after replica_state (``engine.writes.write_tables``), so a
committed partition_state means the whole increment is."""
APPEND_TABLES = frozenset(t.name for t in (METADATA_EVENTS, DECODE_QUARANTINE, PARTITION_TRANSITIONS, REPLICA_TRANSITIONS,
                                             ANOMALIES))
STATE_TABLES = (PARTITION_STATE.name, REPLICA_STATE.name)
STREAMED_TABLES = (ZNODE_EVENTS.name, CONTROLLER_DECISIONS.name)
"""The bronze tables an increment reads."""
LOCAL_MAX_ROWS = 1_000_000
"""Default of settings ``pipeline.local_max_rows``: increments up to this many bronze rows run in the driver."""


@dataclass
class Carried:
    """What an increment continues from, held on the driver as Arrow (all empty for a rebuild).

    The monitor keeps it in memory between micro-batches (``engine.carry.MonitorCarry``), so a batch costs
    what it touches, not the whole history: only the touched keys' state is shipped to Spark as fold seeds.
    """

    partition_state: pa.Table
    replica_state: pa.Table
    log_terms: pa.Table  # controller_tenure rows with source 'logs'
    global_events: list[dict[str, Any]] = field(default_factory=list)  # committed global metadata events
    zk_writes: pa.Table | None = None  # committed state writes as detectors.distinct_writes keeps them
    known_ids: Callable[[int, int], set[str]] | None = None  # committed metadata_events ids with zxid in [lo, hi]
    txnlog_max_zxid: int | None = None  # highest zxid the txnlog collector has delivered (gap suppression)
    txnlog_min_zxid: int | None = None  # lowest one: between both, the txnlog is the lossless history
    empty: bool = False
    known_anomaly_ids: set[str] | None = None  # ids already committed in anomalies: not found again
    resigns: list[dict[str, Any]] | None = None  # controller.resign_marks of the committed decisions
    pending_decisions: pa.Table | None = None  # logged decisions not yet settled (detectors.settle_decisions)
    zk_time: int | None = None  # the latest ZooKeeper event time seen, in microseconds (detectors.zk_time_seen)


@dataclass
class Outputs:
    """Every derived table of one increment, collected to the driver ONCE as Arrow (small per increment)."""

    tables: dict[str, pa.Table]
    txnlog_bounds: tuple[int | None, int | None] = (None, None)  # this increment's txnlog zxid range
    resigns: list[dict[str, Any]] = field(default_factory=list)  # what the next increment carries as resigns
    pending_decisions: pa.Table = field(default_factory=lambda: D.PENDING_DECISIONS.empty_table())
    zk_time: int | None = None

    def __getitem__(self, table: str) -> pa.Table:
        return self.tables[table]


def empty_carried() -> Carried:
    return Carried(_empty_arrow(PARTITION_STATE.name), _empty_arrow(REPLICA_STATE.name),
                   _empty_arrow(CONTROLLER_TENURE.name), empty=True)


def widened_txnlog_range(carried: Carried, lo: int | None, hi: int | None) -> tuple[int | None, int | None]:
    """The carried txnlog range widened by an increment's own (lo, hi); either end may be unknown."""
    return (min([v for v in (lo, carried.txnlog_min_zxid) if v is not None], default=None),
            max([v for v in (hi, carried.txnlog_max_zxid) if v is not None], default=None))


def committed_txnlog_range(carried: Carried) -> tuple[int, int] | None:
    """The txnlog's delivered zxid range known to the carried state (decode drops watch rows inside it)."""
    if carried.txnlog_min_zxid is None or carried.txnlog_max_zxid is None:
        return None
    return carried.txnlog_min_zxid, carried.txnlog_max_zxid


def run_increment(spark: SparkSession, znode_events: DataFrame | pa.Table, decisions: DataFrame | pa.Table,
                  carried: Carried, *, cluster: str, kafka_version: str = DEFAULT_KAFKA_VERSION,
                  no_controller_threshold: timedelta = DEFAULT_NO_CONTROLLER_THRESHOLD,
                  decoded: pa.Table | None = None) -> Outputs:
    """Every derived table for one increment (deterministic: same inputs and carried state -> same rows).

    Given DataFrames, decode and the keyed fold run in Spark (``mapInArrow`` over key buckets), once each, and
    are collected once as Arrow. Given Arrow tables (a small increment the caller already holds on the driver),
    the same kernels run in this process: a Spark job costs ~0.3 s even when tiny, which is what a 1 s
    monitor trigger cannot afford. Everything after the fold (controller timeline, detectors, table shaping)
    runs on the driver over the Arrow results, which the delta-rs writes need there anyway.
    ``decoded``: the Arrow ``znode_events`` already through ``decode_table(znode_events,
    committed_txnlog_range(carried))``, by a caller that decodes ahead (the rebuild, while the chunk before folds).
    """
    committed = committed_txnlog_range(carried)
    decoded_df: DataFrame | None = None
    if decoded is None and isinstance(znode_events, pa.Table):
        decoded = decode_table(znode_events, committed)
    elif decoded is None:
        # cached: the driver collects it for the output tables and the fold reads it again in the JVM
        decoded_df = decoded_znode_events(znode_events, committed).cache()
        decoded = decoded_df.toArrow()
    meta_t, quarantine_t = split_decoded(decoded)
    meta = None if decoded_df is None else decoded_df.filter("_ok").select(*META_SEQ.fieldNames())
    if carried.known_ids is not None and meta_t.num_rows:
        lo, hi = pc.min_max(meta_t["zxid"]).values()
        committed_ids = carried.known_ids(lo.as_py(), hi.as_py())
        known = pc.is_in(meta_t["event_id"], pa.array(sorted(committed_ids), pa.string()))
        if pc.any(known).as_py():  # the same change committed by an earlier batch (another collector)
            meta_t = meta_t.filter(pc.invert(known))
            meta = None if meta is None else meta.filter(~F.col("event_id").isin(sorted(committed_ids)))
    txn_lo, txn_hi = _txnlog_bounds(znode_events)
    txn_range = widened_txnlog_range(carried, txn_lo, txn_hi)

    global_rows = _global_rows(meta_t)
    increment_ids = {r["event_id"] for r in global_rows}
    history = [e for e in carried.global_events if e["event_id"] not in increment_ids]
    timeline = replay(cluster, history + global_rows, no_controller_threshold)

    seeds = touched_seeds(carried.partition_state, carried.replica_state, meta_t, timeline.ctx)
    fanned = fanout_rows(meta_t, seeds[0], timeline.ctx)
    if meta is None:
        fold = fold_local(meta_t, fanned, seeds, timeline.ctx, kafka_version)
    else:
        folded = fold_spark(spark, meta, fanned, seeds, timeline.ctx, kafka_version).toArrow()
        fold = {rec: folded.filter(pc.equal(folded["rec"], rec)) for rec in FOLD_RECORDS}
    if decoded_df is not None:
        decoded_df.unpersist()
    pt_t = fold[FoldRecord.PARTITION_TRANSITION].select(list(PARTITION_TRANSITIONS.column_names))
    rt_t = fold[FoldRecord.REPLICA_TRANSITION].select(list(REPLICA_TRANSITIONS.column_names))
    writes_t = fold[FoldRecord.WRITE]
    ps_t = merged_state(carried.partition_state, fold[FoldRecord.PARTITION_STATE].select(list(PARTITION_STATE.column_names)))
    rs_t = merged_state(carried.replica_state, fold[FoldRecord.REPLICA_STATE].select(list(REPLICA_STATE.column_names)))

    dec_t = decisions if isinstance(decisions, pa.Table) else decisions.select(*CONTROLLER_DECISIONS.column_names).toArrow()
    log_terms_t = merge_log_terms(carried.log_terms, dec_t, cluster) if dec_t.num_rows or not carried.empty \
        else _empty_arrow(CONTROLLER_TENURE.name)
    zk_terms_t = _arrow_of(timeline.tenure, CONTROLLER_TENURE.name)
    tenure_t = pa.concat_tables([zk_terms_t, log_terms_t.cast(zk_terms_t.schema)])

    global_anoms = [{k: v for k, v in a.items() if not k.startswith("_")} for a in timeline.anomalies
                    if a["_trigger"] in increment_ids and not covered_gap(a, txn_range)]
    parts = [D.detect_illegal_transitions(pt_t, rt_t), D.write_anomalies(writes_t),
             D.detect_collection_gaps(_gap_rows(znode_events), txn_range)]
    zk_time = D.zk_time_seen(meta_t, carried.zk_time)
    pending = carried.pending_decisions if carried.pending_decisions is not None else D.PENDING_DECISIONS.empty_table()
    settled, pending = D.settle_decisions(pending, dec_t, zk_time)
    if settled.num_rows:
        zk_writes = writes_t.select(list(ZK_WRITE_COLUMNS))
        # the carried writes of the partitions the settled decisions speak about, with the batch's: the detector
        # keeps each partition's newest epochs of both together, as the carry does after the commit
        if carried.zk_writes is not None:
            logged = settled.select(["topic", "partition"]).drop_null()
            keys = carried.zk_writes.join(logged.group_by(["topic", "partition"]).aggregate([]), ["topic", "partition"],
                                          join_type="left semi")
            zk_writes = pa.concat_tables([zk_writes, keys.select(list(ZK_WRITE_COLUMNS)).cast(zk_writes.schema)])
        parts.append(D.detect_decision_zk_divergence(settled, zk_writes))
    if dec_t.num_rows:
        carried_split = set(D.detect_split_brain(carried.log_terms)["anomaly_id"].to_pylist())
        split = D.detect_split_brain(log_terms_t)
        parts += [D.decision_anomalies(dec_t, kafka_version),
                  split.filter(pc.invert(pc.is_in(split["anomaly_id"], pa.array(sorted(carried_split), pa.string()))))]
    found_t = D.concat(parts)
    # controller findings on the driver: resignations vs the whole zk timeline, zombie writes vs zk terms
    resigns = resign_marks(dec_t, carried.resigns or [])
    zombies = writes_t.filter(D.zombie_write_mask(writes_t)).select(list(ZOMBIE_WRITE_COLUMNS)).to_pylist()
    controller_anoms = [*no_active_controller(cluster, resigns, timeline.tenure, history + global_rows,
                                              no_controller_threshold),
                        *zk_split_brain(cluster, zombies, timeline.tenure)]
    anomalies_t = _dedupe(D.concat([D.anomaly_rows(global_anoms), found_t, D.anomaly_rows(controller_anoms)]))
    if carried.known_anomaly_ids:  # ids are deterministic: one committed by an earlier increment is not new
        anomalies_t = anomalies_t.filter(pc.invert(pc.is_in(anomalies_t["anomaly_id"],
                                                            pa.array(sorted(carried.known_anomaly_ids), pa.string()))))

    return Outputs({
        METADATA_EVENTS.name: meta_t.select(list(METADATA_EVENTS.column_names)), DECODE_QUARANTINE.name: quarantine_t,
        PARTITION_TRANSITIONS.name: pt_t, REPLICA_TRANSITIONS.name: rt_t, ANOMALIES.name: anomalies_t,
        CONTROLLER_TENURE.name: tenure_t, PARTITION_STATE.name: ps_t, REPLICA_STATE.name: rs_t,
    }, (txn_lo, txn_hi), resigns, pending, zk_time)


META_SEQ = T.StructType([*spark_schema(METADATA_EVENTS, nullable=True).fields, T.StructField("_seq", T.IntegerType())])


def _arrow_schema(table_or_struct: str | T.StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    struct = spark_schema(table_or_struct, nullable=True) if isinstance(table_or_struct, str) else table_or_struct
    return to_arrow_schema(struct)


def _empty_arrow(table: str) -> pa.Table:
    return _arrow_schema(table).empty_table()


def _arrow_of(rows: list[dict[str, Any]], table: str) -> pa.Table:
    names = spark_schema(table).fieldNames()
    return pa.Table.from_pylist([{c: r.get(c) for c in names} for r in rows], schema=_arrow_schema(table))


def _global_rows(meta: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = meta.filter(pc.is_in(meta["type"], pa.array(GLOBAL_TYPES))).to_pylist()
    return rows


def _dedupe(tbl: pa.Table) -> pa.Table:
    """First row per anomaly_id (the same anomaly found by two detectors, or twice in history + increment)."""
    seen: set[str] = set()
    keep = []
    for i, aid in enumerate(tbl.column("anomaly_id").to_pylist()):
        if aid not in seen:
            seen.add(aid)
            keep.append(i)
    return tbl.take(pa.array(keep, pa.int64())) if len(keep) < tbl.num_rows else tbl


def _txnlog_bounds(znode_events: DataFrame | pa.Table) -> tuple[int | None, int | None]:
    """The lowest and highest zxid this increment's txnlog rows carry (the lossless collector's range)."""
    if isinstance(znode_events, pa.Table):
        txn = znode_events.filter(pc.fill_null(pc.equal(znode_events["source"], str(Source.TXNLOG)), False))["zxid"]
        lo, hi = pc.min_max(txn).values()
        return lo.as_py(), hi.as_py()
    row = znode_events.filter(F.col("source") == str(Source.TXNLOG)).agg(F.min("zxid").alias("lo"), F.max("zxid").alias("hi")).collect()[0]
    return row["lo"], row["hi"]


def _gap_rows(znode_events: DataFrame | pa.Table) -> pa.Table:
    """The bronze rows that report missed versions (few), as Arrow for ``detectors.detect_collection_gaps``."""
    if isinstance(znode_events, pa.Table):
        gaps = znode_events.filter(pc.fill_null(pc.greater(znode_events["missed_versions"], 0), False))
        return gaps.select(list(D.GAP_COLUMNS))
    return znode_events.filter(F.col("missed_versions") > 0).select(*D.GAP_COLUMNS).toArrow()
