"""Bronze ``znode_events`` -> ``metadata_events`` (+ ``quarantine`` for what cannot be decoded).

One codec for everything: ``models.znode_codec`` decodes each distinct payload once, over Arrow batches (the
streaming query runs ``decode_table`` per task inside ``mapInArrow``), so every caller shares the exact rules.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from lakehouse.spark_schema import spark_schema
from models.events import MetadataEvent, MetadataEventType, Source, ZnodeChange, ZnodeOp
from models.ids import event_id, metadata_event_id
from models.tables import METADATA_EVENTS, QUARANTINE
from models.znode_codec import (
    PATH_PATTERNS,
    PartitionStatePayload,
    PathKind,
    TopicAssignment,
    partition_state_detail,
    partition_state_payload,
    topic_assignment,
)
from pipelines.arrow_ids import metadata_event_ids
from pipelines.parallel import THREADS, concat_or_empty, parallel_map
from pipelines.vector_fold import int_codes

log = logging.getLogger(__name__)

# txnlog is lossless, watch reads data after the fact, resync is a re-read: prefer them in that order.
SOURCE_RANK = {str(Source.TXNLOG): 0, str(Source.WATCH): 1, str(Source.RESYNC): 2}
UNKNOWN_SOURCE_RANK = 9

_OUT_SCHEMA = T.StructType(
    [*spark_schema(METADATA_EVENTS, nullable=True).fields,
     T.StructField("_seq", T.IntegerType()),
     T.StructField("_ok", T.BooleanType()),
     T.StructField("q_source", T.StringType()),
     T.StructField("q_raw", T.StringType()),
     T.StructField("q_reason", T.StringType()),
     T.StructField("q_ref", T.StringType()),
     T.StructField("q_observed_at", T.TimestampType())]
)


def _utc(ts: datetime | None) -> datetime | None:
    if ts is None or ts.tzinfo is not None:
        return ts
    return ts.replace(tzinfo=UTC)


def _change_of(row: dict[str, Any]) -> ZnodeChange:
    return ZnodeChange(
        zxid=row["zxid"], path=row["path"], op=ZnodeOp(row["op"]), data=row["data"], version=row["version"],
        czxid=row["czxid"], mzxid=row["mzxid"], pzxid=row["pzxid"], ephemeral_owner=row["ephemeral_owner"],
        session_id=row["session_id"], txn_time=_utc(row["txn_time"]), detail=row["detail"],
    )


_EVENT_COLUMNS = tuple(c for c in METADATA_EVENTS.column_names
                       if c not in ("cluster", "event_id", "type", "isr", "replicas", "detail", "event_time", "path"))
_dumps = json.JSONEncoder(sort_keys=True, default=str).encode  # one encoder: json.dumps(**kw) builds one per call


def metadata_row(cluster: str, row: dict[str, Any], seq: int, ev: MetadataEvent) -> dict[str, Any]:
    """One metadata_events row; its id ignores the collector (same change -> same id from any source)."""
    out: dict[str, Any] = {c: getattr(ev, c, None) for c in _EVENT_COLUMNS}
    out["type"] = str(ev.type)
    out["isr"] = list(ev.isr) if ev.isr is not None else None
    out["replicas"] = list(ev.replicas) if ev.replicas is not None else None
    detail = ev.detail
    if out["type"] == MetadataEventType.COLLECTION_GAP:
        detail = {**detail, "source": row.get("source")}  # a watch gap is noise where the txnlog covers it (engine)
    out["detail"] = _dumps(detail) if detail else None
    out["event_time"] = _utc(ev.event_time) or _utc(row["txn_time"]) or _utc(row["observed_at"])
    out["path"] = ev.path if ev.path is not None else row["path"]
    out["cluster"] = cluster
    out["event_id"] = metadata_event_id(cluster, row["zxid"], row["path"], row["op"], seq)
    out["_seq"] = seq
    out["_ok"] = True
    return out


def quarantine_row(cluster: str, row: dict[str, Any], reason: str) -> dict[str, Any]:
    """One quarantine row for an undecodable change (raw payload kept as text, lossy on non-utf8)."""
    data = row["data"]
    raw = data.decode("utf-8", errors="replace") if data is not None else None
    ref = f"{row['zxid']}:{row['path']}:{row['op']}"
    return {
        "cluster": cluster, "zxid": row["zxid"], "type": "QUARANTINED", "_ok": False, "_seq": 0,
        "event_id": event_id(cluster, row["source"], ref, reason),
        "q_source": row["source"], "q_raw": raw, "q_reason": reason, "q_ref": ref,
        "q_observed_at": _utc(row["observed_at"]),
    }


def decode_row(row: dict[str, Any]) -> list[dict[str, Any]]:
    """One bronze row decoded with the shared codec: its metadata rows, or one quarantine row."""
    from models.errors import MalformedZnodeError
    from models.znode_codec import decode

    cluster = row["cluster"]
    try:
        events = decode(_change_of(row))
    except (MalformedZnodeError, ValueError) as exc:
        return [quarantine_row(cluster, row, str(exc) or type(exc).__name__)]
    return [metadata_row(cluster, row, i, ev) for i, ev in enumerate(events)]


_UNFIT = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError)


def decoded_batch(rows: list[dict[str, Any]], arrow_schema: pa.Schema) -> pa.RecordBatch:
    """``rows`` decoded, as Arrow. A row whose events still do not fit the output columns (a value the codec
    let through) is quarantined with Arrow's reason instead of failing the batch, and every later run on it."""
    groups = [decode_row(row) for row in rows]
    try:
        return pa.RecordBatch.from_pylist([r for g in groups for r in g], schema=arrow_schema)
    except _UNFIT:
        fitted: list[dict[str, Any]] = []
        for row, group in zip(rows, groups, strict=True):
            try:
                pa.RecordBatch.from_pylist(group, schema=arrow_schema)
            except _UNFIT as exc:
                group = [quarantine_row(row["cluster"], row, f"does not fit metadata_events: {exc}")]
            fitted.extend(group)
        return pa.RecordBatch.from_pylist(fitted, schema=arrow_schema)


