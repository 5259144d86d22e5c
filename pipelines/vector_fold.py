"""The keyed fold of both state machines, vectorised with numpy over one bucket's sorted rows.

Same input and output as ``BucketFolder`` (rows sorted by topic, partition, ord, zxid, _seq, event_id; records
with a ``rec`` discriminator) and the same rules, but without a Python call per row:

* every row is a function on the tiny state set: the ``models.fold.PartitionFold`` rule (``StepRule``) the row
  takes, evaluated once on every state code (``_RuleTable``); a seed row is the constant function of its carried
  state, a failover re-seed "keep a state ``NOT_RESEEDED``, else the re-derived state". A segmented prefix
  composition (Hillis-Steele doubling, log2(longest key) numpy passes) gives the state before every row of
  every key at once; the same tables then say which step each row logs, its target, legality and cause.
* the replica machine runs the same scan over rows exploded per (partition, replica): seeds, assignments, ISR
  entries and removals, a broker (de)registration's replica, a re-seed's constant per assigned replica.
* keys with a deletion (request) or a reassignment that drops a replica in the increment (rare: their deletion
  flow takes several steps per replica), or whose carried replicas are deleting (``models.fold.deletion_pending``:
  a write then moves nothing to Online), go through ``BucketFolder`` row by row;
  ``tests/pipelines/test_vector_fold.py`` checks both agree on random histories.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from models.events import MetadataEventType
from models.fold import (
    BROKER_BACK,
    BROKER_GONE,
    DELETING_REPLICA_STATES,
    FIRST_LEADER,
    FOLDED_EVENTS,
    INELIGIBLE_OFFLINE,
    INITIAL_PARTITION_CODE,
    INITIAL_REPLICA_CODE,
    INTO_ISR,
    NEW_LEADER,
    NEW_PARTITION,
    NEW_REPLICA,
    NO_LEADER,
    NOT_RESEEDED,
    OUT_OF_ISR,
    PARTITION_CODES,
    PARTITION_STATES_BY_CODE,
    REPLICA_CODES,
    REPLICA_STATES_BY_CODE,
    SAME_LEADER,
    Cause,
    PartitionFold,
    StepRule,
    reseeded_partition_state,
    reseeded_replica_state,
)
from models.states import DEFAULT_KAFKA_VERSION, PartitionState, ReplicaState
from pipelines.arrow_ids import step_ids
from pipelines.fold_records import FOLD_ARROW_SCHEMA, FOLD_RECORDS, FoldRecord
from pipelines.list_kernels import flat, member_of_row, padded
from pipelines.state_machines import FANNED_GLOBAL_TYPES, SEED, BucketFolder, GlobalContext

T = MetadataEventType

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

FAST_TYPES = (T.PARTITION_ASSIGNED, T.PARTITION_STATE_WRITTEN, T.CONTROLLER_ELECTED, T.BROKER_REGISTERED,
              T.BROKER_DEREGISTERED)
"""The folded event types the numpy pass steps on (each takes one rule per partition or replica)."""
SLOW_TYPES = tuple(t for t in T if t in FOLDED_EVENTS and t not in FAST_TYPES)
"""The other folded types (deletions: several steps per replica): their keys take the row fold."""
P_INITIAL, R_INITIAL = INITIAL_PARTITION_CODE, INITIAL_REPLICA_CODE  # each key's scan starts there
CAUSES = pa.array([str(c) for c in Cause], pa.string())
CAUSE_CODES = {c: i for i, c in enumerate(Cause)}  # index into CAUSES


class PartitionStep(IntEnum):
    """What a row does to its partition's state: the rule of ``PARTITION_STEP_RULES`` it takes, if any (seeds and
    failover re-seeds are constant maps of their own)."""

    NONE = 0  # the identity
    ASSIGN = 1  # an assignment
    FIRST_LEADER = 2  # a state write with a leader, no state znode before
    NEW_LEADER = 3  # a state write with a new leader or leader epoch
    SAME_LEADER = 4  # a state write at the same leader and epoch (an ISR change)
    NO_LEADER = 5  # a state write without a leader


PARTITION_STEP_RULES: Mapping[PartitionStep, StepRule[PartitionState]] = {
    PartitionStep.ASSIGN: NEW_PARTITION, PartitionStep.FIRST_LEADER: FIRST_LEADER,
    PartitionStep.NEW_LEADER: NEW_LEADER, PartitionStep.SAME_LEADER: SAME_LEADER, PartitionStep.NO_LEADER: NO_LEADER,
}


class ReplicaStep(IntEnum):
    """What moves one replica at one row of the replica scan (each element of the exploded rows): the rule of
    ``REPLICA_STEP_RULES`` it takes, or a constant map."""

    SEED = 0  # the carried state (a constant map; not a step)
    ASSIGN = 1  # in a new assignment
    IN_ISR = 2  # in a written ISR
    OUT_OF_ISR = 3  # dropped from the ISR by the controller (or while its broker is down)
    DEREGISTERED = 4  # its broker went away
    REGISTERED = 5  # its broker came back
    RESEED = 6  # a failover re-derives it (a constant map)
    FAILOVER_OFFLINE = 7  # 2.3+: right after the re-seed


REPLICA_STEP_RULES: Mapping[ReplicaStep, StepRule[ReplicaState]] = {
    ReplicaStep.ASSIGN: NEW_REPLICA, ReplicaStep.IN_ISR: INTO_ISR, ReplicaStep.OUT_OF_ISR: OUT_OF_ISR,
    ReplicaStep.DEREGISTERED: BROKER_GONE, ReplicaStep.REGISTERED: BROKER_BACK,
    ReplicaStep.FAILOVER_OFFLINE: INELIGIBLE_OFFLINE,
}


def int_codes(col: pa.Array | pa.ChunkedArray) -> IntArray:
    """An int code per value (equal values, equal codes, a null is a code of its own) for sorting/grouping by
    several columns at once with numpy. Codes of strings follow first appearance, not collation."""
    if pa.types.is_integer(col.type):
        ints: IntArray = pc.fill_null(pc.cast(col, pa.int64()), np.iinfo(np.int64).min).to_numpy()
        return ints
    codes: IntArray = pc.fill_null(pc.index_in(col, pc.unique(col)), -1).to_numpy().astype(np.int64)
    return codes


def segmented_compose(funcs: npt.NDArray[np.int8], seg_start: IntArray) -> npt.NDArray[np.int8]:
    """``P[i] = funcs[i] ∘ … ∘ funcs[seg_start[i]]``: inclusive prefix composition of state maps per segment."""
    monoid = MapMonoid([tuple(int(x) for x in f) for f in np.unique(funcs, axis=0)])
    ids = monoid.ids_of(funcs)
    return monoid.maps[segmented_scan(ids, seg_start, monoid.comp)]


class MapMonoid:
    """Every state map reachable by composing the given ones, numbered, with the composition table.

    A row's state map becomes one small int, and composing two is one table lookup: the prefix scan moves
    ints, not rows of a (rows x states) matrix. The state machines' maps close quickly (tens of maps).
    """

    def __init__(self, generators: Sequence[tuple[int, ...]], limit: int = 4096) -> None:
        k = len(generators[0])
        maps: list[tuple[int, ...]] = [tuple(range(k))]
        index = {maps[0]: 0}
        for g in generators:
            if g not in index:
                index[g] = len(maps)
                maps.append(g)
        done = 0  # maps[:done] composed with every map before them, both ways
        while done < len(maps):
            for j in range(done + 1):
                for a, b in ((maps[done], maps[j]), (maps[j], maps[done])):
                    c = tuple(a[x] for x in b)  # a after b
                    if c not in index:
                        if len(maps) >= limit:
                            raise ValueError(f"state maps do not close within {limit}")
                        index[c] = len(maps)
                        maps.append(c)
            done += 1
        self.index = index
        self.maps = np.array(maps, np.int8)
        self.comp = np.array([[index[tuple(a[x] for x in b)] for b in maps] for a in maps], np.int32)

    def id_of(self, state_map: Sequence[int] | npt.NDArray[np.int8]) -> int:
        return self.index[tuple(int(x) for x in state_map)]

    def ids_of(self, funcs: npt.NDArray[np.int8]) -> npt.NDArray[np.int32]:
        """The ids of a (rows x states) matrix of maps, each one of this monoid."""
        unique, inverse = np.unique(funcs, axis=0, return_inverse=True)
        return np.array([self.id_of(u) for u in unique], np.int32)[inverse.reshape(-1)]

    def constants(self) -> npt.NDArray[np.int32]:
        """Id of the constant map to each state, by state code (they must be generators or reachable)."""
        k = self.maps.shape[1]
        return np.array([self.id_of((s,) * k) for s in range(k)], np.int32)


def segmented_scan(ids: npt.NDArray[np.int32], seg_start: IntArray, comp: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """Inclusive prefix composition per segment over map ids (``comp[later, earlier]``), by doubling."""
    out = ids.copy()
    pos = np.arange(len(ids))
    d = 1
    while True:
        idx = pos[pos - d >= seg_start]
        if not len(idx):
            return out
        out[idx] = comp[out[idx], out[idx - d]]  # the earlier span first, then this one
        d *= 2


def _segment_starts(boundary: BoolArray) -> IntArray:
    """Index of the first row of each row's segment (``boundary[i]``: row i starts a segment)."""
    starts = np.where(boundary, np.arange(len(boundary)), 0)
    return np.maximum.accumulate(starts) if len(starts) else starts.astype(np.int64)


