"""A KRaft cluster's key of the one composition: its metadata-log records in, the same outputs as a ZooKeeper
cluster's buckets and stage out.

KRaft's records are deltas keyed by topic id, so they are made into zkledger's metadata events in log order
against the cluster's metadata image (``models.kraft_image``), which only one key can hold. A KRaft cluster is
therefore one key, ``(cluster, KRAFT_STAGE)``, whose step turns its batch's records into events and runs the
same ``bucket_step`` and ``cluster_step`` a ZooKeeper cluster's keys run, over one bucket holding every
partition. Metadata logs are small next to the partition counts the buckets exist for (a record per leader or
ISR change), so one key keeps up. Arrow and pure Python only: no Spark, no lake.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.anomalies import AnomalyKind, SplitBrainReason
from models.events import KraftRecordSource, MetadataEvent, MetadataEventType
from models.ids import metadata_event_id
from models.kraft_image import (
    ELECTED_FROM_ELR,
    SAME_EPOCH_LEADER,
    MetadataImage,
    image_from_json,
    image_to_json,
)
from models.kraft_records import (
    ControlRecordType,
    KraftDecodeError,
    MetadataRecord,
    decode_control_record,
    decode_metadata_record,
)
from models.tables import ANOMALIES, KRAFT_METADATA_EVENTS
from pipelines import detectors as D
from pipelines.bucket_fold import (
    BUCKET_COLUMN,
    CLUSTER_STAGE,
    TXNLOG_COLUMN,
    TXNLOG_RANGE,
    ZK_TIME,
    BucketState,
    bucket_step,
    route,
)
from pipelines.cluster_stage import ClusterState, StreamPart, cluster_step
from pipelines.controller import anomaly
from pipelines.detectors import DEFAULT_OFFLINE_BLIP

KRAFT_STAGE = -2
"""The bucket number of a KRaft cluster's one key."""


@dataclass(frozen=True)
class KraftState:
    """What a KRaft cluster's key carries: its metadata image, and the state of its one bucket and its stage."""

    image: MetadataImage
    bucket: BucketState
    stage: ClusterState

    def image_bytes(self) -> bytes:
        return json.dumps(image_to_json(self.image), separators=(",", ":")).encode()

    @staticmethod
    def image_of(blob: bytes | None) -> MetadataImage:
        return image_from_json(json.loads(blob)) if blob else MetadataImage()


def route_kraft_rows(records: pa.Table, zookeeper_clusters: frozenset[str] = frozenset(),
                     rewritten: pa.Table | None = None) -> pa.Table:
    """Bronze ``kraft_records`` rows with a ``bucket`` column sending each to its cluster's KRaft key. A cluster
    in ``zookeeper_clusters`` (it has a ZooKeeper history too: a migration) keeps its ZooKeeper history in the
    derived tables, which hold one store per cluster; ``zkledger migration`` and ``state --at`` read its log.
    ``rewritten``: ``rewritten_offsets`` of the whole table when the query started, so that a record Raft
    truncated is dropped even when its replacement comes in a later micro-batch."""
    if zookeeper_clusters and records.num_rows:
        records = records.filter(pc.invert(pc.is_in(records["cluster"], pa.array(sorted(zookeeper_clusters)))))
    records = current_records(records, rewritten)
    return records.append_column(BUCKET_COLUMN, pa.array(np.full(records.num_rows, KRAFT_STAGE, np.int32)))


_OFFSET_KEY = ["cluster", "offset"]
NEWEST_EPOCH = "newest_epoch"
REWRITTEN_OFFSETS = pa.schema([pa.field("cluster", pa.string()), pa.field("offset", pa.int64()),
                               pa.field(NEWEST_EPOCH, pa.int32())])


def rewritten_offsets(records: pa.Table) -> pa.Table:
    """``REWRITTEN_OFFSETS``: each (cluster, offset) of a log segment stored under more than one leader epoch
    (Raft truncated a tail the collector had read and the node took a newer leader's records there), with the
    newest epoch, whose record is the log's."""
    if records.num_rows == 0:
        return REWRITTEN_OFFSETS.empty_table()
    segment = records.filter(pc.equal(records["source"], str(KraftRecordSource.SEGMENT)))
    epochs = segment.select([*_OFFSET_KEY, "leader_epoch"]).group_by(_OFFSET_KEY, use_threads=False).aggregate(
        [("leader_epoch", "max"), ("leader_epoch", "count_distinct")])
    twice = epochs.filter(pc.greater(epochs["leader_epoch_count_distinct"], 1))
    return pa.table([twice["cluster"], twice["offset"], twice["leader_epoch_max"]], schema=REWRITTEN_OFFSETS)


