"""KRaft metadata-log histories for tests: a few record types encoded as Kafka writes them (``tests.kraft_bytes``'
primitives) and made into ``kraft_records`` rows, as `collect kraft` lands them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from lakehouse.spark_schema import spark_arrow_schema
from models.tables import KRAFT_RECORDS
from tests import kraft_bytes as kb

START = datetime(2026, 11, 1, tzinfo=UTC)


def topic_id(name: str) -> str:
    """A stable Kafka-style topic id (base64url of 16 bytes) for a topic name."""
    raw = (name.encode() * 16)[:16]
    import base64

    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def topic(name: str) -> bytes:
    return kb.metadata_value(2, 0, kb.cstring(name) + kb.uuid_bytes(topic_id(name)) + kb.tagged())


def partition(name: str, p: int, replicas: Sequence[int], isr: Sequence[int], leader: int, leader_epoch: int = 0,
              partition_epoch: int = 0) -> bytes:
    body = (kb.i32(p) + kb.uuid_bytes(topic_id(name)) + kb.int32s(replicas) + kb.int32s(isr) + kb.int32s([])
            + kb.int32s([]) + kb.i32(leader) + kb.i32(leader_epoch) + kb.i32(partition_epoch) + kb.tagged())
    return kb.metadata_value(3, 0, body)


def partition_change(name: str, p: int, *, leader: int | None = None, isr: Sequence[int] | None = None,
                     replicas: Sequence[int] | None = None, elr: Sequence[int] | None = None,
                     recovery: int | None = None) -> bytes:
    """A PartitionChangeRecord: v0, or v2 when it carries eligible leader replicas (tag 6)."""
    tags: dict[int, bytes] = {}
    if elr is not None:
        tags[6] = kb.int32s(elr)
    if isr is not None:
        tags[0] = kb.int32s(isr)
    if leader is not None:
        tags[1] = kb.i32(leader)
    if replicas is not None:
        tags[2] = kb.int32s(replicas)
    if recovery is not None:
        tags[5] = kb.i8(recovery)
    return kb.metadata_value(5, 0 if elr is None else 2, kb.i32(p) + kb.uuid_bytes(topic_id(name)) + kb.tagged(tags))


def register_broker(broker: int, epoch: int, fenced: bool = True) -> bytes:
    body = (kb.i32(broker) + kb.uuid_bytes(topic_id(f"b{broker}")) + kb.i64(epoch) + kb.carray([]) + kb.carray([])
            + kb.cstring(None) + kb.boolean(fenced) + kb.boolean(False) + kb.tagged())
    return kb.metadata_value(0, 1, body)


def fence(broker: int, epoch: int, fenced: bool = True) -> bytes:
    return kb.metadata_value(7 if fenced else 8, 0, kb.i32(broker) + kb.i64(epoch) + kb.tagged())


def remove_topic(name: str) -> bytes:
    return kb.metadata_value(9, 0, kb.uuid_bytes(topic_id(name)) + kb.tagged())


def transaction(phase: str, name: str | None = None) -> bytes:
    """A Begin (23), End (24) or Abort (25) TransactionRecord (KIP-868)."""
    key = {"begin": 23, "end": 24, "abort": 25}[phase]
    tags = {0: kb.cstring(name)} if name is not None and phase != "end" else {}
    return kb.metadata_value(key, 0, kb.tagged(tags))


def config(resource: str, name: str, value: str | None) -> bytes:
    return kb.metadata_value(4, 0, kb.i8(2) + kb.cstring(resource) + kb.cstring(name) + kb.cstring(value) + kb.tagged())


def leader_change(leader: int, voters: Sequence[int] = (1, 2, 3)) -> tuple[bytes, bytes]:
    """(key, value) of a LeaderChange control record v0."""
    people = kb.carray([kb.i32(v) + kb.tagged() for v in voters])
    value = kb.i16(0) + kb.i32(leader) + people + kb.carray([kb.i32(leader) + kb.tagged()]) + kb.tagged()
    return kb.control_key(2), value


class KraftLog:
    """A metadata log being written: records appended at increasing offsets, each a ``kraft_records`` row."""

    def __init__(self, cluster: str = "kraft") -> None:
        self.cluster = cluster
        self.rows: list[dict[str, Any]] = []
        self.offset = 0
        self.epoch = 1

    def add(self, *values: bytes, seconds: float = 1.0) -> int:
        """One batch of metadata records; returns its base offset."""
        base = self.offset
        for value in values:
            self._row(value=value, key=None, control=False, base=base, last=base + len(values) - 1, seconds=seconds)
        return base

    def elect(self, leader: int, seconds: float = 1.0) -> int:
        """A new quorum epoch with ``leader``: its LeaderChange control batch."""
        self.epoch += 1
        key, value = leader_change(leader)
        base = self.offset
        self._row(value=value, key=key, control=True, base=base, last=base, seconds=seconds)
        return base

    def _row(self, *, value: bytes, key: bytes | None, control: bool, base: int, last: int, seconds: float) -> None:
        self.rows.append({
            "cluster": self.cluster, "offset": self.offset, "batch_base_offset": base, "batch_last_offset": last,
            "leader_epoch": self.epoch, "batch_timestamp": START + timedelta(seconds=self.offset * seconds),
            "is_control": control, "record_type": None, "record_version": None, "key": key, "value": value,
            "source": "segment", "snapshot_id": None, "file_name": "00000000000000000000.log", "detail": None,
            "collected_at": START,
        })
        self.offset += 1

    def truncate(self, offset: int) -> None:
        """Raft cuts the node's log back to ``offset`` (a tail its leader never committed): the rows collected
        stay, and the log goes on from there (``elect`` first: a newer leader writes it)."""
        self.offset = offset

    def table(self, start: int = 0, stop: int | None = None) -> pa.Table:
        """Every row collected (a rewritten offset's under both epochs), of offsets ``start`` .. ``stop`` - 1."""
        rows = [r for r in self.rows if start <= r["offset"] and (stop is None or r["offset"] < stop)]
        return pa.Table.from_pylist(rows, schema=spark_arrow_schema(KRAFT_RECORDS))

    def rows_since(self, row: int) -> pa.Table:
        """The rows collected after the first ``row`` of them (a later commit of the collector)."""
        return pa.Table.from_pylist(self.rows[row:], schema=spark_arrow_schema(KRAFT_RECORDS))

    def current(self) -> pa.Table:
        """The log as it stands: at each offset the row written last."""
        last = {r["offset"]: r for r in self.rows}
        return pa.Table.from_pylist([last[o] for o in sorted(last)], schema=spark_arrow_schema(KRAFT_RECORDS))


def rewritten_tail(log: KraftLog) -> int:
    """Quorum leader 1 appends two batches it never commits (orders-0 led by broker 3 alone, then audit's
    removal); Raft truncates them and leader 2, at a newer epoch, writes its own records at those offsets and
    past them. Returns how many rows were collected before the rewrite."""
    tail = log.offset
    log.add(partition_change("orders", 0, leader=3, isr=[3]))
    log.add(remove_topic("orders"))
    before = len(log.rows)
    log.truncate(tail)
    log.elect(2)
    log.add(partition_change("orders", 0, isr=[1, 2, 3]))
    log.add(partition_change("orders", 1, leader=3))
    return before


def routine_cluster(log: KraftLog | None = None) -> KraftLog:
    """Three brokers registered and unfenced under quorum leader 1, a topic of two partitions at RF 3."""
    log = log or KraftLog()
    log.elect(1)
    for b in (1, 2, 3):
        log.add(register_broker(b, 10 + b))
    log.add(*(fence(b, 10 + b, fenced=False) for b in (1, 2, 3)))
    log.add(topic("orders"), partition("orders", 0, [1, 2, 3], [1, 2, 3], 1),
            partition("orders", 1, [2, 3, 1], [2, 3, 1], 2))
    return log
