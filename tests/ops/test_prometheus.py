"""The shipped alert rules and dashboard against a real Prometheus (Debian's package, `make prometheus`).

One module fixture runs the whole stack on loopback ports: the session's ZooKeeper, `zkledger collect zk
--metrics-port` on a chroot, the simulator playing the zombie-controller scenario (Kafka 2.0: a critical
ZOMBIE_CONTROLLER_WRITE), `zkledger monitor --metrics-port --webhook` on the same lake (the webhook is a small
HTTP server here), and a Prometheus scraping both every second with a copy of ops/prometheus/zkledger-rules.yml
whose `for:` durations are 0s (the thresholds are the shipped ones). Everything is asserted through
Prometheus's HTTP API. The last test stops the collector and waits for ZkledgerCollectorDown.

The tests without a Prometheus (metric names) run in the fast tier.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML

from models.tables import DERIVED_TABLES
from services.metrics import COMMANDS, Metrics
from services.zookeeper import EmbeddedZooKeeper, free_port
from tests.conftest import make_chroot

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "prometheus" / "zkledger-rules.yml"
EXAMPLE = ROOT / "ops" / "prometheus" / "prometheus-example.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "zkledger-dashboard.json"
WAIT = 420.0  # the monitor's first micro-batch on a busy 2-core machine: a JVM, Python workers, RocksDB
_NAME = re.compile(r"\b(?:zkledger|process)_[a-z0-9_]+\b|\bup\b")


def rule_exprs() -> list[str]:
    groups = YAML(typ="safe").load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def names_in(exprs: list[str]) -> set[str]:
    return {name for expr in exprs for name in _NAME.findall(expr)}


def exposed_names(metrics: Metrics) -> set[str]:
    text = generate_latest(metrics.registry).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


# ---------------------------------------------------------------------------------------------- no Prometheus
def test_every_metric_the_rules_and_the_dashboard_query_is_exposed() -> None:
    exposed = set().union(*(exposed_names(Metrics(command)) for command in COMMANDS)) | {"up"}
    wanted = names_in(rule_exprs() + dashboard_exprs())
    assert wanted - exposed == set()
    assert {"zkledger_rows_committed_total", "zkledger_anomalies_total", "zkledger_commit_lag_seconds",
            "zkledger_monitor_batch_duration_seconds_bucket", "zkledger_webhook_failures_total"} <= wanted
    # every command exposes the names the rules select it by, before anything happened
    collector = set().union(*(exposed_names(Metrics(c)) for c in COMMANDS if c.startswith("collect")))
    assert {"zkledger_commit_lag_seconds", "zkledger_loop_last_turn_timestamp_seconds",
            "zkledger_quarantine_rows_total", "zkledger_gaps_total"} <= collector
    assert {"zkledger_anomalies_total", "zkledger_webhook_failures_total",
            "zkledger_last_commit_timestamp_seconds"} <= exposed_names(Metrics("monitor"))


def test_the_dashboard_is_a_grafana_dashboard_on_a_prometheus_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "zkledger" and dashboard["templating"]["list"][0]["type"] == "datasource"
    graphs = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(graphs) >= 15 and all(p["targets"] and p["datasource"]["uid"] == "${datasource}" for p in graphs)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


# ---------------------------------------------------------------------------------------------- promtool
def test_promtool_accepts_the_shipped_rules_and_example_config(runs_prometheus: None, tmp_path: Path) -> None:
    rules = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 15 rules found" in rules.stdout
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    shutil.copy(RULES, tmp_path / RULES.name)
    config = subprocess.run(["promtool", "check", "config", str(tmp_path / EXAMPLE.name)], capture_output=True,
                            text=True, timeout=60)
    assert config.returncode == 0, config.stdout + config.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(RULES.read_text().replace("up{job=\"zkledger-collect\"} == 0", "up{job= == 0", 1))
    assert subprocess.run(["promtool", "check", "rules", str(broken)], capture_output=True, timeout=60).returncode != 0


# ---------------------------------------------------------------------------------------------- the stack
@dataclass
class Stack:
    base: Path
    prometheus: str
    collector: subprocess.Popen[str]
    monitor: subprocess.Popen[str]
    lake: Any
    posted: list[bytes] = field(default_factory=list)
    stopped: set[str] = field(default_factory=set)  # processes a test stopped on purpose

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def firing(self) -> dict[str, list[dict[str, str]]]:
        with urllib.request.urlopen(f"{self.prometheus}/api/v1/alerts", timeout=10) as answer:
            alerts = json.loads(answer.read())["data"]["alerts"]
        out: dict[str, list[dict[str, str]]] = {}
        for alert in alerts:
            if alert["state"] == "firing":
                out.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
        return out

    def alive(self) -> None:
        for name, proc in (("collector", self.collector), ("monitor", self.monitor)):
            if name not in self.stopped and proc.poll() is not None:  # its stderr went to <name>.log
                err = (self.base / f"{name}.log").read_text(errors="replace")
                raise AssertionError(f"the {name} exited with {proc.returncode}: {err[-3000:]}")


def wait_until(cond: Callable[[], Any], stack: Stack, what: str, limit: float = WAIT) -> Any:
    deadline = time.monotonic() + limit
    while True:
        got = cond()
        if got:
            return got
        stack.alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {limit:.0f} s: {what}")
        time.sleep(0.5)


class _Hook(http.server.BaseHTTPRequestHandler):
    posted: list[bytes]

    def do_POST(self) -> None:
        self.posted.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _test_rules(path: Path) -> None:
    """The shipped rules with every `for:` at 0s: an alert fires at the first evaluation that matches."""
    yaml = YAML(typ="safe")
    rules = yaml.load(RULES.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    out = StringIO()
    yaml.dump(rules, out)
    path.write_text(out.getvalue())


def _start(cmd: list[str], cwd: Path, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log.open("w"), text=True, cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, zk_server: EmbeddedZooKeeper, starts_spark: None,
          runs_prometheus: None) -> Iterator[Stack]:
    from lakehouse import Lake

    base = tmp_path_factory.mktemp("ops")
    chroot = f"/ops-{uuid.uuid4().hex[:10]}"
    make_chroot(zk_server.hosts, chroot)
    conf = base / "zkledger.toml"
    conf.write_text("[pipeline]\nbuckets = 2\n[spark]\nshuffle_partitions = 2\n[collect]\nflush_seconds = 0.2\n"
                    "[metrics]\nready_seconds = 600.0\n")
    lake = Lake(base / "lake", cluster="ops")
    posted: list[bytes] = []
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Hook", (_Hook,), {"posted": posted}))
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    collector_port, monitor_port, prometheus_port = free_port(), free_port(), free_port()
    _test_rules(base / "rules.yml")
    (base / "prometheus.yml").write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(base / "rules.yml")],
        "scrape_configs": [
            {"job_name": "zkledger-collect", "static_configs": [{"targets": [f"127.0.0.1:{collector_port}"]}]},
            {"job_name": "zkledger-monitor", "static_configs": [{"targets": [f"127.0.0.1:{monitor_port}"]}]},
        ]}))
    cli = [sys.executable, "-m", "zkledger.cli", "--conf", str(conf), "--lake", str(lake.root), "--cluster", "ops"]
    prometheus = _start(["prometheus", f"--config.file={base / 'prometheus.yml'}",
                         f"--storage.tsdb.path={base / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                        base, base / "prometheus.log")
    collector = _start([*cli, "collect", "zk", "--zk", zk_server.hosts, "--chroot", chroot,
                        "--metrics-port", str(collector_port)], base, base / "collector.log")
    # beside the watch collector (whose series are checked), the lossless one: a watch may miss the zombie
    # write under load, the transaction log does not, so the monitor always finds it
    lossless = _start([*cli, "collect", "txnlog", "--dir", str(zk_server.data_dir), "--chroot", chroot, "--follow"],
                      base, base / "txnlog.log")
    monitor: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 60
        while not lake.exists("znode_events"):  # the collector's first commit (the chroot's root) made the table
            assert collector.poll() is None, (base / "collector.log").read_text()
            assert time.monotonic() < deadline, "the collector committed nothing"
            time.sleep(0.2)
        # the monitor's JVM starts while the simulated cluster writes
        monitor = _start([*cli, "monitor", "--trigger", "1", "--metrics-port", str(monitor_port), "--webhook",
                          f"http://127.0.0.1:{hook.server_address[1]}/hook"], base, base / "monitor.log")
        simulated = subprocess.run([*cli, "simulate", "--zk", zk_server.hosts + chroot, "--scenario",
                                    "zombie-controller", "--kafka-version", "2.0"], capture_output=True, text=True,
                                   timeout=300, cwd=base, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert simulated.returncode == 0, simulated.stderr
        assert "ZOMBIE_CONTROLLER_WRITE" in simulated.stdout
        yield Stack(base, f"http://127.0.0.1:{prometheus_port}", collector, monitor, lake, posted)
    finally:
        for proc in (collector, lossless, monitor, prometheus):
            if proc is not None:
                _stop(proc)
        hook.shutdown()


def _settled(stack: Stack) -> int:
    """The lake's znode_events rows once two looks a second apart agree (the simulator has finished)."""
    def same() -> int:
        first = stack.lake.row_count("znode_events")
        time.sleep(1)
        return first if first == stack.lake.row_count("znode_events") else 0

    return int(wait_until(same, stack, "znode_events to stop growing", 120))


