"""A KRaft cluster's history in the lake: `kraft_records` through the one engine (the Spark query equal to the
driver-side runner), and `state --offset` over it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.local_run import run_local
from engine.rebuild import rebuild
from lakehouse import Lake
from models.anomalies import AnomalyKind
from models.tables import KRAFT_RECORDS
from tests import kraft_history as kh
from tests.conftest import assert_same_tables
from zkledger import cli


def faulty_cluster() -> kh.KraftLog:
    log = kh.routine_cluster()
    log.add(kh.partition_change("orders", 0, isr=[1, 2]))
    log.add(kh.fence(3, 13))
    log.elect(2)
    log.add(kh.partition_change("orders", 1, leader=-1, isr=[2]))  # 13: offline
    log.add(kh.partition_change("orders", 1, leader=2, isr=[2]))  # 14: back
    log.add(kh.topic("audit"), kh.partition("audit", 0, [3], [3], 3))  # 16: led by fenced broker 3
    log.add(kh.partition_change("audit", 0, leader=1, isr=[3]))  # 17: a leader outside its ISR
    return log


def collected(lake: Lake, log: kh.KraftLog) -> Lake:
    lake.append(KRAFT_RECORDS.name, log.table(), writer_id="fixture", batch_seq=0)
    return lake


def test_a_kraft_history_folds_into_state_and_anomalies(lake: Any, capsys: Any) -> None:
    log = faulty_cluster()
    lake = Lake(lake.root, log.cluster)
    run_local(collected(lake, log))
    kinds = {(a["kind"], a["zxid"]) for a in lake.read_arrow("anomalies").to_pylist()}
    assert kinds == {(AnomalyKind.OFFLINE_PARTITION, 13), (AnomalyKind.LEADER_NOT_LIVE, 16),
                     (AnomalyKind.LEADER_NOT_IN_ISR, 17), (AnomalyKind.UNCLEAN_LEADER_ELECTION, 17)}

    code = cli.run(["--lake", lake.root, "--cluster", log.cluster, "state", "--offset", "13", "--format", "json"])
    st = json.loads(capsys.readouterr().out.splitlines()[0])
    assert code == 0
    assert (st["controller_id"], st["controller_epoch"]) == (2, 3)
    assert sorted(st["live_brokers"]) == [1, 2]
    orders = {p["partition"]: p for p in st["partitions"] if p["topic"] == "orders"}
    assert orders[0]["isr"] == [1, 2] and orders[1]["leader"] == -1


def test_the_spark_query_equals_the_driver_runner_on_a_kraft_history(spark: Any, tmp_path: Path) -> None:
    """Also where Raft rewrote a tail the collector had stored: the truncated records in one commit, the newer
    leader's in the next, each its own micro-batch. The rebuild folds the log as it stands, as the driver-side
    runner does over the log without the truncated records."""
    log = faulty_cluster()
    before = kh.rewritten_tail(log)
    reference = Lake(str(tmp_path / "reference"), log.cluster)
    reference.append(KRAFT_RECORDS.name, log.current(), writer_id="fixture", batch_seq=0)
    queried = Lake(str(tmp_path / "queried"), log.cluster)
    queried.append(KRAFT_RECORDS.name, log.table().slice(0, before), writer_id="fixture", batch_seq=0)
    queried.append(KRAFT_RECORDS.name, log.rows_since(before), writer_id="fixture", batch_seq=1)
    run_local(reference)
    rebuild(spark, queried, max_files_per_trigger=1)
    assert_same_tables(queried, reference)
    state = {(r["topic"], r["partition"]): r for r in queried.read_arrow("partition_state").to_pylist()}
    assert state[("orders", 0)]["isr"] == [1, 2, 3] and state[("orders", 1)]["leader"] == 3


def test_the_report_draws_a_kraft_cluster(lake: Any, tmp_path: Path) -> None:
    log = faulty_cluster()
    lake = Lake(lake.root, log.cluster)
    run_local(collected(lake, log))
    out = tmp_path / "report.html"
    assert cli.run(["--lake", lake.root, "--cluster", log.cluster, "report", "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "orders" in html and "audit" in html
    assert "OFFLINE_PARTITION" in html and "UNCLEAN_LEADER_ELECTION" in html
