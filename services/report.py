"""The HTML report: one self-contained file (inline CSS + inline SVG, no JavaScript, no external assets).

Reads the lake with delta-rs (``Lake.read_arrow``), so it needs no Spark. Sections: controller tenure
timeline (overlaps in red), per-partition leader / ISR / state timelines for partitions with anomalies,
counts over time (offline and under-replicated partitions, controller changes), and the anomaly list
with its evidence. Every user-controlled string is escaped (``html.escape``), SVG text included.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from models.anomalies import duration_text, is_episode_end
from models.events import MetadataEventType
from models.tables import (
    ANOMALIES,
    CONTROLLER_TENURE,
    METADATA_EVENTS,
    PARTITION_TRANSITIONS,
    QUALITY_RESULTS,
)
from services.report_svg import Band, Lane, Marker, Segment, TimeScale, esc, lanes_svg, step_chart_svg

if TYPE_CHECKING:
    from lakehouse import Lake

log = logging.getLogger(__name__)

T = MetadataEventType
Row = dict[str, Any]
REPORT_TABLES = tuple(t.name for t in (CONTROLLER_TENURE, PARTITION_TRANSITIONS, METADATA_EVENTS, ANOMALIES, QUALITY_RESULTS))

STATE_COLORS = {
    "NewPartition": "#9e9e9e",
    "OnlinePartition": "#2e7d32",
    "OfflinePartition": "#c62828",
    "NonExistentPartition": "#616161",
}
SEVERITY_COLORS = {"critical": "#b71c1c", "error": "#e53935", "warning": "#f9a825", "info": "#1e88e5"}
CONTROLLER_COLORS = ("#4e79a7", "#f28e2b", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f", "#bab0ac")


@dataclass(frozen=True)
class ReportData:
    """The rows the report draws, as plain Python (one list of dicts per table)."""

    cluster: str
    tables: Mapping[str, list[Row]]

    def rows(self, table: str) -> list[Row]:
        return list(self.tables.get(table, []))


def load_report_data(lake: Lake) -> ReportData:
    """Current snapshot of each table the report needs, for the lake's cluster; absent tables are empty."""
    tables: dict[str, list[Row]] = {}
    for name in REPORT_TABLES:
        if lake.exists(name):
            rows = lake.read_arrow(name).to_pylist()
            tables[name] = [r for r in rows if r.get("cluster") in (None, lake.cluster)]
        else:
            tables[name] = []
    return ReportData(lake.cluster, tables)


# ---------------------------------------------------------------------------------------------- time range
def _times(data: ReportData) -> list[datetime]:
    out: list[datetime] = []
    for r in data.rows(CONTROLLER_TENURE.name):
        out += [t for t in (r.get("start_time"), r.get("end_time")) if t is not None]
    for table in (PARTITION_TRANSITIONS.name, METADATA_EVENTS.name, ANOMALIES.name):
        out += [r["event_time"] for r in data.rows(table) if r.get("event_time") is not None]
    return out


def time_scale(data: ReportData, width: int = 1100) -> TimeScale:
    times = _times(data)
    if not times:
        now = datetime.now(UTC)
        return TimeScale(now - timedelta(minutes=1), now, width)
    t0, t1 = min(times), max(times)
    # a margin proportional to the span, so a story of a few milliseconds still fills the width
    pad = max((t1 - t0) * 0.03, timedelta(milliseconds=5))
    return TimeScale(t0 - pad, t1 + pad, width)


# ---------------------------------------------------------------------------------------------- controller tenure
def tenure_overlaps(tenures: Sequence[Row], open_end: datetime) -> list[tuple[datetime, datetime, Row, Row]]:
    """Pairs of terms of different controllers whose time ranges overlap (split-brain windows)."""
    timed = [r for r in tenures if r.get("start_time") is not None]
    out = []
    for i, a in enumerate(timed):
        for b in timed[i + 1 :]:
            if a["controller_id"] == b["controller_id"]:
                continue
            start = max(a["start_time"], b["start_time"])
            end = min(a.get("end_time") or open_end, b.get("end_time") or open_end)
            if start < end:
                out.append((start, end, a, b))
    return out


