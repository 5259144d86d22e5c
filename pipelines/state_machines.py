"""The keyed fold of both controller state machines, run once per key BUCKET (not per key).

``fold_bucket`` walks rows already sorted by (topic, partition, ord, zxid, seq) - one Spark partition of
keys - and carries each key's view (state, leader, ISR, replicas, replica states) from its seed row (the
carried ``partition_state``/``replica_state``) through the increment's events. The step rule comes from
``models.states`` via ``step_table``: an illegal step is emitted as a row with ``legal=False`` and
leaves the state unchanged (Kafka 1.1+ logs and skips it). Inference of targets (kafka-zk-metadata.md §2):

* partition: assignment of an unknown partition -> NewPartition; state write with leader >= 0 ->
  OnlinePartition (unless it is an ISR-only write of an already online partition: no election happened);
  leader -1 -> OfflinePartition; state znode / topic deleted -> OfflinePartition -> NonExistentPartition.
* replica: assigned -> NewReplica; in the written ISR -> OnlineReplica; dropped from the ISR by the controller
  (leader_epoch bumped) or while its broker is not registered -> OfflineReplica (a live follower the leader
  drops from the ISR, same leader_epoch, stays OnlineReplica, as in the controller); topic deleted -> OfflineReplica -> ReplicaDeletionStarted -> ReplicaDeletionSuccessful
  -> NonExistentReplica.
* controller failover re-seeds silently: nothing is inferred from /controller changes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from models.ids import step_id
from models.states import (
    DEFAULT_KAFKA_VERSION,
    PartitionState,
    ReplicaState,
    partition_valid_previous,
    replica_valid_previous,
)

P = PartitionState
R = ReplicaState

PARTITION_TYPES = ("PARTITION_ASSIGNED", "PARTITION_STATE_WRITTEN", "PARTITION_STATE_DELETED", "TOPIC_DELETED")
SEED = "_SEED"


def step_table(kind: str, kafka_version: str = DEFAULT_KAFKA_VERSION) -> dict[tuple[str, str], bool]:
    """(from, to) -> legal, for every pair of states of one machine (from models.states, version-aware)."""
    table: Any = partition_valid_previous(kafka_version) if kind == "partition" else replica_valid_previous(kafka_version)
    states = list(P) if kind == "partition" else list(R)
    return {(str(s), str(t)): s in table[t] for s in states for t in states}


@dataclass
class GlobalContext:
    """What the per-key fold needs from the cluster-wide timeline: /controller_epoch and live brokers by zxid."""

    epoch_zxids: list[int] = field(default_factory=list)
    epoch_values: list[int] = field(default_factory=list)
    broker_points: dict[int, tuple[list[int], list[bool]]] = field(default_factory=dict)

    def controller_epoch_at(self, zxid: int) -> int | None:
        i = bisect.bisect_right(self.epoch_zxids, zxid)
        return self.epoch_values[i - 1] if i else None

    def broker_live_at(self, broker: int, zxid: int) -> bool | None:
        """None when the timeline knows no broker at all (history started without /brokers/ids)."""
        if not self.broker_points:
            return None
        points = self.broker_points.get(broker)
        if points is None:
            return False
        i = bisect.bisect_right(points[0], zxid)
        return points[1][i - 1] if i else False


@dataclass
class KeyView:
    """One partition's carried view while its rows are folded."""

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
    touched_replicas: set[int] = field(default_factory=set)


