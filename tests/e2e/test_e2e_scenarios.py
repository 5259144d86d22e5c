"""End to end: every built-in scenario played on a real ZooKeeper, collected by three collectors and rebuilt
in the driver (the session's `runs`, tests/e2e/scenario_lakes.py). The tests read the lakes back: anomaly kinds
against the scenario's declaration and `zkledger state --zxid` at every checkpoint. The Spark query's ways of
running the same bronze are compared with these rebuilds in test_differential.py.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_chroot
from tests.e2e.scenario_lakes import COLLECTION_KINDS, RUN_IDS, RUNS, TXN_ONLY, Run

pytestmark = pytest.mark.integration


def test_txnlog_does_not_attribute_older_failed_multis_to_a_new_chroot(runs: dict[tuple[str, str], Run],
                                                                      zk_server: Any, tmp_path: Path) -> None:
    from collectors.txnlog import TxnLogCollector
    from lakehouse import Lake

    # The 3.8 zombie's fenced multi is in the server's log (its own lake has it) ...
    fenced = [r for r in runs[("zombie-controller", "3.8")].lake.read_arrow("znode_events").to_pylist()
              if r["op"] == "MULTI_FAILED"]
    assert fenced
    # ... and an empty cluster chrooted afterwards on the same server must not inherit it.
    chroot = f"/e2e-empty-{uuid.uuid4().hex[:6]}"
    make_chroot(zk_server.hosts, chroot)
    lake = Lake(tmp_path / "lake", cluster="empty")
    TxnLogCollector(lake, zk_server.data_dir, chroot=chroot).run()
    rows = lake.read_arrow("znode_events").to_pylist() if lake.exists("znode_events") else []
    assert [r for r in rows if r["op"] == "MULTI_FAILED"] == []


def _evidence(run: Run) -> str:
    """The found history anomalies, one line each, for assertion messages (what goes into e2e_findings.md)."""
    return "\n".join(f"  {a['kind']} zxid={a['zxid']} {a['topic']}-{a['partition']} ctl={a['controller_id']}"
                     f"/{a['controller_epoch']} {a['details']} evidence={a['evidence']}" for a in run.anomalies
                     if a["kind"] not in COLLECTION_KINDS)


@pytest.mark.parametrize(("name", "version"), RUNS, ids=RUN_IDS)
def test_scenario_anomaly_kinds_are_exactly_the_declared_ones(runs: dict[tuple[str, str], Run], name: str,
                                                              version: str) -> None:
    run = runs[(name, version)]
    declared = {str(e["kind"]) for e in run.result.expected_anomalies}
    assert run.history_kinds == declared, f"{name} on {version}:\n{_evidence(run)}"
    for entry in run.result.expected_anomalies:
        if "topic" not in entry:
            continue
        where = {(a["topic"], a["partition"]) for a in run.anomalies if a["kind"] == entry["kind"]}
        assert where == {(entry["topic"], entry.get("partition"))}, f"{entry}:\n{_evidence(run)}"


def _state_via_cli(lake: Any, zxid: int, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from zkledger.cli import main

    capsys.readouterr()
    code = main(["--lake", str(lake.root), "--cluster", lake.cluster, "state", "--zxid", str(zxid),
                 "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    state: dict[str, Any] = json.loads(out.splitlines()[0])
    return state


@pytest.mark.parametrize(("name", "version"), RUNS, ids=RUN_IDS)
def test_state_at_checkpoint_zxid_matches_the_known_cluster(runs: dict[tuple[str, str], Run], name: str,
                                                            version: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = runs[(name, version)]
    _assert_checkpoints(run, run.lake, capsys)


@pytest.mark.parametrize(("name", "version"), TXN_ONLY, ids=[f"{n}-{v}" for n, v in TXN_ONLY])
def test_state_at_checkpoint_from_the_lossless_collectors(runs: dict[tuple[str, str], Run], name: str,
                                                          version: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = runs[(name, version)]
    _assert_checkpoints(run, run.txn_lake, capsys)


def _assert_checkpoints(run: Run, lake: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`zkledger state --zxid` at every checkpoint gives the controller, brokers and partitions ZooKeeper held."""
    assert run.result.state_at, "every scenario has at least the 'started' checkpoint"
    for cp in run.result.state_at.values():
        st = _state_via_cli(lake, cp.zxid, capsys)
        where = f"{run.name} {run.version} checkpoint {cp.name} zxid={cp.zxid}"
        assert st["controller_id"] == cp.controller_id, where
        assert st["controller_epoch"] == cp.controller_epoch, where
        assert tuple(st["live_brokers"]) == cp.live_brokers, where
        got = {f"{p['topic']}-{p['partition']}": p for p in st["partitions"]}
        assert set(got) == set(cp.partitions), where
        for key, want in cp.partitions.items():
            p = got[key]
            assert (p["leader"], p["leader_epoch"], p["isr"], p["replicas"]) == (
                want["leader"], want["leader_epoch"], want["isr"], want["replicas"]), f"{where} {key}"
