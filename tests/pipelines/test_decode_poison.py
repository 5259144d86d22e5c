"""Bronze rows no Kafka writes (deep JSON, ids past 32 bits) go to quarantine with a reason; the rows around
them decode as usual. Before, such a row failed the whole decode, and every rebuild or monitor restart after."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

import models.znode_codec as codec
from lakehouse import arrow_schema
from pipelines.decode import decode_table, split_decoded

T0 = datetime(2026, 3, 1, tzinfo=UTC)
STATE = "/brokers/topics/t/partitions/0/state"
GOOD_STATE = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}'
BIG = 99_999_999_999

POISON = {
    "deep state JSON": (STATE, b"[" * 100_000, "nested too deeply"),
    "deep assignment JSON": ("/brokers/topics/t", b'{"version":1,"partitions":' + b"[" * 100_000, "nested too deeply"),
    "broker id in the path": (f"/brokers/ids/{BIG}", b'{"version":4,"host":"h","port":9092,"jmx_port":-1,'
                              b'"endpoints":["PLAINTEXT://h:9092"],"timestamp":"1"}', "broker"),
    "partition in the path": (f"/brokers/topics/t/partitions/{BIG}/state", GOOD_STATE, "partition"),
    "leader": (STATE, GOOD_STATE.replace(b'"leader":1', f'"leader":{BIG}'.encode()), "32-bit"),
    "controller epoch": ("/controller_epoch", str(BIG).encode(), "controller_epoch"),
    "controller id": ("/controller", f'{{"version":1,"brokerid":{BIG},"timestamp":"1"}}'.encode(), "controller_id"),
    "assigned partition": ("/brokers/topics/t", f'{{"version":1,"partitions":{{"{BIG}":[1]}}}}'.encode(), "32-bit"),
    "reassigned partition": ("/admin/reassign_partitions", f'{{"version":1,"partitions":[{{"topic":"t",'
                             f'"partition":{BIG},"replicas":[1]}}]}}'.encode(), "partition"),
    "ISR notification": ("/isr_change_notification/isr_change_0000000001",
                         f'{{"version":1,"partitions":[{{"topic":"t","partition":{BIG}}}]}}'.encode(), "partition"),
}


def _bronze(path: str, data: bytes) -> pa.Table:
    """A good state write, the given row, another good state write (zxids 1, 2, 3)."""
    rows = [(1, STATE, GOOD_STATE), (2, path, data), (3, STATE, GOOD_STATE.replace(b'"leader_epoch":0',
                                                                                   b'"leader_epoch":1'))]
    return pa.Table.from_pylist([
        {"cluster": "c", "zxid": z, "path": p, "op": "SET", "data": d, "version": z, "source": "txnlog",
         "observed_at": T0, "event_id": f"e{z}"} for z, p, d in rows], schema=arrow_schema("znode_events"))


@pytest.mark.parametrize("case", sorted(POISON))
def test_a_poison_row_is_quarantined_and_its_neighbours_decode(case: str) -> None:
    path, data, reason = POISON[case]
    meta, quarantine = split_decoded(decode_table(_bronze(path, data)))
    assert sorted(meta["zxid"].to_pylist()) == [1, 3]
    assert quarantine.num_rows == 1
    assert reason in quarantine["reason"][0].as_py()
    assert quarantine["raw"][0].as_py().startswith(data.decode()[:20])


def test_what_the_codec_lets_through_and_arrow_refuses_is_quarantined_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # the second line of defence: without the codec's range check, Arrow's own refusal quarantines the row
    monkeypatch.setattr(codec, "int32_problem", lambda values: None)
    path, data, _ = POISON["controller epoch"]
    meta, quarantine = split_decoded(decode_table(_bronze(path, data)))
    assert sorted(meta["zxid"].to_pylist()) == [1, 3]
    assert quarantine.num_rows == 1
    assert quarantine["reason"][0].as_py().startswith("does not fit metadata_events:")
