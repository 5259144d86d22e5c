"""The vectorised decodes (partition state writes, topic assignments) equal the row-wise codec path on every row
they take."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.decode import (
    _arrow_out_schema,
    _decode_batches,
    decode_row,
    fast_state_writes,
    fast_topic_assignments,
)
from simulator.payloads import encode_partition_state, encode_topic_assignment

BRONZE = pa.schema([
    ("cluster", pa.string()), ("zxid", pa.int64()), ("path", pa.string()), ("op", pa.string()),
    ("data", pa.binary()), ("version", pa.int32()), ("czxid", pa.int64()), ("mzxid", pa.int64()),
    ("pzxid", pa.int64()), ("ephemeral_owner", pa.int64()), ("session_id", pa.int64()),
    ("txn_time", pa.timestamp("us", tz="UTC")), ("source", pa.string()), ("missed_versions", pa.int32()),
    ("detail", pa.string()), ("observed_at", pa.timestamp("us", tz="UTC")), ("event_id", pa.string()),
])
T0 = datetime(2026, 1, 1, tzinfo=UTC)

paths = st.sampled_from([
    "/brokers/topics/t/partitions/0/state", "/brokers/topics/orders.v2/partitions/17/state",
    "/brokers/topics/t/partitions/0", "/brokers/topics/t", "/controller",
    "/brokers/topics/t/partitions/0123456789/state", "/brokers/topics/t/partitions/٣/state",
    "/brokers/topics/t/partitions/1/state\n", "/brokers/topics/é/partitions/2/state",
    "/brokers/topics/orders.v2", "/brokers/topics/t\n", "/brokers/topics/é", "/brokers/topics/a/b",
])
valid = st.builds(
    lambda le, ep, ce, isr, v, lrs: encode_partition_state(le, ep, ce, isr, v, lrs if v == "3.8" else None),
    st.integers(-1, 5), st.integers(0, 9), st.integers(0, 9), st.lists(st.integers(0, 5), max_size=4),
    st.sampled_from(["1.1", "2.4", "3.8"]), st.sampled_from([None, 1]),
)
replica_lists = st.lists(st.integers(0, 5), max_size=3)
assignments = st.builds(
    lambda parts, moving, v, tid: encode_topic_assignment(
        parts, v, adding={p: r for p, r in moving.items() if p in parts} if v != "2.0" else None,
        removing={p: r[:1] for p, r in moving.items() if p in parts} if v != "2.0" else None, topic_id=tid),
    st.dictionaries(st.integers(0, 40), replica_lists, max_size=6), st.dictionaries(st.integers(0, 40), replica_lists,
                                                                                     max_size=2),
    st.sampled_from(["2.0", "2.4", "3.8"]), st.sampled_from([None, "AAAAAAAAAAAAAAAAAAAAAA"]),
)
hostile_topics = st.sampled_from([
    b'{"version":1,"partitions":{"0":[1,2],"x":[1]}}', b'{"version":1,"partitions":{"0":[1,true]}}',
    b'{"version":1,"partitions":{"0":[1,99999999999]}}', b'{"version":1,"partitions":{"\u0663":[1]}}',
    b'{"version":4,"partitions":{"0":[1]}}', b'{"version":1,"partitions":[]}', b'{"version":1,"partitions":{}}',
    b'{"version":2,"partitions":{"0":[1]},"adding_replicas":{"0":"1"}}',
])
hostile = st.sampled_from([
    b"", b"{", b"[]", b"null", b'{"version":1}', b'{"controller_epoch":1,"leader":-2,"version":1,"leader_epoch":0,"isr":[]}',
    b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1],"isr":[2]}',
    b'{"controller_epoch":1,"leader":true,"version":1,"leader_epoch":0,"isr":[1]}',
    b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1.0]}',
    b'{"controller_epoch":1,"leader":1,"version":2,"leader_epoch":0,"isr":[1]}',
    b'{"controller_epoch":1,"leader":99999999999,"version":1,"leader_epoch":0,"isr":[1]}',
    b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":NaN,"isr":[1]}',
    b'\xff\xfe', b' {"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]} ',
])


@st.composite
def bronze_batches(draw: Any) -> pa.RecordBatch:
    rows = []
    for i in range(draw(st.integers(1, 25))):
        rows.append({
            "cluster": "c", "zxid": 100 + i, "path": draw(paths),
            "op": draw(st.sampled_from(["CREATE", "SET", "SET", "DELETE", "MULTI_FAILED"])),
            "data": draw(st.one_of(valid, valid, assignments, assignments, hostile, hostile_topics, st.none(),
                                   st.binary(max_size=12))),
            "version": draw(st.none() | st.integers(0, 9)), "czxid": 7, "mzxid": 100 + i, "pzxid": None,
            "ephemeral_owner": None, "session_id": None, "txn_time": draw(st.sampled_from([None, T0])),
            "source": "txnlog", "missed_versions": None, "detail": None, "observed_at": T0, "event_id": f"b{i}",
        })
    return pa.RecordBatch.from_pylist(rows, schema=BRONZE)


def _canon(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted((k, v.timestamp() if isinstance(v, datetime) else v) for k, v in r.items()))
                  for r in rows)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bronze_batches())
def test_fast_and_row_decode_agree(batch: pa.RecordBatch) -> None:
    schema = _arrow_out_schema()
    expected = pa.Table.from_pylist([r for row in batch.to_pylist() for r in decode_row(row)], schema=schema).to_pylist()
    got = pa.Table.from_batches(list(_decode_batches([batch])), schema=schema).to_pylist()
    assert _canon(got) == _canon(expected)


def _batch(changes: list[tuple[int, str, str, bytes | None]]) -> pa.RecordBatch:
    """Bronze txnlog rows of (zxid, path, op, data)."""
    rows = [{f.name: None for f in BRONZE} | {"cluster": "c", "zxid": z, "path": p, "op": op, "data": d,
                                              "source": "txnlog", "observed_at": T0, "event_id": str(z)}
            for z, p, op, d in changes]
    return pa.RecordBatch.from_pylist(rows, schema=BRONZE)


def test_fast_path_takes_valid_state_writes_only() -> None:
    ok = encode_partition_state(1, 0, 1, [1, 2], "2.4")
    batch = _batch([(1, "/brokers/topics/t/partitions/0/state", "CREATE", ok),
                    (2, "/brokers/topics/t/partitions/0/state", "SET", b"{oops"),
                    (3, "/brokers/topics/t/partitions/0/state", "DELETE", None),
                    (4, "/controller", "SET", ok)])
    fast, rest = fast_state_writes(batch, _arrow_out_schema())
    assert fast is not None and fast.column("zxid").to_pylist() == [1]
    assert fast.column("detail").to_pylist() == ['{"created": true}']
    assert rest.column("zxid").to_pylist() == [2, 3, 4]


def test_fast_path_fans_out_valid_topic_assignments_only() -> None:
    ok = encode_topic_assignment({1: [2, 3], 0: [1, 2]}, "2.4", adding={1: [3]})
    batch = _batch([(1, "/brokers/topics/t", "CREATE", ok),
                    (2, "/brokers/topics/t", "SET", b'{"version":1,"partitions":{"0":[1,true]}}'),
                    (3, "/brokers/topics/t", "DELETE", None),
                    (4, "/brokers/topics/t/partitions/0/state", "SET", ok)])
    fast, rest = fast_topic_assignments(batch, _arrow_out_schema())
    assert fast is not None
    assert fast.select(["zxid", "topic", "partition", "replicas", "_seq"]).to_pylist() == [
        {"zxid": 1, "topic": "t", "partition": 0, "replicas": [1, 2], "_seq": 0},
        {"zxid": 1, "topic": "t", "partition": 1, "replicas": [2, 3], "_seq": 1}]
    assert fast.column("detail").to_pylist() == [
        '{"partition_count": 2, "payload_version": 2}',
        '{"adding_replicas": [3], "partition_count": 2, "payload_version": 2}']
    assert rest.column("zxid").to_pylist() == [2, 3, 4]
