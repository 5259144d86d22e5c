"""zkledger report: one self-contained HTML file, checked in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from services.report import (
    ReportData,
    controller_changes_series,
    load_report_data,
    offline_series,
    render_html,
    tenure_overlaps,
    under_replicated_series,
)
from tests import sample_data as sd
from zkledger import cli

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is required (make test installs it: apt-get install -y chromium)"
    return exe


def _story_data() -> ReportData:
    tables = {**sd.all_tables(), "metadata_events": sd.metadata_events()}
    return ReportData("local", {k: _with_cluster(v) for k, v in tables.items()})


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


def _squeezed(factor: float) -> ReportData:
    """The story with every time brought `factor` times closer to its start (1000: the story in 0.24 s)."""
    def squash(value: Any) -> Any:
        return sd.T0 + (value - sd.T0) / factor if isinstance(value, datetime) else value

    return ReportData("local", {k: [{c: squash(v) for c, v in r.items()} for r in _with_cluster(rows)]
                                for k, rows in sd.all_tables().items()})


def _axes(page: str) -> list[list[tuple[float, str]]]:
    """Each SVG's tick labels as (x, text)."""
    return [[(float(x), text) for x, text in re.findall(r"<text x='([\d.]+)' y='[\d.]+' font-size='10' fill='#666' "
                                                         r"text-anchor='middle'[^>]*>([^<]*)</text>", svg)]
            for svg in re.findall(r"<svg.*?</svg>", page, re.S)]


@pytest.mark.parametrize(("factor", "example"), [(1000, "12:00:00.050"), (1, "12:01"), (0.001, "01-02 00:00")])
def test_tick_labels_are_distinct_round_and_apart(factor: float, example: str) -> None:
    page = render_html(_squeezed(factor))
    axes = [a for a in _axes(page) if a]
    assert len(axes) >= 6
    for ticks in axes:
        labels = [text for _, text in ticks]
        assert len(set(labels)) == len(labels) >= 3, labels  # no "18:50:32" three times
        xs = [x for x, _ in ticks]
        widest = max(len(t) for t in labels) * 6.5  # 10px system-ui digits are narrower than this
        assert all(b - a > widest for a, b in pairwise(xs)), (labels, xs)
    assert any(text == example for ticks in axes for _, text in ticks), axes[0]


def test_sub_second_story_shows_milliseconds_in_tables() -> None:
    page = render_html(_squeezed(1000))
    assert "2026-01-01 12:00:00.130" in page  # controller 1's term ended 130 ms in
    assert "12:00:00.120" in page  # the offline anomaly's time


def test_details_are_compact_pairs_not_a_json_block() -> None:
    page = render_html(_story_data())
    assert "<pre>" not in page
    assert "<span class='dk'>controllers</span> [1, 2]" in page
    assert "<span class='dk'>overlap_s</span> 30" in page
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in page  # still escaped


def test_step_chart_name_clear_of_its_value_labels() -> None:
    page = render_html(_story_data())
    for svg in re.findall(r"<svg[^>]*aria-label='(?:offline|under|controller elections)[^']*'.*?</svg>", page, re.S):
        gutter = re.findall(r"<text x='\d+' y='([\d.]+)' font-size='(\d+)' text-anchor='end'", svg)
        name_y = [float(y) for y, size in gutter if size == "12"]
        value_y = [float(y) for y, size in gutter if size == "10"]
        assert name_y and value_y and all(abs(n - v) >= 12 for n in name_y for v in value_y), gutter


def test_sub_second_report_renders_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "ms.html"
    out.write_text(render_html(_squeezed(1000)), encoding="utf-8")
    exe = _chromium()
    dom = subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'ud'}", "--dump-dom", out.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert "12:00:00.050" in dom and "12:00:00.100" in dom
    png = tmp_path / "ms.png"
    subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'ud2'}", f"--screenshot={png}",
         "--window-size=1400,2000", out.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 30_000
