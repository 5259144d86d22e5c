"""Events without a partition as rows of the keyed fold: one per partition each may change.

The fold runs per (topic, partition), so an event that concerns many partitions reaches each as a row of its
own, sorted after that zxid's own rows (``FANOUT_SEQ``):

* a topic deletion or deletion request (``/brokers/topics/T`` deleted, ``/admin/delete_topics/T``): every known
  partition of the topic;
* a broker (de)registration: every known partition the broker is, or was, assigned (``PartitionFold`` checks
  the assignment of the moment);
* a controller election (the silent re-seed): every known partition, once the history knows any broker
  (before that, liveness means nothing: ``models.fold.project_metadata`` does the same).

"Known" means carried from earlier increments or seen in this one before the event's zxid. A fanned row of a
cluster-wide event gets ``<event_id>@<topic>`` as its id, so the steps it causes in two topics' partition 0
get distinct ids (``models.ids.step_id`` adds the partition).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.events import MetadataEventType
from pipelines.state_machines import FANNED_GLOBAL_TYPES, PARTITION_TYPES, GlobalContext

T = MetadataEventType

FANOUT_SEQ = 1_000_000  # added to a fanned row's _seq: after that zxid's own rows of the partition
TOPIC_LEVEL_TYPES = (T.TOPIC_DELETED, T.TOPIC_DELETION_REQUESTED)
BROKER_TYPES = (T.BROKER_REGISTERED, T.BROKER_DEREGISTERED)


def fanned_events(meta: pa.Table) -> pa.Table:
    """The increment's events that fan out (topic-level ones without partition, and cluster-wide ones)."""
    topic_level = pc.and_(pc.is_in(meta["type"], pa.array(TOPIC_LEVEL_TYPES)), pc.is_null(meta["partition"]))
    return meta.filter(pc.or_(topic_level, pc.is_in(meta["type"], pa.array(FANNED_GLOBAL_TYPES))))


def touched_by_fanout(events: pa.Table, carried_ps: pa.Table, ctx: GlobalContext) -> pa.Array:
    """Which carried ``partition_state`` rows the fanned ``events`` reach (a boolean mask)."""
    n = carried_ps.num_rows
    if events.num_rows == 0 or n == 0:
        return pa.array(np.zeros(n, bool))
    types, zxids = events["type"].to_pylist(), events["zxid"].to_pylist()
    if any(t == T.CONTROLLER_ELECTED and ctx.brokers_known_at(z) for t, z in zip(types, zxids, strict=True)):
        return pa.array(np.ones(n, bool))
    topics = events.filter(pc.is_in(events["type"], pa.array(TOPIC_LEVEL_TYPES)))["topic"]
    mask = pc.fill_null(pc.is_in(carried_ps["topic"], pc.unique(topics)), False)
    brokers = pc.unique(events.filter(pc.is_in(events["type"], pa.array(BROKER_TYPES)))["broker"].drop_null())
    if len(brokers):
        replicas = carried_ps["replicas"].combine_chunks() if isinstance(carried_ps["replicas"], pa.ChunkedArray) \
            else carried_ps["replicas"]
        hosts = np.zeros(n, bool)
        hit = pc.is_in(pc.list_flatten(replicas), brokers).to_numpy(zero_copy_only=False)
        hosts[pc.list_parent_indices(replicas).to_numpy()[hit]] = True
        mask = pc.or_(mask, pa.array(hosts))
    return mask


