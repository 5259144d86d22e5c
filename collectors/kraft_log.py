"""Read KRaft's metadata log from disk: record batches of segments and snapshots, and the log directory.

Only file reading lives here (no Delta, no Spark); ``models.kraft_records`` decodes the record values.
Files are opened read-only and nothing is ever written to the log directory.

Record batch layout (magic 2, Kafka's ``DefaultRecordBatch``), big-endian::

    0  baseOffset int64          27 baseTimestamp int64
    8  batchLength int32         35 maxTimestamp int64
    12 partitionLeaderEpoch int32 43 producerId int64
    16 magic int8 (= 2)          51 producerEpoch int16
    17 crc uint32 (CRC-32C of bytes 21..end)   53 baseSequence int32
    21 attributes int16          57 recordCount int32
    23 lastOffsetDelta int32     61 records (compressed as one stream when the codec is not none)

``batchLength`` counts the bytes after itself, so a batch takes ``12 + batchLength`` bytes.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

__all__ = [
    "BatchScan",
    "KraftLogError",
    "LogRecord",
    "MetadataLogDir",
    "NotAMetadataLogDirError",
    "QuorumState",
    "RecordBatch",
    "SegmentFile",
    "SnapshotFile",
    "crc32c",
    "crc32c_python",
    "read_batches",
]

METADATA_PARTITION_DIR: Final = "__cluster_metadata-0"
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the part of a batch batchLength does not count
BATCH_HEADER_SIZE: Final = 61
_MAGIC_END: Final = 17  # bytes needed to see the magic byte
_CRC_START: Final = 21
SUPPORTED_MAGIC: Final = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")
_COMPRESSION_NAMES: Final = ("none", "gzip", "snappy", "lz4", "zstd")
_TIMESTAMP_TYPE_LOG_APPEND: Final = 0x08
_TRANSACTIONAL: Final = 0x10
_CONTROL: Final = 0x20


class KraftLogError(Exception):
    """A whole batch (or file) that Kafka could not have written: bad magic, CRC, lengths, codec..."""

    def __init__(self, path: str | os.PathLike[str], position: int, reason: str) -> None:
        reason = " ".join(reason.split())
        super().__init__(f"{os.fspath(path)} at byte {position}: {reason}")
        self.path = os.fspath(path)
        self.position = position
        self.reason = reason

    def __reduce__(self) -> tuple[type[KraftLogError], tuple[str, int, str]]:
        return (KraftLogError, (self.path, self.position, self.reason))


class NotAMetadataLogDirError(ValueError):
    """The path is neither ``__cluster_metadata-0`` nor a log directory that contains it."""


# --------------------------------------------------------------------------------------------------------
# CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of record batches since magic 2.
# google-crc32c's C code (hardware CRC where the CPU has it) when installed: the pure-Python table loop below
# runs at about 15 MB/s, which made the checksum the largest cost of reading a log.
# --------------------------------------------------------------------------------------------------------


def _crc32c_tables() -> tuple[list[int], ...]:
    base = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        base.append(c)
    tables = [base]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(prev[n] >> 8) ^ base[prev[n] & 0xFF] for n in range(256)])
    return tuple(tables)


_CRC_TABLES: Final = _crc32c_tables()
_WORD_PAIRS = struct.Struct("<II")


def crc32c_python(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C in pure Python (8 tables, 8 bytes per step): the fallback without google-crc32c."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _CRC_TABLES
    view = memoryview(data).cast("B")
    crc ^= 0xFFFFFFFF
    whole = len(view) - len(view) % 8
    if whole:
        for lo, hi in _WORD_PAIRS.iter_unpack(view[:whole]):
            lo ^= crc
            crc = (
                t7[lo & 0xFF] ^ t6[(lo >> 8) & 0xFF] ^ t5[(lo >> 16) & 0xFF] ^ t4[lo >> 24]
                ^ t3[hi & 0xFF] ^ t2[(hi >> 8) & 0xFF] ^ t1[(hi >> 16) & 0xFF] ^ t0[hi >> 24]
            )
    for b in view[whole:]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:
    from google_crc32c import extend as _crc32c_extend
    from google_crc32c import implementation as _crc32c_implementation
except ImportError:  # pragma: no cover - the package is a dependency; this keeps a bare checkout working
    _crc32c_extend = None
    _crc32c_implementation = "python"
if _crc32c_implementation != "c":  # its own fallback is pure Python too, and slower than ours
    _crc32c_extend = None

CRC32C_IMPLEMENTATION: Final = "google-crc32c" if _crc32c_extend is not None else "python"


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``crc`` (0 to start)."""
    if _crc32c_extend is None:
        return crc32c_python(data, crc)
    return int(_crc32c_extend(crc, data if type(data) is bytes else bytes(data)))


