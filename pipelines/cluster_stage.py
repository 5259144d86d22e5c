"""A cluster's stage in the streaming query: the cluster-wide work of one micro-batch (Arrow only; no Spark).

The partition buckets (``pipelines.bucket_fold``) fold their own keys. What is about the cluster as a whole runs
once per cluster, keyed by (cluster, ``CLUSTER_STAGE``): it receives the cluster's events without a partition,
every logged controller decision, the collectors' gap rows, the txnlog's delivered zxid range and the decode
quarantine, and carries (``ClusterState``) the timeline events, the controller terms seen in the logs, the
resignation marks and the txnlog range. These are few rows: elections, broker changes, controller terms.

It writes the decode quarantine, the whole ``controller_tenure`` of its
cluster (ZooKeeper terms and logged terms) when a batch may have changed it, and the cluster-wide anomalies: those the timeline replay finds
(triggered by this batch's events), collection gaps, split brain from the logged terms, a resigned controller
still registered, and the checks of decisions about no single partition.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.spark_schema import spark_arrow_schema
from models.anomalies import AnomalyKind
from models.events import MetadataEventType
from models.tables import (
    ANOMALIES,
    CONTROLLER_DECISIONS,
    CONTROLLER_TENURE,
    DECODE_QUARANTINE,
)
from pipelines import detectors as D
from pipelines.bucket_fold import (
    GLOBAL_COLUMNS,
    RECENT_IDS,
    TXNLOG_RANGE,
    first_seen,
    ipc_bytes,
    ipc_table,
    not_superseded,
    range_bounds,
    widened_range,
)
from pipelines.controller import (
    DEFAULT_NO_CONTROLLER_THRESHOLD,
    GLOBAL_TYPES,
    covered_gap,
    merge_log_terms,
    no_active_controller,
    replay,
    resign_marks,
)


class StreamPart(StrEnum):
    """What a packed row of the streaming query's input holds (one table of that kind)."""

    EVENTS = "events"  # routed metadata events (pipelines.bucket_fold.route)
    DECISIONS = "decisions"  # routed controller decisions (pipelines.bucket_fold.route_decisions)
    QUARANTINE = "quarantine"  # decode quarantine rows
    GAPS = "gaps"  # bronze rows reporting missed versions (detectors.GAP_COLUMNS)
    TXNLOG = "txnlog"  # one row: the lowest and highest zxid of the txnlog rows read (TXNLOG_RANGE)
    KRAFT = "kraft"  # a KRaft cluster's kraft_records rows, to its one key (pipelines.kraft_stage)
    ZK_TIME = "zk_time"  # to every bucket: its cluster's latest ZooKeeper event time (pipelines.bucket_fold.zk_times)


RESIGN_MARKS = pa.schema([pa.field("controller_id", pa.int32()), pa.field("event_id", pa.string()),
                          pa.field("ts", pa.timestamp("us", tz="UTC")),
                          pa.field("next_activity", pa.timestamp("us", tz="UTC"))])
"""``pipelines.controller.resign_marks`` as a table (what the stage carries)."""


@dataclass
class ClusterState:
    """What a cluster's stage carries between micro-batches (all small)."""

    global_events: pa.Table  # GLOBAL_COLUMNS of the timeline events so far
    log_terms: pa.Table  # controller_tenure rows with source 'logs'
    resigns: pa.Table  # RESIGN_MARKS
    txnlog: pa.Table  # TXNLOG_RANGE: 0 rows (no txnlog row yet) or 1
    recent_ids: pa.Table  # RECENT_IDS: the newest metadata event ids the stage has written

    @classmethod
    def empty(cls, global_schema: pa.Schema) -> ClusterState:
        return cls(global_schema.empty_table(), spark_arrow_schema(CONTROLLER_TENURE).empty_table(),
                   RESIGN_MARKS.empty_table(), TXNLOG_RANGE.empty_table(), RECENT_IDS.empty_table())

    def to_bytes(self) -> tuple[bytes, ...]:
        return tuple(ipc_bytes(t) for t in (self.global_events, self.log_terms, self.resigns, self.txnlog,
                                            self.recent_ids))

    @classmethod
    def from_bytes(cls, blobs: Sequence[bytes]) -> ClusterState:
        gl, terms, resigns, txn, recent = (ipc_table(b) for b in blobs)
        return cls(gl, terms, resigns, txn, recent)