def fanout_rows(meta: pa.Table, carried_ps: pa.Table, ctx: GlobalContext) -> pa.Table:
    """The fanned rows (``meta``'s columns) of this increment's events over the partitions they reach.

    ``carried_ps``: the carried ``partition_state`` rows shipped to the fold as seeds (already through
    ``touched_by_fanout``); the increment's own partitions are read from ``meta``.
    """
    events = fanned_events(meta)
    if events.num_rows == 0:
        return meta.slice(0, 0)
    keyed = meta.filter(pc.and_(pc.is_in(meta["type"], pa.array(PARTITION_TYPES)), pc.is_valid(meta["partition"])))
    known = _known_partitions(keyed, carried_ps)
    k_topic, k_first = known["topic"].to_pylist(), known["first_zxid"].to_numpy()
    hosts: dict[int, np.ndarray] | None = None  # built on the first broker event that reaches a partition
    event_rows: list[np.ndarray] = []
    key_rows: list[np.ndarray] = []
    topic_arr = np.array(k_topic, dtype=object)
    for i, (kind, zxid, topic, broker) in enumerate(zip(events["type"].to_pylist(), events["zxid"].to_pylist(),
                                                        events["topic"].to_pylist(), events["broker"].to_pylist(),
                                                        strict=True)):
        reach = k_first < zxid
        if kind in TOPIC_LEVEL_TYPES:
            reach &= topic_arr == topic
        elif kind in BROKER_TYPES and reach.any():
            hosts = _hosts(keyed, carried_ps, known) if hosts is None else hosts
            reach &= hosts.get(broker, np.zeros(len(k_first), bool))
        elif not ctx.brokers_known_at(zxid):  # an election before any broker event: nothing to re-derive
            continue
        keys = np.nonzero(reach)[0]
        key_rows.append(keys)
        event_rows.append(np.full(len(keys), i))
    if not key_rows:
        return meta.slice(0, 0)
    ev = pa.array(np.concatenate(event_rows), pa.int64())
    at = pa.array(np.concatenate(key_rows), pa.int64())
    rows = events.take(ev)
    cols = {name: rows[name] for name in rows.column_names}
    cols["partition"] = pc.take(known["partition"], at).cast(rows.schema.field("partition").type)
    cols["topic"] = pc.take(known["topic"], at).cast(rows.schema.field("topic").type)
    cols["_seq"] = pc.add(rows["_seq"], FANOUT_SEQ).cast(rows.schema.field("_seq").type)
    cluster_wide = pc.invert(pc.is_in(rows["type"], pa.array(TOPIC_LEVEL_TYPES)))
    with_topic = pc.binary_join_element_wise(rows["event_id"], cols["topic"], "@")
    cols["event_id"] = pc.if_else(cluster_wide, with_topic, rows["event_id"])
    return pa.table([cols[name] for name in rows.column_names], schema=rows.schema)


def _known_partitions(keyed: pa.Table, carried_ps: pa.Table) -> pa.Table:
    """(topic, partition, first_zxid) of every partition known to this increment (carried ones: first -1)."""
    string, int32 = pa.string(), pa.int32()
    mine = pa.table({"topic": keyed["topic"].cast(string), "partition": keyed["partition"].cast(int32),
                     "first_zxid": keyed["zxid"].cast(pa.int64())})
    carried = pa.table({"topic": carried_ps["topic"].cast(string), "partition": carried_ps["partition"].cast(int32),
                        "first_zxid": pa.array(np.full(carried_ps.num_rows, -1, np.int64))})
    both = pa.concat_tables([mine, carried])
    agg = both.group_by(["topic", "partition"], use_threads=False).aggregate([("first_zxid", "min")])
    return pa.table({"topic": agg["topic"], "partition": agg["partition"], "first_zxid": agg["first_zxid_min"]})


def _hosts(keyed: pa.Table, carried_ps: pa.Table, known: pa.Table) -> dict[int, np.ndarray]:
    """Per broker: which known partitions it is or was assigned (increment assignments, carried replicas)."""
    assigned = keyed.filter(pc.equal(keyed["type"], T.PARTITION_ASSIGNED))
    parts = []
    for t in (assigned, carried_ps):
        replicas = t["replicas"].combine_chunks() if isinstance(t["replicas"], pa.ChunkedArray) else t["replicas"]
        parent = pc.list_parent_indices(replicas)
        parts.append(pa.table({"topic": pc.take(t["topic"], parent).cast(pa.string()),
                               "partition": pc.take(t["partition"], parent).cast(pa.int32()),
                               "broker": pc.list_flatten(replicas).cast(pa.int32())}))
    pairs = pa.concat_tables(parts).group_by(["topic", "partition", "broker"], use_threads=False).aggregate([])
    indexed = known.append_column("_k", pa.array(np.arange(known.num_rows), pa.int64()))
    joined = pairs.join(indexed.select(["topic", "partition", "_k"]), ["topic", "partition"])
    joined = joined.filter(pc.is_valid(joined["broker"]))
    brokers, ks = joined["broker"].to_numpy(), joined["_k"].to_numpy()
    out: dict[int, np.ndarray] = {}
    for b in np.unique(brokers):
        out[int(b)] = np.zeros(known.num_rows, bool)
        out[int(b)][ks[brokers == b]] = True
    return out
