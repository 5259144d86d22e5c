"""The pipeline, composed once: bronze rows routed to keys, then one step per key over that key's carried state.

Keys are ``(cluster, bucket)``: a bucket is a fixed set of partitions (``pipelines.bucket_fold``), bucket
``CLUSTER_STAGE`` a cluster's cluster-wide work (``pipelines.cluster_stage``). ``route_znode_rows`` and
``route_decision_rows`` are row-local (any split of the bronze rows routes the same); ``step_key`` is the one
place where a key's batch meets its state and where every output table's rows are made. Spark's stateful
operator runs it per key per micro-batch (``engine.stateful``); ``engine.local_run`` runs the same steps in the
driver for small histories and tests. Arrow only: no Spark, no lake.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.spark_schema import spark_arrow_schema
from models.events import Source
from models.kraft_image import MetadataImage
from models.states import DEFAULT_KAFKA_VERSION
from models.tables import KRAFT_RECORDS, METADATA_EVENTS
from pipelines.bucket_fold import (
    BUCKET_COLUMN,
    CLUSTER_STAGE,
    GLOBAL_COLUMNS,
    TXNLOG_COLUMN,
    Buckets,
    BucketState,
    at_stage,
    bucket_step,
    route,
    route_decisions,
    to_every_bucket,
    zk_times,
)
from pipelines.cluster_stage import ClusterState, StreamPart, cluster_step
from pipelines.decode import decode_table, split_decoded
from pipelines.detectors import DEFAULT_OFFLINE_BLIP, GAP_COLUMNS
from pipelines.kraft_stage import KRAFT_STAGE, KraftState, kraft_step, route_kraft_rows

SEQ_COLUMN = "_seq"
META_SEQ = pa.schema([*spark_arrow_schema(METADATA_EVENTS), pa.field(SEQ_COLUMN, pa.int32()),
                      pa.field(TXNLOG_COLUMN, pa.bool_())])
"""A decoded metadata event as the keys receive it: ``metadata_events``' columns, its order within its zxid, and
whether a transaction-log row gave it."""
GLOBAL_SCHEMA = pa.schema([META_SEQ.field(c) for c in GLOBAL_COLUMNS])

KRAFT_ROWS = spark_arrow_schema(KRAFT_RECORDS)
KeyState = BucketState | ClusterState | KraftState


def route_znode_rows(bronze: pa.Table, buckets: Buckets) -> list[tuple[StreamPart, pa.Table]]:
    """Bronze ``znode_events`` rows decoded at once (a change both collectors delivered is deduplicated within
    them) and routed: each part's rows with the ``bucket`` column of the key they go to. Quarantine, gap rows
    and the transaction log's zxid range go to the cluster's stage; each cluster's latest ZooKeeper time to all
    its buckets."""
    meta, quarantine = split_decoded(decode_table(bronze))
    txn = bronze.select(["cluster", "zxid"]).filter(_is_txnlog(bronze))
    meta = meta.append_column(TXNLOG_COLUMN, _delivered_by_log(meta, txn))
    gaps = bronze.filter(pc.fill_null(pc.greater(bronze["missed_versions"], 0), False)).select(list(GAP_COLUMNS))
    ranges = txn.group_by("cluster").aggregate([("zxid", "min"), ("zxid", "max")])
    ranges = pa.table({"cluster": ranges["cluster"], "lo": ranges["zxid_min"], "hi": ranges["zxid_max"]})
    return [(StreamPart.EVENTS, route(meta.select(META_SEQ.names).cast(META_SEQ), buckets)),
            (StreamPart.ZK_TIME, zk_times(meta, buckets)), (StreamPart.QUARANTINE, at_stage(quarantine)),
            (StreamPart.GAPS, at_stage(gaps)),
            (StreamPart.TXNLOG, pa.concat_tables([at_stage(ranges), to_every_bucket(ranges, buckets)]))]


def _delivered_by_log(meta: pa.Table, txn: pa.Table) -> pa.Array:
    """Per decoded event: its cluster's transaction log delivered its zxid in these rows (after the dedupe
    such a zxid has only the log's rows). Per cluster: zxids count from 1 in every ensemble, so another
    cluster's log says nothing about this one's."""
    delivered = np.zeros(meta.num_rows, bool)
    for cluster in pc.unique(txn["cluster"]).to_pylist():
        zxids = pc.unique(txn.filter(pc.equal(txn["cluster"], cluster))["zxid"])
        mine = pc.and_(pc.equal(meta["cluster"], cluster), pc.is_in(meta["zxid"], zxids))
        delivered |= pc.fill_null(mine, False).to_numpy(zero_copy_only=False)
    return pa.array(delivered)


def _is_txnlog(bronze: pa.Table) -> pa.ChunkedArray:
    return pc.fill_null(pc.equal(bronze["source"], str(Source.TXNLOG)), False)


def route_decision_rows(decisions: pa.Table, buckets: Buckets) -> list[tuple[StreamPart, pa.Table]]:
    """Bronze ``controller_decisions`` rows, each to its cluster's stage and, about one partition, its bucket."""
    return [(StreamPart.DECISIONS, route_decisions(decisions, buckets))]