def controller_section(data: ReportData, scale: TimeScale) -> str:
    tenures = sorted(
        (r for r in data.rows(CONTROLLER_TENURE.name) if r.get("start_time") is not None),
        key=lambda r: (r["start_time"], r["controller_id"]),
    )
    if not tenures:
        return "<p class='empty'>No controller tenure recorded.</p>"
    open_end = scale.t1
    overlaps = tenure_overlaps(tenures, open_end)
    in_overlap = {id(a) for _, _, a, _ in overlaps} | {id(b) for _, _, _, b in overlaps}
    ids = sorted({r["controller_id"] for r in tenures})
    lanes = []
    for n, cid in enumerate(ids):
        color = CONTROLLER_COLORS[n % len(CONTROLLER_COLORS)]
        segs = [
            Segment(
                r["start_time"],
                r.get("end_time") or open_end,
                f"epoch {r.get('controller_epoch')}",
                color,
                f"controller {cid} epoch {r.get('controller_epoch')} from zxid {r.get('start_zxid')} to "
                f"{r.get('end_zxid')} ({r.get('source')})",
                outline="#c62828" if id(r) in in_overlap else None,
            )
            for r in tenures
            if r["controller_id"] == cid
        ]
        lanes.append(Lane(f"controller {cid}", segs))
    bands = [
        Band(s, e, tooltip=f"controllers {a['controller_id']} and {b['controller_id']} overlap")
        for s, e, a, b in overlaps
    ]
    note = (
        f"<p class='alert'>{len(overlaps)} overlapping term(s) (red): two brokers acted as controller at once.</p>"
        if overlaps
        else "<p class='ok'>No overlapping controller terms.</p>"
    )
    rows = "".join(
        f"<tr><td>{esc(_v(r['controller_id']))}</td><td>{esc(_v(r.get('controller_epoch')))}</td>"
        f"<td>{esc(_t(r.get('start_time')))}</td><td>{esc(_t(r.get('end_time')) or 'current')}</td>"
        f"<td>{esc(_v(r.get('start_zxid')))}</td><td>{esc(_v(r.get('end_zxid')))}</td><td>{esc(_v(r.get('source')))}</td></tr>"
        for r in tenures
    )
    table = (
        "<table><tr><th>controller</th><th>epoch</th><th>start</th><th>end</th><th>start zxid</th>"
        f"<th>end zxid</th><th>source</th></tr>{rows}</table>"
    )
    return note + lanes_svg(lanes, scale, bands, "controller tenure") + table


# ---------------------------------------------------------------------------------------------- partitions
def _spans(points: Sequence[tuple[datetime, Any]], end: datetime) -> list[tuple[datetime, datetime, Any]]:
    """(time, value) changes -> (start, end, value) spans, each lasting until the next change."""
    pts = sorted(points, key=lambda p: p[0])
    return [(t, pts[i + 1][0] if i + 1 < len(pts) else end, v) for i, (t, v) in enumerate(pts)]


def _ints(v: Iterable[int] | None) -> str:
    return ",".join(str(x) for x in v) if v is not None else "-"


def partition_lanes(data: ReportData, topic: str, partition: int, scale: TimeScale) -> list[Lane]:
    end = scale.t1
    trans = [
        r for r in data.rows(PARTITION_TRANSITIONS.name)
        if r["topic"] == topic and r["partition"] == partition and r.get("event_time") is not None
    ]
    states = [Segment(s, e, v, STATE_COLORS.get(v, "#8d6e63"), f"{v}") for s, e, v in
              _spans([(r["event_time"], r["to_state"]) for r in sorted(trans, key=lambda r: r["zxid"])], end)]
    writes = sorted(
        (r for r in data.rows(METADATA_EVENTS.name)
         if r.get("type") == T.PARTITION_STATE_WRITTEN and r.get("topic") == topic
         and r.get("partition") == partition and r.get("event_time") is not None),
        key=lambda r: r["zxid"],
    )
    leader_segs = []
    for s, e, r in _spans([(r["event_time"], r) for r in writes], end):
        leader = r.get("leader")
        color = "#c62828" if leader is None or leader < 0 else "#1565c0"
        text = f"L{leader} e{r.get('leader_epoch')}"
        leader_segs.append(Segment(s, e, text, color, f"leader {leader} epoch {r.get('leader_epoch')} "
                                   f"controller_epoch {r.get('controller_epoch')} zxid {r['zxid']}"))
    replicas = _replicas_by_time(data, topic, partition)
    isr_segs = []
    for s, e, r in _spans([(r["event_time"], r) for r in writes], end):
        isr = r.get("isr") or []
        full = replicas(s)
        under = full is not None and len(isr) < len(full)
        isr_segs.append(Segment(s, e, f"[{_ints(isr)}]", "#ef6c00" if under else "#00897b",
                                f"isr [{_ints(isr)}] of replicas [{_ints(full)}]"))
    markers = [
        Marker(a["event_time"], SEVERITY_COLORS.get(a.get("severity", ""), "#c62828"), f"{a['kind']} ({a['severity']})")
        for a in data.rows(ANOMALIES.name)
        if a.get("topic") == topic and a.get("partition") == partition and a.get("event_time") is not None
    ]
    return [Lane("state", states, markers), Lane("leader / epoch", leader_segs), Lane("ISR", isr_segs)]


