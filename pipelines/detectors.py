"""Anomaly detectors: one ``pa.Table -> pa.Table`` function per kind (rows shaped as ``anomalies``).

Inputs are the increment's outputs as the driver holds them anyway for the Delta writes: ``writes`` = enriched
partition-state writes from the fold (the write plus the partition's view before it and the cluster context at
its zxid), ``transitions`` from the fold, ``decisions`` from the logs, the bronze rows' gaps. Each rule is a
vectorised predicate (Arrow kernels, SQL null semantics: a null comparison is "not flagged"); only flagged rows
are shaped one by one. Ids are ``models.ids.event_id(cluster, kind, *evidence)`` so reruns and replays produce
the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.spark_schema import spark_arrow_schema
from models.anomalies import BLIP_SEVERITY, DEFAULT_OFFLINE_BLIP_MS, SEVERITY, AnomalyKind, SplitBrainReason
from models.decisions import FAILURE_KINDS, DecisionKind
from models.fold import Cause
from models.ids import episode_end_id, event_id
from models.states import (
    DEFAULT_KAFKA_VERSION,
    PartitionState,
    legal_pairs,
    partition_valid_previous,
    replica_valid_previous,
)
from models.tables import ANOMALIES, CONTROLLER_DECISIONS
from pipelines.arrow_ids import event_ids
from pipelines.list_kernels import list_contains, list_has_duplicates, list_has_outside
from pipelines.parallel import parallel_map

K = AnomalyKind
Mask: TypeAlias = pa.Array | pa.ChunkedArray

ANOMALY_SCHEMA = spark_arrow_schema(ANOMALIES)
_ROW_COLUMNS = ("topic", "partition", "replica", "broker", "controller_id", "controller_epoch")
WRITE_DETAILS = ("leader", "leader_epoch", "controller_epoch", "isr", "replicas", "prev_leader", "prev_leader_epoch",
                 "prev_isr", "cur_controller_epoch")
DECISION_DETAILS = ("kind", "from_state", "to_state", "leader", "leader_epoch", "message", "source_file", "line_no")
TRANSITION_DETAILS = ("from_state", "to_state", "cause")


def shape(rows: pa.Table, mask: Mask, kind: AnomalyKind, details: Sequence[str], *,
          evidence: Callable[[dict[str, Any]], list[str]] | None = None, time_column: str = "event_time",
          extra_details: dict[str, Any] | None = None, **cols: str | None) -> pa.Table:
    """The flagged ``rows`` (``mask``) as anomalies rows of ``kind``.

    ``details`` names the columns kept in the JSON details (nulls left out); ``cols`` maps an anomalies column to
    the source column that fills it (None: null), otherwise the same-named column is used when present.
    Evidence is the row's ``event_id`` unless ``evidence`` says otherwise (then rows are shaped one by one).
    A storm can flag a million rows: columns are moved by Arrow kernels, only the JSON is built per row.
    """
    flagged = rows.filter(pc.fill_null(mask, False)) if rows.num_rows else rows
    n = flagged.num_rows
    if n == 0:
        return ANOMALY_SCHEMA.empty_table()
    if evidence is not None:
        flagged = flagged.append_column("_evidence", pa.array([evidence(r) for r in flagged.to_pylist()],
                                                               pa.list_(pa.string())))
        ids = pa.array([event_id(c, str(kind), *ev) for c, ev in zip(
            flagged["cluster"].to_pylist(), flagged["_evidence"].to_pylist(), strict=True)], pa.string())
        ev_col = flagged["_evidence"]
    else:
        ids = event_ids(flagged["cluster"], str(kind), flagged["event_id"])
        ev_col = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)),
                                          pc.cast(flagged["event_id"], pa.string()).combine_chunks())
    out: dict[str, Any] = {
        "cluster": flagged["cluster"], "anomaly_id": ids, "kind": pa.array([str(kind)] * n, pa.string()),
        "severity": pa.array([SEVERITY[kind]] * n, pa.string()),
        "event_time": flagged[time_column], "detected_at": flagged[time_column],
        "zxid": flagged["zxid"] if "zxid" in flagged.column_names else None,
        "details": pa.array(_details_json(flagged, details, extra_details or {}), pa.string()), "evidence": ev_col,
    }
    for c in _ROW_COLUMNS:
        src = cols.get(c, c)
        out[c] = flagged[src] if src is not None and src in flagged.column_names else None
    arrays = [pa.nulls(n, f.type) if out.get(f.name) is None else pc.cast(out[f.name], f.type) for f in ANOMALY_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=ANOMALY_SCHEMA)


def _details_json(rows: pa.Table, names: Sequence[str], extra: dict[str, Any]) -> list[str]:
    """One JSON object per row: the named columns without their nulls, plus ``extra`` (keys sorted)."""
    keys = sorted({*(k for k in names if k in rows.column_names), *extra})
    columns = [rows[k].to_pylist() if k not in extra else [extra[k]] * rows.num_rows for k in keys]
    dumps = json.JSONEncoder(sort_keys=True, default=str).encode
    return [dumps({k: v for k, v in zip(keys, values, strict=True) if v is not None}) for values in zip(*columns, strict=True)]


def anomaly_rows(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Anomalies built row by row (``pipelines.controller.anomaly``) as an anomalies table."""
    return pa.Table.from_pylist([{c: r.get(c) for c in ANOMALY_SCHEMA.names} for r in rows], schema=ANOMALY_SCHEMA)


