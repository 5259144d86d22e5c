"""End to end: every built-in scenario on a real ZooKeeper, three collectors, one Spark rebuild per cluster.

Each (scenario, Kafka version) plays into its own chroot of the session ZooKeeper with the watch collector
running, then the transaction log (same chroot) and the controller/state-change logs are collected into a lake
of its own (the pipeline replays one cluster's timeline, so clusters are not mixed). All runs are played first,
then rebuilt concurrently on the one shared Spark session: a rebuild is mostly driver-side latency, so a few at
once keep the file fast on 2 cores. The tests then read the lakes back: anomaly kinds against the scenario's
declaration, `zkledger state --zxid` at every checkpoint, and the monitor (fed in chunks; SIGKILLed and restarted)
against the rebuild.
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
# The 2.0 runs come after the 3.8 zombie: their chroots must not inherit its fenced multi (finding F2).
RUNS: list[tuple[str, str]] = [(n, "3.8") for n in list_scenarios()] + [(n, "2.0") for n in sorted(VERSIONED)]
RUN_IDS = [f"{n}-{v}" for n, v in RUNS]
# Time travel is also checked strictly on a second lake fed by the lossless collectors only (txnlog + logs, same
# chroot and log files, no watch rows): the runs where the controller or a broker changes.
TXN_ONLY = [("zombie-controller", "2.0"), ("zombie-controller", "3.8"), ("unclean-election", "3.8")]

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
    from engine.rebuild import rebuild

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


# ---------------------------------------------------------------- monitor vs rebuild

# Columns stamped at processing time, not derived from the history.
_VOLATILE = {"detected_at"}
_COMPARED = ("metadata_events", "partition_transitions", "replica_transitions", "anomalies", "partition_state",
             "replica_state")


def _table_rows(lake: Any, table: str) -> list[str]:
    """A table as sorted canonical JSON lines (volatile columns dropped), for an order-free equality."""
    if not lake.exists(table):
        return []
    rows = lake.read_arrow(table).to_pylist()
    return sorted(json.dumps({k: v for k, v in r.items() if k not in _VOLATILE}, default=str, sort_keys=True)
                  for r in rows)


def _window(col: Any, lo: Any, hi: Any) -> Any:
    """lo <= col < hi (open ends when None); rows without a time go to the first window."""
    import pyarrow.compute as pc

    keep = pc.is_valid(col) if lo is None else pc.fill_null(pc.greater_equal(col, lo), False)
    if hi is not None:
        keep = pc.and_(keep, pc.fill_null(pc.less(col, hi), False))
    return pc.or_(keep, pc.is_null(col)) if lo is None else keep


def _bronze_chunks(src: Any, chunks: int) -> list[list[tuple[str, Any]]]:
    """The source lake's bronze split into `chunks` slices by time (znodes and decisions interleaved)."""
    import pyarrow.compute as pc


    z = src.read_arrow("znode_events")
    d = src.read_arrow("controller_decisions")
    # Cut both sources at the same wall-clock instants (txn time, else when a watch saw it / log time), as
    # collectors keeping up would deliver them.
    z = z.append_column("_t", pc.coalesce(z["txn_time"], z["observed_at"]))
    times = sorted(t for t in z["_t"].to_pylist() if t is not None)
    cuts = [times[len(times) * i // chunks] for i in range(1, chunks)]
    out: list[list[tuple[str, Any]]] = []
    lo = None
    for hi in [*cuts, None]:
        out.append([("znode_events", z.filter(_window(z["_t"], lo, hi)).drop_columns(["_t"])),
                    ("controller_decisions", d.filter(_window(d["ts"], lo, hi)))])
        lo = hi
    assert sum(t.num_rows for c in out for name, t in c if name == "znode_events") == z.num_rows
    assert sum(t.num_rows for c in out for name, t in c if name == "controller_decisions") == d.num_rows
    return out


def test_monitor_fed_in_chunks_ends_equal_to_the_rebuild(runs: dict[tuple[str, str], Run], spark: Any,
                                                         tmp_path: Path) -> None:
    from engine.monitor import drain_monitor
    from lakehouse import Lake

    src = runs[("zombie-controller", "2.0")].txn_lake  # lossless bronze: the run the history is known for
    dst = Lake(tmp_path / "lake", cluster=src.cluster)
    for seq, chunk in enumerate(_bronze_chunks(src, 2), start=1):
        for table, rows in chunk:
            if rows.num_rows:
                dst.append(table, rows, writer_id=f"copy-{table}", batch_seq=seq)
        drain_monitor(spark, dst, str(tmp_path / "checkpoint"))
    assert dst.last_batch_seq("partition_state", "monitor") is not None
    for table in _COMPARED:
        assert _table_rows(dst, table) == _table_rows(src, table), table


def _monitor_cmd(lake: Any, *extra: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "zkledger.cli", "--lake", str(lake.root), "--cluster", lake.cluster, "monitor",
            *extra]


def _wait_for_batch(lake: Any, proc: Any, at_least: int, limit: float = 150.0) -> None:
    """Poll until the monitor committed micro-batch `at_least` (not a timing assertion: a generous cap)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        last = lake.last_batch_seq("partition_state", "monitor") if lake.exists("partition_state") else None
        if last is not None and last >= at_least:
            return
        assert proc.poll() is None, "the monitor exited early"
        time.sleep(0.5)
    raise AssertionError(f"monitor did not commit batch {at_least}")


def test_monitor_killed_mid_stream_then_restarted_ends_equal_to_the_rebuild(runs: dict[tuple[str, str], Run],
                                                                             tmp_path: Path) -> None:
    import os
    import signal
    import subprocess

    from lakehouse import Lake

    src = runs[("unclean-election", "3.8")].lake  # watch + txnlog + logs bronze
    dst = Lake(tmp_path / "lake", cluster=src.cluster)
    chunks = _bronze_chunks(src, 4)

    def feed(i: int) -> None:
        for table, rows in chunks[i]:
            if rows.num_rows:
                dst.append(table, rows, writer_id=f"copy-{table}", batch_seq=i + 1)

    env = dict(os.environ)
    feed(0)
    proc = subprocess.Popen(_monitor_cmd(dst, "--trigger", "1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        _wait_for_batch(dst, proc, 0)
        feed(1)
        feed(2)
        _wait_for_batch(dst, proc, 1)  # it is now somewhere in chunk 2 or 3
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    feed(3)
    done = subprocess.run(_monitor_cmd(dst, "--available-now"), capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for table in _COMPARED:
        assert _table_rows(dst, table) == _table_rows(src, table), table


# Every run above was rebuilt in process (a small history is below `pipeline.local_max_rows`). These take the
# other path, Spark jobs over key buckets (`local_max_rows=0`), on the histories with the most kinds of rows:
# both paths must write the same tables.
SPARK_PATH_RUNS = [("zombie-controller", "2.0"), ("unclean-election", "3.8"), ("topic-deletion", "3.8"),
                   ("reassignment", "3.8"), ("failover-storm", "3.8")]
_BOTH_PATHS = (*_COMPARED, "controller_tenure", "decode_quarantine")


def _bronze_copy(src: Any, root: Path) -> Any:
    """A new lake holding only ``src``'s bronze tables (to be rebuilt another way)."""
    from lakehouse import Lake

    dst = Lake(root, cluster=src.cluster)
    for table in ("znode_events", "controller_decisions"):
        rows = src.read_arrow(table)
        if rows.num_rows:
            dst.append(table, rows, writer_id="copy", batch_seq=1)
    return dst


@pytest.mark.parametrize("key", SPARK_PATH_RUNS, ids=[f"{n}-{v}" for n, v in SPARK_PATH_RUNS])
def test_the_spark_path_writes_what_the_in_process_path_writes(runs: dict[tuple[str, str], Run], spark: Any,
                                                                tmp_path: Path, key: tuple[str, str]) -> None:
    from engine.rebuild import rebuild

    src = runs[key].lake
    dst = _bronze_copy(src, tmp_path / "lake")
    rebuild(spark, dst, local_max_rows=0)
    assert dst.read_arrow("anomalies").num_rows == src.read_arrow("anomalies").num_rows
    for table in _BOTH_PATHS:
        assert _table_rows(dst, table) == _table_rows(src, table), table


@pytest.mark.parametrize("key", SPARK_PATH_RUNS, ids=[f"{n}-{v}" for n, v in SPARK_PATH_RUNS])
def test_a_rebuild_in_zxid_chunks_writes_what_one_increment_writes(runs: dict[tuple[str, str], Run], spark: Any,
                                                                   tmp_path: Path, key: tuple[str, str]) -> None:
    """A long history is rebuilt chunk by chunk (bounded driver memory): the chunking must not show."""
    from engine.rebuild import rebuild

    src = runs[key].lake
    dst = _bronze_copy(src, tmp_path / "lake")
    bronze = dst.row_count("znode_events")
    counts = rebuild(spark, dst, chunk_rows=max(1, bronze // 6))
    assert counts["metadata_events"] == dst.row_count("metadata_events")
    history = dst.history("metadata_events")
    assert sum(1 for c in history if "rebuild" in str(c.get("zkledger.writer"))) >= 5  # it really ran in chunks
    state = [c for c in dst.history("partition_state") if "rebuild" in str(c.get("zkledger.writer"))]
    assert len(state) == 2  # the state: emptied by the first chunk, written by the last
    for table in _BOTH_PATHS:
        assert _table_rows(dst, table) == _table_rows(src, table), table
    if key == ("unclean-election", "3.8"):  # chunks through Spark too, continuing the same carried state
        rebuild(spark, dst, local_max_rows=0, chunk_rows=max(1, bronze // 2))
        for table in _BOTH_PATHS:
            assert _table_rows(dst, table) == _table_rows(src, table), table


def test_a_monitor_through_spark_ends_equal_to_the_in_process_rebuild(runs: dict[tuple[str, str], Run], spark: Any,
                                                                      tmp_path: Path) -> None:
    from engine.monitor import drain_monitor
    from lakehouse import Lake

    src = runs[("unclean-election", "3.8")].lake  # watch + txnlog + logs bronze
    dst = Lake(tmp_path / "lake", cluster=src.cluster)
    for seq, chunk in enumerate(_bronze_chunks(src, 3), start=1):
        for table, rows in chunk:
            if rows.num_rows:
                dst.append(table, rows, writer_id=f"copy-{table}", batch_seq=seq)
        drain_monitor(spark, dst, str(tmp_path / "checkpoint"), local_max_rows=0)
    for table in _COMPARED:
        assert _table_rows(dst, table) == _table_rows(src, table), table