def _replicas_by_time(data: ReportData, topic: str, partition: int) -> Any:
    assigned = sorted(
        (r for r in data.rows(METADATA_EVENTS.name)
         if r.get("type") == T.PARTITION_ASSIGNED and r.get("topic") == topic and r.get("partition") == partition),
        key=lambda r: r["zxid"],
    )

    def at(t: datetime) -> list[int] | None:
        current = None
        for r in assigned:
            if r.get("event_time") is None or r["event_time"] <= t:
                current = r.get("replicas")
        return current

    return at


def partitions_section(data: ReportData, scale: TimeScale) -> str:
    keys = sorted(
        {(a["topic"], a["partition"]) for a in data.rows(ANOMALIES.name)
         if a.get("topic") is not None and a.get("partition") is not None},
        key=lambda k: (str(k[0]), k[1]),
    )
    if not keys:
        return "<p class='empty'>No partition had an anomaly.</p>"
    parts = []
    for topic, partition in keys:
        kinds = sorted({a["kind"] for a in data.rows(ANOMALIES.name)
                        if a.get("topic") == topic and a.get("partition") == partition})
        parts.append(f"<h3><span class='tp'>{esc(topic)}-{esc(partition)}</span> "
                     f"<small>{esc(', '.join(kinds))}</small></h3>")
        parts.append(lanes_svg(partition_lanes(data, topic, partition, scale), scale,
                               label=f"partition {topic}-{partition}"))
    legend = " ".join(f"<span class='chip' style='background:{c}'>{esc(s)}</span>" for s, c in STATE_COLORS.items())
    return f"<p class='legend'>{legend} <span class='chip' style='background:#ef6c00'>under-replicated ISR</span>" \
           f" ▼ anomaly</p>" + "".join(parts)


# ---------------------------------------------------------------------------------------------- counts over time
def offline_series(data: ReportData) -> list[tuple[datetime, float]]:
    """Number of partitions whose state is OfflinePartition, after each transition."""
    state: dict[tuple[str, int], str] = {}
    out = []
    for r in sorted(data.rows(PARTITION_TRANSITIONS.name), key=lambda r: r["zxid"]):
        if r.get("event_time") is None:
            continue
        state[(r["topic"], r["partition"])] = r["to_state"]
        out.append((r["event_time"], float(sum(1 for s in state.values() if s == "OfflinePartition"))))
    return out


def under_replicated_series(data: ReportData) -> list[tuple[datetime, float]]:
    """Number of partitions whose ISR is smaller than their replica set, after each relevant event."""
    replicas: dict[tuple[str, int], int] = {}
    isr: dict[tuple[str, int], int] = {}
    out = []
    for r in sorted(data.rows(METADATA_EVENTS.name), key=lambda r: r["zxid"]):
        topic, partition = r.get("topic"), r.get("partition")
        if topic is None or partition is None or r.get("event_time") is None:
            continue
        key = (str(topic), int(partition))
        if r["type"] == T.PARTITION_ASSIGNED and r.get("replicas") is not None:
            replicas[key] = len(r["replicas"])
        elif r["type"] == T.PARTITION_STATE_WRITTEN and r.get("isr") is not None:
            isr[key] = len(r["isr"])
        elif r["type"] in (T.PARTITION_STATE_DELETED, T.TOPIC_DELETED):
            isr.pop(key, None)
        else:
            continue
        out.append((r["event_time"], float(sum(1 for k, n in isr.items() if n < replicas.get(k, 0)))))
    return out