def _decode_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    arrow_schema = _arrow_out_schema()
    for batch in batches:
        states, rest = fast_state_writes(batch, arrow_schema)
        topics, rest = fast_topic_assignments(rest, arrow_schema)
        for fast in (states, topics):
            if fast is not None:
                yield from fast.to_batches()
        if rest.num_rows:
            yield decoded_batch(rest.to_pylist(), arrow_schema)


# -- vectorised path for partition state writes (nearly every bronze row of a real cluster) ------------------
_STATE_PATH = PATH_PATTERNS[PathKind.PARTITION_STATE]
_PAYLOADS: dict[bytes, PartitionStatePayload | None] = {}  # payload bytes -> codec verdict (None: malformed)
_PAYLOAD_CACHE_MAX = 200_000


def _payload_verdicts(unique: list[bytes]) -> list[PartitionStatePayload | None]:
    """The codec's verdict on each distinct payload (a cluster writes few distinct ones: cache them)."""
    if len(_PAYLOADS) > _PAYLOAD_CACHE_MAX:
        _PAYLOADS.clear()
    out: list[PartitionStatePayload | None] = []
    for data in unique:
        if data not in _PAYLOADS:
            try:
                _PAYLOADS[data] = partition_state_payload(data)
            except ValueError:
                _PAYLOADS[data] = None  # the row-wise codec path will quarantine it with the full message
        out.append(_PAYLOADS[data])
    return out


