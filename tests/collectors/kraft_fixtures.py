"""A KRaft metadata log directory on disk for the collector tests: segments and snapshots of record batches
built with ``tests.kraft_bytes`` (the wire format, written independently of the decoder)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from tests import kraft_bytes as kb

TOPIC_RECORD = 2
NO_OP_RECORD = 20
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4


def topic_id(name: str) -> str:
    """A stable Kafka Uuid (base64url, 22 characters) for a topic name."""
    return base64.urlsafe_b64encode(hashlib.sha1(name.encode()).digest()[:16]).decode().rstrip("=")


def topic_record(name: str) -> bytes:
    return kb.metadata_value(TOPIC_RECORD, 0, kb.cstring(name) + kb.uuid_bytes(topic_id(name)) + kb.tagged())


def no_op_record() -> bytes:
    return kb.metadata_value(NO_OP_RECORD, 0, kb.tagged())


def leader_change(leader: int, voters: tuple[int, ...] = (1, 2, 3)) -> tuple[bytes, bytes]:
    """(key, value) of a LeaderChangeMessage v0 control record."""
    voter_list = kb.carray([kb.i32(v) + kb.tagged() for v in voters])
    value = kb.i16(0) + kb.i32(leader) + voter_list + voter_list + kb.tagged()
    return kb.control_key(LEADER_CHANGE), value


def snapshot_header(timestamp_ms: int = 1_700_000_000_000) -> tuple[bytes, bytes]:
    return kb.control_key(SNAPSHOT_HEADER), kb.i16(0) + kb.i64(timestamp_ms) + kb.tagged()


def snapshot_footer() -> tuple[bytes, bytes]:
    return kb.control_key(SNAPSHOT_FOOTER), kb.i16(0) + kb.tagged()


def data_batch(base_offset: int, values: list[bytes], epoch: int = 1) -> bytes:
    return kb.batch(base_offset, [kb.record(i, v) for i, v in enumerate(values)], leader_epoch=epoch,
                    base_timestamp=1_700_000_000_000 + base_offset)


def control_batch(base_offset: int, key_value: tuple[bytes, bytes], epoch: int = 1) -> bytes:
    key, value = key_value
    return kb.batch(base_offset, [kb.record(0, value, key=key)], control=True, leader_epoch=epoch,
                    base_timestamp=1_700_000_000_000 + base_offset)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def snapshot_name(end_offset: int, epoch: int) -> str:
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"


@dataclass
class MetadataLog:
    """A ``__cluster_metadata-0`` directory that tests write like Kafka does: append batches to the newest
    segment, roll segments, write snapshots, delete old segments."""

    path: Path
    next_offset: int = 0
    segments: list[int] = field(default_factory=list)
    expected: dict[int, str] = field(default_factory=dict)  # offset -> record type name of every segment record

    @classmethod
    def create(cls, parent: Path) -> MetadataLog:
        path = parent / "__cluster_metadata-0"
        path.mkdir(parents=True)
        (path / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":1,"votedId":-1,"data_version":0}')
        log = cls(path)
        log.roll()
        return log

    def roll(self) -> Path:
        self.segments.append(self.next_offset)
        segment = self.path / segment_name(self.next_offset)
        segment.touch()
        return segment

    @property
    def active(self) -> Path:
        return self.path / segment_name(self.segments[-1])

    def append_bytes(self, raw: bytes) -> None:
        with open(self.active, "ab") as f:
            f.write(raw)

    def topics(self, *names: str, epoch: int = 1) -> bytes:
        """Append one batch of TopicRecords; returns its bytes."""
        raw = data_batch(self.next_offset, [topic_record(n) for n in names], epoch)
        for i in range(len(names)):
            self.expected[self.next_offset + i] = "TOPIC_RECORD"
        self.next_offset += len(names)
        self.append_bytes(raw)
        return raw

    def leader_change(self, leader: int, epoch: int = 1) -> bytes:
        raw = control_batch(self.next_offset, leader_change(leader), epoch)
        self.expected[self.next_offset] = "LEADER_CHANGE"
        self.next_offset += 1
        self.append_bytes(raw)
        return raw

    def raw_batch(self, values: list[bytes], expected: list[str | None]) -> bytes:
        """A batch of the given metadata record values (``expected``: their type names, None: undecodable)."""
        raw = data_batch(self.next_offset, values)
        for i, name in enumerate(expected):
            self.expected[self.next_offset + i] = name or ""
        self.next_offset += len(values)
        self.append_bytes(raw)
        return raw

    def snapshot(self, names: list[str], epoch: int = 1) -> tuple[Path, int]:
        """A snapshot at the current end offset holding a header, one TopicRecord per name and a footer;
        returns its path and record count."""
        raw = control_batch(0, snapshot_header(), epoch)
        raw += data_batch(1, [topic_record(n) for n in names], epoch)
        raw += control_batch(1 + len(names), snapshot_footer(), epoch)
        path = self.path / snapshot_name(self.next_offset, epoch)
        path.write_bytes(raw)
        return path, len(names) + 2

    def delete_segments_below(self, offset: int) -> list[int]:
        """Delete the segments whose records all lie below ``offset`` (as Kafka does after a snapshot)."""
        gone = [base for i, base in enumerate(self.segments[:-1]) if self.segments[i + 1] <= offset]
        for base in gone:
            (self.path / segment_name(base)).unlink()
            self.segments.remove(base)
        return gone