def concat(parts: Sequence[pa.Table]) -> pa.Table:
    tables = [p.select(ANOMALY_SCHEMA.names).cast(ANOMALY_SCHEMA) for p in parts if p.num_rows]
    return pa.concat_tables(tables) if tables else ANOMALY_SCHEMA.empty_table()


# --- from enriched state writes -------------------------------------------------------------------------
def _changed_leadership(w: pa.Table) -> pa.Array:
    return pc.or_kleene(pc.or_kleene(pc.is_null(w["prev_leader"]), pc.not_equal(w["leader"], w["prev_leader"])),
                        pc.greater(w["leader_epoch"], w["prev_leader_epoch"]))


def zombie_write_mask(w: pa.Table) -> pa.ChunkedArray:
    """current-controller-writes: leadership changed or epoch bumped with a controller_epoch older than current.

    A write at the same leader and leader_epoch that only changes the ISR is leader-originated (IBP < 2.7)
    and legitimately carries an old controller_epoch: not a zombie. Null comparisons are "not a zombie".
    """
    bad = pc.and_kleene(pc.less(w["controller_epoch"], w["cur_controller_epoch"]), _changed_leadership(w))
    return pc.fill_null(bad, False)


def detect_zombie_writes(w: pa.Table) -> pa.Table:
    return shape(w, zombie_write_mask(w), K.ZOMBIE_CONTROLLER_WRITE, WRITE_DETAILS)


def detect_leader_epoch_regression(w: pa.Table) -> pa.Table:
    """leader-epoch-rises, per topic incarnation (the fold resets the view on deletion)."""
    return shape(w, pc.less(w["leader_epoch"], w["prev_leader_epoch"]), K.LEADER_EPOCH_REGRESSION, WRITE_DETAILS)


def leader_not_in_isr_mask(w: pa.Table) -> Mask:
    """consistent-leader-and-isr: a leader (>= 0) outside the ISR (an empty or null ISR included)."""
    in_isr = pc.fill_null(list_contains(w["isr"], w["leader"]), False)
    return pc.fill_null(pc.and_kleene(pc.greater_equal(w["leader"], 0), pc.invert(in_isr)), False)


def isr_not_subset_mask(w: pa.Table) -> Mask:
    """consistent-leader-and-isr: ISR members outside the assigned replicas (all of them in a reassignment), or
    duplicates."""
    return pa.array(list_has_outside(w["isr"], w["replicas"]) | list_has_duplicates(w["isr"]))


def detect_leader_not_live(w: pa.Table) -> pa.Table:
    """consistent-leader-and-isr (leader registered), allowing for the controller's reaction lag.

    Rule: only a write that ELECTS a leader (leader or leader_epoch changes) is checked: electing a broker
    that is not registered under /brokers/ids at that zxid is wrong. A write that keeps an existing leader
    (ISR-only) is not flagged: the controller may not have processed the broker's departure yet, and its
    reaction, when it comes, is itself an election and is checked.
    """
    dead = pc.and_kleene(pc.greater_equal(w["leader"], 0), pc.equal(w["leader_live"], False))
    return shape(w, pc.and_kleene(dead, _changed_leadership(w)), K.LEADER_NOT_LIVE, WRITE_DETAILS, broker="leader")


def offline_mask(w: pa.Table) -> Mask:
    """offline-means-no-leader: a write with leader -1. Not while its topic's deletion is pending: the
    controller takes each replica offline before deleting it."""
    offline = pc.fill_null(pc.equal(w["leader"], -1), False)
    if "deletion_pending" in w.column_names:
        offline = pc.and_(offline, pc.invert(pc.fill_null(w["deletion_pending"], False)))
    return offline


