"""The cluster-wide timeline (controller, controller epoch, live brokers), replayed on the driver.

These events are few (elections, broker (de)registrations), so the whole timeline - committed history
plus the increment - is replayed in zxid order every increment. That makes ``rebuild`` and ``monitor``
agree by construction. Anomalies found here carry the id of the event that triggered them, and an
increment keeps only those triggered by its own events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.spark_schema import spark_arrow_schema
from models.anomalies import SEVERITY, AnomalyKind
from models.decisions import ACTING_CONTROLLER_KINDS, DecisionKind
from models.events import MetadataEventType, Source, TenureSource
from models.ids import event_id
from models.tables import CONTROLLER_TENURE
from pipelines.state_machines import GlobalContext

T = MetadataEventType

GLOBAL_TYPES = (
    T.CONTROLLER_ELECTED, T.CONTROLLER_RESIGNED, T.CONTROLLER_EPOCH_CHANGED, T.BROKER_REGISTERED,
    T.BROKER_UPDATED, T.BROKER_DEREGISTERED, T.CONTROLLER_WRITE_FENCED, T.COLLECTION_GAP,
)

GAP_SOURCE = "_gap_source"
"""On a timeline COLLECTION_GAP anomaly: the collector that saw the gap (from the gap event's detail)."""

# NO_ACTIVE_CONTROLLER: how long /controller may be absent (a normal re-election takes well under a second).
DEFAULT_NO_CONTROLLER_THRESHOLD = timedelta(seconds=30)


@dataclass
class Timeline:
    """Replay result: context for the per-key fold, zk controller terms, anomalies with trigger ids."""

    ctx: GlobalContext
    tenure: list[dict[str, Any]] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)


def anomaly(cluster: str, kind: AnomalyKind, evidence: Sequence[str], row: dict[str, Any],
            details: dict[str, Any], **cols: Any) -> dict[str, Any]:
    """One anomalies row; the id depends only on kind and evidence (deterministic across runs)."""
    out: dict[str, Any] = {
        "cluster": cluster, "anomaly_id": event_id(cluster, str(kind), *evidence), "kind": str(kind),
        "severity": SEVERITY[kind], "event_time": row.get("event_time"), "zxid": row.get("zxid"),
        "detected_at": row.get("event_time"), "details": json.dumps(details, sort_keys=True, default=str),
        "evidence": list(evidence),
    }
    for c in ("topic", "partition", "replica", "broker", "controller_id", "controller_epoch"):
        out[c] = cols.get(c, row.get(c))
    return out


def replay(cluster: str, events: Iterable[dict[str, Any]],
           no_controller_threshold: timedelta = DEFAULT_NO_CONTROLLER_THRESHOLD) -> Timeline:
    """Replay global metadata events (sorted here by zxid, path, event_id) into context, terms, anomalies."""
    ordered = sorted(events, key=lambda e: (e["zxid"], e.get("_seq") or 0, e.get("path") or "", e["event_id"]))
    tl = Timeline(GlobalContext())
    max_epoch: int | None = None
    term: dict[str, Any] | None = None
    absent_since: dict[str, Any] | None = None  # the resign event while /controller is missing
    absent_flagged = False
    for e in ordered:
        kind, z = e["type"], e["zxid"]
        if absent_since is not None and not absent_flagged and _too_long(absent_since, e, no_controller_threshold):
            tl.anomalies.append(_no_controller(cluster, absent_since, e))
            absent_flagged = True
        if kind == T.CONTROLLER_EPOCH_CHANGED and e.get("controller_epoch") is not None:
            epoch = int(e["controller_epoch"])
            if max_epoch is not None and epoch < max_epoch:
                tl.anomalies.append({**anomaly(cluster, AnomalyKind.CONTROLLER_EPOCH_REGRESSION, [e["event_id"]], e,
                                               {"epoch": epoch, "previous_max": max_epoch}), "_trigger": e["event_id"]})
            max_epoch = epoch if max_epoch is None else max(max_epoch, epoch)
            tl.ctx.epoch_zxids.append(z)
            tl.ctx.epoch_values.append(epoch)
            if term is not None and term["controller_epoch"] is None:
                term["controller_epoch"] = epoch
        elif kind == T.CONTROLLER_ELECTED:
            tl.ctx.held_zxids.append(z)
            detail = e.get("detail") or {}
            tl.ctx.held_by_kraft.append(bool((json.loads(detail) if isinstance(detail, str) else detail).get("kraft")))
            if term is not None:
                _close(term, e)
            term = {"cluster": cluster, "controller_id": e.get("controller_id"), "controller_epoch": None,
                    "start_zxid": z, "end_zxid": None, "start_time": e.get("event_time"), "end_time": None,
                    "source": str(TenureSource.ZK)}
            # 2.1+ writes /controller_epoch in the same multi, <=2.0 right after: the next epoch is this term's
            if tl.ctx.epoch_zxids and tl.ctx.epoch_zxids[-1] == z:
                term["controller_epoch"] = tl.ctx.epoch_values[-1]
            tl.tenure.append(term)
            absent_since, absent_flagged = None, False
        elif kind == T.CONTROLLER_RESIGNED:
            if term is not None:
                _close(term, e)
                term = None
            absent_since, absent_flagged = e, False
        elif kind in (T.BROKER_REGISTERED, T.BROKER_UPDATED, T.BROKER_DEREGISTERED) and e.get("broker") is not None:
            zs, lives = tl.ctx.broker_points.setdefault(int(e["broker"]), ([], []))
            zs.append(z)
            lives.append(kind != T.BROKER_DEREGISTERED)
        elif kind == T.CONTROLLER_WRITE_FENCED:
            tl.anomalies.append({**anomaly(cluster, AnomalyKind.FENCED_CONTROLLER_WRITE, [e["event_id"]], e,
                                           {"path": e.get("path"), "detail": e.get("detail")}), "_trigger": e["event_id"]})
        elif kind == T.COLLECTION_GAP:
            tl.anomalies.append({**anomaly(cluster, AnomalyKind.COLLECTION_GAP, [e["event_id"]], e,
                                           {"path": e.get("path"), "detail": e.get("detail")}), "_trigger": e["event_id"],
                                 GAP_SOURCE: json.loads(e.get("detail") or "{}").get("source")})
    return tl