def cluster_step(cluster: str, state: ClusterState, parts: dict[StreamPart, pa.Table],
                 no_controller_threshold: timedelta = DEFAULT_NO_CONTROLLER_THRESHOLD
                 ) -> tuple[dict[str, pa.Table], ClusterState]:
    """One cluster's micro-batch: (its rows of each output table by table name, its next state)."""
    events = parts.get(StreamPart.EVENTS)
    decisions = parts.get(StreamPart.DECISIONS)
    txnlog = widened_range(state.txnlog, parts.get(StreamPart.TXNLOG))
    txn_range = range_bounds(txnlog)
    recent = state.recent_ids
    if events is not None:
        events, recent = first_seen(not_superseded(events, txnlog), recent, txnlog)
    out: dict[str, pa.Table] = {}
    if StreamPart.QUARANTINE in parts:
        out[DECODE_QUARANTINE.name] = parts[StreamPart.QUARANTINE].select(list(DECODE_QUARANTINE.column_names))

    batch = (events.filter(pc.is_in(events["type"], pa.array(GLOBAL_TYPES))).select(list(GLOBAL_COLUMNS))
             .cast(state.global_events.schema) if events is not None else state.global_events.slice(0, 0))
    batch_ids = set(batch["event_id"].to_pylist())
    history = state.global_events.filter(pc.invert(pc.is_in(state.global_events["event_id"],
                                                            pa.array(sorted(batch_ids), pa.string()))))
    timeline_events = history.to_pylist() + batch.to_pylist()
    timeline = replay(cluster, timeline_events, no_controller_threshold)

    found_now = [a for a in timeline.anomalies if a["_trigger"] in batch_ids and not covered_gap(a, txn_range)]
    found = [D.anomaly_rows(_as_episode_starts(found_now))]
    if StreamPart.GAPS in parts:
        found.append(D.detect_collection_gaps(parts[StreamPart.GAPS], txn_range))
    log_terms, resigns = state.log_terms, state.resigns
    if decisions is not None and decisions.num_rows:
        decisions = decisions.select(list(CONTROLLER_DECISIONS.column_names))
        log_terms = merge_log_terms(state.log_terms, decisions, cluster)
        marks = resign_marks(decisions, state.resigns.to_pylist())
        resigns = pa.Table.from_pylist(marks, RESIGN_MARKS)
        partless = decisions.filter(pc.invert(pc.and_(pc.is_valid(decisions["topic"]),
                                                      pc.is_valid(decisions["partition"]))))
        found += [D.decision_anomalies(partless), D.detect_split_brain(log_terms)]
    stuck = no_active_controller(cluster, resigns.to_pylist(), timeline.tenure, timeline_events,
                                 no_controller_threshold)
    found.append(D.anomaly_rows(_as_episode_starts(stuck)))
    absent = [a for a in timeline.anomalies if a["kind"] == AnomalyKind.NO_ACTIVE_CONTROLLER]
    found.append(D.anomaly_rows(controller_episode_ends(absent, stuck, timeline_events, timeline.tenure,
                                                        {a["anomaly_id"] for a in found_now} | batch_ids)))
    out[ANOMALIES.name] = D.concat(found)
    if batch.num_rows or (decisions is not None and decisions.num_rows):  # else the terms cannot have changed
        zk_terms = pa.Table.from_pylist(timeline.tenure, spark_arrow_schema(CONTROLLER_TENURE))
        out[CONTROLLER_TENURE.name] = pa.concat_tables([zk_terms, log_terms.cast(zk_terms.schema)])
    after = ClusterState(pa.concat_tables([history, batch]), log_terms, resigns, txnlog, recent)
    return out, after


def _as_episode_starts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with a NO_ACTIVE_CONTROLLER row marked as the start of its episode."""
    return [{**r, "episode_id": r["anomaly_id"]} if r["kind"] == AnomalyKind.NO_ACTIVE_CONTROLLER else r
            for r in rows]


def controller_episode_ends(absent: Sequence[dict[str, Any]], stuck: Sequence[dict[str, Any]],
                            events: Sequence[dict[str, Any]], tenure: Sequence[dict[str, Any]],
                            now: set[str]) -> list[dict[str, Any]]:
    """The end rows of the NO_ACTIVE_CONTROLLER episodes whose end the history holds, from the whole timeline.

    ``absent``: the timeline's "no /controller" rows (the replay's, evidence the resignation): one ends at the
    next controller election. ``stuck``: ``no_active_controller``'s rows (KAFKA-13407): one ends when
    ``/controller`` stops naming the resigned controller (its ZooKeeper term's end). An absent episode's end
    is given when its start or its end is in this batch (``now``: ids of this batch's events and new rows);
    a stuck one's whenever its start is (the rows are found again each batch; the sink keeps one per id).
    """
    ordered = sorted(events, key=lambda e: (e["zxid"], e.get("_seq") or 0, e.get("path") or "", e["event_id"]))
    at = {e["event_id"]: e for e in ordered}
    elections = [e for e in ordered if e["type"] == MetadataEventType.CONTROLLER_ELECTED]
    out = []
    for start in absent:
        resigned = at.get(start["evidence"][0])
        elected = next((e for e in elections if resigned is not None and e["zxid"] > resigned["zxid"]), None)
        if elected is not None and (elected["event_id"] in now or start["anomaly_id"] in now):
            out.append(_controller_end(start, elected, "controller elected"))
    for start in stuck:
        term = next((t for t in tenure if t["controller_id"] == start["controller_id"] and start["zxid"] is not None
                     and t["start_zxid"] <= start["zxid"] and t["end_zxid"] is not None
                     and start["zxid"] < t["end_zxid"]), None)
        closing = next((e for e in ordered if term is not None and e["zxid"] == term["end_zxid"]
                        and e["type"] in (MetadataEventType.CONTROLLER_ELECTED, MetadataEventType.CONTROLLER_RESIGNED)),
                       None)
        if closing is not None:
            out.append(_controller_end(start, closing, "/controller changed"))
    return out


def _controller_end(start: dict[str, Any], closing: dict[str, Any], how: str) -> dict[str, Any]:
    reason = json.loads(start.get("details") or "{}").get("reason")
    details = {"ended_by": how, "reason": reason, "controller_id": closing.get("controller_id")}
    return D.episode_end(start, end_event=closing["event_id"], ended_at=closing.get("event_time"),
                         ended_zxid=closing["zxid"], details=details)
