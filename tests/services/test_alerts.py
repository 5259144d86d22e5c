"""Monitor alerts: readable lines, and JSON posted to a real local HTTP server with retries."""

from __future__ import annotations

import io
import json
import logging
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from services.alerts import AnomalyAlerter, WebhookSender

ROW = {
    "cluster": "local",
    "anomaly_id": "abc123",
    "kind": "ZOMBIE_CONTROLLER_WRITE",
    "severity": "critical",
    "event_time": datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC),
    "zxid": 0x1000000AB,
    "topic": "orders",
    "partition": 3,
    "controller_id": 1,
    "controller_epoch": 4,
    "details": json.dumps({"message": "leader_epoch bumped by controller epoch 4 while /controller_epoch is 5"}),
    "evidence": ["e1", "e2"],
}


class _Recorder(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []
    fail_first: ClassVar[int] = 0
    done = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if _Recorder.fail_first > 0:
            _Recorder.fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        _Recorder.bodies.append(body)
        self.send_response(204)
        self.end_headers()
        _Recorder.done.set()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def http_server():
    _Recorder.bodies = []
    _Recorder.fail_first = 0
    _Recorder.done = threading.Event()
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_alert_line_is_readable():
    out = io.StringIO()
    alerter = AnomalyAlerter(out=out)
    assert alerter.publish([ROW]) == 1
    line = out.getvalue().strip()
    assert line.startswith("[critical] ZOMBIE_CONTROLLER_WRITE at 2026-11-21 10:00:00")
    assert "orders-3" in line and "controller 1 (epoch 4)" in line and "zxid=0x1000000ab" in line
    assert "leader_epoch bumped" in line


def test_webhook_receives_json_after_retries(http_server):
    _Recorder.fail_first = 2  # two 503s, then success: retried, delivered once
    alerter = AnomalyAlerter(webhook_url=http_server, out=io.StringIO())
    sender = alerter.webhook
    assert sender is not None
    sender.backoff_s = 0.01
    alerter.publish([ROW])
    assert _Recorder.done.wait(10)
    alerter.close()
    assert len(_Recorder.bodies) == 1
    body = json.loads(_Recorder.bodies[0])
    assert body["kind"] == "ZOMBIE_CONTROLLER_WRITE"
    assert body["details"]["message"].startswith("leader_epoch bumped")
    assert body["event_time"] == "2026-11-21T10:00:00+00:00"
    assert sender.sent == 1 and sender.failed == 0


def test_dead_webhook_never_blocks_and_counts_failures():
    # a port nobody listens on: every attempt fails fast; publish must return at once
    sender = WebhookSender("http://127.0.0.1:9/none", attempts=2, backoff_s=0.01, timeout_s=0.5, max_queue=3)
    alerter = AnomalyAlerter(out=io.StringIO())
    alerter.webhook = sender
    alerter.publish([ROW] * 20)  # more than the queue holds: oldest dropped, caller not blocked
    alerter.close()
    assert sender.sent == 0
    assert sender.failed + sender.dropped == 20


def test_bad_webhook_url_is_rejected():
    with pytest.raises(ValueError, match="http"):
        WebhookSender("ftp://example")


class _Redirector(BaseHTTPRequestHandler):
    """Answers POST /hook/... with a redirect to /landing, and records every request that reaches /landing."""

    status: ClassVar[int] = 302
    landed: ClassVar[list[tuple[str, bytes]]] = []
    posts: ClassVar[int] = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path.startswith("/landing"):
            _Redirector.landed.append(("POST", body))
            self.send_response(204)
            self.end_headers()
            return
        _Redirector.posts += 1
        self.send_response(_Redirector.status)
        self.send_header("Location", "/landing")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        _Redirector.landed.append(("GET", b""))
        self.send_response(200)  # what made a bodiless GET count as delivered
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def redirecting_server():
    _Redirector.landed = []
    _Redirector.posts = 0
    server = HTTPServer(("127.0.0.1", 0), _Redirector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_not_followed_nor_counted_as_delivered(redirecting_server, status):
    _Redirector.status = status
    sender = WebhookSender(f"http://127.0.0.1:{redirecting_server}/hook", attempts=3, backoff_s=0.01, timeout_s=5)
    sender.submit(b'{"kind": "SPLIT_BRAIN"}')
    sender.close()
    assert _Redirector.landed == []  # neither a GET nor a re-POST went anywhere else
    assert _Redirector.posts == 1  # a redirect is final: no retries
    assert sender.sent == 0 and sender.failed == 1


def test_failing_webhook_logs_host_not_token(http_server, caplog):
    token = "T0KEN-abcdef123456"
    _Recorder.fail_first = 10  # always 503
    url = http_server.replace("/hook", f"/hook/{token}?key={token}")
    sender = WebhookSender(url, attempts=2, backoff_s=0.01, timeout_s=5)
    with caplog.at_level(logging.WARNING, logger="services.alerts"):
        sender.submit(b"{}")
        sender.close()
    assert sender.failed == 1
    assert caplog.records, "the failure is logged"
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert token not in text and "/hook" not in text
    host = http_server.split("/hook")[0]
    assert f"webhook {host}/… answered 503" in text


def test_dead_webhook_log_names_host_only(caplog):
    sender = WebhookSender("http://127.0.0.1:9/secret-path?token=s3cr3t", attempts=1, timeout_s=0.5)
    with caplog.at_level(logging.WARNING, logger="services.alerts"):
        sender.submit(b"{}")
        sender.close()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "http://127.0.0.1:9/… failed" in text
    assert "s3cr3t" not in text and "secret-path" not in text


def test_alert_line_escapes_terminal_control_bytes():
    out = io.StringIO()
    hostile = {**ROW, "topic": "orders\x1b[2J", "details": json.dumps({"message": "x\x1b]0;pwned\x07\r\nFAKE LINE\x9b1m"})}
    AnomalyAlerter(out=out).publish([hostile])
    line = out.getvalue()
    assert line.count("\n") == 1 and line.endswith("\n")
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in line[:-1]), repr(line)
    assert "\\x1b]0;pwned\\x07" in line and "\\r\\nFAKE LINE" in line and "\\x9b1m" in line
