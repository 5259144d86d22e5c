"""Controller findings that join sources: SPLIT_BRAIN from zombie writes (zk terms) and NO_ACTIVE_CONTROLLER
of the KAFKA-13407 shape (/controller names a broker that resigned in the logs and does not react).

Pure rules first (no Spark), then rebuild. (The streaming monitor in micro-batches, the log records arriving
before or after the ZooKeeper rows, ends with the rebuild's tables: tests/e2e/test_differential.py.)
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pyarrow as pa

from engine.local_run import run_local
from lakehouse.spark_schema import spark_arrow_schema
from models.ids import event_id
from pipelines.controller import no_active_controller, resign_marks, zk_split_brain
from services.metadata_events import read_any
from tests.history import T0, History, decision, split_brain_history, split_brain_log


# --- the rules, on literal rows -------------------------------------------------------------------------
def _decisions(*rows: dict[str, Any]) -> pa.Table:
    return pa.Table.from_pylist([{c: r.get(c) for c in spark_arrow_schema("controller_decisions").names} for r in rows],
                                schema=spark_arrow_schema("controller_decisions"))


def _term(cid: int, epoch: int, start: int, end: int | None = None) -> dict[str, Any]:
    return {"controller_id": cid, "controller_epoch": epoch, "start_zxid": start, "end_zxid": end,
            "start_time": T0 + timedelta(seconds=start), "end_time": None if end is None else T0 + timedelta(seconds=end)}


def _churn(zxid: int, broker: int, kind: str = "BROKER_DEREGISTERED") -> dict[str, Any]:
    return {"type": kind, "zxid": zxid, "broker": broker, "event_time": T0 + timedelta(seconds=zxid),
            "event_id": event_id("test", "churn", zxid)}


RESIGN = decision(6, "CONTROLLER_RESIGNED", controller_id=1, broker_id=1)


def _found(*decs: dict[str, Any], terms: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    marks = resign_marks(_decisions(*decs))
    return no_active_controller("test", marks, terms or [_term(1, 1, 4)], [_churn(8, 3), _churn(9, 2)])


def test_resigned_registered_controller_without_reaction_is_one_finding() -> None:
    got = _found(decision(5, "CONTROLLER_READY", controller_id=1, controller_epoch=1), RESIGN)
    assert len(got) == 1  # one per resignation, at the first broker change
    row = got[0]
    assert (row["kind"], row["controller_id"], row["controller_epoch"], row["broker"], row["zxid"]) == (
        "NO_ACTIVE_CONTROLLER", 1, 1, 3, 8)
    assert row["evidence"] == [RESIGN["event_id"], event_id("test", "churn", 8)]
    assert "KAFKA-13407" in json.loads(row["details"])["reason"]


def test_no_finding_when_the_controller_serves_again_or_reacts() -> None:
    ready_again = decision(7, "CONTROLLER_READY", controller_id=1, controller_epoch=1)
    reacts = decision(8.5, "BROKER_CHANGE", controller_id=1, controller_epoch=1)
    reacts_late = decision(60, "BROKER_CHANGE", controller_id=1, controller_epoch=1)
    assert _found(RESIGN, ready_again) == []  # a normal failover: Ready to serve after the resignation
    assert _found(RESIGN, reacts) == []  # the churn was handled
    assert len(_found(RESIGN, reacts_late)) == 1  # 50 s without a controller is not a reaction
    # resigned before its current term began (then re-elected): not the KAFKA-13407 shape
    assert _found(RESIGN, terms=[_term(1, 1, 2, 5), _term(1, 2, 7)]) == []
    # /controller moved on: the resigned broker is not named by ZooKeeper any more
    assert _found(RESIGN, terms=[_term(1, 1, 4, 7), _term(2, 2, 7)]) == []
    # a line attributed to another controller, or not acting (moved), does not count as X acting
    assert len(_found(RESIGN, decision(7, "CONTROLLER_MOVED", controller_id=1),
                      decision(7.5, "BROKER_CHANGE", controller_id=2))) == 1


def test_resign_marks_are_the_same_whichever_increment_the_lines_arrive_in() -> None:
    lines = [decision(5, "CONTROLLER_READY", controller_id=1), RESIGN,
             decision(9, "BROKER_CHANGE", controller_id=1), decision(7, "REQUEST_SENT", controller_id=1),
             decision(10, "CONTROLLER_RESIGNED", broker_id=2, source_file="broker-2/controller.log")]
    whole = resign_marks(_decisions(*lines))
    assert [(m["controller_id"], m["next_activity"]) for m in whole] == [
        (1, T0 + timedelta(seconds=7)), (2, None)]
    for cut in range(len(lines) + 1):
        assert resign_marks(_decisions(*lines[cut:]), resign_marks(_decisions(*lines[:cut]))) == whole, cut


def _zombie(zxid: int, old: int, new: int) -> dict[str, Any]:
    """A partition-state write the zombie-write rule flags (the enriched write's columns zk_split_brain reads)."""
    return {"event_id": f"w{zxid}", "zxid": zxid, "event_time": T0, "topic": "t", "partition": 0,
            "controller_epoch": old, "cur_controller_epoch": new}


def test_zk_split_brain_one_row_per_epoch_pair_at_its_first_write() -> None:
    tenure = [_term(1, 1, 1, 5), _term(2, 2, 5, 9), _term(1, 3, 9)]
    got = zk_split_brain("test", [_zombie(12, 1, 3), _zombie(8, 1, 2), _zombie(10, 1, 2)], tenure)
    assert [(r["controller_id"], r["controller_epoch"], r["zxid"], r["evidence"]) for r in got] == [
        (1, 1, 8, ["zk-term:1:1", "zk-term:2:2", "w8"])]  # (1, 3): the same broker, not two controllers
    assert json.loads(got[0]["details"])["source"] == "zk"
    # the id names the pair, not the write: a later increment's write of the pair is the same finding
    assert zk_split_brain("test", [_zombie(10, 1, 2)], tenure)[0]["anomaly_id"] == got[0]["anomaly_id"]
    assert zk_split_brain("test", [_zombie(8, 7, 2)], tenure) == []  # epoch 7's controller is unknown


# --- through the engine -----------------------------------------------------------------------------------
def _rows(lake: Any, table: str) -> list[dict[str, Any]]:
    return read_any(lake, table).to_pylist()  # a stored table, or the metadata_events view


def test_rebuild_finds_zk_split_brain_and_the_resigned_controller(lake: Any) -> None:
    lake.append("znode_events", split_brain_history().rows, writer_id="t", batch_seq=1)
    lake.append("controller_decisions", split_brain_log(), writer_id="d", batch_seq=1)
    run_local(lake)
    got = {(r["kind"], r["zxid"]): r for r in _rows(lake, "anomalies")}
    assert sorted(got) == [("NO_ACTIVE_CONTROLLER", 14), ("SPLIT_BRAIN", 12), ("ZOMBIE_CONTROLLER_WRITE", 12),
                           ("ZOMBIE_CONTROLLER_WRITE", 13)]
    split = got[("SPLIT_BRAIN", 12)]
    assert (split["controller_id"], split["controller_epoch"]) == (1, 1)
    write = [r["event_id"] for r in _rows(lake, "metadata_events") if r["zxid"] == 12]
    assert split["evidence"] == ["zk-term:1:1", "zk-term:2:2", *write] and len(write) == 1
    assert json.loads(split["details"])["other_id"] == 2
    gone = got[("NO_ACTIVE_CONTROLLER", 14)]
    assert (gone["controller_id"], gone["broker"]) == (2, 3)
    churn = [r["event_id"] for r in _rows(lake, "metadata_events") if r["zxid"] == 14]
    assert gone["evidence"] == [split_brain_log()[1]["event_id"], *churn] and len(churn) == 1


def test_rebuild_of_a_normal_failover_has_no_controller_finding(lake: Any) -> None:
    h = History()
    h.broker(1).broker(2).broker(3).controller(1, 1)
    h.topic("t", {0: [1, 2, 3]}).state("t", 0, 1, 0, 1, [1, 2, 3], op="CREATE")
    h.add("/controller", "DELETE")  # zxid 8: 1 resigns and lets go of /controller
    h.controller(2, 2)
    h.state("t", 0, 2, 1, 2, [2, 3])  # the successor moves leadership at its own epoch: no zombie
    h.broker(1, op="DELETE").broker(1)
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    lake.append("controller_decisions", [
        decision(5, "CONTROLLER_READY", controller_id=1, controller_epoch=1),
        decision(7.5, "CONTROLLER_RESIGNED", controller_id=1),
        decision(10.5, "CONTROLLER_READY", controller_id=2, controller_epoch=2, source_file="b2/controller.log"),
        decision(11.5, "CONTROLLER_RESIGNED", controller_id=2, source_file="b2/controller.log"),  # ...and back:
        decision(11.8, "CONTROLLER_READY", controller_id=2, controller_epoch=2, source_file="b2/controller.log"),
    ], writer_id="d", batch_seq=1)
    run_local(lake)
    assert _rows(lake, "anomalies") == []