def _last_where(mask: BoolArray, seg_start: IntArray, inclusive: bool) -> IntArray:
    """Per row: index of the last row at (or strictly before) it in its segment where ``mask``; -1 if none."""
    idx = np.where(mask, np.arange(len(mask)), -1)
    last = np.maximum.accumulate(idx) if len(idx) else idx
    if not inclusive:
        last = np.concatenate([[-1], last[:-1]]) if len(last) else last
    return np.where(last >= seg_start, last, -1)


def _take(col: pa.Array | pa.ChunkedArray, idx: IntArray) -> pa.Array:
    """``col[idx]`` with -1 -> null."""
    return pc.take(col, pa.array(idx, pa.int64(), mask=idx < 0))


_S = TypeVar("_S", PartitionState, ReplicaState)


class _RuleTable:
    """Rules evaluated on every state code (``StepRule.apply``, as ``PartitionFold`` runs them), one row per step
    kind; a kind without a rule is the identity and logs nothing."""

    def __init__(self, rules: Iterable[tuple[int, StepRule[_S]]], kinds: int, states: Sequence[_S],
                 valid_previous: Mapping[_S, frozenset[_S]]) -> None:
        code = {s: i for i, s in enumerate(states)}
        self.maps = np.tile(np.arange(len(states), dtype=np.int8), (kinds, 1))  # [kind, state]: the state after
        self.logs = np.zeros((kinds, len(states)), bool)  # [kind, state]: a step is logged
        self.legal = np.zeros((kinds, len(states)), bool)  # [kind, state]
        self.target = np.full(kinds, -1, np.int64)  # [kind]
        self.cause = np.zeros(kinds, np.int64)  # [kind]: index into CAUSES
        for kind, rule in rules:
            self.target[kind], self.cause[kind] = code[rule.target], CAUSE_CODES[rule.cause]
            for i, state in enumerate(states):
                after, step = rule.apply(state, valid_previous)
                self.maps[kind, i] = code[after]
                self.logs[kind, i] = step is not None
                self.legal[kind, i] = step is not None and step.legal