def controller_changes_series(data: ReportData) -> list[tuple[datetime, float]]:
    """Cumulative number of controller elections."""
    elected = sorted(
        (r for r in data.rows(METADATA_EVENTS.name) if r.get("type") == T.CONTROLLER_ELECTED and r.get("event_time")),
        key=lambda r: r["zxid"],
    )
    return [(r["event_time"], float(i + 1)) for i, r in enumerate(elected)]


def counts_section(data: ReportData, scale: TimeScale) -> str:
    return "".join([
        step_chart_svg(offline_series(data), scale, "offline partitions", "#c62828"),
        step_chart_svg(under_replicated_series(data), scale, "under-replicated", "#ef6c00"),
        step_chart_svg(controller_changes_series(data), scale, "controller elections", "#4e79a7"),
    ])


# ---------------------------------------------------------------------------------------------- anomalies
def _details(raw: str | None) -> str:
    """The JSON details as one compact run of ``key value`` pairs (the message first), not a JSON block."""
    if not raw:
        return ""
    try:
        details = json.loads(raw)
    except (ValueError, TypeError):
        return f"<span class='dv'>{esc(raw)}</span>"
    if not isinstance(details, dict):
        return f"<span class='dv'>{esc(_compact(details))}</span>"
    message = details.pop("message", None)
    pairs = "".join(f"<span class='kv'><span class='dk'>{esc(k)}</span> {esc(_compact(v))}</span>"
                    for k, v in sorted(details.items()))
    head = f"<div class='dm'>{esc(_compact(message))}</div>" if message is not None else ""
    return head + pairs


def _compact(value: object) -> str:
    """A scalar as itself, a list or object as one-line JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "), default=str)


def anomalies_section(data: ReportData) -> str:
    rows = sorted(data.rows(ANOMALIES.name), key=lambda a: (a.get("zxid") is None, a.get("zxid") or 0, a["kind"]))
    if not rows:
        return "<p class='ok'>No anomalies.</p>"
    counts: dict[str, int] = defaultdict(int)
    for a in rows:
        counts[a["severity"]] += 1
    summary = " ".join(
        f"<span class='chip' style='background:{SEVERITY_COLORS.get(s, '#777')}'>{esc(s)}: {n}</span>"
        for s, n in sorted(counts.items())
    )
    body = []
    for a in rows:
        tp = f"{a['topic']}-{a['partition']}" if a.get("topic") is not None else ""
        if a.get("replica") is not None:
            tp += f" replica {a['replica']}"
        ctrl = "" if a.get("controller_id") is None else f"{a['controller_id']} (epoch {a.get('controller_epoch')})"
        sev = a.get("severity", "")
        evidence = "<br>".join(esc(e) for e in (a.get("evidence") or []))
        when = _t(a.get("event_time"))
        if is_episode_end(a):  # the row that ends an episode holds its interval
            lasted = "" if a.get("duration_ms") is None else f" (lasted {duration_text(int(a['duration_ms']))})"
            when += f" to {_t(a.get('ended_at'))}{lasted}"
        body.append(
            f"<tr><td><b>{esc(a['kind'])}</b></td>"
            f"<td><span class='chip' style='background:{SEVERITY_COLORS.get(sev, '#777')}'>{esc(sev)}</span></td>"
            f"<td>{esc(when)}</td><td>{esc(_v(a.get('zxid')))}</td><td>{esc(tp)}</td>"
            f"<td>{esc(ctrl)}</td><td>{_details(a.get('details'))}</td><td class='ev'>{evidence}</td></tr>"
        )
    return (
        f"<p>{summary}</p><table class='anomalies'><tr><th>kind</th><th>severity</th><th>time</th><th>zxid</th>"
        f"<th>topic-partition</th><th>controller</th><th>details</th><th>evidence</th></tr>{''.join(body)}</table>"
    )


def quality_section(data: ReportData) -> str:
    rows = data.rows(QUALITY_RESULTS.name)
    if not rows:
        return "<p class='empty'>No quality check has run (<code>zkledger check</code>).</p>"
    last = max(rows, key=lambda r: r["run_at"])
    run = [r for r in rows if r["run_id"] == last["run_id"]]
    failed = [r for r in run if not r["success"]]
    head = (f"<p>Last check {esc(_t(last['run_at']))}: {len(run)} expectations, "
            f"<span class='{'alert' if failed else 'ok'}'>{len(failed)} failed</span>.</p>")
    if not failed:
        return head
    items = "".join(f"<li><code>{esc(r['table_name'])}: {esc(r['expectation'])}</code> {esc(r.get('observed'))}</li>"
                    for r in failed)
    return head + f"<ul>{items}</ul>"


# ---------------------------------------------------------------------------------------------- page
CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#f4f5f7}
header{background:#263238;color:#fff;padding:18px 32px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#b0bec5}
main{padding:8px 32px 40px}
section{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.12);padding:12px 20px;margin:16px 0}
h2{font-size:17px;margin:6px 0 10px}h3{font-size:14px;margin:14px 0 4px}h3 small{color:#777;font-weight:400}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border-bottom:1px solid #e0e0e0;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#eceff1}
.kv{display:inline-block;margin:0 12px 2px 0;font:11px monospace;overflow-wrap:anywhere}
.dk{color:#607d8b;white-space:nowrap}.dm{font-size:12px;margin-bottom:2px;overflow-wrap:anywhere}
.dv{font:11px monospace;overflow-wrap:anywhere}
table.anomalies{width:100%}table.anomalies td:nth-child(7){min-width:280px;max-width:480px}
.ev{font:11px monospace;color:#555}
.chip{display:inline-block;color:#fff;border-radius:10px;padding:1px 8px;font-size:12px;margin-right:4px}
.alert{color:#c62828;font-weight:600}.ok{color:#2e7d32}.empty{color:#777}
.tp{font-family:monospace}.kpi{display:inline-block;margin-right:28px}.kpi b{font-size:22px;display:block}
svg{display:block;margin:4px 0}
"""


