"""The lake's two bronze histories of one cluster as a ``models.migration.MigrationHistory``: ZooKeeper's
``znode_events`` (the transaction log's rows: they carry the writer's session, which the out-of-band rule needs)
and KRaft's ``kraft_records`` (the metadata log's segment records, decoded). The rules themselves live in
``models.migration``; this module only shapes their input and reports what could not be used."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from models.events import KraftRecordSource, Source, ZnodeChange, ZnodeOp
from models.kraft_records import KraftDecodeError, decode_control_record, decode_metadata_record
from models.migration import KraftEntry, MigrationHistory, zk_entries
from pipelines.kraft_stage import current_records


@dataclass(frozen=True)
class HistoryInput:
    """The history, and what of the bronze tables it leaves out (each is said in the command's output)."""

    history: MigrationHistory
    watch_only_rows: int  # ZooKeeper rows from watches only: no session, no multi (the txnlog collector has both)
    kraft_gaps: int  # gap rows in kraft_records: offsets the collector never read from a segment
    undecodable: int  # KRaft records the decoder refused (quarantined by the collector)


def _utc(ts: datetime | None) -> datetime | None:
    return ts if ts is None or ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _change(row: dict[str, Any]) -> ZnodeChange:
    return ZnodeChange(
        zxid=row["zxid"], path=row["path"], op=ZnodeOp(row["op"]), data=row["data"], version=row["version"],
        czxid=row["czxid"], mzxid=row["mzxid"], pzxid=row["pzxid"], ephemeral_owner=row["ephemeral_owner"],
        session_id=row["session_id"], txn_time=_utc(row["txn_time"]), detail=row["detail"],
    )


def migration_history(znode_events: pa.Table, kraft_records: pa.Table, *, chroot: str | None = None,
                      kafka_version: str | None = None) -> HistoryInput:
    """Both histories of one cluster (the tables already filtered to it). ZooKeeper's rows come from the
    transaction log when it was collected (lossless, with sessions), else from the watches; a zxid seen by both
    counts once. KRaft's come from log segments as the log stands (``current_records``), in offset order."""
    txnlog = pc.equal(znode_events["source"], str(Source.TXNLOG))
    has_txnlog = bool(pc.any(txnlog).as_py()) if znode_events.num_rows else False
    zk_rows = znode_events.filter(txnlog) if has_txnlog else znode_events
    seen: set[tuple[int, str, str]] = set()
    changes = []
    for row in zk_rows.to_pylist():
        key = (row["zxid"], row["path"], row["op"])
        if key not in seen:
            seen.add(key)
            changes.append(_change(row))
    entries: list[KraftEntry] = []
    undecodable = 0
    log = current_records(kraft_records)  # at an offset Raft rewrote, the newest leader epoch's record
    segments = log.filter(pc.equal(log["source"], str(KraftRecordSource.SEGMENT)))
    for row in sorted(segments.to_pylist(), key=lambda r: r["offset"]):
        at, epoch = _utc(row["batch_timestamp"]), int(row["leader_epoch"] or 0)
        try:
            record = (decode_control_record(row["key"], row["value"]) if row["is_control"]
                      else decode_metadata_record(row["value"] or b""))
        except KraftDecodeError:
            undecodable += 1
            continue
        entries.append(KraftEntry(row["offset"], epoch, at, record))
    gaps = int(pc.sum(pc.equal(kraft_records["source"], str(KraftRecordSource.GAP))).as_py() or 0) if kraft_records.num_rows else 0
    history = MigrationHistory(tuple(zk_entries(changes, chroot, kafka_version)), tuple(entries))
    return HistoryInput(history, 0 if has_txnlog else zk_rows.num_rows, gaps, undecodable)