def _close(term: dict[str, Any], e: dict[str, Any]) -> None:
    term["end_zxid"] = e["zxid"]
    term["end_time"] = e.get("event_time")


def _too_long(since: dict[str, Any], e: dict[str, Any], threshold: timedelta) -> bool:
    t0: datetime | None = since.get("event_time")
    t1: datetime | None = e.get("event_time")
    return t0 is not None and t1 is not None and t1 - t0 > threshold


def _no_controller(cluster: str, since: dict[str, Any], trigger: dict[str, Any]) -> dict[str, Any]:
    """/controller missing for longer than the threshold, seen at the first later event past it."""
    gap = (trigger["event_time"] - since["event_time"]).total_seconds()
    row = anomaly(cluster, AnomalyKind.NO_ACTIVE_CONTROLLER, [since["event_id"]], since,
                  {"reason": "no /controller", "absent_seconds_at_least": gap, "seen_at_zxid": trigger["zxid"]})
    return {**row, "_trigger": trigger["event_id"]}


# --- controller findings that join ZooKeeper with the logs or with zombie writes -------------------------
RESIGN_COLUMNS = ("controller_id", "broker_id", "ts", "kind", "event_id")
"""The controller_decisions columns ``resign_marks`` reads (the monitor loads them once at start)."""

_NOT_ACTING = (DecisionKind.CONTROLLER_RESIGNED, DecisionKind.CONTROLLER_MOVED, DecisionKind.ELECTION_ERROR)
"""Controller-attributed log kinds that are not the controller acting (stepping down, failing to be elected)."""

_BROKER_CHANGES = (T.BROKER_REGISTERED, T.BROKER_DEREGISTERED)


