"""Findings with an end (issue 31, item 8): OFFLINE_PARTITION, LEADER_NOT_IN_ISR, ISR_NOT_SUBSET_OF_REPLICAS and
NO_ACTIVE_CONTROLLER are episodes: a start row at once, an end row with the interval when it ends, an
OFFLINE_PARTITION that ended within ``pipeline.offline_blip_ms`` a blip. Through the driver-side runner (the
same steps as the Spark query), in one batch and cut into many."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from engine.local_run import run_local
from lakehouse import Lake
from models.anomalies import BLIP_SEVERITY, AnomalyKind, describe
from models.ids import episode_end_id
from tests.history import History

K = AnomalyKind


def _offline_history() -> History:
    """Three partitions go offline at once: one is led again 0.3 s later (a failover's blip), one 30 s later
    (an outage), one never (still open when the history ends)."""
    h = History()
    h.broker(1).broker(2).controller(1, 1)  # zxid 1-4
    h.topic("blip", {0: [1, 2]}).topic("outage", {0: [1, 2]}).topic("open", {0: [1, 2]})  # 5-7
    for topic in ("blip", "outage", "open"):
        h.state(topic, 0, 1, 0, 1, [1, 2], op="CREATE")  # 8-10
    h.state("blip", 0, -1, 1, 1, [1], seconds=20.0)  # 11
    h.state("outage", 0, -1, 1, 1, [1], seconds=20.1)  # 12
    h.state("open", 0, -1, 1, 1, [1], seconds=20.2)  # 13
    h.state("blip", 0, 2, 2, 1, [2], seconds=20.3)  # 14: led again 300 ms after
    h.state("outage", 0, -1, 1, 1, [2], seconds=30.0)  # 15: still offline (an ISR change): no second start
    h.state("outage", 0, 2, 2, 1, [2], seconds=50.1)  # 16: led again 30 s after
    return h


def _rebuilt(lake: Lake, h: History, **options: Any) -> list[dict[str, Any]]:
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    run_local(lake, **options)
    return sorted(lake.read_arrow("anomalies").to_pylist(), key=lambda r: (r["zxid"] or 0, r["ended_zxid"] or 0))


def _of(rows: list[dict[str, Any]], kind: str, topic: str | None = None) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == kind and (topic is None or r["topic"] == topic)]


def test_an_offline_partition_has_a_start_and_an_end_and_a_quick_one_is_a_blip(lake: Lake) -> None:
    rows = _rebuilt(lake, _offline_history())
    blip_start, blip_end = _of(rows, K.OFFLINE_PARTITION, "blip")
    assert (blip_start["zxid"], blip_start["severity"], blip_start["ended_zxid"]) == (11, "error", None)
    assert blip_start["episode_id"] == blip_start["anomaly_id"]
    assert blip_end["anomaly_id"] == episode_end_id(blip_start["anomaly_id"])
    assert blip_end["episode_id"] == blip_start["anomaly_id"]
    assert (blip_end["zxid"], blip_end["ended_zxid"], blip_end["duration_ms"]) == (11, 14, 300)
    assert blip_end["ended_at"] - blip_end["event_time"] == timedelta(milliseconds=300)
    assert blip_end["severity"] == BLIP_SEVERITY
    details = json.loads(blip_end["details"])
    assert (details["blip"], details["blip_threshold_ms"], details["leader"]) == (True, 1000, 2)
    assert blip_end["evidence"][-1] == details["end_event"] and blip_end["evidence"][0] == blip_start["evidence"][0]

    outage = _of(rows, K.OFFLINE_PARTITION, "outage")
    assert [r["ended_zxid"] for r in outage] == [None, 16]  # the write at zxid 15 kept it offline: no new start
    assert (outage[1]["duration_ms"], outage[1]["severity"], json.loads(outage[1]["details"])["blip"]) == (
        30_000, "error", False)

    still = _of(rows, K.OFFLINE_PARTITION, "open")
    assert [(r["zxid"], r["ended_zxid"]) for r in still] == [(13, None)]


def test_the_blip_threshold_is_a_setting(lake: Lake) -> None:
    rows = _rebuilt(lake, _offline_history(), offline_blip=timedelta(milliseconds=100))
    end = _of(rows, K.OFFLINE_PARTITION, "blip")[1]
    assert (end["severity"], json.loads(end["details"])["blip"]) == ("error", False)


def _isr_history() -> History:
    """Leader 1 outside the ISR for three writes, fixed, broken again; an ISR member that is not a replica until
    the topic is deleted."""
    h = History()
    h.broker(1).broker(2).broker(3).controller(1, 1)  # zxid 1-5
    h.topic("t", {0: [1, 2]}).topic("gone", {0: [1, 2]})  # 6-7
    h.state("t", 0, 1, 0, 1, [2], op="CREATE")  # 8: leader 1 not in ISR [2]
    h.state("t", 0, 1, 0, 1, [2, 3])  # 9: still (and 3 is not a replica: its own episode)
    h.state("t", 0, 1, 0, 1, [2])  # 10: still; ISR inside the replicas again
    h.state("t", 0, 1, 0, 1, [1, 2])  # 11: fixed
    h.state("t", 0, 1, 0, 1, [2])  # 12: broken again: a second episode
    h.state("gone", 0, 1, 0, 1, [1, 3], op="CREATE")  # 13: 3 is not assigned
    h.add("/admin/delete_topics/gone", "CREATE")  # 14
    h.add("/brokers/topics/gone/partitions/0/state", "DELETE")  # 15
    h.add("/brokers/topics/gone/partitions/0", "DELETE").add("/brokers/topics/gone/partitions", "DELETE")
    h.add("/brokers/topics/gone", "DELETE").add("/admin/delete_topics/gone", "DELETE")
    return h


def test_isr_findings_are_episodes_from_the_first_bad_write_to_the_first_good_one(lake: Lake) -> None:
    rows = _rebuilt(lake, _isr_history())
    not_in_isr = _of(rows, K.LEADER_NOT_IN_ISR, "t")
    assert [(r["zxid"], r["ended_zxid"]) for r in not_in_isr] == [(8, None), (8, 11), (12, None)]
    assert not_in_isr[1]["duration_ms"] == 3000 and not_in_isr[1]["severity"] == "error"
    outside = _of(rows, K.ISR_NOT_SUBSET_OF_REPLICAS)
    assert [(r["topic"], r["zxid"], r["ended_zxid"]) for r in outside] == [
        ("t", 9, None), ("t", 9, 10), ("gone", 13, None), ("gone", 13, outside[3]["ended_zxid"])]
    assert outside[3]["ended_zxid"] is not None and outside[3]["ended_zxid"] > 13
    assert json.loads(outside[3]["details"])["ended_by"] == "topic deletion"


def _no_controller_history() -> History:
    """/controller gone for 100 s (a broker change sees it), then broker 2 elected."""
    h = History()
    h.broker(1).broker(2).controller(1, 1)  # zxid 1-4
    h.add("/controller", "DELETE", seconds=10)  # 5
    h.broker(1, op="SET")  # 6, at 6 s: within the 30 s
    h.rows[-1]["txn_time"] = h.rows[-1]["observed_at"] = h.rows[-2]["txn_time"] + timedelta(seconds=100)
    h.controller(2, 2, seconds=130)  # 7-8
    return h


def test_no_active_controller_ends_at_the_next_election(lake: Lake) -> None:
    rows = _of(_rebuilt(lake, _no_controller_history()), K.NO_ACTIVE_CONTROLLER)
    assert len(rows) == 2
    start, end = rows
    assert start["episode_id"] == start["anomaly_id"] and start["ended_zxid"] is None
    assert (end["episode_id"], end["ended_zxid"], end["duration_ms"]) == (start["anomaly_id"], 7, 120_000)
    assert end["severity"] == "critical"
    assert json.loads(end["details"])["controller_id"] == 2
    assert "lasted 2 min 0 s" in describe(end) and "started" in describe(start)


def _findings(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in rows)  # every column


def test_any_cut_into_batches_gives_the_same_rows(tmp_path: Any) -> None:
    """The open episodes are carried in the bucket's state: an end found batches after its start."""
    for history in (_offline_history, _isr_history, _no_controller_history):
        whole = Lake(str(tmp_path / f"{history.__name__}-whole"), cluster="test")
        cut = Lake(str(tmp_path / f"{history.__name__}-cut"), cluster="test")
        assert _findings(_rebuilt(whole, history())) == _findings(_rebuilt(cut, history(), batch_rows=1))
