"""zkledger report: one self-contained HTML file, checked in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.users import sample_data as sd
from zkledger import cli
from zkledger.report import (
    ReportData,
    controller_changes_series,
    load_report_data,
    offline_series,
    render_html,
    tenure_overlaps,
    under_replicated_series,
)

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is required (make test installs it: apt-get install -y chromium)"
    return exe


def _story_data() -> ReportData:
    return ReportData("local", {k: _with_cluster(v) for k, v in sd.all_tables().items()})


def _with_cluster(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"cluster": "local", **r} for r in rows]


def test_series_and_overlaps_follow_the_story() -> None:
    data = _story_data()
    assert [v for _, v in offline_series(data)][-2:] == [1.0, 0.0]
    assert max(v for _, v in under_replicated_series(data)) == 1.0
    assert [v for _, v in controller_changes_series(data)] == [1.0, 2.0]
    overlaps = tenure_overlaps(data.rows("controller_tenure"), sd.at(1000))
    assert [(s, e) for s, e, _, _ in overlaps] == [(sd.at(100), sd.at(130))]


def test_page_is_self_contained_and_escapes_hostile_strings() -> None:
    page = render_html(_story_data())
    assert "<script" not in page.lower()
    assert "<img" not in page.lower()  # the hostile details stay text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page), "no external assets"
    for section in ("Controller tenure", "Counts over time", "Partitions with anomalies", "Anomalies"):
        assert f"<h2>{section}</h2>" in page
    assert page.count("<svg") >= 6
    assert "overlapping term" in page


def test_empty_lake_still_renders(lake: Any) -> None:
    page = render_html(load_report_data(lake))
    assert "No controller tenure recorded." in page and "No anomalies." in page


def test_report_command_renders_in_chromium(lake: Any, tmp_path: Path) -> None:
    sd.write_story(lake)
    out = tmp_path / "out" / "report.html"
    code = cli.main(["--lake", lake.root, "--cluster", lake.cluster, "report", "--out", str(out)])
    assert code == 0 and out.exists()
    exe = _chromium()
    url = out.resolve().as_uri()
    dom = subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'ud1'}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert "zkledger report" in dom and "SPLIT_BRAIN" in dom
    assert "<script" not in dom.lower() and "<img" not in dom.lower(), "hostile strings must stay inert text"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "&lt;img src=x onerror=alert(2)&gt;" in dom
    png = tmp_path / "shot.png"
    subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'ud2'}", f"--screenshot={png}",
         "--window-size=1400,2000", url],
        capture_output=True, text=True, timeout=120, check=True,
    )
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 30_000, "a blank page compresses to a few KB"


@pytest.mark.parametrize("argv", [["report"], ["report", "--out"]])
def test_report_requires_out(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
