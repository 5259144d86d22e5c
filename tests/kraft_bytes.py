"""A small, independent encoder for KRaft metadata-log bytes, used to build test vectors.

Written from the wire format, not from ``models.kraft_records``' schema table, so the decoder is checked
against something it does not share code with. The CRC here is the plain bytewise CRC-32C.
"""

from __future__ import annotations

import base64
import gzip
import struct
from collections.abc import Iterable, Sequence

# ---- primitives -------------------------------------------------------------------------------------------


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n: int) -> bytes:
    """Zigzag signed varint (record-level fields)."""
    return uvarint((n << 1) ^ (n >> 63))


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def u16(n: int) -> bytes:
    return struct.pack(">H", n)


def f64(x: float) -> bytes:
    return struct.pack(">d", x)


def boolean(b: bool) -> bytes:
    return b"\x01" if b else b"\x00"


def cstring(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    return uvarint(len(raw) + 1) + raw


def cbytes(b: bytes | None) -> bytes:
    if b is None:
        return b"\x00"
    return uvarint(len(b) + 1) + b


def carray(items: Sequence[bytes] | None) -> bytes:
    if items is None:
        return b"\x00"
    return uvarint(len(items) + 1) + b"".join(items)


def int32s(values: Sequence[int] | None) -> bytes:
    return carray(None if values is None else [i32(v) for v in values])


def uuid_bytes(text: str) -> bytes:
    """Kafka's Uuid string (22 base64url chars) back to its 16 bytes."""
    return base64.urlsafe_b64decode(text + "==")


def uuids(values: Sequence[str] | None) -> bytes:
    return carray(None if values is None else [uuid_bytes(v) for v in values])


def tagged(fields: dict[int, bytes] | None = None) -> bytes:
    """A tagged-field section: count, then (tag, size, bytes) in tag order."""
    fields = fields or {}
    out = uvarint(len(fields))
    for tag in sorted(fields):
        out += uvarint(tag) + uvarint(len(fields[tag])) + fields[tag]
    return out


def metadata_value(api_key: int, version: int, body: bytes, frame_version: int = 1) -> bytes:
    return uvarint(frame_version) + uvarint(api_key) + uvarint(version) + body


def control_key(record_type: int, key_version: int = 0) -> bytes:
    return i16(key_version) + i16(record_type)


# ---- record batches ----------------------------------------------------------------------------------------


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c_bytewise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def record(
    offset_delta: int,
    value: bytes | None,
    key: bytes | None = None,
    timestamp_delta: int = 0,
    headers: Iterable[tuple[str, bytes | None]] = (),
) -> bytes:
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    header_list = list(headers)
    body += varint(len(header_list))
    for hkey, hvalue in header_list:
        raw = hkey.encode("utf-8")
        body += varint(len(raw)) + raw
        body += varint(-1) if hvalue is None else varint(len(hvalue)) + hvalue
    return varint(len(body)) + body


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batch(
    base_offset: int,
    records: Sequence[bytes],
    *,
    leader_epoch: int = 1,
    base_timestamp: int = 1_700_000_000_000,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    control: bool = False,
    transactional: bool = False,
    log_append_time: bool = False,
    codec: str = "none",
    compressed_payload: bytes | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    magic: int = 2,
    crc: int | None = None,
    record_count: int | None = None,
) -> bytes:
    """One v2 record batch. ``compressed_payload`` overrides the record section for codecs gzip can't do."""
    payload = b"".join(records)
    if codec == "gzip":
        payload = gzip.compress(payload)
    if compressed_payload is not None:
        payload = compressed_payload
    attributes = CODECS[codec]
    if log_append_time:
        attributes |= 0x08
    if transactional:
        attributes |= 0x10
    if control:
        attributes |= 0x20
    after_crc = (
        i16(attributes)
        + i32(len(records) - 1 if last_offset_delta is None else last_offset_delta)
        + i64(base_timestamp)
        + i64(base_timestamp if max_timestamp is None else max_timestamp)
        + i64(producer_id)
        + i16(producer_epoch)
        + i32(base_sequence)
        + i32(len(records) if record_count is None else record_count)
        + payload
    )
    checksum = crc32c_bytewise(after_crc) if crc is None else crc
    after_length = i32(leader_epoch) + i8(magic) + struct.pack(">I", checksum) + after_crc
    return i64(base_offset) + i32(len(after_length)) + after_length
