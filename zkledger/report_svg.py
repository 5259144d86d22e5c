"""Tiny inline-SVG drawing for the HTML report: lane timelines and step charts, from plain Python data.

No dependencies, no JavaScript. Every text that reaches the SVG goes through :func:`esc`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

LABEL_W = 190  # left gutter for lane labels
PAD_R = 40
AXIS_H = 22
LANE_H = 26
FONT = "font-family='system-ui,sans-serif'"


def esc(text: object) -> str:
    """Escape for HTML text and attribute values (inline SVG is parsed by the HTML parser)."""
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class Segment:
    start: datetime
    end: datetime
    text: str = ""
    color: str = "#4e79a7"
    tooltip: str = ""
    outline: str | None = None  # stroke color, e.g. red for an overlap


@dataclass(frozen=True)
class Marker:
    at: datetime
    color: str = "#c62828"
    tooltip: str = ""


@dataclass(frozen=True)
class Lane:
    label: str
    segments: Sequence[Segment] = ()
    markers: Sequence[Marker] = ()


@dataclass(frozen=True)
class Band:
    """A highlighted time range over all lanes (e.g. two controllers at once)."""

    start: datetime
    end: datetime
    color: str = "#e53935"
    tooltip: str = ""


@dataclass(frozen=True)
class TimeScale:
    t0: datetime
    t1: datetime
    width: int = 1100
    left: int = LABEL_W
    right_pad: int = PAD_R
    _span: float = field(init=False, default=1.0)

    def __post_init__(self) -> None:
        span = (self.t1 - self.t0).total_seconds()
        object.__setattr__(self, "_span", span if span > 0 else 1.0)

    @property
    def plot_w(self) -> float:
        return float(self.width - self.left - self.right_pad)

    def x(self, t: datetime) -> float:
        frac = (t - self.t0).total_seconds() / self._span
        return self.left + max(0.0, min(1.0, frac)) * self.plot_w

    def ticks(self, n: int = 6) -> list[datetime]:
        step = self._span / n
        return [self.t0 + timedelta(seconds=step * i) for i in range(n + 1)]


def _tick_label(t: datetime, scale: TimeScale) -> str:
    return t.strftime("%H:%M:%S") if scale._span < 86400 else t.strftime("%m-%d %H:%M")


def _axis(scale: TimeScale, y: float, height: float) -> list[str]:
    out = [f"<line x1='{scale.left}' y1='{y:.1f}' x2='{scale.left + scale.plot_w:.1f}' y2='{y:.1f}' stroke='#999'/>"]
    for t in scale.ticks():
        x = scale.x(t)
        out.append(f"<line x1='{x:.1f}' y1='{y - height:.1f}' x2='{x:.1f}' y2='{y:.1f}' stroke='#eee'/>")
        out.append(
            f"<text x='{x:.1f}' y='{y + 14:.1f}' font-size='10' fill='#666' text-anchor='middle' {FONT}>"
            f"{esc(_tick_label(t, scale))}</text>"
        )
    return out


def _title(text: str) -> str:
    return f"<title>{esc(text)}</title>" if text else ""


def lanes_svg(lanes: Sequence[Lane], scale: TimeScale, bands: Sequence[Band] = (), label: str = "") -> str:
    """One row per lane, coloured bars per segment, optional full-height bands and point markers."""
    top = 6
    height = top + LANE_H * len(lanes) + AXIS_H + 4
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' role='img' aria-label='{esc(label)}' width='{scale.width}' "
        f"height='{height}' viewBox='0 0 {scale.width} {height}'>"
    ]
    plot_bottom = top + LANE_H * len(lanes)
    parts += _axis(scale, plot_bottom + 2, plot_bottom - top)
    for i, lane in enumerate(lanes):
        y = top + i * LANE_H
        if i % 2 == 0:
            parts.append(f"<rect x='0' y='{y}' width='{scale.width}' height='{LANE_H}' fill='#fafafa'/>")
        parts.append(
            f"<text x='{scale.left - 8}' y='{y + LANE_H / 2 + 4:.1f}' font-size='12' text-anchor='end' "
            f"fill='#333' {FONT}>{esc(_clip(lane.label, 28))}</text>"
        )
        for s in lane.segments:
            parts.append(_segment(s, scale, y))
        for m in lane.markers:
            x = scale.x(m.at)
            parts.append(
                f"<g><path d='M{x:.1f},{y + 2} l5,-0 l-5,8 l-5,-8 z' fill='{esc(m.color)}'/>"
                f"<line x1='{x:.1f}' y1='{y + 2}' x2='{x:.1f}' y2='{y + LANE_H - 2}' stroke='{esc(m.color)}' "
                f"stroke-width='1.5'/>{_title(m.tooltip)}</g>"
            )
    for b in bands:
        x0, x1 = scale.x(b.start), scale.x(b.end)
        parts.append(
            f"<rect x='{x0:.1f}' y='{top - 4}' width='{max(x1 - x0, 2):.1f}' height='{plot_bottom - top + 6}' "
            f"fill='{esc(b.color)}' fill-opacity='0.18' stroke='{esc(b.color)}' stroke-width='1.5' "
            f"stroke-dasharray='4 2'>{_title(b.tooltip)}</rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _segment(s: Segment, scale: TimeScale, y: float) -> str:
    x0, x1 = scale.x(s.start), scale.x(s.end)
    w = max(x1 - x0, 2.0)
    stroke = f" stroke='{esc(s.outline)}' stroke-width='2'" if s.outline else " stroke='#fff' stroke-width='0.5'"
    text = ""
    max_chars = int(w / 6.5)
    if s.text and max_chars >= 2:
        text = (
            f"<text x='{x0 + 4:.1f}' y='{y + LANE_H / 2 + 4:.1f}' font-size='11' fill='#fff' {FONT}>"
            f"{esc(_clip(s.text, max_chars))}</text>"
        )
    return (
        f"<g><rect x='{x0:.1f}' y='{y + 4}' width='{w:.1f}' height='{LANE_H - 8}' rx='3' fill='{esc(s.color)}'"
        f"{stroke}/>{text}{_title(s.tooltip or s.text)}</g>"
    )


def step_chart_svg(
    points: Sequence[tuple[datetime, float]], scale: TimeScale, label: str, color: str = "#4e79a7", height: int = 120
) -> str:
    """A step line (value holds until the next point) with a y axis from 0 to the max value."""
    top, bottom = 18, height - AXIS_H
    vmax = max((v for _, v in points), default=0.0)
    vmax = vmax if vmax > 0 else 1.0

    def y(v: float) -> float:
        return bottom - (v / vmax) * (bottom - top)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' role='img' aria-label='{esc(label)}' width='{scale.width}' "
        f"height='{height}' viewBox='0 0 {scale.width} {height}'>",
        f"<text x='{scale.left - 8}' y='{top + 4}' font-size='12' text-anchor='end' fill='#333' {FONT}>"
        f"{esc(_clip(label, 28))}</text>",
    ]
    parts += _axis(scale, bottom, bottom - top)
    for v in (0.0, vmax):
        parts.append(
            f"<text x='{scale.left - 8}' y='{y(v) + 4:.1f}' font-size='10' text-anchor='end' fill='#666' "
            f"{FONT}>{esc(_fmt(v))}</text>"
        )
    if points:
        pts = sorted(points)
        # a step path: each value holds until the next point
        d = [f"M{scale.left:.1f},{y(0):.1f}"]
        prev_v = 0.0
        for t, v in pts:
            x = scale.x(t)
            d.append(f"L{x:.1f},{y(prev_v):.1f}")
            d.append(f"L{x:.1f},{y(v):.1f}")
            prev_v = v
        d.append(f"L{scale.left + scale.plot_w:.1f},{y(prev_v):.1f}")
        path = " ".join(d)
        parts.append(f"<path d='{path}' fill='none' stroke='{esc(color)}' stroke-width='2'/>")
        area = f"{path} L{scale.left + scale.plot_w:.1f},{y(0):.1f} Z"
        parts.append(f"<path d='{area}' fill='{esc(color)}' fill-opacity='0.12' stroke='none'/>")
        for t, v in pts:
            parts.append(
                f"<circle cx='{scale.x(t):.1f}' cy='{y(v):.1f}' r='2.5' fill='{esc(color)}'>"
                f"{_title(f'{t.isoformat()}: {_fmt(v)}')}</circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.2f}"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(n - 1, 1)] + "…"
