"""The HTML report: one self-contained file (inline CSS + inline SVG, no JavaScript, no external assets).

Reads the lake with delta-rs (``Lake.read_arrow``), so it needs no Spark. Sections: controller tenure
timeline (overlaps in red), per-partition leader / ISR / state timelines for partitions with anomalies,
counts over time (offline and under-replicated partitions, controller changes), and the anomaly list
with its evidence; when the caller hands it a judged ZooKeeper -> KRaft migration (``models.migration``'s
report, built by the command layer from the bronze tables), its phases, settled points, divergences, findings
and verdict. A table not built yet (no ``zkledger rebuild``) is said so by its section. Every user-controlled
string is escaped (``html.escape``), SVG text included.
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
from typing import TYPE_CHECKING, Any, Final

from models.anomalies import duration_text, is_episode_end
from models.events import MetadataEventType
from models.migration import (
    MigrationFinding,
    MigrationPhase,
    MigrationReport,
    PhaseChange,
    Verdict,
    finalize_verdict,
)
from models.tables import (
    ANOMALIES,
    CONTROLLER_TENURE,
    METADATA_EVENTS,
    PARTITION_TRANSITIONS,
    QUALITY_RESULTS,
)
from services import metadata_events
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
MIGRATION_TITLE: Final = "ZooKeeper → KRaft migration"
CONTROLLER_COLORS = ("#4e79a7", "#f28e2b", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f", "#bab0ac")


@dataclass(frozen=True)
class ReportData:
    """The rows the report draws, as plain Python (one list of dicts per table); ``missing``: tables the lake
    does not have yet (a lake of bronze tables only); ``migration``: a recorded migration, judged."""

    cluster: str
    tables: Mapping[str, list[Row]]
    missing: frozenset[str] = frozenset()
    migration: MigrationReport | None = None

    def rows(self, table: str) -> list[Row]:
        return list(self.tables.get(table, []))


def load_report_data(lake: Lake, migration: MigrationReport | None = None) -> ReportData:
    """Current snapshot of each table the report needs, for the lake's cluster; absent tables are empty (and
    listed in ``missing``, so their sections say they are not built rather than that nothing happened)."""
    tables: dict[str, list[Row]] = {}
    missing = set()
    for name in REPORT_TABLES:
        view = name == METADATA_EVENTS.name
        if metadata_events.exists(lake) if view else lake.exists(name):
            rows = (metadata_events.read(lake, cluster=lake.cluster) if view else lake.read_arrow(name)).to_pylist()
            tables[name] = [r for r in rows if r.get("cluster") in (None, lake.cluster)]
        else:
            tables[name] = []
            missing.add(name)
    return ReportData(lake.cluster, tables, frozenset(missing), migration)


def _not_built(data: ReportData, *tables: str) -> str:
    """The note of a section whose tables the lake does not have yet; empty when it has them."""
    absent = [t for t in tables if t in data.missing]
    if not absent:
        return ""
    names = ", ".join(f"<code>{esc(t)}</code>" for t in absent)
    return (f"<p class='empty'>Not built yet: the lake has no {names} table{'s' if len(absent) > 1 else ''}; "
            "<code>zkledger rebuild</code> derives them from the bronze tables.</p>")


# ---------------------------------------------------------------------------------------------- time range
def _times(data: ReportData) -> list[datetime]:
    out: list[datetime] = []
    for r in data.rows(CONTROLLER_TENURE.name):
        out += [t for t in (r.get("start_time"), r.get("end_time")) if t is not None]
    for table in (PARTITION_TRANSITIONS.name, METADATA_EVENTS.name, ANOMALIES.name):
        out += [r["event_time"] for r in data.rows(table) if r.get("event_time") is not None]
    if data.migration is not None:
        m = data.migration
        stamps = [c.at for c in m.timeline] + [p.at for p in m.points] + [f.at for f in m.findings]
        out += [t for t in stamps if t is not None]
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
        return "<p class='empty'>No controller tenure recorded.</p>" + _not_built(data, CONTROLLER_TENURE.name)
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
        return "<p class='empty'>No partition had an anomaly.</p>" + _not_built(data, ANOMALIES.name)
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
    return _not_built(data, PARTITION_TRANSITIONS.name, METADATA_EVENTS.name) + "".join([
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
    head = f"<div class='dm'>{esc(_compact(message))}</div>" if message is not None else ""
    return head + _pairs(details)


def _pairs(details: Mapping[str, object]) -> str:
    return "".join(f"<span class='kv'><span class='dk'>{esc(k)}</span> {esc(_compact(v))}</span>"
                   for k, v in sorted(details.items()))


def _compact(value: object) -> str:
    """A scalar as itself, a list or object as one-line JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "), default=str)


