"""collectors.kraft_log: record batches read from files, and the metadata log directory."""

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path

import pytest

from collectors.kraft_log import (
    KraftLogError,
    MetadataLogDir,
    NotAMetadataLogDirError,
    crc32c,
    read_batches,
)
from models.kraft_records import (
    ControlRecordType,
    MetadataRecordType,
    decode_control_record,
    decode_metadata_record,
)
from tests.kraft_bytes import (
    batch,
    control_key,
    crc32c_bytewise,
    cstring,
    i16,
    i32,
    i64,
    metadata_value,
    record,
    tagged,
    uuid_bytes,
)

TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw"
T0 = 1_700_000_000_000


def topic_value(name: str) -> bytes:
    return metadata_value(2, 0, cstring(name) + uuid_bytes(TOPIC_ID) + tagged())


def feature_value(level: int) -> bytes:
    return metadata_value(12, 0, cstring("metadata.version") + i16(level) + tagged())


def leader_change_value(leader: int) -> bytes:
    return i16(0) + i32(leader) + bytes.fromhex("02") + i32(leader) + b"\x00" + bytes.fromhex("01") + tagged()


def three_batches() -> list[bytes]:
    return [
        batch(0, [record(0, feature_value(21)), record(1, topic_value("orders"), timestamp_delta=5)]),
        batch(2, [record(0, leader_change_value(1), key=control_key(2))], control=True, leader_epoch=2),
        batch(3, [record(0, topic_value("payments"), headers=[("h", b"v"), ("n", None)])], leader_epoch=2),
    ]


def write(path: Path, *chunks: bytes) -> Path:
    path.write_bytes(b"".join(chunks))
    return path


# ---- CRC-32C --------------------------------------------------------------------------------------------------


def test_crc32c_check_value_and_agreement() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert crc32c(b"") == 0
    for n in (1, 7, 8, 9, 63, 64, 65, 1000):
        data = os.urandom(n)
        assert crc32c(data) == crc32c_bytewise(data)
        assert crc32c(data[n // 2 :], crc32c(data[: n // 2])) == crc32c(data)  # continuation


# ---- batches ----------------------------------------------------------------------------------------------------


def test_reads_batches_records_and_positions(tmp_path: Path) -> None:
    chunks = three_batches()
    path = write(tmp_path / "00000000000000000000.log", *chunks)
    scan = read_batches(path)
    batches = list(scan)
    assert [b.base_offset for b in batches] == [0, 2, 3]
    assert [b.last_offset for b in batches] == [1, 2, 3]
    assert [b.position for b in batches] == [0, len(chunks[0]), len(chunks[0]) + len(chunks[1])]
    assert [b.size for b in batches] == [len(c) for c in chunks]
    assert scan.next_position == path.stat().st_size

    first, control, third = batches
    assert first.magic == 2 and first.crc_valid and first.compression == "none"
    assert not first.is_control and not first.is_transactional
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (-1, -1, -1)
    assert first.partition_leader_epoch == 1
    assert [(r.offset, r.timestamp, r.key) for r in first.records] == [(0, T0, None), (1, T0 + 5, None)]
    assert decode_metadata_record(first.records[0].value or b"").fields == {
        "name": "metadata.version", "featureLevel": 21,
    }
    topic = decode_metadata_record(first.records[1].value or b"")
    assert topic.record_type is MetadataRecordType.TOPIC_RECORD and topic.fields["name"] == "orders"

    assert control.is_control and control.partition_leader_epoch == 2
    leader_change = decode_control_record(control.records[0].key, control.records[0].value)
    assert leader_change.record_type is ControlRecordType.LEADER_CHANGE
    assert leader_change.fields["leaderId"] == 1

    assert third.records[0].headers == (("h", b"v"), ("n", None))
    assert third.records[0].offset == 3


def test_read_from_a_position(tmp_path: Path) -> None:
    chunks = three_batches()
    path = write(tmp_path / "00000000000000000000.log", *chunks)
    scan = read_batches(path, position=len(chunks[0]))
    assert [b.base_offset for b in scan] == [2, 3]
    assert scan.next_position == path.stat().st_size


def test_truncated_tail_batch_is_not_yielded_and_is_read_later(tmp_path: Path) -> None:
    chunks = three_batches()
    whole = len(chunks[0]) + len(chunks[1])
    path = write(tmp_path / "00000000000000000000.log", chunks[0], chunks[1], chunks[2][:20])
    scan = read_batches(path)
    assert [b.base_offset for b in scan] == [0, 2]
    assert scan.next_position == whole

    for cut in (1, 11, 12, 16, 17, len(chunks[2]) - 1):  # before and after the length and magic are written
        write(path, chunks[0], chunks[1], chunks[2][:cut])
        scan = read_batches(path, position=whole)
        assert list(scan) == [] and scan.next_position == whole, cut

    write(path, *chunks)  # Kafka finished the append
    later = read_batches(path, position=whole)
    assert [b.base_offset for b in later] == [3]
    assert later.next_position == path.stat().st_size


def test_empty_file_and_position_at_end(tmp_path: Path) -> None:
    path = write(tmp_path / "00000000000000000000.log")
    scan = read_batches(path)
    assert list(scan) == [] and scan.next_position == 0
    with pytest.raises(ValueError):
        read_batches(path, position=-1)


def test_corrupt_crc_raises_with_the_batch_position(tmp_path: Path) -> None:
    chunks = three_batches()
    bad = bytearray(chunks[1])
    bad[-3] ^= 0xFF  # a byte inside the record, covered by the CRC
    path = write(tmp_path / "00000000000000000000.log", chunks[0], bytes(bad), chunks[2])
    scan = read_batches(path)
    seen = []
    with pytest.raises(KraftLogError) as info:
        for b in scan:
            seen.append(b.base_offset)
    assert seen == [0]
    assert info.value.position == len(chunks[0])
    assert "CRC mismatch" in info.value.reason
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    assert scan.next_position == len(chunks[0])  # the bad batch is where a rescan would start
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.path, copy.position, copy.reason) == (info.value.path, info.value.position, info.value.reason)


def test_crc_check_can_be_reported_instead_of_raised(tmp_path: Path) -> None:
    path = write(tmp_path / "x.log", batch(0, [record(0, topic_value("t"))], crc=12345))
    batches = list(read_batches(path, verify_crc=False))
    assert len(batches) == 1 and not batches[0].crc_valid


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        (batch(0, [record(0, b"v")], magic=1), "magic 1 not supported"),
        (i64(0) + i32(10) + b"\x00" * 10, "batch length 10 is below the 61-byte header"),
        (batch(0, [record(0, b"v")], record_count=2), "record runs past the end of the batch"),
        (batch(0, [record(0, b"v")], record_count=0), "bytes after the last of 0 records"),
        (batch(0, [record(0, b"v")], record_count=-1), "negative record count -1"),
        (batch(0, [b"\x10" + record(0, b"v")[1:] + b"\x00"]), "does not match its content"),
        (batch(0, [b"\x7e" + record(0, b"v")[1:]]), "runs past the end of the batch"),
        (batch(0, [record(0, b"v")], codec="gzip", compressed_payload=b"not gzip"), "cannot decompress gzip"),
    ],
)
def test_malformed_whole_batches(tmp_path: Path, blob: bytes, reason: str) -> None:
    path = write(tmp_path / "x.log", batch(0, [record(0, b"ok")]), blob)
    with pytest.raises(KraftLogError) as info:
        list(read_batches(path))
    assert reason in info.value.reason
    assert info.value.position == len(batch(0, [record(0, b"ok")]))


