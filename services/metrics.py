"""Prometheus metrics and health endpoints of the long-running commands (`collect zk|txnlog|logs`, `monitor`).

One ``Metrics`` object per process: its own registry (the ``zkledger_`` metrics, plus the client library's
standard ``process_*`` metrics), a small typed API the collectors and the monitor call, and an HTTP server
thread on ``host:port`` that answers

* ``/metrics``: the registry in Prometheus's text exposition format (OpenMetrics when the scraper asks);
* ``/healthz``: 200 while the process's loop turned within ``stale_seconds``, else 503 (a supervisor restarts
  a stuck process on it);
* ``/readyz``: 200 when the source is connected and the last commit (or a turn of the loop that found nothing
  pending) is at most ``ready_seconds`` old, else 503 with a one-line reason.

Labels are bounded: ``table`` (a table of ``models.tables``), ``source`` (``watch``, ``resync``, ``txnlog``,
``logs``, ``lake``), ``reason`` (a fixed set of reason classes, ``reason_class``), ``kind`` and ``severity``
(``models.anomalies``); anything else becomes ``other``. No label ever holds a path, a host, a credential or a
payload. Collectors and the engine never import this module at run time: they get the object (or None) from
the CLI.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder

from models.anomalies import SEVERITY, AnomalyKind
from models.tables import ALL_TABLES, DERIVED_TABLES

log = logging.getLogger(__name__)

COMMANDS: Final = ("collect-zk", "collect-txnlog", "collect-logs", "collect-kraft", "monitor")
SOURCES: Final[Mapping[str, tuple[str, ...]]] = {
    "collect-zk": ("watch", "resync"),
    "collect-txnlog": ("txnlog",),
    "collect-logs": ("logs",),
    "collect-kraft": ("kraft",),
    "monitor": ("lake",),
}
"""The ``source`` label values each command uses (a collector's rows carry them in their ``source`` column)."""
TABLES: Final = frozenset(ALL_TABLES)
SEVERITIES: Final = ("info", "warning", "error", "critical")
REASON_CLASSES: Final = ("unparsed_line", "long_line", "out_of_range", "lost_transactions", "other")
"""What ``zkledger_quarantine_rows_total``'s ``reason`` may be: the quarantine's free-text reasons by class."""
_REASON_PREFIXES: Final = (
    ("no recognisable layout", "unparsed_line"),  # collectors.log_parser: a WARN/ERROR line of no known template
    ("line of ", "long_line"),  # collectors.kafka_logs: a line cut to MAX_LINE_BYTES
)
BATCH_BUCKETS: Final = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_POSITIONS_KEPT: Final = 100_000  # (position, seen at) pairs kept per source for the commit lag


def reason_class(reason: str) -> str:
    """The bounded class of a quarantine reason (free text naming files, values and offsets)."""
    for prefix, klass in _REASON_PREFIXES:
        if reason.startswith(prefix):
            return klass
    if "32-bit range" in reason:  # models.events.int32_problem
        return "out_of_range"
    if "are lost at most" in reason:  # collectors.txnlog: a damaged stretch of a transaction log
        return "lost_transactions"
    return "other"


def _one_of(value: object, allowed: Iterable[str]) -> str:
    text = str(value)
    return text if text in set(allowed) else "other"


def _seconds(when: datetime | float | None, default: float) -> float:
    if when is None:
        return default
    return when.timestamp() if isinstance(when, datetime) else float(when)


def version() -> str:
    """The installed zkledger's version (``unknown`` when it runs from a source tree or a zip)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("zkledger")
    except PackageNotFoundError:
        return "unknown"


class _Progress:
    """Where one source is: the newest position seen and committed, and when the oldest pending one was seen."""

    def __init__(self) -> None:
        self.seen = -1
        self.committed = -1
        self.waiting: deque[tuple[int, float]] = deque()  # (position, when seen), positions increasing

    def see(self, position: int, now: float) -> None:
        if position > self.seen:
            self.seen = position
            if position > self.committed and len(self.waiting) < _POSITIONS_KEPT:
                self.waiting.append((position, now))

    def commit(self, position: int) -> None:
        self.committed = max(self.committed, position)
        while self.waiting and self.waiting[0][0] <= self.committed:
            self.waiting.popleft()

    def lag(self, now: float) -> float:
        return now - self.waiting[0][1] if self.waiting else 0.0


class Metrics:
    """The metrics of one process (``command``: one of ``COMMANDS``) and its health.

    ``stale_seconds``: how long the loop may go without turning before ``/healthz`` fails; ``ready_seconds``:
    how old the last commit (or the last turn that found nothing pending) may be for ``/readyz``.
    """

    def __init__(self, command: str, *, stale_seconds: float = 120.0, ready_seconds: float = 300.0,
                 clock: Callable[[], float] = time.time) -> None:
        if command not in COMMANDS:
            raise ValueError(f"command must be one of {', '.join(COMMANDS)}, got {command!r}")
        self.command = command
        self.stale_seconds, self.ready_seconds = stale_seconds, ready_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self.started = clock()
        self._loop_at = self.started  # a process starting up counts as turning
        self._fresh_at: float | None = None  # the last commit, or turn with nothing pending
        self._connected = False
        self._monitor_newest = 0.0
        self._progress: dict[str, _Progress] = {}
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: nothing reads them
        r = self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=r)
        Info("zkledger_build", "The zkledger version and the command this process runs.", registry=r).info(
            {"version": version(), "command": command})
        Gauge("zkledger_uptime_seconds", "Seconds since the process started.", registry=r).set_function(
            lambda: self._clock() - self.started)
        self.connected_gauge = Gauge("zkledger_source_connected",
                                     "1 while the source is connected (ZooKeeper session, data dir or log path "
                                     "readable, the monitor's query active), else 0.", registry=r)
        self.loop_gauge = Gauge("zkledger_loop_last_turn_timestamp_seconds",
                                "When the process's main loop last turned (Unix time).", registry=r)
        self.loop_gauge.set(self.started)
        self.commit_gauge = Gauge("zkledger_last_commit_timestamp_seconds",
                                  "When the process last committed rows to the lake (Unix time; 0: not yet).",
                                  registry=r)
        Gauge("zkledger_ready", "1 when /readyz answers 200, else 0.", registry=r).set_function(
            lambda: 1.0 if self.readiness()[0] else 0.0)
        # --- collectors (registered in a collector only, as the monitor's metrics in the monitor only)
        col, mon = (None, r) if command == "monitor" else (r, None)
        self.rows = Counter("zkledger_rows_committed_total", "Rows a collector committed, by table and source.",
                            ["table", "source"], registry=col)
        self.seen_position = Gauge("zkledger_source_position",
                                   "Newest position seen in the source: a zxid (watch, resync, txnlog) or the "
                                   "log lines read by this process (logs).", ["source"], registry=col)
        self.committed_position = Gauge("zkledger_committed_position",
                                        "Newest position committed to the lake (same units as "
                                        "zkledger_source_position).", ["source"], registry=col)
        self.seen_time = Gauge("zkledger_source_event_time_seconds",
                               "Event time of the newest change seen (Unix time; the watch collector: when it saw "
                               "it).", ["source"], registry=col)
        self.committed_time = Gauge("zkledger_committed_event_time_seconds",
                                    "Event time of the newest change committed (Unix time).", ["source"], registry=col)
        self.lag = Gauge("zkledger_commit_lag_seconds",
                         "0 when everything seen is committed, else the seconds since the oldest change still "
                         "waiting to be committed was seen.", ["source"], registry=col)
        self.gaps = Counter("zkledger_gaps_total", "GAP rows written (changes the collector knows it missed).",
                            ["source"], registry=col)
        self.reconnects = Counter("zkledger_reconnects_total", "Reconnections to the source after a lost connection.",
                                  ["source"], registry=col)
        self.expiries = Counter("zkledger_session_expiries_total", "ZooKeeper sessions lost (expired or closed).",
                                ["source"], registry=col)
        self.quarantine = Counter("zkledger_quarantine_rows_total", "Rows written to quarantine, by reason class.",
                                  ["source", "reason"], registry=col)
        self.rewrites = Counter("zkledger_rewritten_batches_total", "Batches the source rewrote at positions already "
                                "stored (KRaft: Raft truncated an uncommitted tail).", ["source"], registry=col)
        # --- monitor
        self.batch_seconds = Histogram("zkledger_monitor_batch_duration_seconds",
                                       "Wall time of the monitor's micro-batches.", buckets=BATCH_BUCKETS, registry=mon)
        self.input_rows = Counter("zkledger_monitor_input_rows_total", "Bronze rows the monitor's micro-batches read.",
                                  ["table"], registry=mon)
        self.written = Counter("zkledger_monitor_rows_written_total", "Rows the monitor committed, by table.",
                               ["table"], registry=mon)
        self.anomaly_count = Counter("zkledger_anomalies_total", "New anomalies the monitor committed.",
                                     ["kind", "severity"], registry=mon)
        self.monitor_time = Gauge("zkledger_monitor_committed_event_time_seconds",
                                  "Event time of the newest change the monitor committed a row for (Unix "
                                  "time; 0: none yet).", registry=mon)
        Gauge("zkledger_monitor_event_lag_seconds",
              "Seconds between now and the event time of the newest change the monitor committed a row "
              "for (0: none yet).", registry=mon).set_function(self._monitor_lag)
        self.staged_age = Gauge("zkledger_monitor_staged_seconds",
                                "Age of the oldest micro-batch whose tables other than anomalies the monitor has "
                                "staged and not committed yet (0: none).", registry=mon)
        self.webhook_ok = Counter("zkledger_webhook_deliveries_total", "Anomalies delivered to the webhook.",
                                  registry=mon)
        self.webhook_failed = Counter("zkledger_webhook_failures_total",
                                      "Anomalies the webhook did not take after every retry.", registry=mon)
        self._precreate()

    def _precreate(self) -> None:
        """Series at 0 from the start (``increase()`` needs the 0; dashboards show a flat line, not nothing)."""
        if self.command == "monitor":
            for kind in AnomalyKind:
                self.anomaly_count.labels(kind.value, SEVERITY.get(kind, "other"))
            for table in ("znode_events", "controller_decisions"):
                self.input_rows.labels(table)
            for spec in DERIVED_TABLES:
                self.written.labels(spec.name)
            return
        table = {"collect-logs": "controller_decisions"}.get(self.command, "znode_events")
        for source in SOURCES[self.command]:
            self.rows.labels(table, source)
        source = SOURCES[self.command][0]  # positions, gaps, connections: the collector's own source
        if self.command != "collect-zk":
            self.rows.labels("quarantine", source)
        for counter in (self.gaps, self.reconnects, self.expiries, self.rewrites):
            counter.labels(source)
        for reason in REASON_CLASSES:
            self.quarantine.labels(source, reason)
        for gauge in (self.seen_position, self.committed_position, self.seen_time, self.committed_time):
            gauge.labels(source)
        self.lag.labels(source).set_function(lambda: self._lag(source))

    # ------------------------------------------------------------------ health
    def loop_turned(self, *, idle: bool = False) -> None:
        """The main loop turned; ``idle``: nothing is waiting to be committed (the process is up to date)."""
        now = self._clock()
        self._loop_at = now
        self.loop_gauge.set(now)
        if idle:
            self._fresh_at = now

    def source_connected(self, connected: bool) -> None:
        self._connected = connected
        self.connected_gauge.set(1 if connected else 0)

    def health(self) -> tuple[bool, str]:
        """``/healthz``: (alive, one line)."""
        quiet = self._clock() - self._loop_at
        if quiet > self.stale_seconds:
            return False, f"loop has not turned for {quiet:.0f} s (limit {self.stale_seconds:g} s)"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: (ready, one line)."""
        if not self._connected:
            return False, "source not connected"
        if self._fresh_at is None:
            return False, "nothing committed yet"
        age = self._clock() - self._fresh_at
        if age > self.ready_seconds:
            return False, f"last commit {age:.0f} s ago (limit {self.ready_seconds:g} s)"
        return True, "ok"

    # ------------------------------------------------------------------ collectors
    def rows_committed(self, table: str, source: str, n: int) -> None:
        """``n`` rows of ``table`` committed (``source``: the rows' source column, or ``logs``)."""
        now = self._clock()
        self.rows.labels(_one_of(table, TABLES), _one_of(source, _ALL_SOURCES)).inc(n)
        self.commit_gauge.set(now)
        self._fresh_at = now

    def seen(self, source: str, position: int, event_time: datetime | float | None = None) -> None:
        """The source showed a change at ``position`` (a zxid, or a line count for logs)."""
        label = _one_of(source, _ALL_SOURCES)
        now = self._clock()
        with self._lock:
            progress = self._progress.setdefault(label, _Progress())
            newer = position > progress.seen
            progress.see(position, now)
        if newer:
            self.seen_position.labels(label).set(position)
            self.seen_time.labels(label).set(_seconds(event_time, now))

    def committed(self, source: str, position: int, event_time: datetime | float | None = None) -> None:
        """Everything the source showed up to ``position`` is in the lake."""
        label = _one_of(source, _ALL_SOURCES)
        now = self._clock()
        with self._lock:
            progress = self._progress.setdefault(label, _Progress())
            newer = position > progress.committed
            progress.commit(position)
        if newer:
            self.committed_position.labels(label).set(position)
            self.committed_time.labels(label).set(_seconds(event_time, now))
        self._fresh_at = now

    def _lag(self, source: str) -> float:
        with self._lock:
            progress = self._progress.get(source)
            return progress.lag(self._clock()) if progress else 0.0

    def gap(self, source: str) -> None:
        self.gaps.labels(_one_of(source, _ALL_SOURCES)).inc()

    def rewritten(self, source: str) -> None:
        self.rewrites.labels(_one_of(source, _ALL_SOURCES)).inc()

    def reconnected(self, source: str) -> None:
        self.reconnects.labels(_one_of(source, _ALL_SOURCES)).inc()

    def session_expired(self, source: str) -> None:
        self.expiries.labels(_one_of(source, _ALL_SOURCES)).inc()

    def quarantined(self, source: str, reason: str, n: int = 1) -> None:
        """``n`` quarantine rows with the free-text ``reason`` (counted by its class)."""
        self.quarantine.labels(_one_of(source, _ALL_SOURCES), reason_class(reason)).inc(n)

    # ------------------------------------------------------------------ monitor
    def batch_done(self, duration_s: float, input_rows: Mapping[str, int]) -> None:
        """A micro-batch finished in ``duration_s``, having read ``input_rows`` per bronze table."""
        self.batch_seconds.observe(duration_s)
        for table, n in input_rows.items():
            self.input_rows.labels(_one_of(table, TABLES)).inc(n)
        now = self._clock()
        self.commit_gauge.set(now)  # a finished batch committed (at least its partition_state done-marker)
        self._fresh_at = now

    def rows_written(self, table: str, n: int) -> None:
        self.written.labels(_one_of(table, TABLES)).inc(n)

    def anomalies(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """New anomaly rows committed (their ``kind`` and ``severity``)."""
        for row in rows:
            kind = _one_of(row.get("kind"), _KINDS)
            self.anomaly_count.labels(kind, _one_of(row.get("severity"), SEVERITIES)).inc()

    def monitor_committed(self, event_time: datetime | float) -> None:
        """The newest change the monitor has committed a row for happened at ``event_time``."""
        self._monitor_newest = _seconds(event_time, 0.0)
        self.monitor_time.set(self._monitor_newest)

    def _monitor_lag(self) -> float:
        newest = self._monitor_newest
        return max(0.0, self._clock() - newest) if newest else 0.0

    def staged(self, oldest_age_s: float) -> None:
        """The oldest staged, not yet committed micro-batch is ``oldest_age_s`` old (0: none)."""
        self.staged_age.set(oldest_age_s)

    def webhook_result(self, delivered: bool) -> None:
        (self.webhook_ok if delivered else self.webhook_failed).inc()

    # ------------------------------------------------------------------ the HTTP server
    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Answer /metrics, /healthz and /readyz on ``host:port`` from a daemon thread (port 0: any free
        port); returns the address bound. OSError when it cannot listen there."""
        handler = type("MetricsHandler", (_Handler,), {"metrics": self})
        self._server = http.server.ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="zkledger-metrics", daemon=True)
        self._thread.start()
        bound = self._server.server_address
        log.info("metrics and health on http://%s:%d/metrics", bound[0], bound[1])
        return str(bound[0]), int(bound[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


_ALL_SOURCES: Final = frozenset(s for sources in SOURCES.values() for s in sources)
_KINDS: Final = frozenset(k.value for k in AnomalyKind)


class _Handler(http.server.BaseHTTPRequestHandler):
    metrics: Metrics
    server_version = "zkledger"
    sys_version = ""

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._send(200, content_type, encoder(self.metrics.registry), body)
        elif path in ("/healthz", "/readyz"):
            ok, why = self.metrics.health() if path == "/healthz" else self.metrics.readiness()
            self._send(200 if ok else 503, "text/plain; charset=utf-8", (why + "\n").encode(), body)
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics, /healthz or /readyz\n", body)

    def _send(self, status: int, content_type: str, payload: bytes, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes every few seconds: not worth a line each
        log.debug("metrics request: " + format, *args)


def add_metrics_argument(parser: Any) -> None:
    """The ``--metrics-port`` option of a long-running command."""
    parser.add_argument("--metrics-port", metavar="PORT", type=int, default=None,
                        help="serve Prometheus metrics on http://HOST:PORT/metrics and health on /healthz and "
                             "/readyz (HOST: [metrics] host, 127.0.0.1; default: [metrics] port; 0 = off)")


@contextlib.contextmanager
def metrics_server(command: str, port: int | None, settings: Any) -> Iterator[Metrics | None]:
    """A serving ``Metrics`` for the command's run (None when the port, given or from ``settings.metrics``, is 0).
    A port that cannot be listened on is a one-line ``UserError``."""
    from services.errors import UserError

    conf = settings.metrics
    port = conf.port if port is None else port
    if not port:
        yield None
        return
    if not 0 < port < 65536:
        raise UserError(f"--metrics-port must be a port number (1 .. 65535, 0 = off), got {port}")
    metrics = Metrics(command, stale_seconds=conf.stale_seconds, ready_seconds=conf.ready_seconds)
    try:
        metrics.serve(conf.host, port)
    except OSError as exc:
        raise UserError(f"cannot serve metrics on {conf.host}:{port}: {exc.strerror or exc}") from None
    try:
        yield metrics
    finally:
        metrics.close()