def test_the_collectors_series_arrive_with_the_lakes_numbers(stack: Stack) -> None:
    _settled(stack)
    watched = [r for r in stack.lake.read_arrow("znode_events").to_pylist() if r["source"] in ("watch", "resync")]
    rows = len(watched)
    committed = 'sum(zkledger_rows_committed_total{job="zkledger-collect",table="znode_events"})'
    wait_until(lambda: stack.scalar(committed) == rows, stack, f"{committed} == {rows}", 60)
    newest = max(r["zxid"] for r in watched)
    assert stack.scalar('zkledger_committed_position{job="zkledger-collect",source="watch"}') == newest
    assert stack.scalar('zkledger_source_position{job="zkledger-collect",source="watch"}') == newest
    assert stack.scalar('zkledger_commit_lag_seconds{job="zkledger-collect"}') == 0
    assert stack.scalar('zkledger_source_connected{job="zkledger-collect"}') == 1
    assert stack.scalar('zkledger_ready{job="zkledger-collect"}') == 1
    gaps = sum(1 for r in watched if r["op"] == "GAP")
    assert stack.scalar('sum(zkledger_gaps_total{job="zkledger-collect"})') == gaps
    build = stack.query('zkledger_build_info{job="zkledger-collect"}')
    assert build[0]["metric"]["command"] == "collect-zk"


