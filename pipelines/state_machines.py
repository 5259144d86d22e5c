"""The keyed fold of both controller state machines, run once per key BUCKET (not per key).

``BucketFolder.fold`` walks rows already sorted by (topic, partition, ord, zxid, seq) - one Spark partition of
keys - and carries each key's view (state, leader, ISR, replicas, replica states) from its seed row (the
carried ``partition_state``/``replica_state``) through the increment's events. Every step comes from
``models.fold.PartitionFold`` (the rules' one home, version-aware): an illegal step is emitted with
``legal=False`` and leaves the state unchanged (Kafka 1.1+ logs and skips it). Events without a partition
reach each key as rows of their own (``pipelines.fanout``): a topic deletion (request) for the topic's
partitions, a broker (de)registration for the partitions it may host, a controller election (the silent
re-seed) for every known partition.

This is the row-at-a-time fold: ``pipelines.vector_fold`` runs the same on numpy and falls back to it for
rare rows (deletions, reassignments); the differential tests keep both equal.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from typing import Any

import numpy as np
import pyarrow as pa

from models.events import MetadataEvent, MetadataEventType
from models.fold import (
    CLUSTER_WIDE_EVENTS,
    DELETION_EVENTS,
    FOLDED_EVENTS,
    PartitionFold,
    PartitionView,
    deletion_pending,
)
from models.ids import step_id
from models.states import DEFAULT_KAFKA_VERSION, PartitionState, ReplicaState
from pipelines.fold_records import FoldRecord

T = MetadataEventType

P = PartitionState
R = ReplicaState

PARTITION_TYPES = tuple(t for t in T if t in FOLDED_EVENTS and t not in CLUSTER_WIDE_EVENTS)
"""Metadata event types folded per key (a topic-level one, without partition, is fanned out first)."""
FANNED_GLOBAL_TYPES = tuple(t for t in T if t in CLUSTER_WIDE_EVENTS)
"""Cluster-wide event types fanned out to the partitions they may change."""
SEED = "_SEED"


class ContextPoint(IntEnum):
    """What a row of CONTEXT_POINTS records."""

    EPOCH = 0  # /controller_epoch became ``value`` at ``zxid``
    KRAFT_HELD = 1  # an election at ``zxid``; ``value`` 1 when a KRaft controller claimed /controller
    BROKER = 2  # ``broker`` registered (``value`` 1) or deregistered (0) at ``zxid``


CONTEXT_POINTS = pa.schema([pa.field("point", pa.int8()), pa.field("broker", pa.int32()),
                            pa.field("zxid", pa.int64()), pa.field("value", pa.int64())])
"""A ``GlobalContext`` as rows: each of its points, in its lists' order (``broker`` -1 where none)."""


