"""End to end: every built-in scenario on a real ZooKeeper, three collectors, one Spark rebuild per cluster.

Each (scenario, Kafka version) plays into its own chroot of the session ZooKeeper with the watch collector
running, then the transaction log (same chroot) and the controller/state-change logs are collected into a lake
of its own (the pipeline replays one cluster's timeline, so clusters are not mixed). All runs are played first,
then rebuilt concurrently on the one shared Spark session: a rebuild is mostly driver-side latency, so a few at
once keep the file fast on 2 cores. The tests then read the lakes back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from simulator.scenarios import ScenarioResult, list_scenarios, run_scenario

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# failover-storm is scaled down to 50 partitions but keeps its 5 brokers: with 3, three rounds of controller
# crashes leave some partitions' whole ISR down for a moment (seed-dependent), a real OFFLINE_PARTITION and
# "failed to elect leader" history that the scenario does not declare.
SIZES: dict[str, dict[str, int]] = {"failover-storm": {"brokers": 5, "partitions": 50}}
# Versions where the history differs: fencing (2.1), KIP-380 bounce detection (2.2), AlterIsr (2.7).
VERSIONED = {"zombie-controller", "broker-bounce", "isr-shrink-expand"}
# 2.0 first and the 3.8 zombie (alphabetically) last: its fenced multi would otherwise also be attributed to the
# chroots created after it (finding F2 in /work/tasks/e2e_findings.md; strict xfail below).
RUNS: list[tuple[str, str]] = [(n, "2.0") for n in sorted(VERSIONED)] + [(n, "3.8") for n in list_scenarios()]
assert RUNS[-1] == ("zombie-controller", "3.8")
# Finding F1: the watch collector's phantom DELETE at a re-creation zxid survives decode. Whether it shows depends
# on watch timing and on event-id order inside one zxid, so these cannot be strict xfails (they pass sometimes).
F1 = ("F1 (e2e_findings.md): watch collector's phantom DELETE at a re-creation zxid survives decode dedup and "
      "may sort after the txnlog CREATE of the same zxid; timing-dependent")
KIND_XFAIL = {("topic-deletion", "3.8")}
# Every run whose history deletes and re-creates a znode (/controller, /brokers/ids/N) or deletes a topic.
STATE_XFAIL = {("zombie-controller", "2.0"), ("zombie-controller", "3.8"), ("broker-bounce", "2.0"),
               ("broker-bounce", "3.8"), ("controller-failover", "3.8"), ("topic-deletion", "3.8"),
               ("unclean-election", "3.8"), ("broker-crash", "3.8"), ("failover-storm", "3.8")}
# Time travel is also checked strictly on a second lake fed by the lossless collectors only (txnlog + logs, same
# chroot and log files, no watch rows): the runs where the controller or a broker changes.
TXN_ONLY = [("zombie-controller", "2.0"), ("zombie-controller", "3.8"), ("broker-bounce", "2.0"),
            ("unclean-election", "3.8"), ("controller-failover", "3.8")]


def _params(xfails: set[tuple[str, str]]) -> list[Any]:
    return [pytest.param(n, v, id=f"{n}-{v}", marks=[pytest.mark.xfail(strict=False, reason=F1)]
                         if (n, v) in xfails else []) for n, v in RUNS]
SEED = 11
# A collection artefact, not part of the cluster's history: the watch collector's one-shot watches honestly
# report the changes they were too slow to see (README "COLLECTION_GAP rows are honest"); the txnlog has them.
COLLECTION_KINDS = {"COLLECTION_GAP"}


@dataclass
class Run:
    name: str
    version: str
    result: ScenarioResult
    lake: Any
    anomalies: list[dict[str, Any]]
    seconds: dict[str, float]
    txn_lake: Any = None

    @property
    def history_kinds(self) -> set[str]:
        return {str(a["kind"]) for a in self.anomalies} - COLLECTION_KINDS


def _make_chroot(hosts: str, chroot: str) -> None:
    client = KazooClient(hosts=hosts, timeout=15)
    client.start(timeout=15)
    try:
        client.create(chroot)
    finally:
        client.stop()
        client.close()


def _collect_lossless(lake: Any, zk_server: Any, chroot: str, log_dir: Path) -> None:
    from collectors.kafka_logs import collect_logs
    from collectors.txnlog import TxnLogCollector

    TxnLogCollector(lake, zk_server.data_dir, chroot=chroot).run()
    collect_logs(lake, str(log_dir))


def _play(zk_server: Any, root: Path, name: str, version: str) -> tuple[ScenarioResult, Any, float, Any]:
    """Scenario with the watch collector on, then the txnlog and log collectors, into a fresh lake."""
    from collectors.zk_watch import ZkWatchCollector
    from lakehouse import Lake

    tag = f"{name}-{version}"
    chroot = f"/e2e-{tag}-{uuid.uuid4().hex[:6]}"
    _make_chroot(zk_server.hosts, chroot)
    lake = Lake(root / f"lake-{tag}", cluster=tag)
    log_dir = root / f"logs-{tag}"
    t0 = time.monotonic()
    watcher = ZkWatchCollector(lake, zk_server.hosts, chroot)
    watcher.start()
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), name=f"watch-{tag}", daemon=True)
    thread.start()
    try:
        result = run_scenario(name, zk_server.hosts + chroot, version, log_dir, SEED, wall_clock=True,
                              **SIZES.get(name, {}))
    finally:
        time.sleep(0.5)  # the last watch notifications are in flight when the scenario returns
        stop.set()
        thread.join(30)
    _collect_lossless(lake, zk_server, chroot, log_dir)
    txn_lake = None
    if (name, version) in TXN_ONLY:
        txn_lake = Lake(root / f"lake-{tag}-txn", cluster=tag)
        _collect_lossless(txn_lake, zk_server, chroot, log_dir)
    return result, lake, time.monotonic() - t0, txn_lake


def _rebuild(spark: Any, lake: Any) -> tuple[list[dict[str, Any]], float]:
    from jobs._common import rebuild

    t0 = time.monotonic()
    rebuild(spark, lake)
    rows: list[dict[str, Any]] = lake.read_arrow("anomalies").to_pylist() if lake.exists("anomalies") else []
    return rows, time.monotonic() - t0


@pytest.fixture(scope="module")
def runs(zk_server: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Run]]:
    root = tmp_path_factory.mktemp("e2e")
    played = {(n, v): _play(zk_server, root, n, v) for n, v in RUNS}
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="rebuild") as pool:
        futures = {key: pool.submit(_rebuild, spark, lake) for key, (_r, lake, _s, _t) in played.items()}
        txn = [pool.submit(_rebuild, spark, t) for (_r, _l, _s, t) in played.values() if t is not None]
        rebuilt = {key: f.result() for key, f in futures.items()}
        for f in txn:
            f.result()
    for key, (_r, _l, secs, _t) in played.items():
        log.info("e2e %s: play+collect %.1fs, rebuild %.1fs", key, secs, rebuilt[key][1])
    yield {key: Run(key[0], key[1], res, lake, rebuilt[key][0], {"play": secs, "rebuild": rebuilt[key][1]}, t)
           for key, (res, lake, secs, t) in played.items()}


@pytest.mark.xfail(strict=True, reason="F2 (e2e_findings.md): TxnLogCollector attributes a failed multi of an unknown "
                   "session to the chroot even when the txn is older than the chroot itself")
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
    _make_chroot(zk_server.hosts, chroot)
    lake = Lake(tmp_path / "lake", cluster="empty")
    TxnLogCollector(lake, zk_server.data_dir, chroot=chroot).run()
    rows = lake.read_arrow("znode_events").to_pylist() if lake.exists("znode_events") else []
    assert [r for r in rows if r["op"] == "MULTI_FAILED"] == []


def _evidence(run: Run) -> str:
    """The found history anomalies, one line each, for assertion messages (what goes into e2e_findings.md)."""
    return "\n".join(f"  {a['kind']} zxid={a['zxid']} {a['topic']}-{a['partition']} ctl={a['controller_id']}"
                     f"/{a['controller_epoch']} {a['details']} evidence={a['evidence']}" for a in run.anomalies
                     if a["kind"] not in COLLECTION_KINDS)


@pytest.mark.parametrize(("name", "version"), _params(KIND_XFAIL))
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


@pytest.mark.parametrize(("name", "version"), _params(STATE_XFAIL))
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
