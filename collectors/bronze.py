"""Shared bronze sink: ZnodeChange -> ``znode_events`` rows with deterministic ids, idempotent batches.

Each collector owns one ``writer_id``; every Delta commit carries (writer_id, batch_seq) as an app
transaction, so replaying a batch after a crash is a no-op and a restart continues the sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from models.events import Source, ZnodeChange
from models.ids import event_id

log = logging.getLogger(__name__)

TABLE = "znode_events"


class LakeLike(Protocol):
    cluster: str

    def append(self, table: str, rows: Any, writer_id: str, batch_seq: int) -> bool: ...

    def last_batch_seq(self, table: str, writer_id: str) -> int | None: ...


def change_row(
    change: ZnodeChange,
    *,
    cluster: str,
    source: Source | str,
    observed_at: datetime | None = None,
    missed_versions: int | None = None,
) -> dict[str, Any]:
    """One ``znode_events`` row; event_id = event_id(cluster, source, zxid, path, op) (architecture.md)."""
    src = str(source)
    return {
        "cluster": cluster,
        "zxid": change.zxid,
        "path": change.path,
        "op": str(change.op),
        "data": change.data,
        "version": change.version,
        "czxid": change.czxid,
        "mzxid": change.mzxid,
        "pzxid": change.pzxid,
        "ephemeral_owner": change.ephemeral_owner,
        "session_id": change.session_id,
        "txn_time": change.txn_time,
        "source": src,
        "missed_versions": missed_versions,
        "detail": change.detail,
        "observed_at": observed_at or datetime.now(UTC),
        "event_id": event_id(cluster, src, change.zxid, change.path, str(change.op)),
    }


def dedupe(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the last row per event_id (e.g. a multi that set one znode twice), in first-seen order."""
    by_id: dict[str, dict[str, Any]] = {}
    for r in rows:
        by_id[r["event_id"]] = r
    return list(by_id.values())


class BronzeWriter:
    """Appends row batches for one writer_id; batch_seq continues from what the lake recorded."""

    def __init__(self, lake: LakeLike, writer_id: str, table: str = TABLE) -> None:
        self.lake = lake
        self.writer_id = writer_id
        self.table = table
        self.rows_written = 0
        self.batches_written = 0

    @property
    def last_seq(self) -> int | None:
        return self.lake.last_batch_seq(self.table, self.writer_id)

    def next_seq(self) -> int:
        last = self.last_seq
        return 0 if last is None else last + 1

    def write(self, rows: Sequence[dict[str, Any]], batch_seq: int | None = None) -> bool:
        """Commit ``rows`` as one batch (``batch_seq`` defaults to the next one); False if already there."""
        seq = self.next_seq() if batch_seq is None else batch_seq
        unique = dedupe(rows)
        done = self.lake.append(self.table, unique, writer_id=self.writer_id, batch_seq=seq)
        if done:
            self.rows_written += len(unique)
            self.batches_written += 1
            log.debug("%s: batch %d, %d rows", self.writer_id, seq, len(unique))
        return done