class _Tables:
    """The state maps and steps of every kind of row for one Kafka version, from ``models.fold`` (the rules' one
    home), and the monoids of the maps."""

    def __init__(self, kafka_version: str) -> None:
        fold = PartitionFold(kafka_version)
        self.offline_after_reseed = fold.offline_after_reseed
        ps, rs = PARTITION_STATES_BY_CODE, REPLICA_STATES_BY_CODE
        self.p = _RuleTable(PARTITION_STEP_RULES.items(), len(PartitionStep), ps, fold.partition_valid)
        self.r = _RuleTable(REPLICA_STEP_RULES.items(), len(ReplicaStep), rs, fold.replica_valid)
        # a failover re-seed by (has a state znode, leader alive): each state's re-derived one, [znode, live, state]
        self.p_reseed = np.array([[[PARTITION_CODES[s if s in NOT_RESEEDED else reseeded_partition_state(znode, live)]
                                    for s in ps] for live in (False, True)] for znode in (False, True)], np.int8)
        self.p_reseeds_replicas = np.array([s not in NOT_RESEEDED for s in ps])  # [state]
        self.r_reseed = np.array([REPLICA_CODES[reseeded_replica_state(live)] for live in (False, True)], np.int64)
        # every map a row can carry (a seed is the constant map of its carried state), as monoid ids
        self.pmon = MapMonoid([_t(m) for m in (*self.p.maps, *self.p_reseed.reshape(-1, len(ps)))]
                              + [(s,) * len(ps) for s in range(len(ps))])
        self.rmon = MapMonoid([_t(m) for m in self.r.maps] + [(s,) * len(rs) for s in range(len(rs))])
        self.p_ids = np.array([self.pmon.id_of(m) for m in self.p.maps], np.int32)  # [PartitionStep]
        self.p_reseed_ids = np.array([[self.pmon.id_of(m) for m in by_live] for by_live in self.p_reseed],
                                     np.int32)  # [znode, live]
        self.r_ids = np.array([self.rmon.id_of(m) for m in self.r.maps], np.int32)  # [ReplicaStep]


def _t(state_map: npt.NDArray[np.int8]) -> tuple[int, ...]:
    return tuple(int(x) for x in state_map)


_TABLES: dict[str, _Tables] = {}


def _tables(kafka_version: str) -> _Tables:
    """The tables of a Kafka version, built once (closing the monoids takes a few ms)."""
    if kafka_version not in _TABLES:
        _TABLES[kafka_version] = _Tables(kafka_version)
    return _TABLES[kafka_version]


def fold_table(rows: pa.Table, ctx: GlobalContext, kafka_version: str = DEFAULT_KAFKA_VERSION) -> pa.Table:
    """Every record ``BucketFolder.fold`` emits for these sorted rows (without ``src_event_id``)."""
    return pa.concat_tables(fold_parts(rows, ctx, kafka_version).values())


def fold_parts(rows: pa.Table, ctx: GlobalContext, kafka_version: str = DEFAULT_KAFKA_VERSION) -> dict[str, pa.Table]:
    """``fold_table``'s records by kind (``FOLD_RECORDS``): the caller needs them apart, not filtered back out."""
    schema = FOLD_ARROW_SCHEMA
    parts: dict[str, list[pa.Table]] = {rec: [] for rec in FOLD_RECORDS}
    if rows.num_rows == 0:
        return {rec: schema.empty_table() for rec in FOLD_RECORDS}
    topic, part = rows["topic"], rows["partition"]
    boundary = np.ones(rows.num_rows, bool)
    if rows.num_rows > 1:
        same = pc.and_(pc.equal(topic.slice(1), topic.slice(0, rows.num_rows - 1)),
                       pc.equal(part.slice(1), part.slice(0, rows.num_rows - 1)))
        boundary[1:] = ~pc.fill_null(same, False).to_numpy(zero_copy_only=False)
    key = np.cumsum(boundary) - 1
    slow_row = pc.is_in(rows["type"], pa.array(SLOW_TYPES)).to_numpy(zero_copy_only=False)
    slow_row |= _reassignments(rows, boundary)
    slow_row |= _deleting_seeds(rows)
    slow_key = np.zeros(key[-1] + 1, bool)
    slow_key[key[slow_row]] = True
    if slow_key.any():
        slow = rows.filter(pa.array(slow_key[key]))
        records = [{k: v for k, v in r.items() if k != "src_event_id"}
                   for r in BucketFolder(ctx, kafka_version).fold(slow.to_pylist())]
        folded = pa.Table.from_pylist(records, schema=schema)
        for rec in FOLD_RECORDS:
            parts[rec].append(folded.filter(pc.equal(folded["rec"], rec)))
        rows = rows.filter(pa.array(~slow_key[key]))
        boundary = boundary[~slow_key[key]]
    if rows.num_rows:
        for kind, table in _FastFold(rows, boundary, ctx, _tables(kafka_version), schema).run().items():
            parts[kind].append(table)
    return {rec: pa.concat_tables(tables) if len(tables) != 1 else tables[0] for rec, tables in parts.items()}