@dataclass
class GlobalContext:
    """What the per-key fold needs from the cluster-wide timeline: /controller_epoch and live brokers by zxid."""

    epoch_zxids: list[int] = field(default_factory=list)
    epoch_values: list[int] = field(default_factory=list)
    broker_points: dict[int, tuple[list[int], list[bool]]] = field(default_factory=dict)
    # each /controller election: whether a KRaft controller claimed ZooKeeper (a migration, KIP-866). While one
    # holds it, partition states carry the KRaft epoch and KRaft brokers have no /brokers/ids: neither
    # /controller_epoch nor the registrations judge those writes (`zkledger migration` compares the stores then)
    held_zxids: list[int] = field(default_factory=list)
    held_by_kraft: list[bool] = field(default_factory=list)

    def to_table(self) -> pa.Table:
        """The context as CONTEXT_POINTS rows (what a bucket carries instead of replaying its timeline)."""
        brokers = sorted(self.broker_points)
        parts = [(ContextPoint.EPOCH, [-1] * len(self.epoch_zxids), self.epoch_zxids, self.epoch_values),
                 (ContextPoint.KRAFT_HELD, [-1] * len(self.held_zxids), self.held_zxids,
                  [int(h) for h in self.held_by_kraft]),
                 *((ContextPoint.BROKER, [b] * len(self.broker_points[b][0]), self.broker_points[b][0],
                    [int(live) for live in self.broker_points[b][1]]) for b in brokers)]
        return pa.table({"point": pa.array([int(p) for p, keys, _, _ in parts for _ in keys], pa.int8()),
                         "broker": pa.array([k for _, keys, _, _ in parts for k in keys], pa.int32()),
                         "zxid": pa.array([z for _, _, zs, _ in parts for z in zs], pa.int64()),
                         "value": pa.array([v for _, _, _, vs in parts for v in vs], pa.int64())}, schema=CONTEXT_POINTS)

    @classmethod
    def from_table(cls, points: pa.Table) -> GlobalContext:
        """The context ``to_table`` wrote (rows in the order it wrote them)."""
        point, broker, zxid, value = (points[c].to_numpy() for c in CONTEXT_POINTS.names)
        ctx = cls()
        epoch, held = point == ContextPoint.EPOCH, point == ContextPoint.KRAFT_HELD
        ctx.epoch_zxids, ctx.epoch_values = zxid[epoch].tolist(), value[epoch].tolist()
        ctx.held_zxids, ctx.held_by_kraft = zxid[held].tolist(), value[held].astype(bool).tolist()
        on_broker = point == ContextPoint.BROKER
        for b in np.unique(broker[on_broker]).tolist():
            mine = on_broker & (broker == b)
            ctx.broker_points[b] = (zxid[mine].tolist(), value[mine].astype(bool).tolist())
        return ctx

    def controller_epoch_at(self, zxid: int) -> int | None:
        i = bisect.bisect_right(self.epoch_zxids, zxid)
        return self.epoch_values[i - 1] if i else None

    def kraft_holds_at(self, zxid: int) -> bool:
        """Whether a KRaft controller held ZooKeeper's /controller at ``zxid``."""
        i = bisect.bisect_right(self.held_zxids, zxid)
        return self.held_by_kraft[i - 1] if i else False

    def brokers_known_at(self, zxid: int) -> bool:
        """Whether any broker event happened at or before ``zxid`` (before that, liveness means nothing)."""
        return any(points[0] and points[0][0] <= zxid for points in self.broker_points.values())

    def broker_live_at(self, broker: int, zxid: int) -> bool | None:
        """None when the timeline knows no broker at all (history started without /brokers/ids)."""
        if not self.broker_points:
            return None
        points = self.broker_points.get(broker)
        if points is None:
            return False
        i = bisect.bisect_right(points[0], zxid)
        return points[1][i - 1] if i else False


class _LiveAt:
    """The brokers registered at one zxid, as the ``Container`` ``PartitionFold`` asks."""

    def __init__(self, ctx: GlobalContext, zxid: int) -> None:
        self.ctx, self.zxid = ctx, zxid

    def __contains__(self, broker: object) -> bool:
        return isinstance(broker, int) and bool(self.ctx.broker_live_at(broker, self.zxid))


@dataclass
class KeyView:
    """One partition's carried view while its rows are folded (the output fields; ``view()`` for the rules)."""

    cluster: str
    topic: str
    partition: int
    state: str = str(P.NON_EXISTENT)
    leader: int | None = None
    leader_epoch: int | None = None
    controller_epoch: int | None = None
    isr: list[int] | None = None
    replicas: list[int] | None = None
    as_of_zxid: int = -1
    event_time: datetime | None = None
    replica_states: dict[int, str] = field(default_factory=dict)

    def view(self) -> PartitionView:
        return PartitionView(P(self.state), tuple(self.replicas or ()), self.leader, self.leader_epoch,
                             self.controller_epoch, tuple(self.isr or ()),
                             {r: R(s) for r, s in self.replica_states.items()})