def fast_state_writes(batch: pa.RecordBatch, arrow_schema: pa.Schema) -> tuple[pa.Table | None, pa.RecordBatch]:
    """(decoded rows of the valid partition state writes in ``batch``, the other rows for ``decode_row``).

    Exactly what ``decode_row`` yields for those rows (``tests/pipelines/test_fast_decode.py``): the codec validates
    each DISTINCT payload once (``partition_state_payload``), everything per row is an Arrow kernel.
    """
    if batch.num_rows == 0:
        return None, batch
    paths = pc.dictionary_encode(batch["path"])  # a znode is written many times: match each path once
    m = pc.take(pc.extract_regex(paths.dictionary, _STATE_PATH), paths.indices)
    topic, part_text = pc.struct_field(m, "topic"), pc.struct_field(m, "partition")
    candidate = pc.and_(pc.and_(pc.is_valid(m), pc.is_in(batch["op"], pa.array([str(ZnodeOp.CREATE), str(ZnodeOp.SET)]))),
                        pc.is_valid(batch["data"]))
    candidate = pc.fill_null(pc.and_(candidate, pc.less_equal(pc.utf8_length(part_text), 9)), False)
    if not pc.any(candidate).as_py():
        return None, batch
    encoded = pc.dictionary_encode(pc.if_else(candidate, batch["data"], pa.scalar(None, pa.binary())))
    verdicts = _payload_verdicts(encoded.dictionary.to_pylist())
    ok_unique = np.array([v is not None for v in verdicts], bool)
    idx = pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    ok = candidate.to_numpy(zero_copy_only=False) & (ok_unique[idx] if len(ok_unique) else False)
    if not ok.any():
        return None, batch
    rows = np.nonzero(ok)[0]
    take = pa.array(rows, pa.int64())
    good = [v if v is not None else _NO_PAYLOAD for v in verdicts]
    pidx = pa.array(idx[rows], pa.int64())

    def field(values: list[Any], type_: pa.DataType) -> pa.Array:
        return pc.take(pa.array(values, type_), pidx)

    created = pc.equal(pc.take(batch["op"], take), str(ZnodeOp.CREATE))
    detail_created = field([_dumps(partition_state_detail(v, True)) for v in good], pa.string())
    detail_set = field([_dumps(partition_state_detail(v, False)) for v in good], pa.string())
    cluster, zxid, path, op = (pc.take(batch[c], take) for c in ("cluster", "zxid", "path", "op"))
    n = len(rows)
    cols: dict[str, Any] = {
        "cluster": cluster, "zxid": zxid,
        "event_time": pc.coalesce(pc.take(batch["txn_time"], take), pc.take(batch["observed_at"], take)),
        "type": pa.array([str(MetadataEventType.PARTITION_STATE_WRITTEN)] * n, pa.string()),
        "topic": pc.take(topic, take), "partition": pc.cast(pc.take(part_text, take), pa.int32()),
        "controller_epoch": field([v.controller_epoch for v in good], pa.int32()),
        "leader": field([v.leader for v in good], pa.int32()),
        "leader_epoch": field([v.leader_epoch for v in good], pa.int32()),
        "isr": field([list(v.isr) for v in good], pa.list_(pa.int32())),
        "zk_version": pc.take(batch["version"], take), "czxid": pc.take(batch["czxid"], take), "path": path,
        "detail": pc.if_else(created, detail_created, detail_set),
        "event_id": metadata_event_ids(cluster, zxid, path, op),
        "_seq": pa.array(np.zeros(n, np.int32)), "_ok": pa.array(np.ones(n, bool)),
    }
    arrays = [pa.nulls(n, f.type) if f.name not in cols else pc.cast(cols[f.name], f.type) for f in arrow_schema]
    return pa.Table.from_arrays(arrays, schema=arrow_schema), batch.filter(pa.array(~ok))


_NO_PAYLOAD = PartitionStatePayload(0, 0, 0, (), None)  # placeholder for malformed dictionary entries (never taken)

_TOPIC_PATH = PATH_PATTERNS[PathKind.TOPIC]


