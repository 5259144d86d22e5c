"""Anomaly alerts from the monitor: one readable line each, and optionally JSON to a webhook.

The webhook is posted from a background thread through a bounded queue so a slow or dead
endpoint never blocks the stream; each post is retried with backoff, and when the queue is
full the oldest alert is dropped and counted (the anomalies table stays the source of truth).
Redirects are not followed (urllib would turn a 301/302/303 into a bodiless GET): a redirect
fails the alert, like a 4xx, without retries. Logs name the endpoint by scheme and host only,
since the path or query often carries a token.
"""

from __future__ import annotations

import json
import logging
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime
from typing import Any, TextIO

from models.anomalies import describe, describe_group, group_findings
from services.sanitize import remember_url, terminal_safe, url_for_log

log = logging.getLogger(__name__)

_STOP = object()


def anomaly_json(row: Mapping[str, Any]) -> bytes:
    """The webhook body: the anomaly row as JSON (timestamps ISO 8601, details parsed)."""

    def default(value: object) -> object:
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return str(value)

    body = dict(row)
    details = body.get("details")
    if isinstance(details, str):
        try:
            body["details"] = json.loads(details)
        except ValueError:
            pass
    body["summary"] = describe(row)
    return json.dumps(body, default=default, sort_keys=True).encode("utf-8")


class WebhookSender:
    """Posts JSON bodies to one URL from a daemon thread; never blocks the caller."""

    def __init__(
        self,
        url: str,
        *,
        max_queue: int = 10_000,
        attempts: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 5.0,
        post: Callable[[str, bytes, float], int] | None = None,
        on_result: Callable[[bool], None] | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.where = url_for_log(url)  # what logs may show
        remember_url(url)  # and out of anything else logged (urllib errors, -vv debug lines)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self._post = post or _http_post
        self._on_result = on_result  # told of each body: delivered (True) or given up on (False)
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max_queue)
        self._thread = threading.Thread(target=self._run, name="zkledger-webhook", daemon=True)
        self._thread.start()

    def submit(self, body: bytes) -> None:
        while True:
            try:
                self._queue.put_nowait(body)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()  # drop the oldest: the table keeps every anomaly anyway
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (bounded by timeout_s), then stop the thread."""
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, bytes)
            self._deliver(item)

    def _deliver(self, body: bytes) -> None:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                status = self._post(self.url, body, self.timeout_s)
                if 200 <= status < 300:
                    self.sent += 1
                    if self._on_result is not None:
                        self._on_result(True)
                    return
                if not _worth_retrying(status):
                    log.warning("webhook %s answered %s: not retried%s", self.where, status,
                                " (redirects are not followed: configure the final URL)" if 300 <= status < 400 else "")
                    break
                log.warning("webhook %s answered %s (attempt %d/%d)", self.where, status, attempt, self.attempts)
            except (OSError, urllib.error.URLError) as exc:
                log.warning("webhook %s failed: %s (attempt %d/%d)", self.where, _reason(exc), attempt, self.attempts)
            if attempt < self.attempts:
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
        self.failed += 1
        if self._on_result is not None:
            self._on_result(False)


def _worth_retrying(status: int) -> bool:
    """Server trouble and throttling may pass; a redirect or another client error will not."""
    return status >= 500 or status in (408, 429)


def _reason(exc: BaseException) -> str:
    """The failure without the URL (an HTTPError or URLError may carry it)."""
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return type(exc).__name__ if not exc.args else str(exc.args[-1])


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Make every 3xx answer the final one (urllib then reports it as an HTTPError with that code)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects())


def _http_post(url: str, body: bytes, timeout_s: float) -> int:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "zkledger"}
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


class AnomalyAlerter:
    """What the monitor calls after each committed micro-batch with that batch's new anomalies."""

    def __init__(self, webhook_url: str | None = None, out: TextIO | None = None,
                 on_delivery: Callable[[bool], None] | None = None) -> None:
        self.out = out or sys.stdout
        self.webhook = WebhookSender(webhook_url, on_result=on_delivery) if webhook_url else None
        self.count = 0

    def publish(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """A batch's new anomalies: like findings grouped on the terminal, one line per group (an episode that
        started and ended within the batch as its end); every row to the webhook on its own."""
        rows = list(rows)
        for group in group_findings(rows):
            print(terminal_safe(describe_group(group)), file=self.out, flush=True)
        if self.webhook is not None:
            for row in rows:
                self.webhook.submit(anomaly_json(row))
        self.count += len(rows)
        return len(rows)

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close()