def test_the_monitors_series_arrive_with_the_lakes_numbers_and_the_critical_alert_fires(stack: Stack) -> None:
    rows = _settled(stack)
    read = 'sum(zkledger_monitor_input_rows_total{job="zkledger-monitor",table="znode_events"})'
    wait_until(lambda: stack.scalar(read) == rows, stack, f"{read} == {rows} (the monitor read every row)")
    anomalies = stack.lake.row_count("anomalies")
    assert anomalies >= 1
    wait_until(lambda: stack.scalar('sum(zkledger_monitor_rows_written_total{table="anomalies"})') == anomalies,
               stack, "the monitor's anomalies rows written", 60)
    assert stack.scalar('sum(zkledger_anomalies_total{job="zkledger-monitor"})') == anomalies
    kinds = {r["kind"] for r in stack.lake.read_arrow("anomalies").to_pylist() if r["severity"] == "critical"}
    assert "ZOMBIE_CONTROLLER_WRITE" in kinds
    assert (stack.scalar('zkledger_anomalies_total{kind="ZOMBIE_CONTROLLER_WRITE",severity="critical"}') or 0) >= 1
    # the other tables follow the anomalies within monitor.table_commit_seconds, and the series follow them
    written = 'sum(zkledger_monitor_rows_written_total{table="partition_transitions"})'
    wait_until(lambda: stack.lake.row_count("partition_transitions") and stack.scalar(written) == stack.lake.row_count(
        "partition_transitions"), stack, f"{written} == the committed partition_transitions rows", 60)
    assert stack.scalar('zkledger_monitor_staged_seconds{job="zkledger-monitor"}') < 60  # nothing staged for long
    assert (stack.scalar('zkledger_monitor_batch_duration_seconds_count{job="zkledger-monitor"}') or 0) >= 1
    newest = max(r["event_time"] for t in DERIVED_TABLES if "event_time" in t.column_names and stack.lake.exists(t.name)
                 for r in stack.lake.read_arrow(t.name).to_pylist() if r["event_time"])
    assert stack.scalar('zkledger_monitor_committed_event_time_seconds{job="zkledger-monitor"}') == pytest.approx(newest.timestamp(), abs=1e-3)
    assert (stack.scalar('zkledger_monitor_event_lag_seconds{job="zkledger-monitor"}') or 0) > 0
    wait_until(lambda: stack.scalar('zkledger_webhook_deliveries_total{job="zkledger-monitor"}') == anomalies, stack,
               "every anomaly delivered to the webhook", 60)
    assert len(stack.posted) == anomalies and stack.scalar('zkledger_webhook_failures_total{job="zkledger-monitor"}') == 0
    critical = wait_until(lambda: stack.firing().get("ZkledgerCriticalAnomaly"), stack,
                          "ZkledgerCriticalAnomaly firing", 60)
    assert {alert["kind"] for alert in critical} == kinds
    assert "ZkledgerWebhookFailing" not in stack.firing()