def current_records(records: pa.Table, rewritten: pa.Table | None = None) -> pa.Table:
    """``records`` as the log stands: of a segment's rows at one (cluster, offset), only the newest leader
    epoch's (the older ones Raft truncated), judged over ``records`` and the ``rewritten_offsets`` given.
    Snapshot and gap rows as they are."""
    found = rewritten_offsets(records)
    if rewritten is not None and rewritten.num_rows:
        both = pa.concat_tables([found, rewritten.select(REWRITTEN_OFFSETS.names).cast(REWRITTEN_OFFSETS)])
        found = both.group_by(_OFFSET_KEY, use_threads=False).aggregate([(NEWEST_EPOCH, "max")]).rename_columns(
            {f"{NEWEST_EPOCH}_max": NEWEST_EPOCH})
    if found.num_rows == 0:
        return records
    at = records.select(_OFFSET_KEY).append_column("_row", pa.array(np.arange(records.num_rows)))
    joined = at.join(found, _OFFSET_KEY, join_type="inner", use_threads=False)
    segment = pc.equal(pc.take(records["source"], joined["_row"]), str(KraftRecordSource.SEGMENT))
    older = pc.and_(segment, pc.less(pc.take(records["leader_epoch"], joined["_row"]), joined[NEWEST_EPOCH]))
    drop = np.zeros(records.num_rows, bool)
    drop[joined["_row"].filter(older).to_numpy()] = True
    return records.filter(pa.array(~drop)) if drop.any() else records


def kraft_step(cluster: str, state: KraftState, records: pa.Table, meta_schema: pa.Schema, kafka_version: str,
               offline_blip: timedelta = DEFAULT_OFFLINE_BLIP) -> tuple[dict[str, pa.Table], KraftState]:
    """One KRaft cluster's micro-batch: its records (``kraft_records`` rows) made into metadata events against
    the image, then the one bucket's and the stage's steps over them."""
    events = _events(cluster, state.image, records)
    meta = _meta_table(cluster, events, meta_schema)
    quorum = _two_leaders_in_one_epoch(cluster, meta)
    found = _findings(cluster, state.image, meta)
    if found is not None:
        quorum[ANOMALIES.name] = pa.concat_tables([t for t in (quorum.get(ANOMALIES.name), found) if t is not None],
                                                  promote_options="default")
    routed = route(meta, 1)
    at_stage = pc.equal(routed[BUCKET_COLUMN], CLUSTER_STAGE)
    stage_rows = routed.filter(at_stage).drop_columns([BUCKET_COLUMN])
    bucket_rows = routed.filter(pc.invert(at_stage)).drop_columns([BUCKET_COLUMN])
    offsets = records["offset"]
    span = pa.table({"lo": [pc.min(offsets).as_py()], "hi": [pc.max(offsets).as_py()]}, TXNLOG_RANGE) \
        if records.num_rows else TXNLOG_RANGE.empty_table()
    newest = pc.max(records["batch_timestamp"]).as_py() if records.num_rows else None
    zk_time = (pa.table({"cluster": [cluster], "zk_time": [int(newest.timestamp() * 1_000_000)]}, ZK_TIME)
               if newest is not None else None)
    stage_out, stage = cluster_step(cluster, state.stage, {StreamPart.EVENTS: stage_rows, StreamPart.TXNLOG: span})
    bucket_out, bucket = bucket_step(cluster, state.bucket, bucket_rows, None, kafka_version, zk_time, span,
                                     offline_blip)
    out: dict[str, pa.Table] = {}
    for name in dict.fromkeys([*stage_out, *bucket_out, *quorum]):
        parts = [t for t in (stage_out.get(name), bucket_out.get(name), quorum.get(name)) if t is not None]
        out[name] = parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="default")
    if ANOMALIES.name in out:
        out[ANOMALIES.name] = _clean_elr_elections(out[ANOMALIES.name], meta)
    out[KRAFT_METADATA_EVENTS.name] = _once_each(meta).select(list(KRAFT_METADATA_EVENTS.column_names))
    return out, KraftState(state.image, bucket, stage)


def _once_each(meta: pa.Table) -> pa.Table:
    """``meta`` with the first row of each event id only (a batch may read one record twice)."""
    _, first = np.unique(meta["event_id"].to_numpy(zero_copy_only=False), return_index=True)
    return meta if len(first) == meta.num_rows else meta.take(pa.array(np.sort(first), pa.int64()))


