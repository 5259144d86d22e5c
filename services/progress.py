"""A small throttled progress line on stderr for long commands.

On a terminal the line is redrawn in place (`\\r`); in logs and CI a full line is written every few seconds.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO


class Progress:
    """Count work done and show it: ``with Progress(total=n, label="events") as p: p.advance(k)``."""

    def __init__(
        self,
        total: int | None = None,
        label: str = "",
        *,
        stream: TextIO | None = None,
        tty_interval_s: float = 0.2,
        log_interval_s: float = 5.0,
    ) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval = tty_interval_s if self._tty else log_interval_s
        self._started = time.monotonic()
        self._last_draw = self._started
        self._dirty = False  # a \r line is on screen and needs a newline before anything else

    def advance(self, n: int = 1, note: str = "") -> None:
        """Add `n` units of work; redraw if the throttle interval passed."""
        self.done += n
        now = time.monotonic()
        if now - self._last_draw >= self._interval:
            self._last_draw = now
            self._draw(note)

    def set(self, done: int, note: str = "") -> None:
        """Set the absolute amount of work done."""
        self.advance(done - self.done, note)

    def close(self, note: str = "") -> None:
        """Finish the line (only if something was shown, so short runs stay silent)."""
        if self._dirty:
            self._draw(note)
            self._stream.write("\n")
            self._stream.flush()
            self._dirty = False

    def text(self, note: str = "") -> str:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        amount = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        pct = f" {100.0 * self.done / self.total:5.1f}%" if self.total else ""
        rate = f" {self.done / elapsed:,.0f}/s"
        label = f"{self.label}: " if self.label else ""
        return f"{label}{amount}{pct}{rate}" + (f" {note}" if note else "")

    def _draw(self, note: str) -> None:
        if self._tty:
            self._stream.write("\r\x1b[K" + self.text(note))
            self._dirty = True
        else:
            self._stream.write(self.text(note) + "\n")
        self._stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
