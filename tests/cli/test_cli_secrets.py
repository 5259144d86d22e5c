"""Secrets stay out of the CLI's logs, also at -vv where kazoo logs its auth packet."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from services.sanitize import RedactingFilter, redact, remember_credential, url_for_log
from services.zookeeper import EmbeddedZooKeeper

USER, PASSWORD = "zkledger-ro", "Pa55-w0rd-not-for-logs"


@pytest.mark.integration
def test_vv_does_not_print_the_zookeeper_digest_credential(zk_server: EmbeddedZooKeeper, tmp_path: Path) -> None:
    conf = tmp_path / "auth.toml"
    conf.write_text(f'[zookeeper]\nauth_scheme = "digest"\nauth_credential = "{USER}:{PASSWORD}"\n')
    script = Path(sys.executable).with_name("zkledger")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "zkledger.cli"]
    p = subprocess.run([*cli, "--conf", str(conf), "--lake", str(tmp_path / "lake"), "-vv", "collect", "zk",
                        "--zk", zk_server.hosts, "--duration", "1"],
                       capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    # kazoo did log the auth packet (so the test looks at the right line), with the credential masked
    auth_lines = [line for line in p.stderr.splitlines() if "Auth(" in line]
    assert auth_lines and all("auth='***'" in line for line in auth_lines), auth_lines
    assert PASSWORD not in p.stderr + p.stdout
    assert f"{USER}:" not in p.stderr


def test_filter_masks_registered_secrets_auth_fields_userinfo_and_tracebacks() -> None:
    remember_credential("someone:hunter2-long")
    assert redact("login hunter2-long failed") == "login *** failed"
    assert redact("Auth(auth_type=0, scheme='digest', auth=b'a:b')") == "Auth(auth_type=0, scheme='digest', auth=b'***')"
    assert redact("GET https://bob:pw@example.com/x") == "GET https://***@example.com/x"

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("sending %s", "someone:hunter2-long")
        try:
            raise RuntimeError("rejected credential someone:hunter2-long")
        except RuntimeError:
            logger.exception("auth failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "hunter2" not in text
    assert "sending ***" in text and "RuntimeError: rejected credential ***" in text


def test_url_for_log_keeps_scheme_and_host_only() -> None:
    assert url_for_log("https://hooks.example.com/services/T000/B000/XXXX?token=abc") == "https://hooks.example.com/…"
    assert url_for_log("http://u:p@127.0.0.1:8080/hook") == "http://127.0.0.1:8080/…"
    assert url_for_log("http://[::1]:9/") == "http://[::1]:9"
