"""Every built-in scenario played on a real ZooKeeper, collected by the three collectors, rebuilt once.

Each (scenario, Kafka version) plays into its own chroot of the session ZooKeeper with the watch collector
running, then the transaction log (same chroot) and the controller/state-change logs are collected into a lake
of its own, its cluster named after the run (the pipeline replays one cluster's timeline, so clusters are not
mixed). Each lake is then rebuilt by the pipeline's steps run in the driver (``engine.local_run.run_local``:
all history in one batch, no Spark), the reference the differential suite holds the Spark query to.
`tests/e2e/conftest.py` serves the result as the session fixture `runs`; the lakes are read-only from then on.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.scenarios import ScenarioResult, list_scenarios, run_scenario
from tests.conftest import make_chroot

log = logging.getLogger(__name__)

# failover-storm is scaled down to 50 partitions but keeps its 5 brokers: with 3, three rounds of controller
# crashes leave some partitions' whole ISR down for a moment (seed-dependent), a real OFFLINE_PARTITION and
# "failed to elect leader" history that the scenario does not declare.
SIZES: dict[str, dict[str, int]] = {"failover-storm": {"brokers": 5, "partitions": 50}}
# Versions where the history differs: fencing (2.1), KIP-380 bounce detection (2.2), AlterIsr (2.7).
VERSIONED = {"zombie-controller", "broker-bounce", "isr-shrink-expand"}
# The 2.0 runs come after the 3.8 zombie: their chroots must not inherit its fenced multi (finding F2).
RUNS: list[tuple[str, str]] = [(n, "3.8") for n in list_scenarios()] + [(n, "2.0") for n in sorted(VERSIONED)]
RUN_IDS = [f"{n}-{v}" for n, v in RUNS]
# A second lake fed by the lossless collectors only (txnlog + logs, same chroot and log files, no watch rows):
# the runs where the controller or a broker changes.
TXN_ONLY = [("zombie-controller", "2.0"), ("zombie-controller", "3.8"), ("unclean-election", "3.8")]

SEED = 11
# A collection artefact, not part of the cluster's history: the watch collector's one-shot watches honestly
# report the changes they were too slow to see (README "COLLECTION_GAP rows are honest"); the txnlog has them.
COLLECTION_KINDS = {"COLLECTION_GAP"}


@dataclass
class Run:
    """One played scenario: its declared result, its rebuilt lake (and the lossless-only one, if any)."""

    name: str
    version: str
    result: ScenarioResult
    lake: Any
    anomalies: list[dict[str, Any]]
    seconds: dict[str, float] = field(default_factory=dict)
    txn_lake: Any = None

    @property
    def history_kinds(self) -> set[str]:
        return {str(a["kind"]) for a in self.anomalies} - COLLECTION_KINDS


def _collect_lossless(lake: Any, zk_server: Any, chroot: str, log_dir: Path) -> None:
    from collectors.kafka_logs import collect_logs
    from collectors.txnlog import TxnLogCollector

    TxnLogCollector(lake, zk_server.data_dir, chroot=chroot).run()
    collect_logs(lake, str(log_dir))


def _wait_until_caught_up(watcher: Any, quiet: float = 0.5, limit: float = 120.0) -> None:
    """Until the watch collector's queue stayed empty for ``quiet`` seconds. Its stop handles queued
    notifications for 5 s only, then reports the rest as a GAP on "/"; a loaded machine can be further behind
    than that, and the history tests compare what it saw, not how far a stop cuts it short."""
    deadline = time.monotonic() + limit
    empty_since: float | None = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        if not watcher.work.empty():
            empty_since = None
        elif empty_since is None:
            empty_since = now
        elif now - empty_since >= quiet:
            return
        time.sleep(0.05)


def _play(zk_server: Any, root: Path, name: str, version: str) -> tuple[ScenarioResult, Any, float, Any]:
    """Scenario with the watch collector on, then the txnlog and log collectors, into a fresh lake."""
    from collectors.zk_watch import ZkWatchCollector
    from lakehouse import Lake

    tag = f"{name}-{version}"
    chroot = f"/e2e-{tag}-{uuid.uuid4().hex[:6]}"
    make_chroot(zk_server.hosts, chroot)
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
        _wait_until_caught_up(watcher)
        stop.set()
        thread.join(30)
    _collect_lossless(lake, zk_server, chroot, log_dir)
    txn_lake = None
    if (name, version) in TXN_ONLY:
        txn_lake = Lake(root / f"lake-{tag}-txn", cluster=tag)
        _collect_lossless(txn_lake, zk_server, chroot, log_dir)
    return result, lake, time.monotonic() - t0, txn_lake


def _rebuild(lake: Any) -> tuple[list[dict[str, Any]], float]:
    from engine.local_run import run_local

    t0 = time.monotonic()
    run_local(lake)
    rows: list[dict[str, Any]] = lake.read_arrow("anomalies").to_pylist() if lake.exists("anomalies") else []
    return rows, time.monotonic() - t0


def play_all(zk_server: Any, root: Path) -> dict[tuple[str, str], Run]:
    """Every run in RUNS played, collected and rebuilt in the driver (``run_local``) under ``root``."""
    played = {(n, v): _play(zk_server, root, n, v) for n, v in RUNS}
    rebuilt = {key: _rebuild(lake) for key, (_r, lake, _s, _t) in played.items()}
    for _r, _l, _s, txn in played.values():
        if txn is not None:
            _rebuild(txn)
    for key, (_r, _l, secs, _t) in played.items():
        log.info("e2e %s: play+collect %.1fs, rebuild %.1fs", key, secs, rebuilt[key][1])
    return {key: Run(key[0], key[1], res, lake, rebuilt[key][0], {"play": secs, "rebuild": rebuilt[key][1]}, t)
            for key, (res, lake, secs, t) in played.items()}