class BucketFolder:
    """Folds the sorted rows of one bucket; emits output records (dicts with a ``rec`` discriminator)."""

    def __init__(self, ctx: GlobalContext, kafka_version: str = DEFAULT_KAFKA_VERSION) -> None:
        self.ctx = ctx
        self.rules = PartitionFold(kafka_version)

    def fold(self, rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        view: KeyView | None = None
        for row in rows:
            key = (row["topic"], row["partition"])
            if view is None or (view.topic, view.partition) != key:
                if view is not None:
                    yield from self._finals(view)
                view = KeyView(row["cluster"], row["topic"], row["partition"])
            yield from self._apply(view, row)
        if view is not None:
            yield from self._finals(view)

    # -- one row ------------------------------------------------------------------------------------------
    def _apply(self, v: KeyView, row: dict[str, Any]) -> Iterator[dict[str, Any]]:
        kind = row["type"]
        if kind == SEED:
            self._seed(v, row)
            return
        if kind == T.PARTITION_STATE_WRITTEN:
            yield self._write_record(v, row)
        after, steps = self.rules.apply(v.view(), _event(row), _LiveAt(self.ctx, row["zxid"]))
        for n, step in enumerate(steps):
            yield self._step_record(v, row, n, step.replica, step.from_state, step.to_state, step.legal, str(step.cause))
        v.state = str(after.state)
        v.replica_states = {r: str(s) for r, s in after.replica_states.items()}
        if kind == T.PARTITION_ASSIGNED and row["replicas"] is not None:
            v.replicas = list(row["replicas"])
        elif kind == T.PARTITION_STATE_WRITTEN:
            v.leader, v.leader_epoch, v.controller_epoch = row["leader"], row["leader_epoch"], row["controller_epoch"]
            v.isr = list(row["isr"] or [])
        elif kind in DELETION_EVENTS:
            # a recreated topic is a new incarnation: leader_epoch restarts at 0
            v.leader = v.leader_epoch = v.controller_epoch = None
            v.isr = v.replicas = None
        if steps or kind not in FANNED_GLOBAL_TYPES:  # an election or broker row dates the view only if it changed it
            v.as_of_zxid = max(v.as_of_zxid, row["zxid"])
            v.event_time = row["event_time"] or v.event_time

    def _seed(self, v: KeyView, row: dict[str, Any]) -> None:
        v.state = row["state"] or str(P.NON_EXISTENT)
        v.leader, v.leader_epoch = row["leader"], row["leader_epoch"]
        v.controller_epoch, v.isr, v.replicas = row["controller_epoch"], row["isr"], row["replicas"]
        v.as_of_zxid, v.event_time = row["zxid"], row["event_time"]
        v.replica_states = dict(zip(row["seed_replica_ids"] or [], row["seed_replica_states"] or [], strict=True))

    # -- records ------------------------------------------------------------------------------------------
    @staticmethod
    def _step_record(v: KeyView, row: dict[str, Any], n: int, replica: int | None, before: str, target: str,
                     legal: bool, cause: str) -> dict[str, Any]:
        machine = FoldRecord.PARTITION_TRANSITION.value if replica is None else FoldRecord.REPLICA_TRANSITION.value
        rec = {
            "rec": machine, "cluster": v.cluster, "topic": v.topic, "partition": v.partition, "zxid": row["zxid"],
            "event_time": row["event_time"], "from_state": before, "to_state": target, "legal": legal,
            "cause": cause, "event_id": step_id(row["event_id"], v.partition, machine, n),
            "src_event_id": row["event_id"],
        }
        if replica is not None:
            rec["replica"] = replica
        return rec

    def _write_record(self, v: KeyView, row: dict[str, Any]) -> dict[str, Any]:
        """A state write enriched with the view before it and the cluster context at its zxid (for detectors)."""
        leader = row["leader"]
        live = self.ctx.broker_live_at(leader, row["zxid"]) if leader is not None and leader >= 0 else None
        held = self.ctx.kraft_holds_at(row["zxid"])
        return {
            "rec": FoldRecord.WRITE.value, "cluster": v.cluster, "topic": v.topic, "partition": v.partition,
            "zxid": row["zxid"],
            "event_time": row["event_time"], "event_id": row["event_id"], "leader": leader,
            "leader_epoch": row["leader_epoch"], "controller_epoch": row["controller_epoch"], "isr": row["isr"],
            "replicas": v.replicas, "prev_leader": v.leader, "prev_leader_epoch": v.leader_epoch,
            "prev_isr": v.isr, "prev_controller_epoch": v.controller_epoch,
            "cur_controller_epoch": None if held else self.ctx.controller_epoch_at(row["zxid"]),
            "leader_live": None if held else live,
            "deletion_pending": deletion_pending(v.replica_states.values()),
        }

    def _finals(self, v: KeyView) -> Iterator[dict[str, Any]]:
        base = {"cluster": v.cluster, "topic": v.topic, "partition": v.partition, "leader": v.leader,
                "leader_epoch": v.leader_epoch, "isr": v.isr, "replicas": v.replicas,
                "as_of_zxid": v.as_of_zxid, "event_time": v.event_time}
        yield {**base, "rec": FoldRecord.PARTITION_STATE.value, "state": v.state, "controller_epoch": v.controller_epoch}
        for r in sorted(v.replica_states):
            yield {**base, "rec": FoldRecord.REPLICA_STATE.value, "replica": r, "state": v.replica_states[r]}


def _event(row: dict[str, Any]) -> MetadataEvent:
    """A fold row as the ``MetadataEvent`` ``PartitionFold`` steps on."""
    isr, replicas = row["isr"], row["replicas"]
    return MetadataEvent(
        zxid=row["zxid"], type=MetadataEventType(row["type"]), leader=row["leader"], leader_epoch=row["leader_epoch"],
        controller_epoch=row["controller_epoch"], isr=None if isr is None else tuple(isr),
        replicas=None if replicas is None else tuple(replicas), broker=row.get("broker"))