class BucketFolder:
    """Folds the sorted rows of one bucket; emits output records (dicts with a ``rec`` discriminator)."""

    def __init__(self, ctx: GlobalContext, kafka_version: str = DEFAULT_KAFKA_VERSION) -> None:
        self.ctx = ctx
        self.p_legal = step_table("partition", kafka_version)
        self.r_legal = step_table("replica", kafka_version)

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
        steps: list[dict[str, Any]] = []
        if kind == "PARTITION_ASSIGNED":
            self._assigned(v, row, steps)
        elif kind == "PARTITION_STATE_WRITTEN":
            yield self._write_record(v, row)
            self._written(v, row, steps)
        elif kind in ("PARTITION_STATE_DELETED", "TOPIC_DELETED"):
            self._deleted(v, row, steps)
        v.as_of_zxid = max(v.as_of_zxid, row["zxid"])
        v.event_time = row["event_time"] or v.event_time
        yield from steps

    def _seed(self, v: KeyView, row: dict[str, Any]) -> None:
        v.state = row["state"] or str(P.NON_EXISTENT)
        v.leader, v.leader_epoch = row["leader"], row["leader_epoch"]
        v.controller_epoch, v.isr, v.replicas = row["controller_epoch"], row["isr"], row["replicas"]
        v.as_of_zxid, v.event_time = row["zxid"], row["event_time"]
        v.replica_states = dict(zip(row["seed_replica_ids"] or [], row["seed_replica_states"] or [], strict=True))

    def _assigned(self, v: KeyView, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        if v.state == P.NON_EXISTENT:
            steps.append(self._pstep(v, row, str(P.NEW), "assignment"))
        replicas = list(row["replicas"] or [])
        for r in replicas:
            if v.replica_states.get(r, str(R.NON_EXISTENT)) == R.NON_EXISTENT:
                steps.append(self._rstep(v, row, r, str(R.NEW), "assignment"))
        v.replicas = replicas

    def _written(self, v: KeyView, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        leader, epoch = row["leader"], row["leader_epoch"]
        isr = list(row["isr"] or [])
        if leader is not None and leader >= 0:
            isr_only = v.state == P.ONLINE and leader == v.leader and epoch == v.leader_epoch
            if not isr_only:
                steps.append(self._pstep(v, row, str(P.ONLINE), "leader elected" if v.leader is not None else "state created"))
        elif v.state != P.OFFLINE:
            steps.append(self._pstep(v, row, str(P.OFFLINE), "no leader"))
        for r in isr:
            if v.replica_states.get(r) != R.ONLINE:
                steps.append(self._rstep(v, row, r, str(R.ONLINE), "in isr"))
        # a replica the controller takes out of the ISR goes Offline: its writes bump leader_epoch (writer 2 in
        # kafka-zk-metadata.md §1: election, or removeReplicasFromIsr on OfflineReplica, e.g. a controlled
        # shutdown), and so does a broker that is gone; the leader shrinking the ISR of a live follower that fell
        # behind (writers 3/4, same leader_epoch) changes no replica state
        by_controller = epoch is not None and v.leader_epoch is not None and epoch > v.leader_epoch
        for r in v.isr or []:
            if r not in isr and v.replica_states.get(r) == R.ONLINE and (
                    by_controller or not self.ctx.broker_live_at(r, row["zxid"])):
                steps.append(self._rstep(v, row, r, str(R.OFFLINE), "removed from isr"))
        v.leader, v.leader_epoch, v.controller_epoch, v.isr = leader, epoch, row["controller_epoch"], isr

    def _deleted(self, v: KeyView, row: dict[str, Any], steps: list[dict[str, Any]]) -> None:
        if v.state not in (P.OFFLINE, P.NON_EXISTENT):
            steps.append(self._pstep(v, row, str(P.OFFLINE), "topic deletion"))
        if v.state != P.NON_EXISTENT:
            steps.append(self._pstep(v, row, str(P.NON_EXISTENT), "topic deletion"))
        for r in sorted(v.replica_states):
            if v.replica_states[r] == R.NON_EXISTENT:
                continue
            if v.replica_states[r] != R.OFFLINE:
                steps.append(self._rstep(v, row, r, str(R.OFFLINE), "topic deletion"))
            for target in (R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT):
                steps.append(self._rstep(v, row, r, str(target), "topic deletion"))
        # a recreated topic is a new incarnation: leader_epoch restarts at 0
        v.leader = v.leader_epoch = v.controller_epoch = None
        v.isr = v.replicas = None

    # -- steps --------------------------------------------------------------------------------------------
    def _pstep(self, v: KeyView, row: dict[str, Any], target: str, cause: str) -> dict[str, Any]:
        before = v.state
        legal = self.p_legal[(before, target)]
        if legal:
            v.state = target
        n = row.setdefault("_nsteps", 0)
        row["_nsteps"] = n + 1
        return {
            "rec": "pt", "cluster": v.cluster, "topic": v.topic, "partition": v.partition, "zxid": row["zxid"],
            "event_time": row["event_time"], "from_state": before, "to_state": target, "legal": legal,
            "cause": cause, "event_id": step_id(row["event_id"], v.partition, "pt", n), "src_event_id": row["event_id"],
        }

    def _rstep(self, v: KeyView, row: dict[str, Any], replica: int, target: str, cause: str) -> dict[str, Any]:
        before = v.replica_states.get(replica, str(R.NON_EXISTENT))
        legal = self.r_legal[(before, target)]
        if legal:
            v.replica_states[replica] = target
        v.touched_replicas.add(replica)
        n = row.setdefault("_nsteps", 0)
        row["_nsteps"] = n + 1
        return {
            "rec": "rt", "cluster": v.cluster, "topic": v.topic, "partition": v.partition, "replica": replica,
            "zxid": row["zxid"], "event_time": row["event_time"], "from_state": before, "to_state": target,
            "legal": legal, "cause": cause, "event_id": step_id(row["event_id"], v.partition, "rt", n),
            "src_event_id": row["event_id"],
        }

    def _write_record(self, v: KeyView, row: dict[str, Any]) -> dict[str, Any]:
        """A state write enriched with the view before it and the cluster context at its zxid (for detectors)."""
        leader = row["leader"]
        live = self.ctx.broker_live_at(leader, row["zxid"]) if leader is not None and leader >= 0 else None
        return {
            "rec": "w", "cluster": v.cluster, "topic": v.topic, "partition": v.partition, "zxid": row["zxid"],
            "event_time": row["event_time"], "event_id": row["event_id"], "leader": leader,
            "leader_epoch": row["leader_epoch"], "controller_epoch": row["controller_epoch"], "isr": row["isr"],
            "replicas": v.replicas, "prev_leader": v.leader, "prev_leader_epoch": v.leader_epoch,
            "prev_isr": v.isr, "prev_controller_epoch": v.controller_epoch,
            "cur_controller_epoch": self.ctx.controller_epoch_at(row["zxid"]), "leader_live": live,
        }

    def _finals(self, v: KeyView) -> Iterator[dict[str, Any]]:
        base = {"cluster": v.cluster, "topic": v.topic, "partition": v.partition, "leader": v.leader,
                "leader_epoch": v.leader_epoch, "isr": v.isr, "replicas": v.replicas,
                "as_of_zxid": v.as_of_zxid, "event_time": v.event_time}
        yield {**base, "rec": "ps", "state": v.state, "controller_epoch": v.controller_epoch}
        for r in sorted(v.replica_states):
            yield {**base, "rec": "rs", "replica": r, "state": v.replica_states[r]}