def _clean_elr_elections(anomalies: pa.Table, meta: pa.Table) -> pa.Table:
    """``anomalies`` less the unclean elections of leaders taken from the ELR: the ISR check the state machines
    share knows only the ISR, and KRaft keeps a leaderless partition's last in-sync replicas in its ELR."""
    from_elr = [e["event_id"] for e in meta.select(["event_id", "detail"]).to_pylist()
                if e["detail"] and ELECTED_FROM_ELR in json.loads(e["detail"])]
    if not from_elr or anomalies.num_rows == 0:
        return anomalies
    unclean = pc.equal(anomalies["kind"], str(AnomalyKind.UNCLEAN_LEADER_ELECTION))
    evidence = pc.list_element(anomalies["evidence"], 0)
    drop = pc.and_(pc.fill_null(unclean, False), pc.fill_null(pc.is_in(evidence, pa.array(from_elr)), False))
    return anomalies.filter(pc.invert(drop))


def _findings(cluster: str, image: MetadataImage, meta: pa.Table) -> pa.Table | None:
    """The image's KRaft-only findings of this batch as anomalies rows (drained from the image). A row's
    evidence is the events of its offset, and the partition and broker it names."""
    if not image.findings:
        return None
    ids: dict[int, list[str]] = {}
    for zxid, eid in zip(meta["zxid"].to_pylist(), meta["event_id"].to_pylist(), strict=True):
        ids.setdefault(zxid, []).append(eid)
    rows = []
    for f in image.findings:
        what = f"{f.topic}-{f.partition}@{f.broker}" if f.topic is not None else f"offset {f.offset}"
        row = {"zxid": f.offset, "event_time": f.at, "topic": f.topic, "partition": f.partition, "broker": f.broker}
        rows.append(anomaly(cluster, f.kind, [*ids.get(f.offset, []), what], row, f.details))
    image.findings.clear()
    return D.anomaly_rows(rows)


def _two_leaders_in_one_epoch(cluster: str, meta: pa.Table) -> dict[str, pa.Table]:
    """A SPLIT_BRAIN for each election the log records in an epoch that already had another leader."""
    rows = [anomaly(cluster, AnomalyKind.SPLIT_BRAIN, [e["event_id"]], e,
                    {"reason": str(SplitBrainReason.SAME_EPOCH), "leaders": [detail[SAME_EPOCH_LEADER],
                                                                             e["controller_id"]]})
            for e in meta.filter(pc.equal(meta["type"], str(MetadataEventType.CONTROLLER_ELECTED))).to_pylist()
            if SAME_EPOCH_LEADER in (detail := json.loads(e["detail"] or "{}"))]
    return {ANOMALIES.name: D.anomaly_rows(rows)} if rows else {}


def _events(cluster: str, image: MetadataImage, records: pa.Table) -> list[tuple[MetadataEvent, str]]:
    """The batch's records in log order through the image: (event, the record's name) pairs. A snapshot is
    taken only where the image has not reached its end (the log before it was deleted unread): at a hole before
    a record, the snapshot that covers it (the first ending at or after the record, else the newest before)."""
    rows = current_records(records).select(["offset", "leader_epoch", "batch_timestamp", "is_control", "key",
                                            "value", "source", "snapshot_id"]).to_pylist()
    segment = sorted((r for r in rows if r["source"] == KraftRecordSource.SEGMENT), key=lambda r: r["offset"])
    snapshots: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["source"] == KraftRecordSource.SNAPSHOT and r["snapshot_id"]:
            snapshots.setdefault(r["snapshot_id"], []).append(r)
    pending = sorted(((int(sid.split("-")[0]), sid) for sid in snapshots), reverse=True)
    out: list[tuple[MetadataEvent, str]] = []
    rewritten: list[dict[str, Any]] = []  # records of a newer epoch at offsets the image has applied
    applied_epoch = -1
    for r in segment:
        if r["offset"] > image.offset + 1 and pending:  # a hole: what the log held before r was deleted unread
            covering = [p for p in pending if p[0] >= r["offset"]]
            chosen = min(covering) if covering else max(pending)
            _rebase(image, snapshots[chosen[1]], out)
            pending = [p for p in pending if p[0] > chosen[0]]
        while pending and pending[-1][0] <= r["offset"]:
            _rebase(image, snapshots[pending.pop()[1]], out)
        if r["offset"] <= image.offset and int(r["leader_epoch"] or 0) > image.log_epoch:
            if not rewritten:
                applied_epoch = image.log_epoch  # the epoch of what it applied there
            rewritten.append(r)
            continue
        out.extend(_record_events(image, r))
    while pending:
        _rebase(image, snapshots[pending.pop()[1]], out)
    if rewritten:
        out.append((_rewrite_gap(rewritten, applied_epoch), REWRITE_GAP))
        image.log_epoch = max(image.log_epoch, *(int(r["leader_epoch"]) for r in rewritten))
    return out