def anomalies_section(data: ReportData) -> str:
    rows = sorted(data.rows(ANOMALIES.name), key=lambda a: (a.get("zxid") is None, a.get("zxid") or 0, a["kind"]))
    if not rows:
        note = _not_built(data, ANOMALIES.name)  # then no anomaly is not a clean bill of health
        return f"<p class='{'empty' if note else 'ok'}'>No anomalies.</p>{note}"
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


# ---------------------------------------------------------------------------------------------- migration
PHASE_LABELS: Final[Mapping[MigrationPhase, str]] = {
    MigrationPhase.ZOOKEEPER: "ZooKeeper mode",
    MigrationPhase.PRE_MIGRATION: "pre-migration",
    MigrationPhase.LOADING: "loading",
    MigrationPhase.DUAL_WRITE: "dual-write",
    MigrationPhase.KRAFT_BROKERS: "KRaft brokers",
    MigrationPhase.FINALIZED: "finalized",
}
PHASE_COLORS: Final[Mapping[MigrationPhase, str]] = {
    MigrationPhase.ZOOKEEPER: "#78909c",
    MigrationPhase.PRE_MIGRATION: "#8d6e63",
    MigrationPhase.LOADING: "#ef6c00",
    MigrationPhase.DUAL_WRITE: "#1e88e5",
    MigrationPhase.KRAFT_BROKERS: "#5e35b1",
    MigrationPhase.FINALIZED: "#00695c",
}
AGREED_COLOR: Final = "#2e7d32"  # a settled point where the stores agree
DIVERGED_COLOR: Final = "#c62828"  # one where they do not
MIGRATION_ROWS: Final = 200
"""The most divergences and findings the section lists (its counts are whole; `zkledger migration --format json`
lists them all)."""


def phase_spans(report: MigrationReport, start: datetime,
                end: datetime) -> list[tuple[datetime, datetime, MigrationPhase, PhaseChange | None]]:
    """Each phase's time range and the change that began it: ZooKeeper mode from ``start`` to the first change
    (no change began it), then each phase until the next change (the last until ``end``). A change without a time
    cannot be placed and is left out."""
    changes: list[tuple[datetime, PhaseChange | None]] = [(c.at, c) for c in report.timeline if c.at is not None]
    if not changes or start < changes[0][0]:
        changes.insert(0, (start, None))
    return [(s, e, c.phase if c is not None else MigrationPhase.ZOOKEEPER, c) for s, e, c in _spans(changes, end)]


def _where(zxid: int | None, offset: int | None) -> str:
    """A place in either store, as `zkledger migration` prints it."""
    return " / ".join(p for p in (f"zxid {zxid:#x}" if zxid is not None else "",
                                  f"offset {offset}" if offset is not None else "") if p)


def migration_lanes(report: MigrationReport, scale: TimeScale) -> list[Lane]:
    """The phases as coloured bands, the settled aligned points as ticks (red where the stores disagree) and the
    findings as markers coloured by severity, on the report's time axis."""
    phases = []
    for s, e, phase, change in phase_spans(report, scale.t0, scale.t1):
        how = f" ({_where(change.zxid, change.offset)}: {change.signal})" if change is not None else ""
        phases.append(Segment(s, e, PHASE_LABELS[phase], PHASE_COLORS[phase],
                              f"{PHASE_LABELS[phase]} from {_t(s)}{how}"))
    ticks = [Marker(c.point.at, DIVERGED_COLOR if c.divergences else AGREED_COLOR,
                    f"settled point {_where(c.point.zxid, c.point.offset)}: {len(c.divergences)} divergence(s)")
             for c in report.checks if c.point.at is not None]
    found = [Marker(f.at, SEVERITY_COLORS.get(f.severity, "#c62828"),
                    f"{f.kind} ({f.severity}) at {_where(f.zxid, f.offset)}")
             for f in report.findings if f.at is not None]
    return [Lane("phase", phases), Lane("settled aligned points", markers=ticks), Lane("findings", markers=found)]


def _phase_rows(timeline: Sequence[PhaseChange]) -> str:
    rows = "".join(
        f"<tr><td><span class='chip' style='background:{PHASE_COLORS[c.phase]}'>{esc(PHASE_LABELS[c.phase])}</span>"
        f"</td><td>{esc(_t(c.at))}</td><td>{esc(_where(c.zxid, c.offset))}</td><td>{esc(c.signal)}</td></tr>"
        for c in timeline)
    return f"<table><tr><th>phase</th><th>from</th><th>where</th><th>signal</th></tr>{rows}</table>"