def detect_unclean_elections(w: pa.Table) -> pa.Table:
    """clean-election: a new leader that was not in the previous ISR."""
    new_leader = pc.or_kleene(pc.is_null(w["prev_leader"]), pc.not_equal(w["leader"], w["prev_leader"]))
    bad = pc.and_kleene(pc.and_kleene(pc.greater_equal(w["leader"], 0), pc.is_valid(w["prev_isr"])),
                        pc.and_kleene(new_leader, pc.invert(list_contains(w["prev_isr"], w["leader"]))))
    return shape(w, bad, K.UNCLEAN_LEADER_ELECTION, WRITE_DETAILS)


WRITE_DETECTORS: tuple[Callable[[pa.Table], pa.Table], ...] = (
    detect_zombie_writes, detect_leader_epoch_regression, detect_leader_not_live, detect_unclean_elections,
)
"""The checks of one write each (point findings); the write episodes are ``WRITE_EPISODES``."""


# --- episodes: write findings with a start and an end ------------------------------------------------------
WRITE_EPISODES: dict[AnomalyKind, Callable[[pa.Table], Mask]] = {
    K.OFFLINE_PARTITION: offline_mask, K.LEADER_NOT_IN_ISR: leader_not_in_isr_mask,
    K.ISR_NOT_SUBSET_OF_REPLICAS: isr_not_subset_mask,
}
"""A partition's condition that lasts from the write that breaks the rule to the first one that does not (or
the partition's deletion): one start row, reported at once, then one end row (``episode_end``)."""
OPEN_EPISODES = pa.schema([ANOMALY_SCHEMA.field(c) for c in (
    "kind", "anomaly_id", "event_time", "zxid", "evidence", *_ROW_COLUMNS)])
"""The start rows of a bucket's episodes not ended yet (what it carries; one per kind and partition at most):
what their end rows copy, so an end finds the same start whether it came in its batch or was carried."""
DEFAULT_OFFLINE_BLIP = timedelta(milliseconds=DEFAULT_OFFLINE_BLIP_MS)
_GONE = str(PartitionState.NON_EXISTENT)


