"""A simulated ZK-mode Kafka cluster writing to a real ZooKeeper what Kafka of a given version writes.

Each broker has its own kazoo session: `/brokers/ids/N` and `/controller` are ephemeral and die with it, so a
crash is closing that session. The active controller keeps Kafka's partition and replica state machines in
memory (tables from `models.states`; invalid steps are logged and skipped, PSM/RSM@1.1+), and every ZooKeeper
write it makes goes through `Controller.commit`, which from 2.1 wraps it in `multi(check(/controller_epoch,
epochZkVersion), op)` (KAFKA-6082) so a zombie's write fails as a failed multi; up to 2.0 it is a plain write.
Controller reactions are invoked synchronously by the scenario runner instead of through watches, so a seeded
run issues the same writes in the same order every time.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from models.states import (
    PartitionState,
    ReplicaState,
    is_legal_partition_step,
    is_legal_replica_step,
    parse_kafka_version,
    partition_valid_previous,
    replica_valid_previous,
)
from simulator import payloads
from simulator.logs import BrokerLogs, SimClock, Templates, tp

log = logging.getLogger(__name__)

P = PartitionState
R = ReplicaState
EPOCH_PATH = "/controller_epoch"


class ZnodeWrite(NamedTuple):
    """One change the simulator made: op is CREATE, SET, DELETE or MULTI_FAILED (path = the failed check)."""

    path: str
    op: str
    data: bytes | None
    version: int | None = None  # the znode's version after the change, where it carries meaning


@dataclass
class PartitionView:
    """A controller's view of one partition (its cached LeaderIsrAndControllerEpoch + zkVersion)."""

    topic: str
    partition: int
    replicas: list[int]
    leader: int = -1
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    controller_epoch: int = 0
    zk_version: int = -1  # -1: no state znode
    state: PartitionState = P.NON_EXISTENT
    recovering: bool = False

    @property
    def key(self) -> str:
        return tp(self.topic, self.partition)

    @property
    def state_path(self) -> str:
        return f"/brokers/topics/{self.topic}/partitions/{self.partition}/state"


def _sort_key(s: str) -> int:
    order = [P.NEW, P.ONLINE, P.OFFLINE, P.NON_EXISTENT, R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_STARTED,
             R.DELETION_SUCCESSFUL, R.DELETION_INELIGIBLE, R.NON_EXISTENT]
    return [str(x) for x in order].index(s)


class Broker:
    """One broker process: its session, its logs and the latest controller epoch it has seen."""

    def __init__(self, cluster: Cluster, broker_id: int) -> None:
        self.cluster = cluster
        self.id = broker_id
        self.client: KazooClient | None = None
        self.known_epoch = 0
        self.logs = BrokerLogs(broker_id, cluster.broker_log_dir(broker_id), cluster.clock)

    @property
    def alive(self) -> bool:
        return self.client is not None

    def connect(self) -> KazooClient:
        client = KazooClient(hosts=self.cluster.zk_hosts, timeout=10.0)
        client.start(timeout=15)
        self.client = client
        return client

    def start(self) -> None:
        """Open a session and register `/brokers/ids/N` (ephemeral)."""
        client = self.connect()
        data = payloads.encode_broker_registration(
            self.id, f"broker-{self.id}.sim", 9092, self.cluster.kafka_version, timestamp_ms=self.cluster.clock.ms()
        )
        path = f"/brokers/ids/{self.id}"
        if self.cluster.version >= (2, 2):  # KAFKA-7165: created empty and set in one multi (the broker epoch)
            tx = client.transaction()
            tx.create(path, b"", ephemeral=True)
            tx.set_data(path, data)
            tx.commit()
            self.cluster.record(path, "CREATE", b"", 0)
            self.cluster.record(path, "SET", data, 1)  # the registration: the set that makes version 1
        else:
            client.create(path, data, ephemeral=True)
            self.cluster.record(path, "CREATE", data)
        if self.cluster.version < (3, 0):  # 3.0+ asks the controller for a block when a producer needs one
            self.cluster.allocate_producer_ids(self.id)

    def stop_session(self) -> None:
        """Close the session: ZooKeeper deletes this broker's ephemeral znodes (a crash or expiry)."""
        if self.client is None:
            return
        gone = [f"/brokers/ids/{self.id}"]
        ctl = self.cluster.read_controller_id()
        if ctl == self.id:
            gone.append("/controller")
        self.client.stop()
        self.client.close()
        self.client = None
        for path in gone:
            self.cluster.record(path, "DELETE", None)

    def receive_leader_and_isr(self, controller_id: int, epoch: int, correlation_id: int, n: int) -> bool:
        """Broker side of a LeaderAndIsr request: drop it when the controller epoch is old (RM@3.8.0 l1869)."""
        t = self.cluster.templates
        if epoch < self.known_epoch:
            self.logs.state_change("WARN", t.stale_lai(controller_id, correlation_id, epoch, self.known_epoch))
            return False
        self.known_epoch = epoch
        if t.summarised_requests:
            self.logs.state_change("INFO", t.broker_handling(correlation_id, controller_id, n))
        return True


