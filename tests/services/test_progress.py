"""Progress: throttled lines on a non-terminal stream, in-place redraws on a terminal."""

from __future__ import annotations

import io

from services.progress import Progress


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_mode_writes_full_lines_only_after_the_interval() -> None:
    out = io.StringIO()
    p = Progress(total=10, label="events", stream=out, log_interval_s=0.0)
    p.advance(4)
    p.advance(1, note="zxid 0x5")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("events: 4/10  40.0%") and lines[1].endswith("zxid 0x5")
    assert "\r" not in out.getvalue()


def test_throttle_suppresses_frequent_updates() -> None:
    out = io.StringIO()
    with Progress(label="rows", stream=out, log_interval_s=3600) as p:
        for _ in range(1000):
            p.advance()
    assert out.getvalue() == ""  # nothing due yet, and a short run stays silent
    assert p.done == 1000


def test_tty_mode_redraws_in_place_and_ends_the_line() -> None:
    out = FakeTty()
    with Progress(total=None, label="x", stream=out, tty_interval_s=0.0) as p:
        p.set(7)
    text = out.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and "x: 7 " in text