def test_every_dashboard_query_runs_and_every_name_it_uses_is_scraped(stack: Stack) -> None:
    wait_until(lambda: stack.scalar('zkledger_monitor_batch_duration_seconds_count{job="zkledger-monitor"}'), stack,
               "a finished micro-batch")
    with urllib.request.urlopen(f"{stack.prometheus}/api/v1/label/__name__/values", timeout=10) as answer:
        scraped = set(json.loads(answer.read())["data"])
    assert names_in(dashboard_exprs() + rule_exprs()) - scraped == set()
    for expr in dashboard_exprs():
        stack.query(expr.replace("$__rate_interval", "1m"))  # asserts status success
    # with every `for:` at 0 s an alert fires at the first evaluation that matches: a process is not ready until
    # its first commit, which a loaded machine delays; once both run, none of these fires (or stays firing)
    health = {"ZkledgerCollectorDown", "ZkledgerMonitorDown", "ZkledgerCollectorAbsent", "ZkledgerCollectorStale",
              "ZkledgerNotReady"}
    wait_until(lambda: not stack.firing().keys() & health, stack, f"none of {sorted(health)} firing", 60)


def test_the_collector_down_alert_fires_when_the_collector_stops(stack: Stack) -> None:
    wait_until(lambda: stack.scalar('up{job="zkledger-collect"}') == 1, stack, "the collector scraped", 60)
    stack.stopped.add("collector")
    stack.collector.send_signal(signal.SIGTERM)
    out, _ = stack.collector.communicate(timeout=60)
    assert stack.collector.returncode == 0
    assert out.strip().splitlines()[-1].startswith("collect zk: ")
    down = wait_until(lambda: stack.firing().get("ZkledgerCollectorDown"), stack, "ZkledgerCollectorDown firing", 60)
    assert down[0]["job"] == "zkledger-collect" and down[0]["severity"] == "critical"
    assert "ZkledgerMonitorDown" not in stack.firing()