class Controller:
    """The active (or zombie) controller: an epoch, a context read from ZooKeeper, two state machines."""

    def __init__(self, cluster: Cluster, broker: Broker, epoch: int, epoch_zk_version: int) -> None:
        self.cluster = cluster
        self.broker = broker
        self.id = broker.id
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.partitions: dict[str, PartitionView] = {}
        self.replicas: dict[tuple[str, int, int], ReplicaState] = {}
        self.live: set[int] = set()
        self.correlation_id = 0
        self.t = cluster.templates

    # -- writing ----------------------------------------------------------------------------------------
    def commit(self, batches: list[list[tuple[Any, ...]]], event: str = "") -> list[bool]:
        """Issue each batch of ops asynchronously; returns per-batch success. Fencing per version (docs/kafka-metadata.md)."""
        client = self.broker.client
        if client is None:
            raise RuntimeError(f"controller {self.id} has no session")
        fenced = self.cluster.version >= (2, 1)
        pending: list[Any] = []
        for ops in batches:
            if fenced:
                txn = client.transaction()
                txn.check(EPOCH_PATH, self.epoch_zk_version)
                for op in ops:
                    _add_to_txn(txn, op)
                pending.append(txn.commit_async())
            else:
                pending.append([_single_async(client, op) for op in ops])
        ok: list[bool] = []
        moved = False
        for ops, handle in zip(batches, pending, strict=True):
            if fenced:
                results = handle.get()
                success = not any(isinstance(r, Exception) for r in results)
                if not success and isinstance(results[0], Exception):
                    moved = True
                    self.cluster.record(EPOCH_PATH, "MULTI_FAILED", None)
            else:
                success = True
                for h in handle:
                    try:
                        h.get()
                    except KazooException:
                        success = False
            if success:
                for op in ops:
                    self.cluster.record(op[1], {"create": "CREATE", "set": "SET", "delete": "DELETE"}[op[0]],
                                        op[2] if op[0] != "delete" else None)
            ok.append(success)
        if moved:
            self.broker.logs.controller("INFO", self.t.controller_moved(event or "ControllerChange"))
        return ok

    def state_payload(self, p: PartitionView) -> bytes:
        return payloads.encode_partition_state(
            p.leader, p.leader_epoch, p.controller_epoch, p.isr, self.cluster.kafka_version,
            leader_recovery_state=1 if p.recovering else None,
        )

    def write_states(self, parts: list[PartitionView], new: list[dict[str, Any]], event: str) -> list[bool]:
        """Write the proposed leader/isr for each partition (create when it has no state znode yet)."""
        batches: list[list[tuple[Any, ...]]] = []
        for p, proposal in zip(parts, new, strict=True):
            candidate = PartitionView(p.topic, p.partition, p.replicas, proposal["leader"], proposal["leader_epoch"],
                                      proposal["isr"], self.epoch, p.zk_version, p.state, proposal.get("recovering", False))
            data = self.state_payload(candidate)
            if p.zk_version < 0:
                batches.append([("create", p.state_path, data, False)])
            else:
                batches.append([("set", p.state_path, data, p.zk_version)])
        ok = self.commit(batches, event)
        for p, proposal, success in zip(parts, new, ok, strict=True):
            if success:
                p.leader, p.leader_epoch, p.isr = proposal["leader"], proposal["leader_epoch"], list(proposal["isr"])
                p.controller_epoch, p.zk_version = self.epoch, p.zk_version + 1
                p.recovering = proposal.get("recovering", False)
        return ok

    # -- state machines ---------------------------------------------------------------------------------
    def legal_partition(self, p: PartitionView, target: PartitionState) -> bool:
        if is_legal_partition_step(p.state, target):
            return True
        valid = sorted((str(s) for s in partition_valid_previous(self.cluster.kafka_version)[target]), key=_sort_key)
        self.broker.logs.state_change(
            "ERROR", self.t.partition_failed(self.id, self.epoch, p.topic, p.partition, p.state, target), self.epoch,
            exc=self.t.invalid_partition_transition(p.topic, p.partition, valid, target, p.state),
        )
        return False

    def move_partition(self, p: PartitionView, target: PartitionState) -> bool:
        """An in-memory step (New, Offline, NonExistent); Online goes through `elect`."""
        if not self.legal_partition(p, target):
            return False
        if target == P.NEW:
            self.broker.logs.state_change(self.t.partition_level(target), self.t.partition_new(p.topic, p.partition, p.replicas), self.epoch)
        else:
            self.broker.logs.state_change(self.t.partition_level(target), self.t.partition_changed(p.topic, p.partition, p.state, target), self.epoch)
        p.state = target
        return True

    def move_replica(self, p: PartitionView, replica: int, target: ReplicaState) -> bool:
        key = (p.topic, p.partition, replica)
        current = self.replicas.get(key, R.NON_EXISTENT)
        if not is_legal_replica_step(current, target, self.cluster.kafka_version):
            valid = sorted((str(s) for s in replica_valid_previous(self.cluster.kafka_version)[target]), key=_sort_key)
            self.broker.logs.state_change(
                "ERROR", self.t.replica_failed(self.id, self.epoch, replica, p.topic, p.partition, current, target), self.epoch,
                exc=self.t.invalid_replica_transition(p.topic, p.partition, replica, valid, target, current),
            )
            return False
        self.broker.logs.state_change("TRACE", self.t.replica_changed(replica, p.topic, p.partition, current, target), self.epoch)
        self.replicas[key] = target
        return True

    def elect(self, parts: list[PartitionView], strategy: str, event: str, exclude: int | None = None,
              unclean_topics: frozenset[str] = frozenset()) -> list[PartitionView]:
        """Drive partitions to OnlinePartition: choose a leader, write ZooKeeper, send LeaderAndIsr."""
        chosen: list[PartitionView] = []
        proposals: list[dict[str, Any]] = []
        for p in parts:
            if not self.legal_partition(p, P.ONLINE):
                continue
            proposal = self.choose_leader(p, strategy, exclude, p.topic in unclean_topics)
            if proposal is None:
                cause = self.t.no_leader_cause(p.topic, p.partition, strategy)
                self.broker.logs.state_change("ERROR", self.t.partition_failed(self.id, self.epoch, p.topic, p.partition, p.state, P.ONLINE), self.epoch, exc=cause)
                continue
            chosen.append(p)
            proposals.append(proposal)
        done: list[PartitionView] = []
        from_states = {p.key: p.state for p in chosen}
        for p, success in zip(chosen, self.write_states(chosen, proposals, event), strict=True):
            if not success:
                continue
            lai = self.t.leader_and_isr(p.leader, p.leader_epoch, p.isr, p.zk_version, p.recovering)
            self.broker.logs.state_change(self.t.partition_level(P.ONLINE), self.t.partition_online(p.topic, p.partition, from_states[p.key], lai), self.epoch)
            p.state = P.ONLINE
            done.append(p)
        self.send_leader_and_isr(done)
        return done

    def choose_leader(self, p: PartitionView, strategy: str, exclude: int | None, unclean: bool) -> dict[str, Any] | None:
        live = [r for r in p.replicas if r in self.live and r != exclude]
        if p.zk_version < 0:  # New -> Online: first live replica, ISR = live replicas, epoch 0
            return {"leader": live[0], "leader_epoch": 0, "isr": live} if live else None
        isr_live = [r for r in p.replicas if r in p.isr and r in live]
        if isr_live:
            leader = isr_live[0]
            if strategy == "OfflinePartitionLeaderElectionStrategy" and p.leader in isr_live:
                leader = p.leader
            return {"leader": leader, "leader_epoch": p.leader_epoch + 1, "isr": isr_live}
        if unclean and live:  # unclean: a replica outside the ISR; 3.2+ marks it RECOVERING (KIP-704)
            return {"leader": live[0], "leader_epoch": p.leader_epoch + 1, "isr": [live[0]],
                    "recovering": self.cluster.version >= (3, 2)}
        return None

    def remove_from_isr(self, parts: list[PartitionView], replica: int, event: str) -> None:
        """OfflineReplica: drop the replica from the ISR (leader -1 if it led; 1.1+ never empties the ISR)."""
        todo = [p for p in parts if replica in p.isr or p.leader == replica]
        proposals = []
        for p in todo:
            isr = [r for r in p.isr if r != replica] or ([replica] if self.cluster.version >= (1, 1) else [])
            leader = -1 if p.leader == replica else p.leader
            proposals.append({"leader": leader, "leader_epoch": p.leader_epoch + 1, "isr": isr})
        for p, ok in zip(todo, self.write_states(todo, proposals, event), strict=True):
            if ok and self.cluster.version >= (2, 6):
                self.broker.logs.state_change(
                    "INFO", f"Partition {p.key} state changed to (Leader:{p.leader},ISR:{','.join(map(str, p.isr))},"
                    f"LeaderEpoch:{p.leader_epoch},ControllerEpoch:{p.controller_epoch}) after removing replica "
                    f"{replica} from the ISR as part of transition to OfflineReplica", self.epoch)

    def send_leader_and_isr(self, parts: list[PartitionView]) -> None:
        """LeaderAndIsr to every live replica of the partitions, then UpdateMetadata (CCM)."""
        if not parts:
            return
        per_broker: dict[int, list[PartitionView]] = {}
        for p in parts:
            for r in p.replicas:
                if r in self.live:
                    per_broker.setdefault(r, []).append(p)
        for broker_id in sorted(per_broker):
            todo = per_broker[broker_id]
            if self.t.summarised_requests:
                leaders = sum(1 for p in todo if p.leader == broker_id)
                self.broker.logs.state_change("INFO", self.t.lai_request_summary(broker_id, leaders, len(todo) - leaders), self.epoch)
            else:
                for p in todo:
                    kind = "become-leader" if p.leader == broker_id else "become-follower"
                    state = f"(LeaderAndIsrInfo:(Leader:{p.leader},ISR:{','.join(map(str, p.isr))},LeaderEpoch:{p.leader_epoch},ControllerEpoch:{p.controller_epoch}),ReplicationFactor:{len(p.replicas)},AllReplicas:{','.join(map(str, p.replicas))})"
                    self.broker.logs.state_change("TRACE", self.t.lai_request_partition(kind, state, broker_id, p.topic, p.partition), self.epoch)
            self.correlation_id += 1
            self.cluster.brokers[broker_id].receive_leader_and_isr(self.id, self.epoch, self.correlation_id, len(todo))
        if self.t.summarised_requests:
            self.broker.logs.state_change("INFO", self.t.update_metadata_summary(self.live, len(parts)), self.epoch)

    def send_update_metadata(self) -> None:
        """After failover every live broker learns the new epoch."""
        if self.t.summarised_requests:
            self.broker.logs.state_change("INFO", self.t.update_metadata_summary(self.live, len(self.partitions)), self.epoch)
        for b in sorted(self.live):
            self.cluster.brokers[b].known_epoch = max(self.cluster.brokers[b].known_epoch, self.epoch)

    # -- events -----------------------------------------------------------------------------------------
    def on_failover(self) -> None:
        """onControllerFailover: load the context from ZooKeeper, re-seed silently, elect offline partitions."""
        logs = self.broker.logs
        milestones = self.t.failover_milestones(self.epoch)
        for msg in milestones[:4]:
            logs.controller("INFO", msg)
        self.live = self.cluster.live_ids()
        self.partitions = self.cluster.load_partitions()
        for p in self.partitions.values():
            if p.zk_version < 0:
                p.state = P.NEW
            else:
                p.state = P.ONLINE if p.leader in self.live else P.OFFLINE
            for r in p.replicas:
                self.replicas[(p.topic, p.partition, r)] = R.ONLINE if r in self.live else R.DELETION_INELIGIBLE
        for msg in milestones[4:-1]:
            logs.controller("INFO", msg)
        self.send_update_metadata()
        if self.cluster.version >= (2, 3):  # KAFKA-3143: offline replicas -> OfflineReplica at startup
            for dead in sorted({r for p in self.partitions.values() for r in p.replicas} - self.live):
                parts = [p for p in self.partitions.values() if dead in p.replicas]
                for p in parts:
                    self.move_replica(p, dead, R.OFFLINE)
        todo = [p for p in self.partitions.values() if p.state in (P.NEW, P.OFFLINE)]
        self.elect(todo, "OfflinePartitionLeaderElectionStrategy", "Startup", unclean_topics=self.cluster.unclean_topics)
        if self.cluster.version >= (2, 3):
            for dead in sorted({r for p in self.partitions.values() for r in p.replicas} - self.live):
                self.remove_from_isr([p for p in self.partitions.values() if dead in p.replicas], dead, "Startup")
        logs.controller("INFO", milestones[-1])

    def on_topic_created(self, topic: str, assignment: dict[int, list[int]]) -> None:
        parts = []
        for partition, replicas in sorted(assignment.items()):
            p = PartitionView(topic, partition, list(replicas))
            self.partitions[p.key] = p
            self.move_partition(p, P.NEW)
            for r in replicas:
                self.move_replica(p, r, R.NEW)
            parts.append(p)
        self.cluster.ensure_partition_paths(topic, sorted(assignment))
        self.elect(parts, "OfflinePartitionLeaderElectionStrategy", "TopicChange")
        for p in parts:
            for r in p.replicas:
                self.move_replica(p, r, R.ONLINE)

    def on_broker_change(self, added: list[int], deleted: list[int], bounced: list[int]) -> None:
        self.live = self.cluster.live_ids()
        self.broker.logs.controller("INFO", self.t.broker_change(added, deleted, bounced, sorted(self.live)))
        for b in deleted + bounced:
            self.on_broker_failure(b)
        for b in added + bounced:
            self.on_broker_startup(b)

    def on_broker_failure(self, dead: int) -> None:
        self.broker.logs.controller("INFO", f"Broker failure callback for {dead}")
        self.live.discard(dead)
        led = [p for p in self.partitions.values() if p.leader == dead and p.state == P.ONLINE]
        for p in led:
            self.move_partition(p, P.OFFLINE)
        offline = [p for p in self.partitions.values() if p.state == P.OFFLINE]
        self.elect(offline, "OfflinePartitionLeaderElectionStrategy", "BrokerChange", unclean_topics=self.cluster.unclean_topics)
        hosted = [p for p in self.partitions.values() if dead in p.replicas and p.state != P.NON_EXISTENT]
        for p in hosted:
            self.move_replica(p, dead, R.OFFLINE)
        self.remove_from_isr(hosted, dead, "BrokerChange")

    def on_broker_startup(self, broker_id: int) -> None:
        self.broker.logs.controller("INFO", f"New broker startup callback for {broker_id}")
        self.live.add(broker_id)
        self.cluster.brokers[broker_id].known_epoch = max(self.cluster.brokers[broker_id].known_epoch, self.epoch)
        for p in self.partitions.values():
            if broker_id in p.replicas and p.state != P.NON_EXISTENT:
                self.move_replica(p, broker_id, R.ONLINE)
        offline = [p for p in self.partitions.values() if p.state in (P.NEW, P.OFFLINE)]
        self.elect(offline, "OfflinePartitionLeaderElectionStrategy", "BrokerChange", unclean_topics=self.cluster.unclean_topics)

    def controlled_shutdown(self, broker_id: int) -> None:
        """ControlledShutdown: move leadership off the broker, then take its replicas out of the ISR."""
        self.broker.logs.controller("INFO", f"Shutting down broker {broker_id}")
        led = [p for p in self.partitions.values() if p.leader == broker_id and p.state == P.ONLINE and len(p.isr) > 1]
        self.elect(led, "ControlledShutdownPartitionLeaderElectionStrategy", "ControlledShutdown", exclude=broker_id)
        followers = [p for p in self.partitions.values() if broker_id in p.replicas and p.leader != broker_id]
        for p in followers:
            self.move_replica(p, broker_id, R.OFFLINE)
        self.remove_from_isr(followers, broker_id, "ControlledShutdown")

    def delete_topic(self, topic: str) -> None:
        """TopicDeletionManager: replicas Offline->DeletionStarted->Successful->NonExistent, partitions ->NonExistent."""
        parts = [p for p in self.partitions.values() if p.topic == topic]
        for p in parts:
            self.move_partition(p, P.OFFLINE)
            self.move_partition(p, P.NON_EXISTENT)
            for r in p.replicas:
                for target in (R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT):
                    self.move_replica(p, r, target)
        ops: list[tuple[Any, ...]] = []
        for p in sorted(parts, key=lambda x: x.partition):
            ops += [("delete", p.state_path, -1), ("delete", f"/brokers/topics/{topic}/partitions/{p.partition}", -1)]
        ops += [("delete", f"/brokers/topics/{topic}/partitions", -1), ("delete", f"/brokers/topics/{topic}", -1)]
        if self.cluster.exists(f"/config/topics/{topic}"):
            ops.append(("delete", f"/config/topics/{topic}", -1))
        ops.append(("delete", f"/admin/delete_topics/{topic}", -1))
        self.commit([ops], "TopicDeletion")
        for p in parts:
            del self.partitions[p.key]
        self.cluster.unclean_topics = self.cluster.unclean_topics - {topic}