def _kpis(data: ReportData) -> str:
    anomalies = data.rows(ANOMALIES.name)
    crit = sum(1 for a in anomalies if a.get("severity") == "critical")
    elections = len(controller_changes_series(data))
    parts = [("anomalies", len(anomalies)), ("critical", crit), ("controller elections", elections),
             ("partition transitions", len(data.rows(PARTITION_TRANSITIONS.name)))]
    return "".join(f"<div class='kpi'><b>{n}</b>{esc(label)}</div>" for label, n in parts)


def render_html(data: ReportData, generated_at: datetime | None = None) -> str:
    """The whole report as one HTML string."""
    scale = time_scale(data)
    generated = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    sections = [
        ("Summary", _kpis(data)),
        ("Controller tenure", controller_section(data, scale)),
        ("Counts over time", counts_section(data, scale)),
        ("Partitions with anomalies", partitions_section(data, scale)),
        ("Anomalies", anomalies_section(data)),
        ("Data quality", quality_section(data)),
    ]
    body = "".join(f"<section><h2>{esc(title)}</h2>{html}</section>" for title, html in sections)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>zkledger report: {esc(data.cluster)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>zkledger report — cluster {esc(data.cluster)}</h1>"
        f"<p>{esc(_t(scale.t0))} → {esc(_t(scale.t1))} · generated {esc(generated)}</p></header>"
        f"<main>{body}</main></body></html>"
    )


def write_report(lake: Lake, out: str | os.PathLike[str]) -> tuple[str, ReportData]:
    """Render the lake's report to ``out`` (atomically); returns the path and the data drawn."""
    data = load_report_data(lake)
    page = render_html(data)
    path = os.fspath(out)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(page)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)  # no half-written file left beside the target
        raise
    log.info("report written to %s (%d bytes)", path, len(page))
    return path, data


def _v(value: object) -> str:
    return "" if value is None else str(value)


def _t(t: datetime | None) -> str:
    """UTC time to the millisecond (a controller's decisions are often milliseconds apart)."""
    if t is None:
        return ""
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"