# --------------------------------------------------------------------------------------------------------
# Decompression. gzip is in the standard library; the others only when a module for them is importable.
# --------------------------------------------------------------------------------------------------------

_Decompress = Callable[[bytes], bytes]
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"


def _try_import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _snappy_xerial(raw_decompress: _Decompress) -> _Decompress:
    # Kafka's snappy stream is xerial's framing: 8-byte magic, int32 version, int32 compatible version,
    # then blocks of (int32 compressed length, raw snappy block)
    def decompress(data: bytes) -> bytes:
        if not data.startswith(_XERIAL_MAGIC):
            return raw_decompress(data)
        out = bytearray()
        pos = 16
        while pos < len(data):
            if pos + 4 > len(data):
                raise ValueError("snappy block length truncated")
            (size,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if size < 0 or pos + size > len(data):
                raise ValueError("snappy block truncated")
            out += raw_decompress(data[pos : pos + size])
            pos += size
        return bytes(out)

    return decompress


def _find_decompressor(codec: str) -> _Decompress | None:
    cramjam = _try_import("cramjam")
    if codec == "snappy":
        snappy = _try_import("snappy")
        if snappy is not None:
            return _snappy_xerial(snappy.decompress)
        if cramjam is not None:
            return _snappy_xerial(lambda b: bytes(cramjam.snappy.decompress_raw(b)))
    elif codec == "lz4":  # LZ4 frame format
        lz4_frame = _try_import("lz4.frame")
        if lz4_frame is not None:
            return lambda b: bytes(lz4_frame.decompress(b))
        if cramjam is not None:
            return lambda b: bytes(cramjam.lz4.decompress(b))
    elif codec == "zstd":
        zstandard = _try_import("zstandard")
        if zstandard is not None:
            # Kafka's zstd frames may not record their content size, so stream rather than one-shot
            return lambda b: bytes(zstandard.ZstdDecompressor().decompressobj().decompress(b))
        if cramjam is not None:
            return lambda b: bytes(cramjam.zstd.decompress(b))
    return None


_decompressors: dict[str, _Decompress | None] = {"gzip": gzip.decompress}


def _decompressor(codec: str) -> _Decompress | None:
    if codec not in _decompressors:
        _decompressors[codec] = _find_decompressor(codec)
    return _decompressors[codec]


# --------------------------------------------------------------------------------------------------------
# Batches and records
# --------------------------------------------------------------------------------------------------------


class LogRecord(NamedTuple):
    """One record of a batch, with its absolute offset and timestamp (a tuple: a log holds millions of them,
    and a frozen dataclass costs several times more to build)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class RecordBatch:
    """One record batch; ``position`` is its byte position in the file and ``size`` includes the 12-byte head."""

    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    magic: int
    crc_valid: bool
    compression: str
    is_transactional: bool
    is_control: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_timestamp: int
    max_timestamp: int
    position: int
    size: int
    records: tuple[LogRecord, ...]


class _BadRecords(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed varint (up to 64 bits), as record fields are written."""
    try:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        raw = b & 0x7F
        shift = 7
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            if b < 0x80:
                return (raw >> 1) ^ -(raw & 1), pos
            shift += 7
            if shift > 63:
                raise _BadRecords("varint longer than 10 bytes")
    except IndexError:
        raise _BadRecords("record runs past the end of the batch") from None


def _bytes_field(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = _varint(buf, pos)
    if length < 0:
        return None, pos
    stop = pos + length
    if stop > end:
        raise _BadRecords(f"{what} length {length} runs past the end of its record")
    return buf[pos:stop], stop


def _parse_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> tuple[LogRecord, ...]:
    records: list[LogRecord] = []
    append = records.append
    make = LogRecord._make
    varint = _varint
    pos = 0
    size = len(data)
    no_headers: tuple[tuple[str, bytes | None], ...] = ()
    try:
        for _ in range(count):
            # one-byte varints inline (the common case in a metadata log); longer ones through _varint
            b = data[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = varint(data, pos)
            end = pos + length
            if length < 0 or end > size:
                raise _BadRecords(f"record length {length} runs past the end of the batch")
            pos += 1  # record attributes: unused since magic 2
            b = data[pos]
            if b < 0x80:
                timestamp_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                timestamp_delta, pos = varint(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = varint(data, pos)
            key: bytes | None
            if data[pos] == 1:  # zigzag -1: a null key, as metadata records have
                key, pos = None, pos + 1
            else:
                key, pos = _bytes_field(data, pos, end, "key")
            b = data[pos]
            if b < 0x80:  # values up to 63 bytes
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif data[pos + 1] < 0x80:  # up to 8191 bytes: nearly all the rest
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                length, pos = varint(data, pos)
            if length < 0:
                value = None
            else:
                if pos + length > end:
                    raise _BadRecords(f"value length {length} runs past the end of its record")
                value, pos = data[pos : pos + length], pos + length
            if data[pos] == 0:
                headers, pos = no_headers, pos + 1
            else:
                headers, pos = _headers(data, pos, end)
            if pos != end:
                raise _BadRecords(f"record length {length} does not match its content ({pos - end + length} bytes)")
            timestamp = log_append_time if log_append_time is not None else base_timestamp + timestamp_delta
            append(make((base_offset + offset_delta, timestamp, key, value, headers)))
    except IndexError:
        raise _BadRecords("record runs past the end of the batch") from None
    if pos != size:
        raise _BadRecords(f"{size - pos} bytes after the last of {count} records")
    return tuple(records)


def _headers(data: bytes, pos: int, end: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    header_count, pos = _varint(data, pos)
    if header_count < 0:
        raise _BadRecords(f"negative header count {header_count}")
    headers = []
    for _ in range(header_count):
        key_length, pos = _varint(data, pos)
        if key_length < 0 or pos + key_length > end:
            raise _BadRecords(f"header key length {key_length} is invalid")
        try:
            header_key = data[pos : pos + key_length].decode("utf-8")
        except UnicodeDecodeError:
            raise _BadRecords("header key is not valid UTF-8") from None
        header_value, pos = _bytes_field(data, pos + key_length, end, "header value")
        headers.append((header_key, header_value))
    return tuple(headers), pos


def _decode_batch(path: str, position: int, blob: bytes, verify_crc: bool) -> RecordBatch:
    """Decode one whole batch; ``blob`` holds exactly its bytes, header included."""
    (
        base_offset, _length, leader_epoch, magic, stored_crc, attributes, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ) = _HEADER.unpack_from(blob, 0)
    computed_crc = crc32c(blob[_CRC_START:])
    crc_valid = computed_crc == stored_crc
    if verify_crc and not crc_valid:
        raise KraftLogError(path, position, f"CRC mismatch: stored {stored_crc:#010x}, computed {computed_crc:#010x}")
    codec_id = attributes & 0x07
    if codec_id >= len(_COMPRESSION_NAMES):
        raise KraftLogError(path, position, f"unknown compression type {codec_id}")
    compression = _COMPRESSION_NAMES[codec_id]
    if count < 0:
        raise KraftLogError(path, position, f"negative record count {count}")
    payload = blob[BATCH_HEADER_SIZE:]
    if compression != "none":
        decompress = _decompressor(compression)
        if decompress is None:
            raise KraftLogError(path, position, f"compression {compression} not supported (no module for it)")
        try:
            payload = decompress(payload)
        except Exception as exc:  # each codec module raises its own error types
            raise KraftLogError(path, position, f"cannot decompress {compression}: {exc}") from None
    log_append_time = max_timestamp if attributes & _TIMESTAMP_TYPE_LOG_APPEND else None
    try:
        records = _parse_records(payload, count, base_offset, base_timestamp, log_append_time)
    except _BadRecords as exc:
        raise KraftLogError(path, position, str(exc)) from None
    return RecordBatch(
        base_offset=base_offset,
        last_offset=base_offset + last_offset_delta,
        partition_leader_epoch=leader_epoch,
        magic=magic,
        crc_valid=crc_valid,
        compression=compression,
        is_transactional=bool(attributes & _TRANSACTIONAL),
        is_control=bool(attributes & _CONTROL),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        position=position,
        size=len(blob),
        records=records,
    )


class BatchScan:
    """An iteration over a file's whole batches from a byte position (see ``read_batches``).

    ``next_position`` is the byte position just after the last batch handed out (the start position
    before any): where the next scan of a growing file starts.
    """

    def __init__(self, path: str | os.PathLike[str], position: int = 0, *, verify_crc: bool = True) -> None:
        if position < 0:
            raise ValueError(f"position must be >= 0, not {position}")
        self.path = os.fspath(path)
        self.start_position = position
        self.next_position = position
        self.verify_crc = verify_crc

    def __iter__(self) -> Iterator[RecordBatch]:
        path = self.path
        position = self.next_position
        with open(path, "rb", buffering=1 << 20) as file:
            # bytes appended after this point are left for the next scan; this also keeps a corrupt,
            # huge batch length from turning into a huge read
            file_size = os.fstat(file.fileno()).st_size
            file.seek(position)
            while True:
                head = file.read(_MAGIC_END)
                if len(head) < LOG_OVERHEAD:
                    return  # end of file, or a batch whose length is not written yet
                (batch_length,) = struct.unpack_from(">i", head, 8)
                if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
                    raise KraftLogError(
                        path, position, f"batch length {batch_length} is below the {BATCH_HEADER_SIZE}-byte header"
                    )
                if len(head) < _MAGIC_END:
                    return
                magic = head[16]
                if magic != SUPPORTED_MAGIC:
                    raise KraftLogError(path, position, f"magic {magic} not supported (only {SUPPORTED_MAGIC})")
                size = LOG_OVERHEAD + batch_length
                if position + size > file_size:
                    return  # Kafka is still appending this batch: leave it for the next scan
                rest = file.read(size - _MAGIC_END)
                if len(rest) < size - _MAGIC_END:
                    return  # the file was truncated under us (a follower cutting a diverged tail)
                batch = _decode_batch(path, position, head + rest, self.verify_crc)
                position += size
                self.next_position = position
                yield batch


def read_batches(path: str | os.PathLike[str], position: int = 0, *, verify_crc: bool = True) -> BatchScan:
    """The whole record batches of a segment (``.log``) or snapshot (``.checkpoint``) from ``position``.

    A batch not fully written yet at the end of the file is not yielded and is no error: ``next_position``
    stays at its start. A whole batch that is malformed raises ``KraftLogError``. With
    ``verify_crc=False`` a CRC mismatch is reported in ``RecordBatch.crc_valid`` instead.
    """
    return BatchScan(path, position, verify_crc=verify_crc)


# --------------------------------------------------------------------------------------------------------
# The log directory
# --------------------------------------------------------------------------------------------------------

_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True)
class SegmentFile:
    path: Path
    base_offset: int


@dataclass(frozen=True)
class SnapshotFile:
    """A finished snapshot: it holds the state up to ``end_offset`` (exclusive), taken at ``epoch``."""

    path: Path
    end_offset: int
    epoch: int


@dataclass(frozen=True)
class QuorumState:
    """The ``quorum-state`` file: what this node last knew of the Raft election.

    ``voters`` exists only in data version 0 (static quorums before Kafka 3.8); ``voted_directory_id``
    only in version 1.
    """

    leader_id: int
    leader_epoch: int
    voted_id: int
    voted_directory_id: str | None
    voters: tuple[int, ...] | None
    data_version: int | None


class MetadataLogDir:
    """The ``__cluster_metadata-0`` directory: its segments, snapshots and quorum state (read-only)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        given = Path(path)
        if given.name == METADATA_PARTITION_DIR and given.is_dir():
            self.path = given
        elif (given / METADATA_PARTITION_DIR).is_dir():
            self.path = given / METADATA_PARTITION_DIR
        else:
            raise NotAMetadataLogDirError(
                f"{given} is neither a {METADATA_PARTITION_DIR} directory nor a log directory containing one"
            )

    def segments(self) -> list[SegmentFile]:
        """Log segments (``<base offset>.log``) by base offset; deleted, cleaned and swap files left out."""
        found = []
        for entry in os.scandir(self.path):
            match = _SEGMENT_NAME.match(entry.name)
            if match and entry.is_file():
                found.append(SegmentFile(Path(entry.path), int(match.group(1))))
        return sorted(found, key=lambda s: s.base_offset)

    def snapshots(self) -> list[SnapshotFile]:
        """Finished snapshots (``<end offset>-<epoch>.checkpoint``) by end offset; partial ones left out."""
        found = []
        for entry in os.scandir(self.path):
            match = _SNAPSHOT_NAME.match(entry.name)
            if match and entry.is_file():
                found.append(SnapshotFile(Path(entry.path), int(match.group(1)), int(match.group(2))))
        return sorted(found, key=lambda s: (s.end_offset, s.epoch))

    def quorum_state(self) -> QuorumState | None:
        """The parsed ``quorum-state`` file, or None when there is none."""
        path = self.path / "quorum-state"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise KraftLogError(path, 0, f"quorum-state is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise KraftLogError(path, 0, "quorum-state is not a JSON object")
        voters = data.get("currentVoters")
        try:
            return QuorumState(
                leader_id=int(data.get("leaderId", -1)),
                leader_epoch=int(data.get("leaderEpoch", -1)),
                voted_id=int(data.get("votedId", -1)),
                voted_directory_id=data.get("votedDirectoryId"),
                voters=None if voters is None else tuple(int(v["voterId"]) for v in voters),
                data_version=None if data.get("data_version") is None else int(data["data_version"]),
            )
        except (TypeError, ValueError, KeyError) as exc:
            raise KraftLogError(path, 0, f"quorum-state has an unexpected shape: {exc!r}") from None
