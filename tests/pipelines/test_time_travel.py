"""Time travel replay (pipelines.time_travel.state_at) on literal metadata: no Spark needed."""

from __future__ import annotations

from typing import Any

import pytest

from pipelines.time_travel import state_at


def _ev(zxid: int, type_: str, event_id: str, **kw: Any) -> dict[str, Any]:
    return {"zxid": zxid, "type": type_, "event_id": event_id, "event_time": None, "topic": None,
            "partition": None, "broker": None, "controller_id": None, "controller_epoch": None, **kw}


@pytest.mark.parametrize("topic_event_id", ["a", "z"])  # before and after the partition deletes in id order
def test_topic_deleted_in_one_multi_with_its_partitions_is_gone(topic_event_id: str) -> None:
    meta = [
        _ev(1, "PARTITION_ASSIGNED", "p", topic="scratch", partition=0, replicas=[1, 2]),
        _ev(2, "PARTITION_STATE_WRITTEN", "w", topic="scratch", partition=0, leader=1, leader_epoch=0, isr=[1, 2]),
        _ev(3, "TOPIC_DELETED", topic_event_id, topic="scratch"),
        _ev(3, "PARTITION_STATE_DELETED", "m", topic="scratch", partition=0),
        _ev(3, "OTHER", "n", topic="scratch", partition=0),
    ]
    assert [p["partition"] for p in state_at(meta, [], zxid=2)["partitions"]] == [0]
    assert state_at(meta, [], zxid=3)["partitions"] == []


def test_controller_and_brokers_as_of_a_zxid() -> None:
    meta = [
        _ev(1, "BROKER_REGISTERED", "b1", broker=1), _ev(2, "BROKER_REGISTERED", "b2", broker=2),
        _ev(3, "CONTROLLER_ELECTED", "c1", controller_id=1), _ev(4, "CONTROLLER_EPOCH_CHANGED", "e1", controller_epoch=1),
        _ev(5, "BROKER_DEREGISTERED", "d1", broker=1), _ev(5, "CONTROLLER_RESIGNED", "r1"),
    ]
    at4 = state_at(meta, [], zxid=4)
    assert (at4["controller_id"], at4["controller_epoch"], at4["live_brokers"]) == (1, 1, [1, 2])
    at5 = state_at(meta, [], zxid=5)
    assert (at5["controller_id"], at5["live_brokers"]) == (None, [2])