REWRITE_GAP = "RewrittenTail"
"""The record name of the COLLECTION_GAP event for records Raft rewrote after the image had applied them."""
REWRITE_GAP_SOURCE = "kraft"
"""``detail.source`` of that event: the metadata log, a lossless source whose gaps no other one covers."""


def _rewrite_gap(rows: list[dict[str, Any]], applied_epoch: int) -> MetadataEvent:
    """The records of a newer leader epoch at offsets this image has applied from the tail Raft truncated: it
    cannot take them back, so what follows them may be wrong until a rebuild folds the log as it stands
    (``current_records``). One COLLECTION_GAP at the first of them."""
    first, last = min(r["offset"] for r in rows), max(r["offset"] for r in rows)
    epoch = max(int(r["leader_epoch"]) for r in rows)
    stamps = [t for r in rows if (t := _utc(r["batch_timestamp"])) is not None]
    return MetadataEvent(first, MetadataEventType.COLLECTION_GAP, event_time=min(stamps, default=None),
                         detail={"source": REWRITE_GAP_SOURCE, "offsets": f"{first}..{last}", "leader_epoch": epoch,
                                 "applied_epoch": applied_epoch,
                                 "reason": "Raft rewrote records the pipeline had applied; rebuild to fold the "
                                           "log as it stands"})


def _record_events(image: MetadataImage, r: dict[str, Any]) -> list[tuple[MetadataEvent, str]]:
    if r["offset"] <= image.offset:
        return []  # already applied (a replayed batch, or a snapshot that reached past it)
    epoch, at = int(r["leader_epoch"] or 0), _utc(r["batch_timestamp"])
    try:
        if r["is_control"]:
            control = decode_control_record(r["key"], r["value"])
            name = ControlRecordType(control.record_type).name
            return [(e, name) for e in image.apply_control(control, r["offset"], epoch, at)]
        record = decode_metadata_record(r["value"] or b"")
    except KraftDecodeError:
        # the collector quarantined it; the bronze row keeps it
        image.offset, image.log_epoch = max(image.offset, r["offset"]), max(image.log_epoch, epoch)
        return []
    return [(e, record.record_type.name) for e in image.apply(record, r["offset"], epoch, at)]


def _rebase(image: MetadataImage, rows: list[dict[str, Any]], out: list[tuple[MetadataEvent, str]]) -> None:
    snapshot_id = rows[0]["snapshot_id"]
    end_offset = int(snapshot_id.split("-")[0])
    if end_offset - 1 <= image.offset:
        return  # the log's own records got there first
    records: list[MetadataRecord] = []
    for r in sorted(rows, key=lambda r: r["offset"]):
        if r["is_control"]:
            continue
        try:
            records.append(decode_metadata_record(r["value"] or b""))
        except KraftDecodeError:
            continue
    epoch = int(snapshot_id.split("-")[1])
    stamps = [_utc(r["batch_timestamp"]) for r in rows]
    at = max((t for t in stamps if t is not None), default=None)
    out.extend((e, "SNAPSHOT") for e in image.rebase(records, end_offset, epoch, at))


def _utc(ts: datetime | None) -> datetime | None:
    return ts if ts is None or ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _meta_table(cluster: str, events: list[tuple[MetadataEvent, str]], schema: pa.Schema) -> pa.Table:
    rows: list[dict[str, Any]] = []
    seq: dict[int, int] = {}
    for e, record in events:
        n = seq[e.zxid] = seq.get(e.zxid, -1) + 1
        rows.append({
            "cluster": cluster, "zxid": e.zxid, "event_time": e.event_time, "type": str(e.type), "topic": e.topic,
            "partition": e.partition, "broker": e.broker, "controller_id": e.controller_id,
            "controller_epoch": e.controller_epoch, "leader": e.leader, "leader_epoch": e.leader_epoch,
            "isr": None if e.isr is None else list(e.isr), "replicas": None if e.replicas is None else list(e.replicas),
            "zk_version": e.zk_version, "czxid": e.czxid, "path": e.path,
            "detail": json.dumps(e.detail, sort_keys=True, separators=(",", ":")) if e.detail else None,
            "event_id": metadata_event_id(cluster, e.zxid, e.path, record, n), "_seq": n, TXNLOG_COLUMN: True,
        })
    return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