def _deleting_seeds(rows: pa.Table) -> BoolArray:
    """Seed rows that carry a deleting replica (the key's topic deletion is pending)."""
    seeds = pc.equal(rows["type"], SEED)
    states = rows["seed_replica_states"]  # a null list has no items: no fill (filling a list column is slow)
    deleting = pa.array(sorted(str(s) for s in DELETING_REPLICA_STATES), pa.string())
    parents = pc.list_parent_indices(states)
    hit = pc.is_in(pc.list_flatten(states), value_set=deleting).to_numpy(zero_copy_only=False)
    out = np.zeros(rows.num_rows, bool)
    out[parents.to_numpy(zero_copy_only=False)[hit]] = True
    out &= pc.fill_null(seeds, False).to_numpy(zero_copy_only=False)
    return out


def _reassignments(rows: pa.Table, boundary: BoolArray) -> BoolArray:
    """Assignment rows that follow an earlier assignment or seed of their key and drop one of its replicas
    (a reassignment done: its deletion flow takes several steps per replica, which the row fold takes)."""
    is_assign: BoolArray = pc.equal(rows["type"], T.PARTITION_ASSIGNED).to_numpy(zero_copy_only=False)
    if not is_assign.any():
        return is_assign
    has_replicas = is_assign | pc.equal(rows["type"], SEED).to_numpy(zero_copy_only=False)
    before = _last_where(has_replicas, _segment_starts(boundary), inclusive=False)
    src = np.nonzero(is_assign & (before >= 0))[0]
    out = np.zeros(rows.num_rows, bool)
    if not len(src):
        return out
    parents, values, _ = flat(pc.take(rows["replicas"], pa.array(before[src], pa.int64())))
    dropped = ~member_of_row(values, src[parents], padded(rows["replicas"]))
    out[src[parents[dropped]]] = True
    return out


PARTITION_NAMES = pa.array([str(x) for x in PARTITION_STATES_BY_CODE], pa.string())  # index = state code
REPLICA_NAMES = pa.array([str(x) for x in REPLICA_STATES_BY_CODE], pa.string())


def _state_codes(names: pa.Array, by_code: pa.Array) -> pa.Array:
    """State codes of state names (null stays null); a name that is no state is a corrupt carried state."""
    codes = pc.index_in(names, value_set=by_code)
    if codes.null_count != names.null_count:
        bad = names.filter(pc.and_(pc.is_null(codes), pc.is_valid(names)))
        raise ValueError(f"carried state holds unknown state names: {sorted(set(bad.to_pylist()))[:5]}")
    return codes