def route_kraft_records(records: pa.Table, buckets: Buckets, zookeeper_clusters: frozenset[str] = frozenset(),
                        rewritten: pa.Table | None = None) -> list[tuple[StreamPart, pa.Table]]:
    """Bronze ``kraft_records`` rows, each to its cluster's KRaft key (``pipelines.kraft_stage``); none of a
    cluster that has a ZooKeeper history, nor one Raft truncated (``route_kraft_rows``)."""
    return [(StreamPart.KRAFT, route_kraft_rows(records, zookeeper_clusters, rewritten))]


def empty_state(bucket: int) -> KeyState:
    """A key's state before its first batch."""
    if bucket == KRAFT_STAGE:
        return KraftState(MetadataImage(), BucketState.empty(META_SEQ), ClusterState.empty(GLOBAL_SCHEMA))
    return ClusterState.empty(GLOBAL_SCHEMA) if bucket == CLUSTER_STAGE else BucketState.empty(META_SEQ)


def step_key(cluster: str, bucket: int, parts: dict[StreamPart, pa.Table], state: KeyState,
             kafka_version: str = DEFAULT_KAFKA_VERSION,
             offline_blip: timedelta = DEFAULT_OFFLINE_BLIP) -> tuple[dict[str, pa.Table], KeyState]:
    """One key's batch: (its rows of each output table by table name, its next state). ``parts``: the routed
    rows the key received this batch, by kind, without the ``bucket`` column; ``offline_blip``: settings
    ``pipeline.offline_blip_ms``."""
    if isinstance(state, ClusterState):
        return cluster_step(cluster, state, parts)
    if isinstance(state, KraftState):
        return kraft_step(cluster, state, parts.get(StreamPart.KRAFT, KRAFT_ROWS.empty_table()), META_SEQ,
                          kafka_version, offline_blip)
    events = parts.get(StreamPart.EVENTS, META_SEQ.empty_table())
    return bucket_step(cluster, state, events, parts.get(StreamPart.DECISIONS), kafka_version,
                       parts.get(StreamPart.ZK_TIME), parts.get(StreamPart.TXNLOG), offline_blip)


def by_key(rows: pa.Table) -> Iterator[tuple[str, int, pa.Table]]:
    """``rows`` split by their (cluster, bucket), without the bucket column."""
    if rows.num_rows == 0:
        return
    rows = rows.sort_by([("cluster", "ascending"), (BUCKET_COLUMN, "ascending")])
    cluster = rows["cluster"].to_numpy(zero_copy_only=False)
    bucket = rows[BUCKET_COLUMN].to_numpy()
    starts = np.flatnonzero(np.r_[True, (cluster[1:] != cluster[:-1]) | (bucket[1:] != bucket[:-1])])
    body = rows.drop_columns([BUCKET_COLUMN])
    for a, b in zip(starts, np.r_[starts[1:], len(bucket)], strict=True):
        yield str(cluster[a]), int(bucket[a]), body.slice(a, b - a)
