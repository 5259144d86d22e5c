"""services.metrics: the registry, the HTTP endpoints (/metrics, /healthz, /readyz) served on a real socket, the
bounded labels, and the log collector (no JVM: delta-rs) run with metrics, in-process and as `zkledger collect
logs --follow --metrics-port`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conf.settings import load_settings
from services.alerts import WebhookSender
from services.errors import UserError
from services.metrics import REASON_CLASSES, Metrics, metrics_server, reason_class
from services.zookeeper import free_port

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "logs"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def served() -> Iterator[tuple[Metrics, Clock, str]]:
    clock = Clock()
    metrics = Metrics("collect-txnlog", stale_seconds=30, ready_seconds=60, clock=clock)
    host, port = metrics.serve("127.0.0.1", 0)
    try:
        yield metrics, clock, f"http://{host}:{port}"
    finally:
        metrics.close()


def test_metrics_endpoint_serves_the_counters_the_collector_reports(served: tuple[Metrics, Clock, str]) -> None:
    metrics, clock, url = served
    status, text = get(url + "/metrics")
    assert status == 200
    assert value(text, "zkledger_build_info", command="collect-txnlog", version=_version()) == 1
    assert value(text, "zkledger_rows_committed_total", table="znode_events", source="txnlog") == 0
    metrics.seen("txnlog", 0x10, 1_000.0)
    metrics.seen("txnlog", 0x12, 1_002.0)
    clock.now += 7
    metrics.rows_committed("znode_events", "txnlog", 5)
    metrics.rows_committed("znode_events", "txnlog", 2)
    metrics.committed("txnlog", 0x10, 1_000.0)  # 0x12 still waits: seen 7 s ago
    metrics.gap("txnlog")
    metrics.quarantined("txnlog", "log.1: torn entry; transactions 0x5..0x7 are lost at most (bytes 9..99 unreadable)")
    text = get(url + "/metrics")[1]
    assert value(text, "zkledger_rows_committed_total", table="znode_events", source="txnlog") == 7
    assert value(text, "zkledger_source_position", source="txnlog") == 0x12
    assert value(text, "zkledger_committed_position", source="txnlog") == 0x10
    assert value(text, "zkledger_source_event_time_seconds", source="txnlog") == 1_002
    assert value(text, "zkledger_commit_lag_seconds", source="txnlog") == 7
    assert value(text, "zkledger_gaps_total", source="txnlog") == 1
    assert value(text, "zkledger_quarantine_rows_total", source="txnlog", reason="lost_transactions") == 1
    assert value(text, "zkledger_uptime_seconds") == 7
    metrics.committed("txnlog", 0x12, 1_002.0)
    assert value(get(url + "/metrics")[1], "zkledger_commit_lag_seconds", source="txnlog") == 0


def test_health_and_readiness_follow_the_loop_and_the_commits(served: tuple[Metrics, Clock, str]) -> None:
    metrics, clock, url = served
    assert get(url + "/healthz") == (200, "ok\n")  # starting up counts as turning
    assert get(url + "/readyz") == (503, "source not connected\n")
    metrics.source_connected(True)
    assert get(url + "/readyz") == (503, "nothing committed yet\n")
    metrics.loop_turned(idle=True)  # nothing pending: up to date
    assert get(url + "/readyz") == (200, "ok\n")
    assert value(get(url + "/metrics")[1], "zkledger_ready") == 1
    clock.now += 45
    assert get(url + "/healthz") == (503, "loop has not turned for 45 s (limit 30 s)\n")
    metrics.loop_turned()  # turning, but with rows pending
    assert get(url + "/healthz") == (200, "ok\n")
    clock.now += 20
    assert get(url + "/readyz") == (503, "last commit 65 s ago (limit 60 s)\n")
    metrics.rows_committed("znode_events", "txnlog", 1)
    assert get(url + "/readyz") == (200, "ok\n")
    metrics.source_connected(False)
    assert get(url + "/readyz")[0] == 503
    assert get(url + "/nothing")[0] == 404
    request = urllib.request.Request(url + "/healthz", method="HEAD")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200 and answer.read() == b""


def test_labels_stay_bounded_whatever_the_callers_pass(served: tuple[Metrics, Clock, str]) -> None:
    metrics, _, url = served
    metrics.rows_committed("/var/lib/zookeeper/secret-table", "txnlog:/var/lib/zookeeper", 3)
    metrics.quarantined("logs", "no recognisable layout (ERROR line) in /var/log/kafka/server.log")
    monitor = Metrics("monitor")
    monitor.anomalies([{"kind": "SPLIT_BRAIN", "severity": "critical"}, {"kind": "user:pass@host", "severity": "x"}])
    text = get(url + "/metrics")[1]
    assert value(text, "zkledger_rows_committed_total", table="other", source="other") == 3
    assert value(text, "zkledger_quarantine_rows_total", source="logs", reason="unparsed_line") == 1
    assert not [name for name, _ in samples(text) if name.startswith("zkledger_monitor_")]  # a collector's only
    from prometheus_client import generate_latest

    monitor_text = generate_latest(monitor.registry).decode()
    assert value(monitor_text, "zkledger_anomalies_total", kind="SPLIT_BRAIN", severity="critical") == 1
    assert value(monitor_text, "zkledger_anomalies_total", kind="other", severity="other") == 1
    assert not [name for name, _ in samples(monitor_text) if name.startswith("zkledger_rows_committed")]
    label_values = {v for _, labels in [*samples(text), *samples(monitor_text)] for _, v in labels}
    assert not [v for v in label_values if "/" in v or "@" in v or ":" in v]


@pytest.mark.parametrize(("reason", "klass"), [
    ("no recognisable layout (WARN line)", "unparsed_line"),
    ("line of 2000000 bytes is longer than 65536: only its first 65536 bytes were read and kept", "long_line"),
    ("controller_epoch 9999999999 is outside Kafka's 32-bit range", "out_of_range"),
    ("isr [1, 9999999999] has a broker id outside Kafka's 32-bit range", "out_of_range"),
    ("log.100: bad crc; transactions 0x5..0x9 are lost at most (bytes from offset 20 unreadable)", "lost_transactions"),
    ("something new", "other"),
])
def test_quarantine_reasons_fall_into_fixed_classes(reason: str, klass: str) -> None:
    assert reason_class(reason) == klass
    assert klass in REASON_CLASSES


def test_monitor_metrics_batches_anomalies_event_lag_and_webhook() -> None:
    clock = Clock()
    metrics = Metrics("monitor", clock=clock)
    metrics.batch_done(3.2, {"znode_events": 40, "controller_decisions": 2})
    metrics.rows_written("anomalies", 2)
    metrics.monitor_committed(clock.now - 90)
    metrics.anomalies([{"kind": "ZOMBIE_CONTROLLER_WRITE", "severity": "critical"}])
    posted: list[bytes] = []
    def accept(url: str, body: bytes, timeout: float) -> int:
        posted.append(body)
        return 200

    ok = WebhookSender("http://127.0.0.1:1/hook", attempts=1, post=accept, on_result=metrics.webhook_result)
    ok.submit(b"{}")
    ok.close()
    failing = WebhookSender("http://127.0.0.1:1/hook", attempts=2, backoff_s=0.01, post=lambda url, body, t: 503,
                            on_result=metrics.webhook_result)
    failing.submit(b"{}")
    failing.close()
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    assert value(text, "zkledger_monitor_batch_duration_seconds_count") == 1
    assert value(text, "zkledger_monitor_batch_duration_seconds_bucket", le="5.0") == 1
    assert value(text, "zkledger_monitor_batch_duration_seconds_bucket", le="2.5") == 0
    assert value(text, "zkledger_monitor_input_rows_total", table="znode_events") == 40
    assert value(text, "zkledger_monitor_rows_written_total", table="anomalies") == 2
    assert value(text, "zkledger_monitor_event_lag_seconds") == 90
    assert value(text, "zkledger_anomalies_total", kind="ZOMBIE_CONTROLLER_WRITE", severity="critical") == 1
    assert value(text, "zkledger_anomalies_total", kind="SPLIT_BRAIN", severity="critical") == 0  # there at 0
    assert posted == [b"{}"]
    assert value(text, "zkledger_webhook_deliveries_total") == 1
    assert value(text, "zkledger_webhook_failures_total") == 1


def test_metrics_server_is_off_at_port_0_and_a_busy_port_is_a_one_line_error() -> None:
    settings = load_settings()
    with metrics_server("collect-zk", None, settings) as none:
        assert none is None  # [metrics] port = 0 by default
    with metrics_server("collect-zk", free_port(), settings) as first:
        assert first is not None and first._server is not None
        port = first._server.server_address[1]
        with pytest.raises(UserError, match=f"cannot serve metrics on 127.0.0.1:{port}: "), \
                metrics_server("collect-zk", port, settings):
            pass
    with pytest.raises(UserError, match="--metrics-port must be a port number"), \
            metrics_server("collect-zk", 70000, settings):
        pass


def test_log_collector_reports_what_it_commits(tmp_path: Path) -> None:
    from collectors.kafka_logs import collect_logs
    from lakehouse import Lake

    lake = Lake(tmp_path / "lake", cluster="m")
    log_file = tmp_path / "broker-1" / "controller.log"
    log_file.parent.mkdir()
    text = (LOGS / "zombie").rglob("*.log").__next__().read_text()
    log_file.write_text(text + "[2026-01-01 00:00:00,000] ERROR something no template knows (kafka.Foo)\n")
    metrics = Metrics("collect-logs")
    summary = collect_logs(lake, log_file, metrics=metrics)
    from prometheus_client import generate_latest

    got = generate_latest(metrics.registry).decode()
    decisions = lake.row_count("controller_decisions")
    assert decisions > 0 and summary["records"] == decisions
    assert value(got, "zkledger_rows_committed_total", table="controller_decisions", source="logs") == decisions
    assert value(got, "zkledger_rows_committed_total", table="quarantine", source="logs") == lake.row_count("quarantine")
    assert value(got, "zkledger_quarantine_rows_total", source="logs", reason="unparsed_line") >= 1
    lines = len(log_file.read_text().splitlines())
    assert value(got, "zkledger_source_position", source="logs") == lines
    assert value(got, "zkledger_committed_position", source="logs") == lines
    assert value(got, "zkledger_source_connected") == 1


def test_collect_logs_follow_serves_metrics_and_health_and_exits_0(tmp_path: Path) -> None:
    from lakehouse import Lake

    log_dir = tmp_path / "kafka"
    for source in (LOGS / "zombie").rglob("*.log"):
        target = log_dir / source.relative_to(LOGS / "zombie")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    port = free_port()
    cmd = [sys.executable, "-m", "zkledger.cli", "--lake", str(tmp_path / "lake"), "--cluster", "m", "collect", "logs",
           "--path", str(log_dir), "--follow", "--metrics-port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    lake = Lake(tmp_path / "lake", cluster="m")
    try:
        def committed() -> Any:
            try:
                _, text = get(url + "/metrics")
            except OSError:
                return None
            rows = value(text, "zkledger_rows_committed_total", table="controller_decisions", source="logs")
            return text if rows and lake.exists("controller_decisions") and \
                rows == lake.row_count("controller_decisions") else None

        deadline = time.monotonic() + 60
        while (text := committed()) is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the collector's metrics never matched the lake"
            time.sleep(0.2)
        assert value(text, "zkledger_build_info", command="collect-logs", version=_version()) == 1
        assert get(url + "/healthz") == (200, "ok\n")
        assert get(url + "/readyz") == (200, "ok\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip().splitlines()[-1].startswith("collect logs: ")


def _version() -> str:
    from services.metrics import version

    return version()


def test_kraft_collector_reports_what_it_commits(tmp_path: Path) -> None:
    from collectors.kraft_collect import KraftCollector
    from lakehouse import Lake
    from tests.collectors.kraft_fixtures import MetadataLog

    lake = Lake(tmp_path / "lake", cluster="k")
    log = MetadataLog.create(tmp_path / "metadata")
    log.topics(*(f"t{i}" for i in range(5)))
    log.topics("u")
    metrics = Metrics("collect-kraft")
    summary = KraftCollector(lake, log.path, metrics=metrics).run()
    from prometheus_client import generate_latest

    got = generate_latest(metrics.registry).decode()
    assert summary["records"] == lake.row_count("kraft_records") == 6
    assert value(got, "zkledger_rows_committed_total", table="kraft_records", source="kraft") == 6
    assert value(got, "zkledger_source_position", source="kraft") == 5
    assert value(got, "zkledger_committed_position", source="kraft") == 5
    assert value(got, "zkledger_source_connected") == 1


def test_kraft_collector_counts_the_batches_raft_rewrote(tmp_path: Path) -> None:
    import os

    from collectors.kraft_collect import KraftCollector
    from lakehouse import Lake
    from tests.collectors.kraft_fixtures import MetadataLog

    lake = Lake(tmp_path / "lake", cluster="k")
    log = MetadataLog.create(tmp_path / "metadata")
    log.leader_change(1)
    committed = log.active.stat().st_size
    log.topics("a", "b")  # offsets 1-2, never committed
    KraftCollector(lake, log.path).run()
    os.truncate(log.active, committed)
    log.next_offset = 1
    log.leader_change(2, epoch=2)
    log.topics("c", epoch=2)  # offsets 1 and 2 again
    metrics = Metrics("collect-kraft")
    assert KraftCollector(lake, log.path, metrics=metrics).run()["rewritten"] == 2
    from prometheus_client import generate_latest

    got = generate_latest(metrics.registry).decode()
    assert value(got, "zkledger_rewritten_batches_total", source="kraft") == 2
    assert value(got, "zkledger_rows_committed_total", table="kraft_records", source="kraft") == 2