def resign_marks(decisions: pa.Table, carried: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Every logged controller resignation with the time its controller next acted (None: not yet seen).

    A mark is ``{controller_id, event_id, ts, next_activity}``. ``carried`` are the marks of earlier
    increments; this increment's ``decisions`` add resignations and can only move ``next_activity`` earlier,
    so the marks are the same whichever increments the decisions arrive in. A resignation is the broker's
    own line: ``controller_id`` from the line's prefix, else the broker whose log it is.
    """
    marks = {m["event_id"]: dict(m) for m in carried}
    for r in _resign_rows(decisions):
        marks.setdefault(r["event_id"], r)
    if not marks:
        return []
    acting = _acting_us(decisions, {int(m["controller_id"]) for m in marks.values()})
    for m in marks.values():
        times = acting.get(int(m["controller_id"]))
        if times is None:
            continue
        later = pc.filter(times, pc.greater(times, _us(m["ts"])))
        first = pc.min(later).as_py() if len(later) else None
        if first is not None and (m["next_activity"] is None or first < _us(m["next_activity"])):
            m["next_activity"] = _from_us(first)
    return sorted(marks.values(), key=lambda m: (_us(m["ts"]), m["event_id"]))


def _resign_rows(decisions: pa.Table) -> list[dict[str, Any]]:
    rows = decisions.filter(pc.and_(pc.equal(decisions["kind"], DecisionKind.CONTROLLER_RESIGNED), pc.is_valid(decisions["ts"])))
    out = []
    for r in rows.select(["controller_id", "broker_id", "ts", "event_id"]).to_pylist():
        who = r["controller_id"] if r["controller_id"] is not None else r["broker_id"]
        if who is not None:
            out.append({"controller_id": int(who), "event_id": r["event_id"], "ts": _utc(r["ts"]),
                        "next_activity": None})
    return out


def _acting_us(decisions: pa.Table, ids: set[int]) -> dict[int, pa.Array]:
    """Per controller id in ``ids``: the times (us since the epoch) of its log lines acting as controller."""
    ok = pc.and_(pc.and_(pc.is_in(decisions["controller_id"], pa.array(sorted(ids), pa.int32())),
                         pc.invert(pc.is_in(decisions["kind"], pa.array(_NOT_ACTING)))),
                 pc.is_valid(decisions["ts"]))
    rows = decisions.filter(ok)
    if rows.num_rows == 0:
        return {}
    times = pc.cast(pc.cast(rows["ts"], pa.timestamp("us", tz="UTC")), pa.int64())
    who = rows["controller_id"]
    return {i: pc.filter(times, pc.equal(who, i)) for i in ids}


def no_active_controller(cluster: str, marks: Sequence[dict[str, Any]], tenure: Sequence[dict[str, Any]],
                         events: Iterable[dict[str, Any]],
                         reaction: timedelta = DEFAULT_NO_CONTROLLER_THRESHOLD) -> list[dict[str, Any]]:
    """KAFKA-13407: /controller names X, X resigned in that term, and broker churn gets no controller reaction.

    For each broker (de)registration inside X's open ZooKeeper term: X's latest resignation in the term
    before it, with no controller action by X since (a ``Ready to serve`` included) up to ``reaction`` after
    the churn. One row per resignation, at the first such broker change (evidence: both event ids).
    """
    found: dict[str, dict[str, Any]] = {}
    if not marks:
        return []
    churn = sorted((e for e in events if e["type"] in _BROKER_CHANGES and e.get("event_time") is not None),
                   key=lambda e: (e["zxid"], e["event_id"]))
    for b in churn:
        term = _term_at(tenure, int(b["zxid"]))
        if term is None or term["controller_id"] is None or term["start_time"] is None \
                or b.get("broker") == term["controller_id"]:  # X's own registration ends with its term
            continue
        x, t_b = int(term["controller_id"]), _us(b["event_time"])
        resigned = [m for m in marks if m["controller_id"] == x and _us(term["start_time"]) <= _us(m["ts"]) < t_b]
        if not resigned:
            continue
        r = resigned[-1]  # marks are in time order: the latest resignation before the churn
        acted = r["next_activity"]
        if r["event_id"] in found or (acted is not None and _us(acted) <= t_b + reaction // timedelta(microseconds=1)):
            continue
        details = {"reason": "controller resigned but still registered (KAFKA-13407)", "resigned_at": r["ts"],
                   "resign_event": r["event_id"], "broker_change": b["type"], "changed_broker": b.get("broker"),
                   "message": f"/controller names {x}, which resigned at {r['ts'].isoformat()} and has not acted "
                              f"since; broker {b.get('broker')} changed with no controller reaction"}
        found[r["event_id"]] = anomaly(cluster, AnomalyKind.NO_ACTIVE_CONTROLLER, [r["event_id"], b["event_id"]], b,
                                       details, controller_id=x, controller_epoch=term["controller_epoch"],
                                       broker=b.get("broker"))
    return list(found.values())


def zk_split_brain(cluster: str, zombie_writes: Sequence[dict[str, Any]],
                   tenure: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """SPLIT_BRAIN from ZooKeeper: a zombie write proves its epoch's controller acted in a newer term.

    ``zombie_writes``: this increment's enriched partition-state writes that ``detectors.zombie_write_mask``
    flags (``event_id``, ``zxid``, ``event_time``, ``topic``, ``partition``, ``controller_epoch``,
    ``cur_controller_epoch``). One row per (old epoch, new epoch) pair
    whose controllers (from the zk terms) are two different ids, at the pair's lowest-zxid write. The id
    names the pair only (the two terms), so a later increment's writes of the same pair give the same id;
    the write is appended to the evidence.
    """
    first: dict[tuple[int, int], dict[str, Any]] = {}
    for z in sorted(zombie_writes, key=lambda z: (z["zxid"], z["event_id"])):
        if z["controller_epoch"] is not None and z["cur_controller_epoch"] is not None:
            first.setdefault((int(z["controller_epoch"]), int(z["cur_controller_epoch"])), z)
    out = []
    for (old, new), z in sorted(first.items()):
        a, b = _id_of_epoch(tenure, old), _id_of_epoch(tenure, new)
        if a is None or b is None or a == b:
            continue
        terms = [f"zk-term:{a}:{old}", f"zk-term:{b}:{new}"]
        write = z["event_id"]
        details = {"controller_id": a, "controller_epoch": old, "other_id": b, "other_epoch": new, "source": str(TenureSource.ZK),
                   "first_write": write,
                   "message": f"controller {a} (epoch {old}) wrote partition state after controller {b} "
                              f"took epoch {new}"}
        row = anomaly(cluster, AnomalyKind.SPLIT_BRAIN, terms, z, details, controller_id=a, controller_epoch=old)
        out.append({**row, "evidence": [*terms, *([write] if write else [])]})
    return out


def _id_of_epoch(tenure: Sequence[dict[str, Any]], epoch: int) -> int | None:
    ids = [t["controller_id"] for t in tenure if t.get("controller_epoch") == epoch and t.get("controller_id") is not None]
    return int(ids[0]) if ids else None


def _term_at(tenure: Sequence[dict[str, Any]], zxid: int) -> dict[str, Any] | None:
    """The zk term open at ``zxid`` (start inclusive, end exclusive)."""
    for t in tenure:
        if t["start_zxid"] <= zxid and (t["end_zxid"] is None or zxid < t["end_zxid"]):
            return t
    return None


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _us(ts: datetime) -> int:
    return (_utc(ts) - _EPOCH) // timedelta(microseconds=1)


def _from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


ZOMBIE_WRITE_COLUMNS = ("event_id", "zxid", "event_time", "topic", "partition", "controller_epoch",
                        "cur_controller_epoch")
"""What ``zk_split_brain`` reads of a flagged write."""


def covered_gap(anomaly: dict[str, Any], txn_range: tuple[int | None, int | None]) -> bool:
    """A watch collector's gap is noise when the txnlog has delivered that zxid (it holds the lossless history
    between the lowest and the highest zxid it delivered; below, its files were purged or not yet read)."""
    lo, hi = txn_range
    if anomaly["kind"] != AnomalyKind.COLLECTION_GAP or lo is None or hi is None or anomaly.get("zxid") is None:
        return False
    return anomaly[GAP_SOURCE] in (Source.WATCH, Source.RESYNC) and lo <= int(anomaly["zxid"]) <= hi


def merge_log_terms(carried_terms: pa.Table, decisions: pa.Table, cluster: str) -> pa.Table:
    """Controller terms seen in logs: (controller id, epoch) -> first and last time it acted, from the lines
    that show it acting (``ACTING_CONTROLLER_KINDS``)."""
    voiced = pc.is_in(decisions["kind"], pa.array(sorted(ACTING_CONTROLLER_KINDS), pa.string()))
    for column in ("controller_id", "controller_epoch", "ts"):
        voiced = pc.and_(voiced, pc.is_valid(decisions[column]))
    acting = decisions.filter(voiced)
    schema = spark_arrow_schema(CONTROLLER_TENURE)
    n = acting.num_rows
    new = pa.table({"cluster": pa.array([cluster] * n, pa.string()), "controller_id": acting["controller_id"],
                    "controller_epoch": acting["controller_epoch"], "start_zxid": pa.nulls(n, pa.int64()),
                    "end_zxid": pa.nulls(n, pa.int64()), "start_time": acting["ts"], "end_time": acting["ts"],
                    "source": pa.array([str(TenureSource.LOGS)] * n, pa.string())})
    both = pa.concat_tables([carried_terms.select(schema.names).cast(schema), new.select(schema.names).cast(schema)])
    keys = ["cluster", "controller_id", "controller_epoch", "source"]
    agg = both.group_by(keys, use_threads=False).aggregate(
        [("start_zxid", "min"), ("end_zxid", "max"), ("start_time", "min"), ("end_time", "max")])
    agg = agg.rename_columns([{"start_zxid_min": "start_zxid", "end_zxid_max": "end_zxid", "start_time_min": "start_time",
                               "end_time_max": "end_time"}.get(c, c) for c in agg.column_names])
    return agg.select(schema.names).cast(schema)
