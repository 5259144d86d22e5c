"""Monitor alerts: readable lines, and JSON posted to a real local HTTP server with retries."""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from zkledger.alerts import AnomalyAlerter, WebhookSender

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