def test_gzip_batch(tmp_path: Path) -> None:
    records = [record(i, topic_value(f"t{i}"), timestamp_delta=i) for i in range(50)]
    path = write(tmp_path / "x.log", batch(10, records, codec="gzip"))
    (only,) = list(read_batches(path))
    assert only.compression == "gzip"
    assert [r.offset for r in only.records] == list(range(10, 60))
    assert decode_metadata_record(only.records[49].value or b"").fields["name"] == "t49"


@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy"])
def test_codec_without_a_module_is_an_error(tmp_path: Path, codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # as on a machine without the optional codec modules (the pinned set has none): no import finds one
    import collectors.kraft_log as kraft_log

    monkeypatch.setattr(kraft_log, "_try_import", lambda name: None)
    monkeypatch.setattr(kraft_log, "_decompressors", {"gzip": kraft_log.gzip.decompress})
    path = write(tmp_path / "x.log", batch(0, [record(0, b"v")], codec=codec, compressed_payload=b"\x00" * 8))
    with pytest.raises(KraftLogError) as info:
        list(read_batches(path))
    assert info.value.reason.startswith(f"compression {codec} not supported")


def test_transactional_producer_fields_and_log_append_time(tmp_path: Path) -> None:
    blob = batch(
        5, [record(0, b"a", timestamp_delta=1), record(1, b"b", timestamp_delta=2)],
        transactional=True, log_append_time=True, max_timestamp=T0 + 99,
        producer_id=1234, producer_epoch=3, base_sequence=17,
    )
    (only,) = list(read_batches(write(tmp_path / "x.log", blob)))
    assert only.is_transactional and not only.is_control
    assert (only.producer_id, only.producer_epoch, only.base_sequence) == (1234, 3, 17)
    assert (only.base_timestamp, only.max_timestamp) == (T0, T0 + 99)
    assert [r.timestamp for r in only.records] == [T0 + 99, T0 + 99]  # log-append time: the batch's time


def test_snapshot_file_reads_like_a_segment(tmp_path: Path) -> None:
    header = i16(0) + i64(T0) + tagged()
    footer = i16(0) + tagged()
    path = write(
        tmp_path / "00000000000000000042-0000000003.checkpoint",
        batch(0, [record(0, header, key=control_key(3))], control=True),
        batch(1, [record(0, feature_value(21))]),
        batch(2, [record(0, footer, key=control_key(4))], control=True),
    )
    kinds = []
    for b in read_batches(path):
        for r in b.records:
            if b.is_control:
                kinds.append(decode_control_record(r.key, r.value).record_type.name)
            else:
                kinds.append(decode_metadata_record(r.value or b"").record_type.name)
    assert kinds == ["SNAPSHOT_HEADER", "FEATURE_LEVEL_RECORD", "SNAPSHOT_FOOTER"]


# ---- the log directory -----------------------------------------------------------------------------------------


def make_metadata_dir(root: Path) -> Path:
    part = root / "__cluster_metadata-0"
    part.mkdir(parents=True)
    for name in [
        "00000000000000000000.log", "00000000000000001234.log", "00000000000000000099.log",
        "00000000000000000000.index", "00000000000000000000.timeindex", "00000000000000000050.log.deleted",
        "00000000000000000060.log.cleaned", "00000000000000000070.log.swap", "leader-epoch-checkpoint",
        "partition.metadata", "123.log",
        "00000000000000001000-0000000002.checkpoint", "00000000000000000500-0000000001.checkpoint",
        "00000000000000002000-0000000003.checkpoint.part", "00000000000000000100-0000000001.checkpoint.deleted",
    ]:
        (part / name).write_bytes(b"")
    return part


def test_lists_segments_and_snapshots_ignoring_junk(tmp_path: Path) -> None:
    part = make_metadata_dir(tmp_path / "meta")
    before = sorted(os.listdir(part))
    log_dir = MetadataLogDir(part)
    assert [(s.base_offset, s.path.name) for s in log_dir.segments()] == [
        (0, "00000000000000000000.log"), (99, "00000000000000000099.log"), (1234, "00000000000000001234.log"),
    ]
    assert [(s.end_offset, s.epoch) for s in log_dir.snapshots()] == [(500, 1), (1000, 2)]
    assert log_dir.quorum_state() is None
    assert sorted(os.listdir(part)) == before  # read-only: nothing created


def test_accepts_the_parent_log_dir(tmp_path: Path) -> None:
    part = make_metadata_dir(tmp_path / "meta")
    assert MetadataLogDir(tmp_path / "meta").path == part
    assert len(MetadataLogDir(str(tmp_path / "meta")).segments()) == 3


def test_rejects_other_directories(tmp_path: Path) -> None:
    (tmp_path / "orders-0").mkdir()
    for bad in (tmp_path, tmp_path / "orders-0", tmp_path / "missing"):
        with pytest.raises(NotAMetadataLogDirError) as info:
            MetadataLogDir(bad)
        assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_quorum_state_versions(tmp_path: Path) -> None:
    part = make_metadata_dir(tmp_path / "meta")
    state = {"clusterId": "", "leaderId": 1, "leaderEpoch": 5, "votedId": -1, "appliedOffset": 0,
             "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}
    (part / "quorum-state").write_text(json.dumps(state))
    qs = MetadataLogDir(part).quorum_state()
    assert qs is not None
    assert (qs.leader_id, qs.leader_epoch, qs.voted_id, qs.voters, qs.data_version) == (1, 5, -1, (1, 2, 3), 0)

    state = {"leaderId": 3000, "leaderEpoch": 9, "votedId": 3000, "votedDirectoryId": TOPIC_ID, "data_version": 1}
    (part / "quorum-state").write_text(json.dumps(state))
    qs = MetadataLogDir(part).quorum_state()
    assert qs is not None
    assert (qs.leader_id, qs.leader_epoch, qs.voters, qs.voted_directory_id) == (3000, 9, None, TOPIC_ID)

    (part / "quorum-state").write_text("{not json")
    with pytest.raises(KraftLogError):
        MetadataLogDir(part).quorum_state()


def test_batch_header_layout_matches_the_documented_offsets() -> None:
    blob = batch(7, [record(0, b"x")], leader_epoch=4)
    assert struct.unpack_from(">q", blob, 0)[0] == 7
    assert struct.unpack_from(">i", blob, 8)[0] == len(blob) - 12
    assert struct.unpack_from(">i", blob, 12)[0] == 4
    assert blob[16] == 2
    assert struct.unpack_from(">I", blob, 17)[0] == crc32c(blob[21:])
