"""The controller rules on literal rows: terms and epoch regressions from the ZooKeeper timeline
(``pipelines.controller.replay``), SPLIT_BRAIN from the terms the logs show (``detect_split_brain``)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from collectors.log_parser import parse_lines
from lakehouse.spark_schema import spark_arrow_schema
from models.anomalies import AnomalyKind, SplitBrainReason
from models.events import MetadataEvent, MetadataEventType, TenureSource, ZnodeChange, ZnodeOp
from models.ids import event_id
from models.znode_codec import decode
from pipelines.controller import merge_log_terms, replay
from pipelines.detectors import detect_split_brain
from simulator.payloads import encode_controller, encode_controller_epoch
from tests.history import T0

T = MetadataEventType


def _row(zxid: int, type_: T, **cols: Any) -> dict[str, Any]:
    return {"zxid": zxid, "type": str(type_), "event_time": T0 + timedelta(seconds=zxid),
            "event_id": event_id("test", str(type_), zxid), **cols}


def _rows(events: list[MetadataEvent]) -> list[dict[str, Any]]:
    return [{**dataclasses.asdict(e), "type": str(e.type), "event_id": event_id("test", str(e.type), e.zxid, e.path)}
            for e in events]


def _terms(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(t["controller_id"], t["controller_epoch"], t["start_zxid"], t["end_zxid"], t["source"])
            for t in replay("test", events).tenure]


# --- terms ---------------------------------------------------------------------------------------------
def test_a_term_takes_the_epoch_written_after_the_election_up_to_2_0() -> None:
    events = [_row(10, T.CONTROLLER_ELECTED, controller_id=1), _row(11, T.CONTROLLER_EPOCH_CHANGED, controller_epoch=1),
              _row(20, T.CONTROLLER_RESIGNED), _row(21, T.CONTROLLER_ELECTED, controller_id=2),
              _row(23, T.CONTROLLER_EPOCH_CHANGED, controller_epoch=2)]
    zk = str(TenureSource.ZK)
    assert _terms(events) == [(1, 1, 10, 20, zk), (2, 2, 21, None, zk)]


def test_a_term_takes_the_epoch_of_its_own_multi_from_2_1_in_either_order() -> None:
    changes = [ZnodeChange(30, "/controller_epoch", ZnodeOp.SET, encode_controller_epoch(5)),
               ZnodeChange(30, "/controller", ZnodeOp.CREATE, encode_controller(3, 1, "2.8")),
               ZnodeChange(40, "/controller", ZnodeOp.DELETE),
               ZnodeChange(41, "/controller", ZnodeOp.CREATE, encode_controller(1, 2, "2.8")),
               ZnodeChange(41, "/controller_epoch", ZnodeOp.SET, encode_controller_epoch(6))]
    events = _rows([e for c in changes for e in decode(c)])
    zk = str(TenureSource.ZK)
    assert _terms(events) == _terms(events[::-1]) == [(3, 5, 30, 40, zk), (1, 6, 41, None, zk)]


def test_an_election_without_a_seen_resignation_closes_the_previous_term() -> None:
    events = [_row(1, T.CONTROLLER_ELECTED, controller_id=1), _row(1, T.CONTROLLER_EPOCH_CHANGED, controller_epoch=1),
              _row(9, T.CONTROLLER_ELECTED, controller_id=2), _row(9, T.CONTROLLER_EPOCH_CHANGED, controller_epoch=2),
              _row(12, T.PARTITION_STATE_WRITTEN, topic="t", partition=0)]
    assert [t[:4] for t in _terms(events)] == [(1, 1, 1, 9), (2, 2, 9, None)]


def test_the_controller_epoch_going_back_is_a_regression_and_a_jump_is_not() -> None:
    events = [_row(1, T.CONTROLLER_EPOCH_CHANGED, controller_epoch=3),
              _row(2, T.CONTROLLER_EPOCH_CHANGED, controller_epoch=5),  # missed writes: a gap, not a regression
              _row(3, T.CONTROLLER_EPOCH_CHANGED, controller_epoch=4)]
    found = replay("test", events).anomalies
    assert [(a["kind"], a["zxid"], json.loads(a["details"])) for a in found] == [
        (AnomalyKind.CONTROLLER_EPOCH_REGRESSION, 3, {"epoch": 4, "previous_max": 5})]


# --- SPLIT_BRAIN from the logs ---------------------------------------------------------------------------
def _log_terms(*terms: tuple[int, int, int, int]) -> pa.Table:
    """(controller id, epoch, first, last second it acted) as controller_tenure rows with source 'logs'."""
    schema = spark_arrow_schema("controller_tenure")
    return pa.Table.from_pylist([{"cluster": "test", "controller_id": cid, "controller_epoch": epoch, "start_zxid": None,
                                  "end_zxid": None, "start_time": T0 + timedelta(seconds=first),
                                  "end_time": T0 + timedelta(seconds=last), "source": str(TenureSource.LOGS)}
                                 for cid, epoch, first, last in terms], schema=schema)


def _split(terms: pa.Table) -> list[tuple[Any, ...]]:
    return [(json.loads(d)["reason"], json.loads(d)["controller_id"], json.loads(d)["other_id"], t)
            for d, t in zip(detect_split_brain(terms)["details"].to_pylist(),
                            detect_split_brain(terms)["event_time"].to_pylist(), strict=True)]


def test_an_older_epoch_acting_after_a_newer_one_began_is_split_brain() -> None:
    # controller 1 (epoch 4) keeps logging decisions after controller 2 (epoch 5) began: the zombie shape
    found = detect_split_brain(_log_terms((1, 4, 100, 120), (2, 5, 110, 130)))
    assert _split(_log_terms((1, 4, 100, 120), (2, 5, 110, 130))) == [
        (SplitBrainReason.OVERLAPPING_TERMS, 1, 2, T0 + timedelta(seconds=110))]
    assert found["evidence"].to_pylist() == [["term:1:4", "term:2:5"]]
    assert found["kind"].to_pylist() == [AnomalyKind.SPLIT_BRAIN] and found["severity"].to_pylist() == ["critical"]


def test_two_ids_claiming_one_epoch_are_split_brain_even_apart_in_time() -> None:
    assert _split(_log_terms((1, 7, 1, 5), (2, 7, 50, 60))) == [
        (SplitBrainReason.SAME_EPOCH, 1, 2, T0 + timedelta(seconds=50))]


def test_a_clean_failover_and_one_controller_across_epochs_are_not_split_brain() -> None:
    assert detect_split_brain(_log_terms((1, 4, 10, 20), (2, 5, 30, 40))).num_rows == 0
    assert detect_split_brain(_log_terms((1, 4, 10, 20), (1, 5, 15, 40))).num_rows == 0  # re-elected itself


def test_each_split_brain_keeps_its_id_as_the_terms_grow() -> None:
    """The monitor re-runs the rule on terms whose last-seen time moves: the anomaly id must not."""
    first = detect_split_brain(_log_terms((1, 7, 1, 5), (2, 7, 50, 60)))
    later = detect_split_brain(_log_terms((1, 7, 1, 90), (2, 7, 50, 200)))
    assert first["anomaly_id"].to_pylist() == later["anomaly_id"].to_pylist()


# the end of a controlled shutdown of controller 3 (epoch 3) on Kafka 3.9: broker 1 is elected (epoch 4) while
# broker 2 still applies the UpdateMetadata request controller 3 sent before it resigned
_HANDOVER = """\
[2026-11-26 19:59:27,910] INFO [Controller id=3 epoch=3] Sending UpdateMetadata request to brokers HashSet(1, 2) for 3 partitions (state.change.logger)
[2026-11-26 19:59:27,990] INFO [Controller id=3] Resigned (kafka.controller.KafkaController)
[2026-11-26 19:59:28,059] INFO [Controller id=1] 1 successfully elected as the controller. Epoch incremented to 4 and epoch zk version is now 4 (kafka.controller.KafkaController)
[2026-11-26 19:59:28,120] INFO [Controller id=1 epoch=4] Sending UpdateMetadata request to brokers HashSet(1, 2) for 0 partitions (state.change.logger)
[2026-11-26 19:59:28,272] INFO [Broker id=2] Add 3 partitions and deleted 0 partitions from metadata cache in response to UpdateMetadata request sent by controller 3 epoch 3 with correlation id 41 (state.change.logger)
[2026-11-26 19:59:28,300] INFO [Controller id=1 epoch=4] Sending UpdateMetadata request to brokers HashSet(1, 2) for 3 partitions (state.change.logger)
"""


def _parsed_terms(text: str) -> pa.Table:
    records, rejected, _ = parse_lines(text.splitlines())
    assert not rejected
    schema = spark_arrow_schema("controller_decisions")
    rows = [{c: str(getattr(r, c)) if c == "kind" else getattr(r, c, None) for c in schema.names} for r in records]
    return merge_log_terms(_log_terms(), pa.Table.from_pylist(rows, schema=schema), "test")


def test_a_broker_applying_an_old_controller_s_request_late_is_not_that_controller_acting() -> None:
    terms = _parsed_terms(_HANDOVER)
    spans = {(t["controller_id"], t["controller_epoch"]): (t["start_time"].strftime("%S.%f")[:6],
                                                            t["end_time"].strftime("%S.%f")[:6])
             for t in terms.to_pylist()}
    assert spans == {(3, 3): ("27.910", "27.910"), (1, 4): ("28.059", "28.300")}
    assert detect_split_brain(terms).num_rows == 0


def test_the_old_controller_logging_its_own_decision_after_the_handover_is_split_brain() -> None:
    zombie = _HANDOVER + ("[2026-11-26 19:59:28,280] INFO [Controller id=3 epoch=3] Sending UpdateMetadata request to "
                          "brokers HashSet(1, 2) for 1 partitions (state.change.logger)\n")
    assert _split(_parsed_terms(zombie)) == [
        (SplitBrainReason.OVERLAPPING_TERMS, 3, 1, datetime(2026, 11, 26, 19, 59, 28, 59000, tzinfo=UTC))]


def test_a_broker_refusing_the_old_controller_s_request_as_stale_is_split_brain() -> None:
    """The zombie's own log may stop at its session expiry; the broker that refuses its late request shows it
    still sending in the newer term."""
    refused = _HANDOVER + ("[2026-11-26 19:59:28,350] WARN [Broker id=2] Ignoring LeaderAndIsr request from controller 3 "
                           "with correlation id 42 since its controller epoch 3 is old. Latest known controller epoch "
                           "is 4 (state.change.logger)\n")
    assert _split(_parsed_terms(refused)) == [
        (SplitBrainReason.OVERLAPPING_TERMS, 3, 1, datetime(2026, 11, 26, 19, 59, 28, 59000, tzinfo=UTC))]