def _divergence_rows(report: MigrationReport) -> str:
    diverged = [(c.point, d) for c in report.checks for d in c.divergences]
    if not diverged:
        return "<p class='ok'>The stores agree at every settled aligned point.</p>" if report.checks else ""
    rows = "".join(
        f"<tr><td>{esc(_where(p.zxid, p.offset))}</td><td>{esc(_t(p.at))}</td><td>{esc(d.entity)}</td>"
        f"<td>{esc(d.key)}</td><td>{esc(d.field)}</td><td>{esc(_value(d.zk_value))}</td>"
        f"<td>{esc(_value(d.kraft_value))}</td></tr>"
        for p, d in diverged[:MIGRATION_ROWS])
    more = _more(len(diverged), "divergences")
    return (f"<h3>Divergences at settled points ({len(diverged)})</h3><table class='divergences'><tr><th>where</th>"
            f"<th>time</th><th>entity</th><th>key</th><th>field</th><th>ZooKeeper</th><th>KRaft</th></tr>{rows}"
            f"</table>{more}")


def _finding_rows(findings: Sequence[MigrationFinding]) -> str:
    if not findings:
        return "<p class='ok'>No migration hazard found.</p>"
    body = []
    for f in findings[:MIGRATION_ROWS]:
        details = dict(f.details)
        path = details.pop("path", None)
        subject = (str(path) if path is not None
                   else f"{f.topic}-{f.partition}" if f.topic is not None and f.partition is not None
                   else f.topic if f.topic is not None
                   else f"broker {f.broker}" if f.broker is not None else "")
        body.append(
            f"<tr><td><span class='chip' style='background:{SEVERITY_COLORS.get(f.severity, '#777')}'>"
            f"{esc(f.severity)}</span></td><td><b>{esc(f.kind)}</b></td><td>{esc(_t(f.at))}</td>"
            f"<td>{esc(_where(f.zxid, f.offset))}</td><td class='tp'>{esc(subject)}</td><td>{_pairs(details)}</td></tr>")
    return (f"<h3>Findings ({len(findings)})</h3><table class='anomalies'><tr><th>severity</th><th>kind</th>"
            f"<th>time</th><th>where</th><th>path</th><th>details</th></tr>{''.join(body)}</table>"
            + _more(len(findings), "findings"))


def _verdict(verdict: Verdict) -> str:
    if verdict.safe:
        return "<p class='ok verdict'>Verdict: safe to finalize.</p>"
    reasons = "".join(f"<li><b>{esc(b.reason)}</b>: {esc(b.message)}</li>" for b in verdict.blockers)
    return f"<p class='alert verdict'>Verdict: not safe to finalize.</p><ul>{reasons}</ul>"


def migration_section(report: MigrationReport, scale: TimeScale) -> str:
    """A ZooKeeper -> KRaft migration as ``models.migration`` judged it: phases, settled points, divergences,
    findings and whether finalizing is safe (the verdict is ``finalize_verdict``'s, not the report's)."""
    settled = sum(1 for p in report.points if p.settled)
    diverging = sum(1 for c in report.checks if c.divergences)
    head = (f"<p>Phase <b>{esc(PHASE_LABELS[report.phase])}</b>; {len(report.points)} <code>/migration</code> "
            f"writes, {settled} settled and compared, {diverging} with divergences; {len(report.findings)} "
            "finding(s).</p>")
    legend = " ".join(f"<span class='chip' style='background:{PHASE_COLORS[p]}'>{esc(label)}</span>"
                      for p, label in PHASE_LABELS.items())
    ticks = (f"<span class='chip' style='background:{AGREED_COLOR}'>stores agree</span>"
             f"<span class='chip' style='background:{DIVERGED_COLOR}'>stores diverge</span>")
    return (head + _verdict(finalize_verdict(report)) + f"<p class='legend'>{legend} {ticks} ▼ settled point or finding</p>"
            + lanes_svg(migration_lanes(report, scale), scale, label="ZooKeeper to KRaft migration")
            + _phase_rows(report.timeline) + _divergence_rows(report) + _finding_rows(report.findings))


def _value(value: object) -> str:
    """A store's value of a field; None: the store does not have it."""
    return "(absent)" if value is None else _compact(list(value) if isinstance(value, tuple) else value)


def _more(total: int, what: str) -> str:
    return (f"<p class='empty'>{total - MIGRATION_ROWS} more {esc(what)}: <code>zkledger migration --format json</code> "
            "lists them all.</p>" if total > MIGRATION_ROWS else "")


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
    sections = [("Summary", _kpis(data))]
    if data.migration is not None:
        sections.append((MIGRATION_TITLE, migration_section(data.migration, scale)))
    sections += [
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


def write_report(lake: Lake, out: str | os.PathLike[str], *,
                 migration: MigrationReport | None = None) -> tuple[str, ReportData]:
    """Render the lake's report to ``out`` (atomically), with ``migration``'s section when one is given; returns
    the path and the data drawn."""
    data = load_report_data(lake, migration)
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
