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

    @property
    def step_seconds(self) -> float:
        """The tick spacing: the smallest round step that leaves room for every label."""
        max_ticks = max(2, int(self.plot_w // TICK_MIN_PX))
        for step in TICK_STEPS:
            if self._span / step <= max_ticks:
                return step
        return TICK_STEPS[-1] * (self._span // (TICK_STEPS[-1] * max_ticks) + 1)

    def ticks(self) -> list[datetime]:
        """Ticks at multiples of :attr:`step_seconds` (round clock times) inside the scale."""
        step_us = round(self.step_seconds * 1_000_000)
        start_us = _epoch_us(self.t0)
        first = -(-start_us // step_us) * step_us  # the first multiple at or after t0
        out = []
        t_us = first
        while t_us <= _epoch_us(self.t1):
            out.append(self.t0 + timedelta(microseconds=t_us - start_us))
            t_us += step_us
        return out

    def tick_label(self, t: datetime) -> str:
        """A label as precise as the tick step (milliseconds for a sub-second story), with the date when the
        scale spans more than one day, so no two ticks read the same."""
        step = self.step_seconds
        if step >= 86400:
            return t.strftime("%Y-%m-%d")
        day = t.strftime("%m-%d ") if self._span > 86400 else ""
        if step >= 60:
            return day + t.strftime("%H:%M")
        if step >= 1:
            return day + t.strftime("%H:%M:%S")
        return day + t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"


# round tick steps in seconds, from 1 ms to a week
TICK_STEPS: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
    3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400,
)
TICK_MIN_PX = 110  # room for the widest label ("12-31 23:59:59.999") and a gap


def _epoch_us(t: datetime) -> int:
    return (t.toordinal() * 86400 + t.hour * 3600 + t.minute * 60 + t.second) * 1_000_000 + t.microsecond


def _axis(scale: TimeScale, y: float, height: float) -> list[str]:
    out = [f"<line x1='{scale.left}' y1='{y:.1f}' x2='{scale.left + scale.plot_w:.1f}' y2='{y:.1f}' stroke='#999'/>"]
    for t in scale.ticks():
        x = scale.x(t)
        out.append(f"<line x1='{x:.1f}' y1='{y - height:.1f}' x2='{x:.1f}' y2='{y:.1f}' stroke='#eee'/>")
        out.append(
            f"<text x='{x:.1f}' y='{y + 14:.1f}' font-size='10' fill='#666' text-anchor='middle' {FONT}>"
            f"{esc(scale.tick_label(t))}</text>"
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
        # the chart's name mid-height, clear of the 0 and max values written at the axis ends
        f"<text x='{scale.left - 8}' y='{(top + bottom) / 2 + 4:.1f}' font-size='12' text-anchor='end' fill='#333' "
        f"{FONT}>{esc(_clip(label, 24))}</text>",
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