def fast_topic_assignments(batch: pa.RecordBatch, arrow_schema: pa.Schema) -> tuple[pa.Table | None, pa.RecordBatch]:
    """(decoded rows of the valid topic assignments in ``batch``, the other rows for ``decode_row``).

    A topic's assignment fans out into one PARTITION_ASSIGNED event per partition (a cluster's creation is
    one such row per topic, thousands of events each). The codec validates each payload
    (``topic_assignment``); the per-event columns are built whole, not as one dict per event. Exactly what
    ``decode_row`` yields for those rows (``tests/pipelines/test_fast_decode.py``).
    """
    if batch.num_rows == 0:
        return None, batch
    m = pc.extract_regex(batch["path"], _TOPIC_PATH)
    candidate = pc.fill_null(pc.and_(pc.and_(pc.is_valid(m), pc.is_in(batch["op"], pa.array([str(ZnodeOp.CREATE), str(ZnodeOp.SET)]))),
                                     pc.is_valid(batch["data"])), False)
    if not pc.any(candidate).as_py():
        return None, batch
    rows = np.nonzero(candidate.to_numpy(zero_copy_only=False))[0]
    taken: list[int] = []
    assignments: list[TopicAssignment] = []
    for row, data in zip(rows.tolist(), pc.take(batch["data"], pa.array(rows)).to_pylist(), strict=True):
        try:
            a = topic_assignment(data)
        except ValueError:
            continue  # decode_row quarantines it, with the codec's message
        if a.partitions:  # an empty assignment is one partition-less event: left to decode_row
            taken.append(row)
            assignments.append(a)
    if not taken:
        return None, batch
    partitions: list[int] = []
    replicas: list[tuple[int, ...]] = []
    details: list[str] = []
    seqs: list[int] = []
    for a in assignments:
        ordered = sorted(a.partitions)
        shared = _dumps(a.common)  # the detail of every partition not being reassigned
        partitions += ordered
        replicas += [a.partitions[p] for p in ordered]
        details += [_dumps(a.partition_detail(p)) if p in a.adding or p in a.removing else shared for p in ordered]
        seqs += range(len(ordered))
    per_row = np.array([len(a.partitions) for a in assignments])
    take = pa.array(np.repeat(np.array(taken, np.int64), per_row))
    n = len(partitions)
    cluster, zxid, path, op = (pc.take(batch[c], take) for c in ("cluster", "zxid", "path", "op"))
    seq = pa.array(seqs, pa.int32())
    cols: dict[str, Any] = {
        "cluster": cluster, "zxid": zxid,
        "event_time": pc.coalesce(pc.take(batch["txn_time"], take), pc.take(batch["observed_at"], take)),
        "type": pa.array([str(MetadataEventType.PARTITION_ASSIGNED)] * n, pa.string()),
        "topic": pc.take(pc.struct_field(m, "topic"), take), "partition": pa.array(partitions, pa.int32()),
        "replicas": pa.array(replicas, pa.list_(pa.int32())), "detail": pa.array(details, pa.string()),
        "zk_version": pc.take(batch["version"], take), "czxid": pc.take(batch["czxid"], take), "path": path,
        "event_id": metadata_event_ids(cluster, zxid, path, op, seq), "_seq": seq,
        "_ok": pa.array(np.ones(n, bool)),
    }
    arrays = [pa.nulls(n, f.type) if f.name not in cols else pc.cast(cols[f.name], f.type) for f in arrow_schema]
    keep = np.ones(batch.num_rows, bool)
    keep[taken] = False
    return pa.Table.from_arrays(arrays, schema=arrow_schema), batch.filter(pa.array(keep))


def _arrow_out_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(_OUT_SCHEMA)


