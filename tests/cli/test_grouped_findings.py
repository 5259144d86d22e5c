"""What a command prints can be read at a glance (issue 31, item 8): like findings grouped on one line each (kind,
cause, subject, count, first and last time), an episode's start and end as one finding, and a multi-line log
message never breaking the one-line form. `--format json` stays one row per anomaly."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from models.anomalies import describe, describe_group, group_findings
from models.ids import episode_end_id, event_id
from services.alerts import AnomalyAlerter
from services.sanitize import terminal_safe
from zkledger.cli import main

T0 = datetime(2026, 11, 22, tzinfo=UTC)


def _failed_change(i: int, topic: str = "rf3") -> dict[str, Any]:
    """A broker's shutdown: the controller logs one failed state change per partition, its message two lines."""
    message = (f"[Controller id=1 epoch=3] Controller 1 epoch 3 failed to change state for partition {topic}-{i} "
               f"from OnlinePartition to OfflinePartition\nk")
    return {"cluster": "local", "anomaly_id": event_id("fsc", topic, i), "kind": "FAILED_STATE_CHANGE",
            "severity": "warning", "event_time": T0 + timedelta(seconds=i), "zxid": None, "detected_at": T0,
            "topic": topic, "partition": i, "controller_id": 1, "controller_epoch": 3, "evidence": [f"e{i}"],
            "details": json.dumps({"kind": "PARTITION_TRANSITION_FAILED", "from_state": "OnlinePartition",
                                   "to_state": "OfflinePartition", "message": message})}


def _offline_episode(blip: bool) -> list[dict[str, Any]]:
    start_id = event_id("offline", blip)
    start = {"cluster": "local", "anomaly_id": start_id, "episode_id": start_id, "kind": "OFFLINE_PARTITION",
             "severity": "error", "event_time": T0, "zxid": 0x40, "detected_at": T0, "topic": "orders",
             "partition": 0, "evidence": ["w1"], "details": json.dumps({"leader": -1})}
    took = 12 if blip else 45_000
    end = {**start, "anomaly_id": episode_end_id(start_id), "severity": "warning" if blip else "error",
           "ended_at": T0 + timedelta(milliseconds=took), "ended_zxid": 0x43, "duration_ms": took,
           "evidence": ["w1", "w2"], "details": json.dumps({"blip": blip, "blip_threshold_ms": 1000, "leader": 2})}
    return [start, end]


def test_twenty_like_failures_are_one_line_and_a_two_line_message_stays_on_it() -> None:
    rows = [_failed_change(i) for i in range(20)]
    groups = group_findings(rows)
    assert len(groups) == 1
    line = terminal_safe(describe_group(groups[0], width=220))  # as every printer shows it
    assert "\n" not in line and len(line) <= 220 and line.endswith("...")
    assert line.startswith("[warning] FAILED_STATE_CHANGE x20 (OnlinePartition -> OfflinePartition) rf3: ")
    assert f"first {T0.isoformat(sep=' ')}" in line and "last 2026-11-22 00:00:19+00:00" in line
    assert "partitions 0, 1, 2, 3, 4, 5, 6, 7, ..." in line
    single = terminal_safe(describe(rows[0]))
    assert "\n" not in single and single.endswith("OfflinePartition\\nk [evidence: 1 event(s), first e0]")


def test_groups_keep_apart_kinds_causes_and_topics() -> None:
    rows = [*(_failed_change(i) for i in range(3)), *(_failed_change(i, "rf1") for i in range(2))]
    other = {**_failed_change(9), "anomaly_id": "other",
             "details": json.dumps({"from_state": "NewPartition", "to_state": "OnlinePartition"})}
    groups = group_findings([*rows, other])
    assert sorted((g.cause, g.subject, len(g.rows)) for g in groups) == [
        ("NewPartition -> OnlinePartition", "rf3", 1), ("OnlinePartition -> OfflinePartition", "rf1", 2),
        ("OnlinePartition -> OfflinePartition", "rf3", 3)]


def test_an_ended_episode_is_one_finding_with_its_interval() -> None:
    blip, outage = _offline_episode(True), _offline_episode(False)
    groups = group_findings([*blip, *outage])
    assert sorted((g.severity, g.cause, len(g.rows)) for g in groups) == [("error", "ended", 1), ("warning", "blip", 1)]
    text = {g.cause: describe_group(g) for g in groups}
    assert text["blip"].startswith("[warning] OFFLINE_PARTITION from 2026-11-22 00:00:00+00:00 to "
                                   "2026-11-22 00:00:00+00:00 (lasted 12 ms, a blip: under 1.0 s) zxid=0x40..0x43")
    assert "(lasted 45.0 s) zxid=0x40..0x43 orders-0" in text["ended"] and "a blip" not in text["ended"]
    open_only = describe_group(group_findings(blip[:1])[0])
    assert open_only.startswith("[error] OFFLINE_PARTITION at 2026-11-22 00:00:00+00:00 zxid=0x40 orders-0 started")


def test_the_monitor_prints_groups_and_posts_every_row() -> None:
    out = io.StringIO()
    alerter = AnomalyAlerter(out=out)
    posted: list[bytes] = []

    class Hook:
        def submit(self, body: bytes) -> None:
            posted.append(body)

    alerter.webhook = Hook()  # type: ignore[assignment]
    rows = [*(_failed_change(i) for i in range(20)), *_offline_episode(True)]
    assert alerter.publish(rows) == 22
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and any("x20" in x for x in lines) and any("a blip" in x for x in lines)
    assert len(posted) == 22 and json.loads(posted[-1])["duration_ms"] == 12


def test_the_anomalies_command_groups_and_json_stays_row_per_anomaly(lake: Any,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    lake.append("anomalies", [*(_failed_change(i) for i in range(20)), *_offline_episode(True)], writer_id="t",
                batch_seq=0)
    assert main(["--lake", lake.root, "--cluster", lake.cluster, "anomalies"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3, lines  # the blip, the twenty failures, the summary
    assert lines[-1] == "22 anomalies (21 findings, like ones grouped: 2 lines)"
    assert main(["--lake", lake.root, "--cluster", lake.cluster, "anomalies", "--format", "json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()[:-1]]
    assert len(rows) == 22 and sum(r["ended_zxid"] is not None for r in rows) == 1