def episode_end(start: dict[str, Any], *, end_event: str | None, ended_at: Any, ended_zxid: int | None,
                details: dict[str, Any], severity: str | None = None) -> dict[str, Any]:
    """The row that ends the episode ``start`` (its start row, or the carried part of it): the start's
    subject, time and zxid with the end's, the duration, and an id derived from the start's. ``severity``: the
    episode's as a whole (default the kind's)."""
    began = start.get("event_time")
    # the order is the zxids'; the times are the collectors' clocks, which may disagree by a little
    duration = None if began is None or ended_at is None else max(0, (ended_at - began) // timedelta(milliseconds=1))
    evidence = [*(start.get("evidence") or ()), *([end_event] if end_event else [])]
    row = {c: start.get(c) for c in ANOMALY_SCHEMA.names}
    row.update(anomaly_id=episode_end_id(start["anomaly_id"]), episode_id=start["anomaly_id"],
               severity=severity or SEVERITY[AnomalyKind(start["kind"])], detected_at=ended_at or began,
               ended_at=ended_at, ended_zxid=ended_zxid, duration_ms=duration, evidence=evidence,
               details=json.dumps({**details, "end_event": end_event}, sort_keys=True, default=str))
    return row


def offline_end_details(start: dict[str, Any], ended_at: Any, offline_blip: timedelta) -> tuple[dict[str, Any], str]:
    """(the blip verdict for an OFFLINE_PARTITION end's details, the episode's severity): a blip ended within
    ``offline_blip`` of its start (a failover's leader -1 before the next election), an outage did not."""
    began = start.get("event_time")
    blip = began is not None and ended_at is not None and ended_at - began <= offline_blip
    verdict = {"blip": blip, "blip_threshold_ms": offline_blip // timedelta(milliseconds=1)}
    return verdict, BLIP_SEVERITY if blip else SEVERITY[K.OFFLINE_PARTITION]


def _key_ints(t: pa.Table, topics: pa.Array) -> np.ndarray:
    """(topic, partition) as one int64 per row, topics coded by their place in ``topics``."""
    code = pc.fill_null(pc.index_in(t["topic"], topics), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    part = pc.fill_null(t["partition"], -1).to_numpy(zero_copy_only=False).astype(np.int64)
    out: np.ndarray = (code << 32) | (part & 0xFFFF_FFFF)
    return out


def write_episodes(writes: pa.Table, pt: pa.Table, carried: pa.Table,
                   offline_blip: timedelta = DEFAULT_OFFLINE_BLIP) -> tuple[pa.Table, pa.Table]:
    """(the start and end rows of the WRITE_EPISODES, the episodes still open) of a bucket's batch.

    ``writes``: the fold's enriched state writes; ``pt``: its partition transitions (a deletion step to
    NonExistentPartition ends a partition's episodes); ``carried``: OPEN_EPISODES from earlier batches. Per
    partition in zxid order, a write that breaks a rule after one that did not (or after nothing carried)
    starts an episode (the row the per-write check made, same id); the next write that keeps the rule ends it.
    The rule is per partition and in its order only, so any cut of the history into batches gives the same
    rows."""
    gone = pt.filter(pc.fill_null(pc.and_(pc.equal(pt["to_state"], _GONE),
                                          pc.equal(pt["cause"], str(Cause.TOPIC_DELETION))), False))
    if writes.num_rows == 0 and (gone.num_rows == 0 or carried.num_rows == 0):
        return ANOMALY_SCHEMA.empty_table(), carried
    obs = pa.concat_tables([writes.append_column("_gone", pa.array(np.zeros(writes.num_rows, bool))),
                            gone.select(["cluster", "topic", "partition", "zxid", "event_time", "event_id"]).append_column(
                                "_gone", pa.array(np.ones(gone.num_rows, bool)))], promote_options="default")
    topics = pc.unique(pa.chunked_array([*obs["topic"].chunks, *carried["topic"].chunks], pa.string()))
    # a partition's rows together in zxid order: the partition as one integer sorts faster than its topic's name
    obs = obs.append_column("_key", pa.array(_key_ints(obs, topics))).sort_by(
        [("_key", "ascending"), ("zxid", "ascending"), ("_gone", "ascending"), ("event_id", "ascending")])
    key, carried_key = obs["_key"].to_numpy(), _key_ints(carried, topics)
    n = obs.num_rows
    at = np.arange(n)
    first = np.r_[True, key[1:] != key[:-1]] if n else np.zeros(0, bool)
    last = np.r_[key[1:] != key[:-1], True] if n else np.zeros(0, bool)
    seg_first = np.maximum.accumulate(np.where(first, at, 0)) if n else at
    is_gone = obs["_gone"].to_numpy(zero_copy_only=False)
    found: list[pa.Table] = []
    ends: list[dict[str, Any]] = []
    still_open = [carried.filter(pa.array(~np.isin(carried_key, key)))]  # partitions this batch did not touch
    for kind, rule in WRITE_EPISODES.items():
        mine = pc.equal(carried["kind"], str(kind)).to_numpy(zero_copy_only=False)
        by_key = {int(k): i for i, k in enumerate(carried_key) if mine[i]}
        was_open = np.isin(key[first], carried_key[mine])
        bad = np.asarray(pc.fill_null(rule(obs), False).to_numpy(zero_copy_only=False), bool) & ~is_gone
        before = np.r_[False, bad[:-1]] if n else bad
        before[first] = was_open
        start, end = bad & ~before, ~bad & before
        starts = shape(obs, pa.array(start), kind, WRITE_DETAILS)
        starts = starts.set_column(starts.schema.get_field_index("episode_id"), "episode_id", starts["anomaly_id"])
        found.append(starts)
        row_of_start = np.full(n, -1)
        row_of_start[start] = np.arange(int(start.sum()))
        latest = np.maximum.accumulate(np.where(start, at, -1)) if n else at
        start_rows = starts.to_pylist() if end.any() else []
        for i in np.flatnonzero(end):
            j = latest[i]
            began = start_rows[row_of_start[j]] if j >= seg_first[i] else carried.slice(by_key[int(key[i])], 1).to_pylist()[0]
            began = {**began, "cluster": obs["cluster"][i].as_py()}
            ended_at, zxid = obs["event_time"][i].as_py(), obs["zxid"][i].as_py()
            details: dict[str, Any] = {"ended_by": "topic deletion" if is_gone[i] else "write"}
            if not is_gone[i]:
                details.update({c: obs[c][i].as_py() for c in ("leader", "leader_epoch", "isr")})
            severity = None
            if kind == K.OFFLINE_PARTITION:
                verdict, severity = offline_end_details(began, ended_at, offline_blip)
                details.update(verdict)
            ends.append(episode_end(began, end_event=obs["event_id"][i].as_py(), ended_at=ended_at, ended_zxid=zxid,
                                    details=details, severity=severity))
        open_at_last = last & bad
        from_batch = open_at_last & (latest >= seg_first)
        still_open.append(starts.take(pa.array(row_of_start[latest[from_batch]], pa.int64()))
                          .select(OPEN_EPISODES.names))
        kept = [by_key[int(k)] for k in key[open_at_last & ~from_batch]]
        still_open.append(carried.take(pa.array(kept, pa.int64())))
    opened = pa.concat_tables([t.select(OPEN_EPISODES.names).cast(OPEN_EPISODES) for t in still_open])
    return concat([*found, anomaly_rows(ends)]), opened


# --- from the fold's transitions ---------------------------------------------------------------------------
def detect_illegal_transitions(pt: pa.Table, rt: pa.Table) -> pa.Table:
    zk = {"source": "zk"}
    return concat([
        shape(pt, pc.invert(pt["legal"]), K.ILLEGAL_PARTITION_TRANSITION, TRANSITION_DETAILS, extra_details=zk),
        shape(rt, pc.invert(rt["legal"]), K.ILLEGAL_REPLICA_TRANSITION, TRANSITION_DETAILS, extra_details=zk),
    ])


# --- from controller/broker logs ------------------------------------------------------------------------
FAILED_CHANGE_KINDS = tuple(sorted(str(k) for k in FAILURE_KINDS & {
    DecisionKind.PARTITION_TRANSITION_FAILED, DecisionKind.REPLICA_TRANSITION_FAILED, DecisionKind.INVALID_TRANSITION}))
"""A state change that did not take effect; an invalid-transition cause is ALSO an illegal transition."""


def _decisions(d: pa.Table, mask: Mask, kind: AnomalyKind) -> pa.Table:
    return shape(d, mask, kind, DECISION_DETAILS, time_column="ts", broker=None)


def detect_failed_state_changes(d: pa.Table) -> pa.Table:
    return _decisions(d, pc.is_in(d["kind"], pa.array(FAILED_CHANGE_KINDS)), K.FAILED_STATE_CHANGE)


def detect_stale_controller_requests(d: pa.Table) -> pa.Table:
    return _decisions(d, pc.equal(d["kind"], str(DecisionKind.STALE_CONTROLLER_REQUEST)), K.STALE_CONTROLLER_REQUEST)


def detect_stale_zk_version_isr_updates(d: pa.Table) -> pa.Table:
    """KAFKA-2729: a leader's cached partition-state version is behind ZooKeeper, so its ISR change was skipped."""
    return shape(d, pc.equal(d["kind"], str(DecisionKind.STALE_ZK_VERSION)), K.STALE_ZK_VERSION_ISR_UPDATE,
                 DECISION_DETAILS, time_column="ts", broker="broker_id")


def detect_illegal_logged_transitions(d: pa.Table, kafka_version: str = DEFAULT_KAFKA_VERSION) -> pa.Table:
    """Logged transitions checked against the version-aware tables, plus logged invalid-transition errors."""
    p_ok = pa.array(sorted(f"{a}>{b}" for a, b in legal_pairs(partition_valid_previous(kafka_version))))
    r_ok = pa.array(sorted(f"{a}>{b}" for a, b in legal_pairs(replica_valid_previous(kafka_version))))
    pair = pc.binary_join_element_wise(d["from_state"], d["to_state"], ">")  # null when from_state is null

    def logged(kind: DecisionKind, ok: pa.Array) -> pa.Array:
        return pc.and_kleene(pc.equal(d["kind"], str(kind)), pc.invert(pc.is_in(pair, ok)))

    invalid = pc.equal(d["kind"], str(DecisionKind.INVALID_TRANSITION))
    on_replica = pc.is_valid(d["replica"])
    partition = pc.or_kleene(logged(DecisionKind.PARTITION_TRANSITION, p_ok), pc.and_(invalid, pc.invert(on_replica)))
    replica = pc.or_kleene(logged(DecisionKind.REPLICA_TRANSITION, r_ok), pc.and_(invalid, on_replica))
    return concat([_decisions(d, partition, K.ILLEGAL_PARTITION_TRANSITION),
                   _decisions(d, replica, K.ILLEGAL_REPLICA_TRANSITION)])


def _write_keys(t: pa.Table) -> pa.Array:
    """(topic, partition, leader, leader_epoch) as one string per row (null when any part is null)."""
    return pc.binary_join_element_wise(t["topic"], *(pc.cast(t[c], pa.string()) for c in
                                                     ("partition", "leader", "leader_epoch")), "\x1f")


ZK_WRITE_COLUMNS = ("topic", "partition", "leader", "leader_epoch")
"""What the decision detectors ask of a state write: whether ZooKeeper ever held (leader, leader_epoch)."""
ZK_WRITE_SCHEMA = pa.schema([pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
                             pa.field("leader", pa.int32()), pa.field("leader_epoch", pa.int32())])


ZK_WRITES_KEPT_EPOCHS = 32
"""How many (leader, leader_epoch) rows of one partition are kept to check logged decisions against: its
newest by leader epoch. The controller logs a decision within seconds of writing it, so a settled decision asks
about one of its partition's latest leader epochs; one at or below the oldest kept epoch of a partition that has
had this many is beyond judgement (not flagged), not wrong. Keeps the carried writes one window per partition
rather than every leader change of the monitor's life."""


def distinct_writes(writes: pa.Table) -> pa.Table:
    """The writes the decisions are checked against, one row per (topic, partition, leader, leader_epoch): per
    partition its ZK_WRITES_KEPT_EPOCHS newest distinct rows by leader epoch (then by leader, so ties at the cut
    fall the same way in any order). A row missing a part never matches a decision and is not kept.

    The one retention rule: it composes (``distinct_writes(concat(distinct_writes(a), b))`` is
    ``distinct_writes(concat(a, b))``), so a carry advanced batch by batch (``advanced_writes``) holds what the
    whole history gives.
    Vectorised: topics as dictionary codes, a hash count per partition, then one numpy sort of the rows of the
    partitions over the window only."""
    cols = list(ZK_WRITE_COLUMNS)
    t = writes.select(cols)
    t = t.filter(pc.and_(pc.and_(pc.is_valid(t["topic"]), pc.is_valid(t["partition"])),
                         pc.and_(pc.is_valid(t["leader"]), pc.is_valid(t["leader_epoch"]))))
    if t.num_rows == 0:
        return t
    topics = pc.dictionary_encode(t["topic"].combine_chunks())
    coded = pa.table({"topic": topics.indices, **{c: t[c] for c in cols[1:]}})
    coded = coded.group_by(cols, use_threads=False).aggregate([]).select(cols)  # distinct rows
    n = coded.num_rows
    key = ((coded["topic"].to_numpy().astype(np.int64) << 32)  # (topic, partition) as one int64
           | (coded["partition"].to_numpy().astype(np.int64) + 2**31))
    counts = pc.value_counts(pa.array(key))
    rows = pc.take(counts.field("counts"), pc.index_in(pa.array(key), counts.field("values"))).to_numpy()
    over = np.flatnonzero(rows > ZK_WRITES_KEPT_EPOCHS)
    if over.size:
        epoch, leader = (coded[c].to_numpy().astype(np.int64)[over] for c in ("leader_epoch", "leader"))
        order = over[np.lexsort((leader, epoch, key[over]))]  # by partition, each one's newest rows last
        grouped = key[order]
        at = np.arange(order.size)
        last = np.ones(order.size, bool)
        last[:-1] = grouped[1:] != grouped[:-1]
        group_end = np.minimum.accumulate(np.where(last, at, order.size)[::-1])[::-1]
        keep = np.ones(n, bool)
        keep[order[group_end - at >= ZK_WRITES_KEPT_EPOCHS]] = False  # the rows are distinct: K newest kept
        coded = coded.filter(pa.array(keep))
    return pa.table({"topic": pc.take(topics.dictionary, coded["topic"]), **{c: coded[c] for c in cols[1:]}},
                    schema=t.schema)


def advanced_writes(carried: pa.Table, writes: pa.Table) -> pa.Table:
    """``carried`` (``distinct_writes`` rows) with a batch's ``writes``: only the partitions written are
    windowed again (the retention is per partition), so a batch's cost follows its writes, not the bucket's
    keys. The rows of ``distinct_writes(concat(carried, writes))``, the untouched partitions' first."""
    if writes.num_rows == 0:
        return carried
    new = writes.select(list(ZK_WRITE_COLUMNS)).cast(ZK_WRITE_SCHEMA)
    if new.num_rows >= carried.num_rows // ZK_WRITES_KEPT_EPOCHS:
        # about as many writes as the carry has partitions (a rebuild's batch): most are touched, and one
        # pass over everything is cheaper than finding them
        return distinct_writes(pa.concat_tables([carried, new]))
    topics = pc.unique(pa.chunked_array([*carried["topic"].chunks, *new["topic"].chunks], pa.string()))
    touched = pa.array(np.isin(_key_ints(carried, topics), _key_ints(new, topics)))
    return pa.concat_tables([carried.filter(pc.invert(touched)),
                             distinct_writes(pa.concat_tables([carried.filter(touched), new]))])


def _partition_keys(t: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(t["topic"], pc.cast(t["partition"], pa.string()), "\x1f")


def beyond_kept_writes(d: pa.Table, kept: pa.Table) -> pa.Array:
    """Per row of ``d``: its leader epoch is at or below the oldest one ``kept`` (``distinct_writes``) holds for
    its partition, and that partition's window is full (ZK_WRITES_KEPT_EPOCHS rows): what ZooKeeper held then is
    no longer known. False for a partition with fewer rows (all its writes are kept) or a null epoch."""
    windows = kept.group_by(["topic", "partition"], use_threads=False).aggregate(
        [("leader_epoch", "count"), ("leader_epoch", "min")])
    full = windows.filter(pc.greater_equal(windows["leader_epoch_count"], ZK_WRITES_KEPT_EPOCHS))
    if full.num_rows == 0 or d.num_rows == 0:
        return pa.array(np.zeros(d.num_rows, bool))
    floor = pc.take(full["leader_epoch_min"], pc.index_in(_partition_keys(d), _partition_keys(full)))
    return pc.fill_null(pc.less_equal(d["leader_epoch"], floor), False)


def detect_decision_zk_divergence(d: pa.Table, zk_writes: pa.Table) -> pa.Table:
    """The controller logged t-p -> OnlinePartition with leader L / epoch E, but ZK never held (L, E).

    ``d``: settled decisions (``settle_decisions``); ``zk_writes``: the known state writes (topic, partition,
    leader, leader_epoch) of their partitions, retained here by ``distinct_writes`` whatever the caller passed
    (carried rows already retained, a batch's raw writes, or both concatenated give one answer). A decision at or
    below the oldest kept epoch of a partition whose window is full is not judged (``beyond_kept_writes``).
    """
    keys = ["topic", "partition"]
    asked = d.select(keys).drop_null().group_by(keys, use_threads=False).aggregate([])
    asked = asked.cast(pa.schema([zk_writes.schema.field(k).with_nullable(True) for k in keys]))
    # retention is per partition: the writes of the partitions asked about give their windows whole
    kept = distinct_writes(zk_writes.select(list(ZK_WRITE_COLUMNS)).join(asked, keys, join_type="left semi"))
    seen = pc.fill_null(pc.is_in(_write_keys(d), pc.unique(_write_keys(kept)).drop_null()), False)
    judged = pc.invert(beyond_kept_writes(d, kept))
    return _decisions(d, pc.and_kleene(pc.and_kleene(_zk_checked(d), pc.invert(seen)), judged),
                      K.DECISION_ZK_DIVERGENCE)


DECISION_SETTLE = timedelta(seconds=10)
"""How far ZooKeeper's history must have run past a logged decision before the decision is compared with it.
Kafka's controller writes ZooKeeper first and logs after, but the two reach the lake through different
collectors, each committing about once a second: a decision can arrive before its write."""
PENDING_DECISIONS = spark_arrow_schema(CONTROLLER_DECISIONS)
"""The logged decisions waiting for ZooKeeper's history to settle (what a monitor carries)."""


def _zk_checked(d: pa.Table) -> Mask:
    """The decisions compared with ZooKeeper: a partition logged going online with a leader and epoch."""
    return pc.and_kleene(pc.and_kleene(pc.equal(d["kind"], str(DecisionKind.PARTITION_TRANSITION)),
                                       pc.equal(d["to_state"], "OnlinePartition")),
                         pc.and_(pc.is_valid(d["leader"]), pc.is_valid(d["leader_epoch"])))


def micros(times: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Timestamps (any unit, with or without zone: both mean UTC here) as int64 microseconds."""
    return pc.cast(pc.cast(times, pa.timestamp("us", tz="UTC")), pa.int64())


def zk_time_seen(meta: pa.Table, before: int | None) -> int | None:
    """The latest ZooKeeper event time (microseconds) of ``meta`` (one cluster's decoded events) and ``before``."""
    top = pc.max(micros(meta["event_time"])).as_py() if meta.num_rows else None
    return max((t for t in (top, before) if t is not None), default=None)


def settle_horizon(zk_time: int) -> int:
    """The latest decision time (microseconds) ZooKeeper's history up to ``zk_time`` settles."""
    return zk_time - int(DECISION_SETTLE.total_seconds() * 1_000_000)


def settle_decisions(pending: pa.Table, decisions: pa.Table, zk_time: int | None) -> tuple[pa.Table, pa.Table]:
    """(the decisions to compare with ZooKeeper now, those still waiting) of the carried ``pending`` and a
    batch's ``decisions``: one is settled once ZooKeeper's history (``zk_time``, ``zk_time_seen``) has run
    DECISION_SETTLE past it. A decision without a time is settled at once. Deterministic in the data, so
    a rebuild and a monitor fed in any chunks settle the same decisions against the same writes."""
    new = decisions.filter(_zk_checked(decisions)).select(PENDING_DECISIONS.names).cast(PENDING_DECISIONS)
    waiting = pa.concat_tables([pending.select(PENDING_DECISIONS.names).cast(PENDING_DECISIONS), new])
    if zk_time is None:
        mask = pc.is_null(waiting["ts"])
    else:
        mask = pc.fill_null(pc.less_equal(micros(waiting["ts"]), settle_horizon(zk_time)), True)
    return waiting.filter(mask), waiting.filter(pc.invert(mask))


DECISION_DETECTORS: tuple[Callable[[pa.Table], pa.Table], ...] = (
    detect_failed_state_changes, detect_stale_controller_requests, detect_stale_zk_version_isr_updates,
)


def detect_split_brain(terms: pa.Table) -> pa.Table:
    """Two controller ids acting as controller at once, from the logged-decision terms.

    ``terms``: controller_tenure rows with source 'logs' (one per (controller id, epoch) seen acting: few).
    Flagged: two ids claiming the same epoch (an election makes one controller per epoch: ``reason`` same_epoch),
    and two ids with different epochs whose acting times overlap (the older epoch still acting after the newer
    one started, Kafka's soft-failure or zombie shape: ``reason`` overlapping_terms). The details name when the
    older term was first seen acting, not when last: logs arrive in time order, so that is known when the overlap
    is, and the first-found row (the one committed) does not depend on where micro-batches cut the logs.
    """
    rows = sorted((t for t in terms.to_pylist() if t["start_time"] is not None and t["end_time"] is not None),
                  key=lambda t: (t["start_time"], t["controller_id"]))
    pairs = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if a["cluster"] != b["cluster"] or a["controller_id"] == b["controller_id"]:
                continue
            if a["controller_epoch"] == b["controller_epoch"]:
                reason = SplitBrainReason.SAME_EPOCH
            elif a["end_time"] >= b["start_time"] and b["end_time"] >= a["start_time"]:
                reason = SplitBrainReason.OVERLAPPING_TERMS
            else:
                continue
            old, new = (a, b) if a["controller_epoch"] <= b["controller_epoch"] else (b, a)
            pairs.append({"cluster": a["cluster"], "event_time": new["start_time"],
                          "controller_id": old["controller_id"], "controller_epoch": old["controller_epoch"],
                          "other_id": new["controller_id"], "other_epoch": new["controller_epoch"],
                          "old_first_seen": old["start_time"], "reason": str(reason)})
    if not pairs:
        return ANOMALY_SCHEMA.empty_table()
    table = pa.Table.from_pylist(pairs)
    return shape(table, pa.array([True] * len(pairs)), K.SPLIT_BRAIN,
                 ("controller_id", "controller_epoch", "other_id", "other_epoch", "old_first_seen", "reason"),
                 evidence=lambda r: [f"term:{r['controller_id']}:{r['controller_epoch']}",
                                     f"term:{r['other_id']}:{r['other_epoch']}"])


def detect_collection_gaps(znode_gaps: pa.Table,
                           txnlog_range: tuple[int | None, int | None] = (None, None)) -> pa.Table:
    """znode rows whose collector saw a version jump (missed_versions > 0).

    Not when the txnlog collector has delivered that zxid (``txnlog_range``, its lowest and highest delivered
    zxid, holds it): the lossless history is in the lake, so the watch's gap lost nothing.
    """
    bad = pc.greater(znode_gaps["missed_versions"], 0)
    lo, hi = txnlog_range
    if lo is not None and hi is not None:
        zxid = znode_gaps["zxid"]
        covered = pc.and_kleene(pc.greater_equal(zxid, lo), pc.less_equal(zxid, hi))
        bad = pc.and_kleene(bad, pc.invert(covered))  # no zxid: not reported beside a txnlog, as before
    return shape(znode_gaps, bad, K.COLLECTION_GAP, ("path", "missed_versions", "source"), time_column="observed_at")


GAP_COLUMNS = ("cluster", "zxid", "path", "missed_versions", "source", "observed_at", "event_id")
"""The bronze columns ``detect_collection_gaps`` reads."""


def write_anomalies(writes: pa.Table) -> pa.Table:
    if writes.num_rows < 100_000:
        return concat([det(writes) for det in WRITE_DETECTORS])
    # independent column kernels over a million rows at a storm or a rebuild chunk: one per core
    return concat(parallel_map(lambda det: det(writes), WRITE_DETECTORS))


def decision_anomalies(decisions: pa.Table, kafka_version: str = DEFAULT_KAFKA_VERSION) -> pa.Table:
    """The checks of logged decisions that need nothing but the logs (ZooKeeper's: ``settle_decisions``,
    then ``detect_decision_zk_divergence``)."""
    return concat([*(det(decisions) for det in DECISION_DETECTORS),
                   detect_illegal_logged_transitions(decisions, kafka_version)])

