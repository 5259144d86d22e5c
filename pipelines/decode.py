"""Bronze ``znode_events`` -> ``metadata_events`` (+ ``quarantine`` for what cannot be decoded).

One codec for everything: ``models.znode_codec.decode`` runs per row inside ``mapInArrow`` (one Python
call per Arrow batch, not per row), so Spark and the unit tests share the exact decoding rules.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from models.events import MetadataEvent, ZnodeChange, ZnodeOp
from models.ids import event_id
from models.tables import METADATA_EVENTS, QUARANTINE
from pipelines.schemas import schema

log = logging.getLogger(__name__)

# txnlog is lossless, watch reads data after the fact, resync is a re-read: prefer them in that order.
SOURCE_RANK = {"txnlog": 0, "watch": 1, "resync": 2}

_OUT_SCHEMA = T.StructType(
    [*schema("metadata_events").fields,
     T.StructField("_seq", T.IntegerType()),
     T.StructField("_ok", T.BooleanType()),
     T.StructField("q_source", T.StringType()),
     T.StructField("q_raw", T.StringType()),
     T.StructField("q_reason", T.StringType()),
     T.StructField("q_ref", T.StringType()),
     T.StructField("q_observed_at", T.TimestampType())]
)


def dedupe_znode_events(df: DataFrame, txnlog_range: tuple[int, int] | None = None) -> DataFrame:
    """One row per (zxid, path, op): the same change seen by several collectors is kept once.

    Where the txnlog covers a zxid (between its first and last delivered zxid, in this input or the committed
    ``txnlog_range``), watch/resync rows are dropped: the txnlog is lossless, while a watch reads after the
    fact and can stamp a phantom DELETE with a re-creation's zxid.
    """
    txn = F.when(F.col("source") == "txnlog", F.col("zxid"))
    w_cluster = Window.partitionBy("cluster")
    df = df.withColumn("_lo", F.min(txn).over(w_cluster)).withColumn("_hi", F.max(txn).over(w_cluster))
    covered = F.coalesce(F.col("zxid").between(F.col("_lo"), F.col("_hi")), F.lit(False))
    if txnlog_range is not None:
        covered = covered | F.col("zxid").between(F.lit(txnlog_range[0]), F.lit(txnlog_range[1]))
    df = df.filter((F.col("source") == "txnlog") | ~covered).drop("_lo", "_hi")
    rank = F.coalesce(
        F.create_map(*[x for k, v in SOURCE_RANK.items() for x in (F.lit(k), F.lit(v))])[F.col("source")],
        F.lit(9),
    )
    w = Window.partitionBy("cluster", "zxid", "path", "op").orderBy(rank, F.col("observed_at"), F.col("event_id"))
    return df.withColumn("_rn", F.row_number().over(w)).filter("_rn = 1").drop("_rn")


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


def metadata_row(cluster: str, row: dict[str, Any], seq: int, ev: MetadataEvent) -> dict[str, Any]:
    """One metadata_events row; its id ignores the collector (same change -> same id from any source)."""
    out: dict[str, Any] = {c: getattr(ev, c, None) for c in METADATA_EVENTS.column_names if c not in ("cluster", "event_id")}
    out["type"] = str(ev.type)
    out["isr"] = list(ev.isr) if ev.isr is not None else None
    out["replicas"] = list(ev.replicas) if ev.replicas is not None else None
    detail = dict(ev.detail or {})
    if out["type"] == "COLLECTION_GAP":
        detail["source"] = row.get("source")  # a watch gap is noise where the txnlog covers it (engine)
    out["detail"] = json.dumps(detail, sort_keys=True, default=str) if detail else None
    out["event_time"] = _utc(ev.event_time) or _utc(row["txn_time"]) or _utc(row["observed_at"])
    out["path"] = ev.path if ev.path is not None else row["path"]
    out["cluster"] = cluster
    out["event_id"] = event_id(cluster, "meta", row["zxid"], row["path"], row["op"], seq)
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


def decode_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode bronze rows with the shared codec; malformed payloads become quarantine rows."""
    from models.errors import MalformedZnodeError
    from models.znode_codec import decode

    out: list[dict[str, Any]] = []
    for row in rows:
        cluster = row["cluster"]
        try:
            events = decode(_change_of(row))
        except (MalformedZnodeError, ValueError) as exc:
            out.append(quarantine_row(cluster, row, str(exc) or type(exc).__name__))
            continue
        out.extend(metadata_row(cluster, row, i, ev) for i, ev in enumerate(events))
    return out


def _decode_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    arrow_schema = _arrow_out_schema()
    for batch in batches:
        rows = decode_rows(batch.to_pylist())
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)


def _arrow_out_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(_OUT_SCHEMA)


def decoded_znode_events(df: DataFrame, txnlog_range: tuple[int, int] | None = None) -> DataFrame:
    """Bronze rows after source dedupe, decoded: metadata rows (``_ok``) and quarantine rows (``q_*``) together."""
    return dedupe_znode_events(df, txnlog_range).mapInArrow(_decode_batches, _OUT_SCHEMA)


def split_decoded(decoded: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(metadata_events + ``_seq``, quarantine) from a collected ``decoded_znode_events`` (split on the driver)."""
    ok = decoded["_ok"]
    meta = decoded.filter(ok).select([*METADATA_EVENTS.column_names, "_seq"])
    q = decoded.filter(pc.invert(ok))
    renamed = {"q_source": "source", "q_raw": "raw", "q_reason": "reason", "q_observed_at": "observed_at",
               "q_ref": "ref"}
    q = q.select(list(q.schema.names)).rename_columns([renamed.get(n, n) for n in q.schema.names])
    return meta, q.select(list(QUARANTINE.column_names))


def decode_znode_events(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(metadata_events, quarantine) from bronze znode_events, after source dedupe."""
    decoded = decoded_znode_events(df)
    meta = decoded.filter("_ok").select(*METADATA_EVENTS.column_names, "_seq")
    quarantine = decoded.filter("NOT _ok").select(
        "cluster", F.col("q_source").alias("source"), F.col("q_raw").alias("raw"),
        F.col("q_reason").alias("reason"), F.col("q_observed_at").alias("observed_at"),
        F.col("q_ref").alias("ref"), "event_id",
    )
    return meta, quarantine.select(*QUARANTINE.column_names)