class _FastFold:
    """One vectorised pass over rows of keys without deletions or reassignments (``boundary`` marks each key's
    first row)."""

    def __init__(self, rows: pa.Table, boundary: BoolArray, ctx: GlobalContext, tables: _Tables,
                 schema: pa.Schema) -> None:
        self.rows, self.ctx, self.t, self.schema = rows, ctx, tables, schema
        self.n = rows.num_rows
        self.start = _segment_starts(boundary)
        self.key_last = np.append(np.nonzero(boundary)[0][1:] - 1, self.n - 1)  # last row of each key
        self.key_of = np.cumsum(boundary) - 1
        types = rows["type"]
        self.is_seed = pc.equal(types, SEED).to_numpy(zero_copy_only=False)
        self.is_assign = pc.equal(types, T.PARTITION_ASSIGNED).to_numpy(zero_copy_only=False)
        self.is_write = pc.equal(types, T.PARTITION_STATE_WRITTEN).to_numpy(zero_copy_only=False)
        self.is_elect = pc.equal(types, T.CONTROLLER_ELECTED).to_numpy(zero_copy_only=False)
        self.is_reg = pc.equal(types, T.BROKER_REGISTERED).to_numpy(zero_copy_only=False)
        self.is_dereg = pc.equal(types, T.BROKER_DEREGISTERED).to_numpy(zero_copy_only=False)
        self.is_fanned = pc.is_in(types, pa.array(FANNED_GLOBAL_TYPES)).to_numpy(zero_copy_only=False)
        self.zxid = rows["zxid"].to_numpy()
        clusters = pc.unique(rows["cluster"])
        self.one_cluster = clusters[0] if len(clusters) == 1 and clusters.null_count == 0 else None
        self.leader = self._ints("leader")
        self.epoch = self._ints("leader_epoch")
        # the view: leader fields come from the last write or seed, replicas from the last assignment or seed
        self.lw_at = _last_where(self.is_write | self.is_seed, self.start, inclusive=True)
        self.lw_before = _last_where(self.is_write | self.is_seed, self.start, inclusive=False)
        self.ra_at = _last_where(self.is_assign | self.is_seed, self.start, inclusive=True)
        self.p_before: IntArray = np.zeros(0, np.int64)  # each row's partition state before it (set by the scan)
        self.dates_view: BoolArray = np.ones(self.n, bool)  # rows whose zxid dates the key's view (set by run)

    def _cluster(self, r: pa.Array) -> pa.Array:
        """``rows["cluster"]`` taken at ``r``: repeated when the rows hold one cluster (nearly always)."""
        if self.one_cluster is not None:
            return pa.repeat(self.one_cluster, len(r))
        return pc.take(self.rows["cluster"], r)

    def _ints(self, name: str) -> npt.NDArray[np.float64]:
        """An int column as float64 with NaN for null (exact for every int32 id and epoch)."""
        values: npt.NDArray[np.float64] = pc.cast(self.rows[name], pa.float64()).to_numpy(zero_copy_only=False)
        return values

    def run(self) -> dict[str, pa.Table]:
        pt_steps = self._partition_steps()  # first: a re-seed of the replicas needs the partition's state
        rt_steps, replica_finals = self._replica_steps()
        # an election or broker row reaches every partition that might change: it dates a key's view only
        # where it did change something (which partitions it reaches depends on how history is chunked)
        stepped = np.zeros(self.n, bool)
        stepped[pt_steps["row"]] = stepped[rt_steps["row"]] = True
        self.dates_view = ~self.is_fanned | stepped
        finals_rs = self._replica_finals(*replica_finals)
        pt, rt = self._number_steps(pt_steps, rt_steps)
        return {FoldRecord.PARTITION_TRANSITION: pt, FoldRecord.REPLICA_TRANSITION: rt, FoldRecord.WRITE: self._writes(),
                FoldRecord.PARTITION_STATE: self._partition_finals(pt_steps["final"]), FoldRecord.REPLICA_STATE: finals_rs}

    # -- partition machine --------------------------------------------------------------------------------
    def _partition_steps(self) -> dict[str, Any]:
        t, n = self.t, self.n
        prev_leader = np.where(self.lw_before >= 0, self.leader[np.maximum(self.lw_before, 0)], np.nan)
        prev_epoch = np.where(self.lw_before >= 0, self.epoch[np.maximum(self.lw_before, 0)], np.nan)
        online = self.is_write & (self.leader >= 0)  # NaN compares False: a null leader is "no leader"
        step = np.full(n, PartitionStep.NONE, np.int64)
        step[self.is_assign] = PartitionStep.ASSIGN
        step[online] = np.where(np.isnan(prev_leader[online]), PartitionStep.FIRST_LEADER, PartitionStep.NEW_LEADER)
        step[online & (self.leader == prev_leader) & (self.epoch == prev_epoch)] = PartitionStep.SAME_LEADER
        step[self.is_write & ~online] = PartitionStep.NO_LEADER
        ids = t.p_ids[step]
        seed_state = self._seed_states()
        ids[self.is_seed] = t.pmon.constants()[seed_state[self.is_seed]]  # a seed is the constant map of its state
        znode, live = self._reseed_inputs(prev_leader)
        ids[self.is_elect] = t.p_reseed_ids[znode[self.is_elect], live[self.is_elect]]
        after = t.pmon.maps[segmented_scan(ids, self.start, t.pmon.comp), P_INITIAL].astype(np.int64)
        before = np.where(np.arange(n) > self.start, np.concatenate([[P_INITIAL], after[:-1]]), P_INITIAL)
        self.p_before = before
        emitted = t.p.logs[step, before]
        target = t.p.target[step]
        legal = t.p.legal[step, before]
        cause = t.p.cause[step]
        reseeded = t.p_reseed[znode, live, before].astype(np.int64)
        resets = self.is_elect & (reseeded != before)
        emitted |= resets
        target[resets] = reseeded[resets]
        legal |= resets  # a re-seed validates nothing
        cause[resets] = CAUSE_CODES[Cause.FAILOVER_RESEED]
        rows = np.nonzero(emitted)[0]
        return {"row": rows, "slot": np.zeros(len(rows), np.int64), "replica": None,
                "from": before[rows], "to": target[rows], "legal": legal[rows],
                "cause": cause[rows], "final": after[self.key_last]}

    def _reseed_inputs(self, prev_leader: npt.NDArray[np.float64]) -> tuple[IntArray, IntArray]:
        """Per election row, what the new controller derives the partition's state from (``PartitionFold.reseed``):
        (has a state znode, its leader is registered), each 0 or 1 (0 on other rows)."""
        znode, live = np.zeros(self.n, np.int64), np.zeros(self.n, np.int64)
        rows = np.nonzero(self.is_elect)[0]
        if not len(rows):
            return znode, live
        leader = prev_leader[rows]
        has_leader = ~np.isnan(leader) & (leader >= 0)
        znode[rows] = ~np.isnan(leader)
        live[rows] = self._live_at(np.where(has_leader, leader, -1).astype(np.int64), self.zxid[rows]) & has_leader
        return znode, live

    def _seed_states(self) -> IntArray:
        """Each seed row's carried partition state code (the initial state where null, and on other rows)."""
        codes = np.full(self.n, P_INITIAL, np.int64)
        seeds = np.nonzero(self.is_seed)[0]
        names = pc.take(self.rows["state"], pa.array(seeds, pa.int64()))
        codes[seeds] = pc.fill_null(_state_codes(pc.if_else(pc.equal(names, ""), None, names), PARTITION_NAMES),
                                    P_INITIAL).to_numpy(zero_copy_only=False)
        return codes

    # -- replica machine ----------------------------------------------------------------------------------
    def _explode(self, column: str, rows_mask: BoolArray, row_of: IntArray | None = None) -> tuple[IntArray, IntArray, IntArray]:
        """(source row, replica, position in its list) of every list element of ``column`` on masked rows.

        ``row_of`` reads the list from another row (e.g. the previous write's ISR) but reports the masked row.
        """
        src = np.nonzero(rows_mask)[0] if row_of is None else np.nonzero(rows_mask & (row_of >= 0))[0]
        read_from = src if row_of is None else row_of[src]
        parents, values, position = flat(pc.take(self.rows[column], pa.array(read_from, pa.int64())))
        return src[parents], values, position

    def _replica_steps(self) -> tuple[dict[str, Any], tuple[IntArray, IntArray, IntArray]]:
        t, S = self.t, ReplicaStep
        # seeds: each carried replica's state as a constant map; not a step
        s_rows, s_rep, s_pos = self._explode("seed_replica_ids", self.is_seed)
        seed_names = pc.list_flatten(pc.take(self.rows["seed_replica_states"],
                                             pa.array(np.nonzero(self.is_seed)[0], pa.int64())))
        seed_codes = _state_codes(seed_names, REPLICA_NAMES).to_numpy(zero_copy_only=False).astype(np.int64)
        a_rows, a_rep, a_pos = self._explode("replicas", self.is_assign)
        i_rows, i_rep, i_pos = self._explode("isr", self.is_write)
        o_rows, o_rep, o_pos = self._explode("isr", self.is_write, row_of=self.lw_before)
        if len(o_rows):  # still in the new ISR: no step; nor a live follower the leader dropped (same epoch)
            keep = ~member_of_row(o_rep, o_rows, padded(self.rows["isr"]))
            by_controller = self.epoch[o_rows] > self.epoch[self.lw_before[o_rows]]  # NaN compares False
            keep &= by_controller | ~self._live_at(o_rep, self.zxid[o_rows])
            o_rows, o_rep, o_pos = o_rows[keep], o_rep[keep], o_pos[keep]
        isr_len = self._list_lengths("isr")
        # broker (de)registrations: the broker's replica, when the partition's assignment holds it
        b_rows, b_rep = self._broker_elements()
        # failover re-seeds of re-seeded partitions: each assigned replica's derived state, then (2.3+) the
        # FAILOVER_OFFLINE rule where it applies to that state
        e_rows, e_rep, e_pos = self._explode("replicas", self.is_elect & t.p_reseeds_replicas[self.p_before],
                                             row_of=self.ra_at)
        e_const = t.r_reseed[self._live_at(e_rep, self.zxid[e_rows]).astype(np.int64)]
        m = t.r.logs[S.FAILOVER_OFFLINE, e_const] if t.offline_after_reseed else np.zeros(len(e_rows), bool)
        f_rows, f_rep, f_pos = e_rows[m], e_rep[m], e_pos[m]
        replicas_len = self._list_lengths("replicas")
        kind = np.concatenate([np.full(len(s_rows), S.SEED), np.full(len(a_rows), S.ASSIGN),
                               np.full(len(i_rows), S.IN_ISR), np.full(len(o_rows), S.OUT_OF_ISR),
                               np.where(self.is_reg[b_rows], S.REGISTERED, S.DEREGISTERED),
                               np.full(len(e_rows), S.RESEED), np.full(len(f_rows), S.FAILOVER_OFFLINE)])
        row = np.concatenate([s_rows, a_rows, i_rows, o_rows, b_rows, e_rows, f_rows])
        rep = np.concatenate([s_rep, a_rep, i_rep, o_rep, b_rep, e_rep, f_rep])
        slot = np.concatenate([s_pos - 1_000_000, 1 + a_pos, 1 + i_pos, 1 + isr_len[o_rows] + o_pos,
                               np.ones(len(b_rows), np.int64), 1 + e_pos,
                               1 + replicas_len[np.maximum(self.ra_at[f_rows], 0)] + f_pos])
        order = np.lexsort((slot, row, rep, self.key_of[row]))
        kind, row, rep, slot = kind[order], row[order], rep[order], slot[order]
        # each seed element's carried state, and each re-seed element's derived one, carried through the sort
        const = np.concatenate([seed_codes, np.zeros(len(a_rows) + len(i_rows) + len(o_rows) + len(b_rows), np.int64),
                                e_const, np.zeros(len(f_rows), np.int64)])[order]
        boundary = np.ones(len(order), bool)
        if len(order) > 1:
            boundary[1:] = (self.key_of[row[1:]] != self.key_of[row[:-1]]) | (rep[1:] != rep[:-1])
        start = _segment_starts(boundary)
        ids = t.r_ids[kind]
        constant = (kind == S.SEED) | (kind == S.RESEED)
        ids[constant] = t.rmon.constants()[const[constant]]
        after = t.rmon.maps[segmented_scan(ids, start, t.rmon.comp), R_INITIAL].astype(np.int64)
        pos = np.arange(len(order))
        before = np.where(pos > start, np.concatenate([[R_INITIAL], after[:-1]]) if len(after) else after, R_INITIAL)
        emitted = t.r.logs[kind, before]
        target = t.r.target[kind]
        legal = t.r.legal[kind, before]
        cause = t.r.cause[kind]
        resets = (kind == S.RESEED) & (before != const)
        emitted |= resets
        target[resets] = const[resets]
        legal |= resets  # a re-seed validates nothing
        cause[resets] = CAUSE_CODES[Cause.FAILOVER_RESEED]
        # a replica is part of the final state once seeded or after its first legal step (as BucketFolder)
        present = (kind == S.SEED) | (emitted & legal)
        seg_id = np.cumsum(boundary) - 1
        seg_present = np.zeros(seg_id[-1] + 1 if len(seg_id) else 0, bool)
        np.logical_or.at(seg_present, seg_id, present)
        seg_last = np.append(np.nonzero(boundary)[0][1:] - 1, len(order) - 1) if len(order) else np.zeros(0, np.int64)
        final_idx = seg_last[seg_present]
        e = np.nonzero(emitted)[0]
        steps = {"row": row[e], "slot": slot[e], "replica": rep[e], "from": before[e], "to": target[e],
                 "legal": legal[e], "cause": cause[e]}
        return steps, (row[final_idx], rep[final_idx], after[final_idx])

    def _broker_elements(self) -> tuple[IntArray, IntArray]:
        """(row, broker) of each broker (de)registration row whose partition's assignment holds the broker."""
        rows = np.nonzero((self.is_reg | self.is_dereg) & (self.ra_at >= 0))[0]
        if not len(rows) or "broker" not in self.rows.column_names:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        broker = pc.fill_null(pc.cast(pc.take(self.rows["broker"], pa.array(rows, pa.int64())), pa.int64()),
                              -1).to_numpy(zero_copy_only=False)
        held = member_of_row(broker, self.ra_at[rows], padded(self.rows["replicas"])) & (broker >= 0)
        return rows[held], broker[held]

    def _list_lengths(self, column: str) -> IntArray:
        lengths: IntArray = pc.fill_null(pc.list_value_length(self.rows[column]), 0).to_numpy(
            zero_copy_only=False).astype(np.int64)
        return lengths

    # -- records ------------------------------------------------------------------------------------------
    def _number_steps(self, pt: dict[str, Any], rt: dict[str, Any]) -> list[pa.Table]:
        """Step n of a source row counts its emitted steps in order (partition step first): the id suffix."""
        row = np.concatenate([pt["row"], rt["row"]])
        slot = np.concatenate([pt["slot"], rt["slot"]])
        order = np.lexsort((slot, row))
        first = np.ones(len(order), bool)
        first[1:] = row[order][1:] != row[order][:-1]
        rank = np.arange(len(order)) - _segment_starts(first)
        step_n = np.empty(len(order), np.int64)
        step_n[order] = rank
        n_pt = len(pt["row"])
        return [self._transitions(FoldRecord.PARTITION_TRANSITION, pt, step_n[:n_pt], PARTITION_STATES_BY_CODE),
                self._transitions(FoldRecord.REPLICA_TRANSITION, rt, step_n[n_pt:], REPLICA_STATES_BY_CODE)]

    def _transitions(self, rec: str, s: dict[str, Any], step_n: IntArray, names: Sequence[object]) -> pa.Table:
        rows, r = self.rows, pa.array(s["row"], pa.int64())
        src_ids = pc.take(rows["event_id"], r)
        state_names = pa.array([str(x) for x in names], pa.string())
        partition = pc.take(rows["partition"], r)
        cols: dict[str, Any] = {
            "rec": pa.repeat(pa.scalar(rec), len(r)), "cluster": self._cluster(r),
            "topic": pc.take(rows["topic"], r), "partition": partition,
            "replica": pa.array(s["replica"], pa.int32()) if s["replica"] is not None else None,
            "zxid": pc.take(rows["zxid"], r), "event_time": pc.take(rows["event_time"], r),
            "from_state": pc.take(state_names, pa.array(s["from"])), "to_state": pc.take(state_names, pa.array(s["to"])),
            "legal": pa.array(s["legal"], pa.bool_()), "cause": pc.take(CAUSES, pa.array(s["cause"])),
            "event_id": step_ids(src_ids, partition, rec, step_n),
        }
        return self._table(cols, len(r))

    def _writes(self) -> pa.Table:
        rows = self.rows
        w = np.nonzero(self.is_write)[0]
        r = pa.array(w, pa.int64())
        before = self.lw_before[w]
        leader = self.leader[w]
        held = self._kraft_holds(self.zxid[w])
        cols: dict[str, Any] = {
            "rec": pa.repeat(pa.scalar(FoldRecord.WRITE.value), len(w)),
            **{c: pc.take(rows[c], r) for c in ("cluster", "topic", "partition", "zxid", "event_time", "event_id",
                                                "leader", "leader_epoch", "controller_epoch", "isr")},
            "replicas": _take(rows["replicas"], self.ra_at[w]),
            "prev_leader": _take(rows["leader"], before), "prev_leader_epoch": _take(rows["leader_epoch"], before),
            "prev_isr": _take(rows["isr"], before), "prev_controller_epoch": _take(rows["controller_epoch"], before),
            "cur_controller_epoch": self._controller_epoch_at(self.zxid[w], held),
            "leader_live": self._leader_live(leader, self.zxid[w], held),
            "deletion_pending": pa.repeat(pa.scalar(False), len(w)),  # deleting keys take the row fold
        }
        return self._table(cols, len(w))

    def _kraft_holds(self, zxids: IntArray) -> BoolArray:
        """Whether a KRaft controller held /controller at each zxid (``GlobalContext.kraft_holds_at``)."""
        if not self.ctx.held_zxids:
            return np.zeros(len(zxids), bool)
        i = np.searchsorted(np.array(self.ctx.held_zxids, np.int64), zxids, side="right")
        return np.where(i > 0, np.array(self.ctx.held_by_kraft, bool)[np.maximum(i - 1, 0)], False)

    def _controller_epoch_at(self, zxids: IntArray, held: BoolArray) -> pa.Array:
        if not self.ctx.epoch_zxids:
            return pa.nulls(len(zxids), pa.int32())
        i = np.searchsorted(np.array(self.ctx.epoch_zxids, np.int64), zxids, side="right")
        values = np.array(self.ctx.epoch_values, np.int64)[np.maximum(i - 1, 0)]
        return pa.array(values, pa.int32(), mask=(i == 0) | held)

    def _live_at(self, brokers: IntArray, zxids: IntArray) -> BoolArray:
        """Whether each broker was registered at its zxid (False when the timeline knows no broker at all)."""
        live = np.zeros(len(brokers), bool)
        for broker, (points, states) in self.ctx.broker_points.items():
            m = brokers == broker
            if not m.any():
                continue
            i = np.searchsorted(np.array(points, np.int64), zxids[m], side="right")
            live[m] = np.where(i > 0, np.array(states, bool)[np.maximum(i - 1, 0)], False)
        return live

    def _leader_live(self, leader: npt.NDArray[np.float64], zxids: IntArray, held: BoolArray) -> pa.Array:
        has_leader = ~np.isnan(leader) & (leader >= 0)
        if not self.ctx.broker_points:
            return pa.nulls(len(zxids), pa.bool_())
        live = self._live_at(np.where(has_leader, leader, -1).astype(np.int64), zxids)
        return pa.array(live, pa.bool_(), mask=~has_leader | held)

    def _view_cols(self, key_rows: IntArray) -> dict[str, Any]:
        """The final view columns of keys given by their last row (as ``BucketFolder._finals``)."""
        rows = self.rows
        lw, ra = self.lw_at[key_rows], self.ra_at[key_rows]
        first = self.start[key_rows]
        as_of, event_time = self._key_as_of_and_time()
        k = self.key_of[key_rows]
        return {
            "cluster": _take(rows["cluster"], first), "topic": _take(rows["topic"], first),
            "partition": _take(rows["partition"], first),
            "leader": _take(rows["leader"], lw), "leader_epoch": _take(rows["leader_epoch"], lw),
            "isr": _take(rows["isr"], lw), "replicas": _take(rows["replicas"], ra),
            "as_of_zxid": pa.array(as_of[k], pa.int64()), "event_time": _take(rows["event_time"], event_time[k]),
        }

    def _key_as_of_and_time(self) -> tuple[IntArray, IntArray]:
        """Per key: the highest zxid of the rows that date its view (``dates_view``), and the row of their last
        non-null event_time (-1 if none)."""
        as_of = np.maximum.reduceat(np.where(self.dates_view, self.zxid, -1), np.nonzero(self.start == np.arange(self.n))[0])
        has_time = pc.is_valid(self.rows["event_time"]).to_numpy(zero_copy_only=False) & self.dates_view
        last_time = _last_where(has_time, self.start, inclusive=True)[self.key_last]
        return as_of, last_time

    def _partition_finals(self, final_codes: IntArray) -> pa.Table:
        names = PARTITION_NAMES
        cols = self._view_cols(self.key_last)
        cols["rec"] = pa.repeat(pa.scalar(FoldRecord.PARTITION_STATE.value), len(self.key_last))
        cols["state"] = pc.take(names, pa.array(final_codes))
        cols["controller_epoch"] = _take(self.rows["controller_epoch"], self.lw_at[self.key_last])
        return self._table(cols, len(self.key_last))

    def _replica_finals(self, rows: IntArray, replicas: IntArray, codes: IntArray) -> pa.Table:
        names = REPLICA_NAMES
        key_rows = self.key_last[self.key_of[rows]]
        order = np.lexsort((replicas, self.key_of[rows]))
        key_rows, replicas, codes = key_rows[order], replicas[order], codes[order]
        cols = self._view_cols(key_rows)
        cols["rec"] = pa.repeat(pa.scalar(FoldRecord.REPLICA_STATE.value), len(key_rows))
        cols["replica"] = pa.array(replicas, pa.int32())
        cols["state"] = pc.take(names, pa.array(codes))
        return self._table(cols, len(key_rows))

    def _table(self, cols: dict[str, Any], n: int) -> pa.Table:
        arrays = []
        for f in self.schema:
            v = cols.get(f.name)
            arrays.append(pa.nulls(n, f.type) if v is None else pc.cast(v, f.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)