def dedupe_table(bronze: pa.Table, txnlog_range: tuple[int, int] | None = None) -> pa.Table:
    """One row per (cluster, zxid, path, op): the same change seen by several collectors is kept once, from the
    best source (txnlog, then watch, then resync), then the earliest observation.

    Where the txnlog covers a zxid (between its first and last delivered zxid in these rows, or in
    ``txnlog_range``), watch/resync rows are dropped: the txnlog is lossless, while a watch reads after the fact
    and can stamp a phantom DELETE with a re-creation's zxid."""
    if bronze.num_rows == 0:
        return bronze
    is_txn = pc.fill_null(pc.equal(bronze["source"], str(Source.TXNLOG)), False)
    zxid = bronze["zxid"]
    covered = pa.array(np.zeros(bronze.num_rows, bool))
    txn = bronze.select(["cluster", "zxid"]).filter(is_txn)  # (filtering the payload columns costs seconds)
    if txn.num_rows:
        for b in txn.group_by("cluster").aggregate([("zxid", "min"), ("zxid", "max")]).to_pylist():
            inside = pc.and_(pc.greater_equal(zxid, b["zxid_min"]), pc.less_equal(zxid, b["zxid_max"]))
            covered = pc.or_(covered, pc.fill_null(pc.and_(pc.equal(bronze["cluster"], b["cluster"]), inside), False))
    if txnlog_range is not None:
        lo, hi = txnlog_range
        covered = pc.or_(covered, pc.fill_null(pc.and_(pc.greater_equal(zxid, lo), pc.less_equal(zxid, hi)), False))
    wanted = pc.or_(is_txn, pc.invert(covered))
    kept = bronze if pc.all(wanted).as_py() else bronze.filter(wanted)
    if kept.num_rows == 0:
        return kept
    # several rows can only be one change where they share a zxid (a multi, or two collectors): only those
    # rows are grouped by (path, op) and ranked; codes make a null equal a null, as in Spark's window
    n = kept.num_rows
    c, z = int_codes(kept["cluster"]), int_codes(kept["zxid"])
    in_order = bool(np.all((c[1:] > c[:-1]) | ((c[1:] == c[:-1]) & (z[1:] >= z[:-1]))))
    order = np.arange(n) if in_order else np.lexsort((z, c))
    cs, zs = c[order], z[order]
    same_zxid = (cs[1:] == cs[:-1]) & (zs[1:] == zs[:-1])
    shared = np.zeros(n, bool)
    shared[1:] |= same_zxid
    shared[:-1] |= same_zxid
    keep = np.ones(n, bool)
    at = np.nonzero(shared)[0]
    if len(at):
        rows = pa.array(order[at], pa.int64())
        ranks = pc.fill_null(pc.index_in(pc.take(kept["source"], rows), pa.array(list(SOURCE_RANK))), UNKNOWN_SOURCE_RANK)
        sub = pa.table({"c": cs[at], "z": zs[at], "p": int_codes(pc.take(kept["path"], rows)),
                        "o": int_codes(pc.take(kept["op"], rows)), "_rank": ranks,
                        "observed_at": pc.take(kept["observed_at"], rows), "event_id": pc.take(kept["event_id"], rows),
                        "at": at})
        sub = sub.take(pc.sort_indices(sub, [(k, "ascending", "at_start") for k in
                                             ("c", "z", "p", "o", "_rank", "observed_at", "event_id")]))
        group = np.stack([sub[k].to_numpy() for k in ("c", "z", "p", "o")], axis=1)
        first = np.concatenate([[True], (group[1:] != group[:-1]).any(axis=1)])
        keep[sub["at"].to_numpy()[~first]] = False  # the best source, then the earliest observation wins
    if keep.all():
        return kept
    # the kept rows stay in their input order: a chunk a row or two out of zxid order is not re-sorted whole
    # (the fold orders its own rows)
    kept_at = np.ones(n, bool)
    kept_at[order[~keep]] = False
    return kept.filter(pa.array(kept_at))


def decode_table(bronze: pa.Table, txnlog_range: tuple[int, int] | None = None) -> pa.Table:
    """Bronze rows after source dedupe (``dedupe_table``), decoded: metadata rows (``_ok``) and quarantine rows
    (``q_*``) together (``split_decoded`` parts them)."""
    rows = dedupe_table(bronze, txnlog_range)
    # decode is row-local: a run of rows per core (few runs: distinct payloads and znodes are done per run)
    size = max(DECODE_MIN_RUN_ROWS, -(-rows.num_rows // THREADS))
    runs = [rows.slice(at, size).combine_chunks() for at in range(0, rows.num_rows, size)]
    out = _arrow_out_schema()
    decoded = parallel_map(lambda run: pa.Table.from_batches(list(_decode_batches(run.to_batches())), schema=out), runs)
    return concat_or_empty(decoded, out)


DECODE_MIN_RUN_ROWS = 50_000


def split_decoded(decoded: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(metadata_events + ``_seq``, quarantine) from ``decode_table``'s rows."""
    ok = decoded["_ok"]
    all_ok = pc.all(ok).as_py()  # the usual case: no filtering of a million rows
    meta = (decoded if all_ok else decoded.filter(ok)).select([*METADATA_EVENTS.column_names, "_seq"])
    q = decoded.slice(0, 0) if all_ok else decoded.filter(pc.invert(ok))
    renamed = {"q_source": "source", "q_raw": "raw", "q_reason": "reason", "q_observed_at": "observed_at",
               "q_ref": "ref"}
    q = q.select(list(q.schema.names)).rename_columns([renamed.get(n, n) for n in q.schema.names])
    return meta, q.select(list(QUARANTINE.column_names))


def metadata_events_of(bronze: pa.Table, txnlog_range: tuple[int, int] | None = None) -> pa.Table:
    """The metadata events ``bronze`` decodes to (each change once: ``dedupe_table``), in ``metadata_events``'
    columns: the ``metadata_events`` view's ZooKeeper part (``services.metadata_events``)."""
    meta, _ = split_decoded(decode_table(bronze, txnlog_range))
    return meta.select(list(METADATA_EVENTS.column_names))