def _add_to_txn(txn: Any, op: tuple[Any, ...]) -> None:
    if op[0] == "create":
        txn.create(op[1], op[2], ephemeral=op[3])
    elif op[0] == "set":
        txn.set_data(op[1], op[2], version=op[3])
    else:
        txn.delete(op[1], version=op[2])


def _single_async(client: KazooClient, op: tuple[Any, ...]) -> Any:
    if op[0] == "create":
        return client.create_async(op[1], op[2], ephemeral=op[3])
    if op[0] == "set":
        return client.set_async(op[1], op[2], version=op[3])
    return client.delete_async(op[1], version=op[2])


class Cluster:
    """Brokers, an admin client and the current controller, all against one ZooKeeper (a chroot is fine)."""

    def __init__(self, zk_hosts: str, kafka_version: str, log_dir: str | Path | None, seed: int,
                 wall_clock: bool = False) -> None:
        self.zk_hosts = zk_hosts
        self.kafka_version = kafka_version
        self.version = parse_kafka_version(kafka_version)
        if not (1, 1) <= self.version < (4, 0):  # 4.0 dropped ZooKeeper mode (KRaft only)
            raise ValueError(f"Kafka {kafka_version} is not simulated (supported: 1.1 .. 3.9, ZooKeeper mode)")
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = SimClock(seed, wall=wall_clock)
        self.templates = Templates(kafka_version)
        self.writes: list[ZnodeWrite] = []
        self.brokers: dict[int, Broker] = {}
        self.controller: Controller | None = None
        self.unclean_topics: frozenset[str] = frozenset()
        self.admin = KazooClient(hosts=zk_hosts, timeout=10.0)
        self.admin.start(timeout=15)

    def broker_log_dir(self, broker_id: int) -> Path | None:
        return self.log_dir / f"broker-{broker_id}" if self.log_dir is not None else None

    def record(self, path: str, op: str, data: bytes | None, version: int | None = None) -> None:
        self.writes.append(ZnodeWrite(path, op, data, version))

    def close(self) -> None:
        for b in self.brokers.values():
            if b.client is not None:
                b.client.stop()
                b.client.close()
                b.client = None
            b.logs.close()
        self.admin.stop()
        self.admin.close()

    # -- admin-side writes (AdminZkClient / tools: not controller writes, never fenced) ----------------
    def admin_create(self, path: str, data: bytes = b"") -> None:
        self.admin.create(path, data)
        self.record(path, "CREATE", data)

    def admin_set(self, path: str, data: bytes) -> None:
        self.admin.set(path, data)
        self.record(path, "SET", data)

    def bootstrap(self) -> None:
        """What the first broker of a new cluster writes before anything else: Kafka's persistent top-level
        paths (with their parents), the config entity paths of its line, the cluster id and, from 2.7, the
        feature znode its controller creates."""
        entity_types = ["topics", "clients", "users", "brokers"] + (["ips"] if self.version >= (2, 7) else [])
        paths = ["/brokers", "/consumers", "/brokers/ids", "/brokers/topics", "/config", "/config/changes", "/admin",
                 "/admin/delete_topics", "/brokers/seqid", "/isr_change_notification", "/latest_producer_id_block",
                 "/log_dir_event_notification", *(f"/config/{t}" for t in entity_types), "/cluster"]
        for path in paths:
            if self.admin.exists(path) is None:
                self.admin_create(path)
        if self.admin.exists("/cluster/id") is None:
            self.admin_create("/cluster/id", payloads.encode_cluster_id(payloads.cluster_id(self.seed)))
        if self.version >= (2, 7) and self.admin.exists("/feature") is None:
            self.admin_create("/feature", payloads.encode_feature({}, self.kafka_version))

    def allocate_producer_ids(self, broker_id: int) -> None:
        """A broker's transaction coordinator takes the next block of 1,000 producer ids at start-up."""
        data, _ = self.admin.get("/latest_producer_id_block")
        start = int(json.loads(data)["block_end"]) + 1 if data else 0
        self.admin_set("/latest_producer_id_block", payloads.encode_producer_id_block(broker_id, start, start + 999))

    def exists(self, path: str) -> bool:
        return self.admin.exists(path) is not None

    def ensure_partition_paths(self, topic: str, partitions: list[int]) -> None:
        base = f"/brokers/topics/{topic}/partitions"
        paths = [base] + [f"{base}/{p}" for p in partitions]
        for path in paths:
            try:
                self.admin.create(path, b"")
                self.record(path, "CREATE", b"")
            except NodeExistsError:
                pass

    def live_ids(self) -> set[int]:
        return {int(c) for c in self.admin.get_children("/brokers/ids")}

    def read_controller_id(self) -> int | None:
        try:
            data, _ = self.admin.get("/controller")
        except NoNodeError:
            return None
        return int(json.loads(data)["brokerid"])

    def read_epoch(self) -> tuple[int, int] | None:
        try:
            data, stat = self.admin.get(EPOCH_PATH)
        except NoNodeError:
            return None
        return int(data), stat.version

    def load_partitions(self) -> dict[str, PartitionView]:
        """The new controller's context: assignments and state znodes, read asynchronously."""
        topics = sorted(self.admin.get_children("/brokers/topics"))
        assignments = {t: json.loads(self.admin.get(f"/brokers/topics/{t}")[0])["partitions"] for t in topics}
        views = [PartitionView(t, int(p), list(r)) for t in topics for p, r in sorted(assignments[t].items(), key=lambda kv: int(kv[0]))]
        pending = [self.admin.get_async(v.state_path) for v in views]
        for v, h in zip(views, pending, strict=True):
            try:
                data, stat = h.get()
            except NoNodeError:
                continue
            obj = json.loads(data)
            v.leader, v.leader_epoch, v.isr = obj["leader"], obj["leader_epoch"], list(obj["isr"])
            v.controller_epoch, v.zk_version = obj["controller_epoch"], stat.version
            v.recovering = obj.get("leader_recovery_state") == 1
        return {v.key: v for v in views}

    # -- election ---------------------------------------------------------------------------------------
    def elect_controller(self, broker_id: int) -> Controller | None:
        """One broker's attempt to become controller (KC.elect); None if another broker won."""
        broker = self.brokers[broker_id]
        client = broker.client
        assert client is not None
        data = payloads.encode_controller(broker_id, self.clock.ms(), self.kafka_version)
        if self.version >= (2, 1):  # one multi: create /controller + conditional epoch bump (KAFKA-6082)
            current = self.read_epoch()
            if current is None:
                client.create(EPOCH_PATH, payloads.encode_controller_epoch(0))
                self.record(EPOCH_PATH, "CREATE", payloads.encode_controller_epoch(0))
                current = (0, 0)
            epoch = current[0] + 1
            txn = client.transaction()
            txn.create("/controller", data, ephemeral=True)
            txn.set_data(EPOCH_PATH, payloads.encode_controller_epoch(epoch), version=current[1])
            if any(isinstance(r, Exception) for r in txn.commit()):
                return None
            self.record("/controller", "CREATE", data)
            self.record(EPOCH_PATH, "SET", payloads.encode_controller_epoch(epoch))
            zk_version = current[1] + 1
        else:  # two steps: ephemeral /controller, then the epoch with a version check
            try:
                client.create("/controller", data, ephemeral=True)
            except NodeExistsError:
                return None
            self.record("/controller", "CREATE", data)
            current = self.read_epoch()
            if current is None:
                client.create(EPOCH_PATH, payloads.encode_controller_epoch(1))
                self.record(EPOCH_PATH, "CREATE", payloads.encode_controller_epoch(1))
                epoch, zk_version = 1, 0
            else:
                epoch = current[0] + 1
                client.set(EPOCH_PATH, payloads.encode_controller_epoch(epoch), version=current[1])
                self.record(EPOCH_PATH, "SET", payloads.encode_controller_epoch(epoch))
                zk_version = current[1] + 1
        for msg in self.templates.elected(broker_id, epoch, zk_version):
            broker.logs.controller("INFO", msg)
        controller = Controller(self, broker, epoch, zk_version)
        self.controller = controller
        controller.on_failover()
        return controller

    def elect_any(self, exclude: set[int] | None = None) -> Controller:
        """Live brokers race for /controller; the seeded rng picks who tries first."""
        candidates = sorted(b for b, br in self.brokers.items() if br.alive and b not in (exclude or set()))
        self.rng.shuffle(candidates)
        for b in candidates:
            won = self.elect_controller(b)
            if won is not None:
                return won
        raise RuntimeError("no broker could become controller")
