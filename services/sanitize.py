"""Text that leaves the process: secrets redacted from logs, control bytes kept off the terminal.

* :class:`RedactingFilter` sits on the log handlers the CLI installs: it replaces registered secrets
  (:func:`remember_secret`, :func:`remember_credential`, :func:`remember_url`) and anything shaped like auth data (kazoo's ``auth='user:pass'`` packet,
  ``scheme://user:pass@host``) with ``***``, in the message and in a formatted traceback.
* :func:`url_for_log` names a URL by ``scheme://host[:port]/…`` only: the path and query may carry a token.
* :func:`terminal_safe` escapes control characters (ESC, BEL, CR, C1 codes, bidi overrides) so text read
  from logs or ZooKeeper cannot move the cursor, recolour or retitle the terminal, or split a line.
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import urlsplit

MASK = "***"

_secrets: set[str] = set()
_secrets_lock = threading.Lock()

# kazoo's Auth packet repr (auth='user:pw' / auth=b'user:pw'), and userinfo in a URL
_AUTH_FIELD = re.compile(r"""(\bauth(?:_data|_credential)?\s*[=:]\s*b?)(['"])(.*?)\2""", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")

# C0 controls, DEL, C1 controls, and the Unicode bidi/direction marks that reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def remember_secret(value: str | None) -> None:
    """Redact `value` from every log line from now on."""
    if value:
        with _secrets_lock:
            _secrets.add(value)


def remember_credential(credential: str | None) -> None:
    """Redact a ``user:password`` credential, and the password alone (it may be logged without the user)."""
    remember_secret(credential)
    _user, sep, password = (credential or "").partition(":")
    if sep and len(password) >= 4:  # a very short password would mask ordinary text
        remember_secret(password)


def remember_url(url: str) -> None:
    """Redact a URL whose path, query or userinfo may hold a token: the URL and each of those parts."""
    remember_secret(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    if tail not in ("", "/"):
        remember_secret(tail)
    if parts.password:
        remember_secret(parts.password)


def redact(text: str) -> str:
    """`text` with registered secrets and auth-shaped data replaced by ``***``."""
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)  # the longest first: a password inside user:password
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _AUTH_FIELD.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}{m.group(2)}", text)
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)


class RedactingFilter(logging.Filter):
    """A handler filter that rewrites each record's message (and traceback) through :func:`redact`.

    On a handler it sees every record that handler emits, including those propagated from library loggers
    (kazoo logs its auth packet at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: let the handler report it as logging does
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def url_for_log(url: str) -> str:
    """``scheme://host[:port]/…``: where a URL points, without its userinfo, path or query."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    hidden = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{netloc}{hidden}"


def terminal_safe(text: str) -> str:
    """`text` with every control character written as a visible escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if char in named:
        return named[char]
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
