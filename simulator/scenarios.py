"""Named, seeded scenarios and `run_scenario`.

A scenario is JSON-shaped data: `brokers`, `topics`, a list of `steps` and the `expected_anomalies` the history
really shows (docs/invariants.md; exactly these kinds; an entry may carry `"versions": "<2.1"` or
`">=2.1"` when the answer depends on the Kafka version). A JSON file with the same structure can be run by path.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from models.anomalies import AnomalyKind as K
from models.states import PartitionState, ReplicaState, parse_kafka_version
from simulator import payloads
from simulator.cluster import Cluster, Controller, PartitionView, ZnodeWrite

log = logging.getLogger(__name__)

Scenario = dict[str, Any]


def _topic(name: str, partitions: int, rf: int = 3, unclean: bool = False) -> dict[str, Any]:
    return {"name": name, "partitions": partitions, "replication_factor": rf, "unclean": unclean}


_START = [{"op": "start_brokers"}, {"op": "elect"}, {"op": "create_topics"}, {"op": "checkpoint", "name": "started"}]

SCENARIOS: dict[str, Scenario] = {
    "startup": {"brokers": 3, "topics": [_topic("orders", 3), _topic("payments", 2)], "steps": _START,
                "expected_anomalies": []},
    "controlled-shutdown": {"brokers": 3, "topics": [_topic("orders", 3)],
                            "steps": [*_START, {"op": "controlled_shutdown", "broker": "non-controller"},
                                      {"op": "checkpoint", "name": "after-shutdown"}],
                            "expected_anomalies": []},
    "broker-crash": {"brokers": 3, "topics": [_topic("orders", 3)],
                     "steps": [*_START, {"op": "crash", "broker": 2}, {"op": "checkpoint", "name": "after-crash"}],
                     "expected_anomalies": []},
    "controller-failover": {"brokers": 3, "topics": [_topic("orders", 3)],
                            "steps": [*_START, {"op": "controller_failover"}, {"op": "checkpoint", "name": "after-failover"}],
                            "expected_anomalies": []},
    "zombie-controller": {
        "brokers": 3, "topics": [_topic("orders", 3)],
        "steps": [*_START, {"op": "zombie", "topic": "orders"}, {"op": "checkpoint", "name": "after-zombie"}],
        "expected_anomalies": [
            {"kind": K.ZOMBIE_CONTROLLER_WRITE, "topic": "orders", "partition": "$zombie", "versions": "<2.1"},
            # All versions: fencing only stops the ZooKeeper write; the zombie still logs controller
            # actions at its old epoch (Sending LeaderAndIsr ... epoch=1) after the successor's election at epoch 2,
            # which is SPLIT_BRAIN (one-controller, docs/invariants.md): decisions of two ids, overlapping terms.
            {"kind": K.SPLIT_BRAIN},
            {"kind": K.FENCED_CONTROLLER_WRITE, "versions": ">=2.1"},
            {"kind": K.STALE_CONTROLLER_REQUEST},
        ],
    },
    "illegal-transition": {
        "brokers": 3, "topics": [_topic("orders", 2)],
        "steps": [*_START, {"op": "force_partition_state", "topic": "orders", "partition": 1, "to": "NonExistentPartition"}],
        # One ERROR record: "failed to change state ... from OnlinePartition to NonExistentPartition" + IllegalStateException.
        "expected_anomalies": [
            {"kind": K.ILLEGAL_PARTITION_TRANSITION, "topic": "orders", "partition": 1},
            {"kind": K.FAILED_STATE_CHANGE, "topic": "orders", "partition": 1},
        ],
    },
    "topic-deletion": {"brokers": 3, "topics": [_topic("orders", 2), _topic("scratch", 2)],
                       "steps": [*_START, {"op": "delete_topic", "topic": "scratch"}, {"op": "checkpoint", "name": "after-delete"}],
                       "expected_anomalies": []},
    "reassignment": {"brokers": 4, "topics": [_topic("orders", 2)],
                     "steps": [*_START, {"op": "reassign", "topic": "orders", "partition": 0, "replicas": [4, 3, 2]},
                               {"op": "checkpoint", "name": "after-reassign"}],
                     "expected_anomalies": []},
    "unclean-election": {
        "brokers": 3, "topics": [_topic("logs", 1, rf=2, unclean=True)],
        "steps": [*_START, {"op": "isr_shrink", "topic": "logs", "partition": 0, "remove": "follower"},
                  {"op": "crash", "broker": "follower:logs-0"}, {"op": "crash", "broker": "leader:logs-0"},
                  {"op": "checkpoint", "name": "offline"}, {"op": "restart", "broker": "crashed:0"}, {"op": "checkpoint", "name": "after-unclean"}],
        "expected_anomalies": [
            {"kind": K.OFFLINE_PARTITION, "topic": "logs", "partition": 0},
            {"kind": K.UNCLEAN_LEADER_ELECTION, "topic": "logs", "partition": 0},
            # With both replicas down the controller's OfflinePartition -> OnlinePartition election fails and it logs
            # "failed to change state ... StateChangeFailedException: Failed to elect leader" (the simulator writes
            # it): a real FAILED_STATE_CHANGE, before the restart allows the unclean election.
            {"kind": K.FAILED_STATE_CHANGE, "topic": "logs", "partition": 0},
        ],
    },
    "isr-shrink-expand": {"brokers": 3, "topics": [_topic("orders", 2)],
                          "steps": [*_START, {"op": "isr_shrink", "topic": "orders", "partition": 0, "remove": "follower"},
                                    {"op": "checkpoint", "name": "shrunk"},
                                    {"op": "isr_expand", "topic": "orders", "partition": 0},
                                    {"op": "checkpoint", "name": "expanded"}],
                          "expected_anomalies": []},
    "broker-bounce": {"brokers": 3, "topics": [_topic("orders", 3)],
                      "steps": [*_START, {"op": "bounce", "broker": 3}, {"op": "checkpoint", "name": "after-bounce"}],
                      "expected_anomalies": []},
    "failover-storm": {"brokers": 5, "topics": [_topic("storm", 20_000)],
                       "steps": [*_START, {"op": "storm", "rounds": 3}, {"op": "checkpoint", "name": "after-storm"}],
                       "expected_anomalies": []},
}


@dataclass(frozen=True)
class Checkpoint:
    """Known cluster state that holds from ZooKeeper transaction `zxid` on (until the next change)."""

    name: str
    zxid: int
    controller_id: int | None
    controller_epoch: int | None
    live_brokers: tuple[int, ...]
    partitions: dict[str, dict[str, Any]]


@dataclass
class ScenarioResult:
    name: str
    kafka_version: str
    seed: int
    expected_anomalies: list[dict[str, Any]]
    znode_writes: list[ZnodeWrite]
    state_at: dict[str, Checkpoint]
    log_files: list[Path]
    topics: list[str] = field(default_factory=list)


def list_scenarios() -> list[str]:
    return sorted(SCENARIOS)


def load_scenario(name_or_path: str, brokers: int | None = None, partitions: int | None = None) -> tuple[str, Scenario]:
    """A built-in scenario by name, or a JSON file; `brokers`/`partitions` override the sizes (failover-storm)."""
    if name_or_path in SCENARIOS:
        name, spec = name_or_path, json.loads(json.dumps(SCENARIOS[name_or_path]))
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise ValueError(f"unknown scenario {name_or_path!r} (known: {', '.join(list_scenarios())}, or a JSON file)")
        name, spec = path.stem, json.loads(path.read_text())
    if brokers is not None:
        spec["brokers"] = brokers
    if partitions is not None and spec["topics"]:
        spec["topics"][0]["partitions"] = partitions
    return name, spec


def applies(entry: dict[str, Any], kafka_version: str) -> bool:
    cond = entry.get("versions")
    if not cond:
        return True
    op, ver = (">=", cond[2:]) if cond.startswith(">=") else ("<", cond[1:])
    at_least = parse_kafka_version(kafka_version) >= parse_kafka_version(ver)
    return at_least if op == ">=" else not at_least


def run_scenario(name_or_path: str, zk_hosts: str, kafka_version: str = "3.8", log_dir: str | Path | None = None,
                 seed: int = 0, *, brokers: int | None = None, partitions: int | None = None,
                 wall_clock: bool = False) -> ScenarioResult:
    """Play a scenario against a real ZooKeeper (use an empty chroot); returns what was written and expected.

    ``wall_clock`` stamps log lines with the real time (as real brokers do) instead of the seeded clock.
    """
    name, spec = load_scenario(name_or_path, brokers, partitions)
    cluster = Cluster(zk_hosts, kafka_version, log_dir, seed, wall_clock)
    runner = _Runner(cluster, spec)
    try:
        cluster.bootstrap()
        for step in spec["steps"]:
            runner.run(step)
    finally:
        cluster.close()
    expected = [{k: runner.resolved.get(v, v) if isinstance(v, str) else v for k, v in e.items() if k != "versions"}
                for e in spec.get("expected_anomalies", []) if applies(e, kafka_version)]
    files = sorted(f for b in cluster.brokers.values() for f in b.logs.paths() if f.exists())
    return ScenarioResult(name, kafka_version, seed, expected, cluster.writes, runner.checkpoints, files,
                          [t["name"] for t in spec["topics"]])


class _Runner:
    """Executes scenario steps; each step method is one operational event."""

    def __init__(self, cluster: Cluster, spec: Scenario) -> None:
        self.cluster = cluster
        self.spec = spec
        self.checkpoints: dict[str, Checkpoint] = {}
        self.crashed: list[int] = []
        self.resolved: dict[str, Any] = {}  # "$zombie" -> the partition the zombie wrote

    @property
    def ctl(self) -> Controller:
        assert self.cluster.controller is not None
        return self.cluster.controller

    def run(self, step: dict[str, Any]) -> None:
        self.cluster.clock.advance(1 + self.cluster.rng.random() * 4)
        getattr(self, "_" + step["op"])(step)

    def _broker_ref(self, ref: int | str) -> int:
        """`3`, or `leader:t-0` / `follower:t-0` (resolved against the controller's view)."""
        if isinstance(ref, int):
            return ref
        if ref == "non-controller":
            return max(b for b, br in self.cluster.brokers.items() if br.alive and b != self.ctl.id)
        role, key = ref.split(":")
        if role == "crashed":
            return self.crashed[int(key)]
        p = self.ctl.partitions[key]
        if role == "leader":
            return p.leader
        return next(r for r in p.replicas if r != p.leader)

    def _part(self, step: dict[str, Any]) -> PartitionView:
        return self.ctl.partitions[f"{step['topic']}-{step['partition']}"]

    def _start_brokers(self, step: dict[str, Any]) -> None:
        from simulator.cluster import Broker

        for b in range(1, int(self.spec["brokers"]) + 1):
            self.cluster.brokers[b] = Broker(self.cluster, b)
            self.cluster.brokers[b].start()

    def _elect(self, step: dict[str, Any]) -> None:
        if "broker" in step:
            self.cluster.elect_controller(int(step["broker"]))
        else:
            self.cluster.elect_any()

    def _create_topics(self, step: dict[str, Any]) -> None:
        ids = sorted(self.cluster.brokers)
        for i, t in enumerate(self.spec["topics"]):
            start = self.cluster.rng.randrange(len(ids))
            rf = int(t["replication_factor"])
            assignment = {p: [ids[(start + p + j) % len(ids)] for j in range(rf)] for p in range(int(t["partitions"]))}
            topic_id = payloads.topic_id(self.cluster.seed, i)
            if t.get("unclean"):
                cfg = b'{"version":1,"config":{"unclean.leader.election.enable":"true"}}'
                self.cluster.admin_create(f"/config/topics/{t['name']}", cfg)
                self.cluster.unclean_topics = self.cluster.unclean_topics | {t["name"]}
            data = payloads.encode_topic_assignment(assignment, self.cluster.kafka_version, topic_id=topic_id)
            self.cluster.admin_create(f"/brokers/topics/{t['name']}", data)
            self.ctl.on_topic_created(t["name"], assignment)

    def _checkpoint(self, step: dict[str, Any]) -> None:
        zxid = _last_zxid(self.cluster.admin)
        epoch = self.cluster.read_epoch()
        states = {k: str(p.state) for k, p in self.ctl.partitions.items()}
        parts = {k: {"leader": p.leader, "leader_epoch": p.leader_epoch, "isr": list(p.isr), "replicas": list(p.replicas),
                     "controller_epoch": p.controller_epoch, "state": states.get(k)}
                 for k, p in sorted(self.cluster.load_partitions().items())}  # what ZooKeeper holds
        self.checkpoints[step["name"]] = Checkpoint(step["name"], zxid, self.cluster.read_controller_id(),
                                                    epoch[0] if epoch else None, tuple(sorted(self.cluster.live_ids())), parts)

    def _crash(self, step: dict[str, Any]) -> None:
        b = self._broker_ref(step["broker"])
        was_controller = self.cluster.controller is not None and self.cluster.controller.id == b
        self.crashed.append(b)
        self.cluster.brokers[b].stop_session()
        if was_controller:
            self.cluster.elect_any()
        else:
            self.ctl.on_broker_change([], [b], [])

    def _restart(self, step: dict[str, Any]) -> None:
        b = self._broker_ref(step["broker"])
        self.cluster.brokers[b].start()
        self.ctl.on_broker_change([b], [], [])

    def _controlled_shutdown(self, step: dict[str, Any]) -> None:
        b = self._broker_ref(step["broker"])
        if self.ctl.id == b:
            raise ValueError("controlled_shutdown of the controller itself is not simulated")
        self.ctl.controlled_shutdown(b)
        self.cluster.brokers[b].stop_session()
        self.ctl.on_broker_change([], [b], [])

    def _controller_failover(self, step: dict[str, Any]) -> None:
        old = self.ctl.id
        self.cluster.brokers[old].logs.controller("INFO", "Resigned")
        self.cluster.brokers[old].stop_session()
        self.cluster.elect_any()

    def _bounce(self, step: dict[str, Any]) -> None:
        b = int(step["broker"])
        self.cluster.brokers[b].stop_session()
        self.cluster.brokers[b].start()
        if self.cluster.version >= (2, 2):  # KIP-380: the new czxid tells the controller it bounced
            self.ctl.on_broker_change([], [], [b])
        else:
            self.ctl.on_broker_change([], [b], [])
            self.ctl.on_broker_change([b], [], [])

    def _force_partition_state(self, step: dict[str, Any]) -> None:
        from models.states import PartitionState

        self.ctl.move_partition(self._part(step), PartitionState(step["to"]))

    def _delete_topic(self, step: dict[str, Any]) -> None:
        self.cluster.admin_create(f"/admin/delete_topics/{step['topic']}")
        self.ctl.delete_topic(step["topic"])

    def _isr_shrink(self, step: dict[str, Any]) -> None:
        p = self._part(step)
        out = self._broker_ref(f"follower:{p.key}") if step.get("remove") == "follower" else int(step["remove"])
        self._isr_change(p, [r for r in p.isr if r != out])

    def _isr_expand(self, step: dict[str, Any]) -> None:
        p = self._part(step)
        self._isr_change(p, [r for r in p.replicas if r in p.isr or r in self.ctl.live])

    def _isr_change(self, p: PartitionView, isr: list[int]) -> None:
        self._isr_changes([p], [isr])

    def _isr_changes(self, parts: list[PartitionView], isrs: list[list[int]]) -> None:
        """ISR-only writes (leader and leader epoch unchanged), by the writer the version has (docs/kafka-metadata.md).

        < 2.7: each partition's leader writes its state znode itself (conditional on its cached zkVersion,
        keeping the controller_epoch that made it leader), then one isr_change_notification per leader naming
        all its changed partitions, which the controller consumes and deletes. 2.7+: AlterIsr, the controller
        writes them with its current epoch.
        """
        if not parts:
            return
        if self.cluster.version >= (2, 7):
            proposals = [{"leader": p.leader, "leader_epoch": p.leader_epoch, "isr": isr} for p, isr in zip(parts, isrs, strict=True)]
            self.ctl.write_states(parts, proposals, "AlterIsrReceived")
            return
        by_leader: dict[int, list[tuple[PartitionView, list[int]]]] = {}
        for p, isr in zip(parts, isrs, strict=True):
            by_leader.setdefault(p.leader, []).append((p, isr))
        for leader_id in sorted(by_leader):
            self._leader_isr_writes(leader_id, by_leader[leader_id])

    def _leader_isr_writes(self, leader_id: int, changes: list[tuple[PartitionView, list[int]]]) -> None:
        """One leader's direct ISR writes (pipelined on its session, so ZooKeeper applies them in this order)."""
        leader = self.cluster.brokers[leader_id]
        assert leader.client is not None
        datas = [payloads.encode_partition_state(p.leader, p.leader_epoch, p.controller_epoch, isr, self.cluster.kafka_version)
                 for p, isr in changes]
        pending = [leader.client.set_async(p.state_path, data, version=p.zk_version)
                   for (p, _), data in zip(changes, datas, strict=True)]
        for (p, isr), data, handle in zip(changes, datas, pending, strict=True):
            handle.get()  # a real leader's conditional write fails only if its cache is stale: not in a scenario
            self.cluster.record(p.state_path, "SET", data)
            p.isr, p.zk_version = list(isr), p.zk_version + 1
        note = payloads.encode_isr_change((p.topic, p.partition) for p, _ in changes)
        created = leader.client.create("/isr_change_notification/isr_change_", note, sequence=True)
        self.cluster.record(created, "CREATE", note)
        self.ctl.commit([[("delete", created, -1)]], "IsrChangeNotification")

    def _reassign(self, step: dict[str, Any]) -> None:
        """Reassignment: full set RS = target ++ origin, catch up, move leader, shrink to target."""
        p = self._part(step)
        target = [int(r) for r in step["replicas"]]
        origin = list(p.replicas)
        full = list(dict.fromkeys(target + origin))
        ctl, topic = self.ctl, p.topic
        body = {"version": 1, "partitions": [{"topic": topic, "partition": p.partition, "replicas": target}]}
        self.cluster.admin_create("/admin/reassign_partitions", json.dumps(body, separators=(",", ":")).encode())
        adding = {p.partition: [r for r in target if r not in origin]}
        removing = {p.partition: [r for r in origin if r not in target]}
        self._write_assignment(topic, {p.partition: full}, adding, removing)
        p.replicas = full
        for r in adding[p.partition]:
            ctl.move_replica(p, r, ReplicaState.NEW)
        ctl.write_states([p], [{"leader": p.leader, "leader_epoch": p.leader_epoch + 1, "isr": p.isr}], "PartitionReassignment")
        self._isr_change(p, [r for r in full if r in ctl.live])  # new replicas caught up
        from models.states import PartitionState as PS
        from models.states import ReplicaState as RS

        for r in adding[p.partition]:
            ctl.move_replica(p, r, RS.ONLINE)
        isr = [r for r in target if r in p.isr]
        new_leader = p.leader if p.leader in target else isr[0]
        ctl.write_states([p], [{"leader": new_leader, "leader_epoch": p.leader_epoch + 1, "isr": isr}], "PartitionReassignment")
        lai = ctl.t.leader_and_isr(p.leader, p.leader_epoch, p.isr, p.zk_version)
        ctl.broker.logs.state_change(ctl.t.partition_level(PS.ONLINE), ctl.t.partition_online(topic, p.partition, PS.ONLINE, lai), ctl.epoch)
        for r in removing[p.partition]:
            for st in (RS.OFFLINE, RS.DELETION_STARTED, RS.DELETION_SUCCESSFUL, RS.NON_EXISTENT):
                ctl.move_replica(p, r, st)
        p.replicas = target
        self._write_assignment(topic, {p.partition: target}, {}, {})
        ctl.commit([[("delete", "/admin/reassign_partitions", -1)]], "PartitionReassignment")

    def _write_assignment(self, topic: str, changed: dict[int, list[int]], adding: dict[int, list[int]],
                          removing: dict[int, list[int]]) -> None:
        data, stat = self.cluster.admin.get(f"/brokers/topics/{topic}")
        current = {int(k): v for k, v in json.loads(data)["partitions"].items()}
        current.update(changed)
        topic_id = json.loads(data).get("topic_id")
        if self.cluster.version >= (2, 4):  # adding/removing maps exist from topic znode v2 (2.4)
            new = payloads.encode_topic_assignment(current, self.cluster.kafka_version,
                                                   adding={k: v for k, v in adding.items() if v},
                                                   removing={k: v for k, v in removing.items() if v}, topic_id=topic_id)
        else:
            new = payloads.encode_topic_assignment(current, self.cluster.kafka_version)
        self.ctl.commit([[("set", f"/brokers/topics/{topic}", new, stat.version)]], "PartitionReassignment")

    def _zombie(self, step: dict[str, Any]) -> None:
        """The controller's session expires; a successor is elected; the old one, unaware, still acts.

        It moves leadership of one partition (a decision it was processing) with its stale epoch and cached
        zkVersion, then sends LeaderAndIsr. <= 2.0 the write lands (no fencing, the successor has not touched
        that znode); from 2.1 the multi's /controller_epoch check fails. Brokers that saw the new epoch ignore
        the request either way.
        """
        zombie = self.ctl
        old_broker = zombie.broker
        old_broker.stop_session()  # session expiry: /controller and /brokers/ids/N vanish
        successor = self.cluster.elect_any(exclude={old_broker.id})
        old_broker.connect()  # the zombie's ZooKeeper client reconnects with a fresh session
        # A partition the successor had no reason to touch (not led by the zombie's broker).
        p = next(p for k, p in sorted(zombie.partitions.items()) if p.topic == step["topic"] and p.leader != old_broker.id)
        self.resolved["$zombie"] = p.partition
        others = [r for r in p.isr if r not in (p.leader, old_broker.id)]
        proposal = {"leader": others[0], "leader_epoch": p.leader_epoch + 1, "isr": p.isr}
        if zombie.write_states([p], [proposal], "ReplicaLeaderElection")[0]:
            lai = zombie.t.leader_and_isr(p.leader, p.leader_epoch, p.isr, p.zk_version)
            old_broker.logs.state_change(zombie.t.partition_level("OnlinePartition"),
                                         zombie.t.partition_online(p.topic, p.partition, "OnlinePartition", lai), zombie.epoch)
        zombie.live = {b for b in zombie.live if b != old_broker.id}
        zombie.send_leader_and_isr([p])  # in flight: brokers on the new epoch drop it
        old_broker.logs.controller("INFO", "Resigned")
        old_broker.stop_session()
        old_broker.start()  # re-registers as a plain broker
        successor.on_broker_change([old_broker.id], [], [])
        self.cluster.controller = successor

    def _storm(self, step: dict[str, Any]) -> None:
        """Repeated controller crashes, each followed by a restart of that broker: mass leader elections.

        The restarted broker catches up and its leaders add it back to their ISRs (the ISR expand of the
        version), as in a real clean storm. Without that, rounds that kill every replica of a partition in turn
        (RF 3, 3 rounds) would leave an ISR of one dead broker, an offline partition and a failed election.
        """
        for _ in range(int(step.get("rounds", 3))):
            old = self.ctl.id
            self.cluster.brokers[old].stop_session()
            self.cluster.elect_any()
            self.cluster.brokers[old].start()
            self.ctl.on_broker_change([old], [], [])
            self._rejoin_isr(old)

    def _rejoin_isr(self, broker_id: int) -> None:
        """ISR expand for every online partition hosting `broker_id` whose ISR lacks it (it has caught up)."""
        ctl = self.ctl
        parts = [p for p in sorted(ctl.partitions.values(), key=lambda v: (v.topic, v.partition))
                 if broker_id in p.replicas and broker_id not in p.isr and p.state == PartitionState.ONLINE
                 and p.leader in ctl.live]
        # Partition.maybeExpandIsr: the ISR is a Set, the new member joins last (insertion order for small sets)
        self._isr_changes(parts, [[*p.isr, broker_id] for p in parts])

def _last_zxid(client: KazooClient) -> int:
    """The server's last committed zxid (four-letter word `srvr`; the embedded server whitelists it)."""
    out = client.command(b"srvr")
    for line in out.splitlines():
        if line.startswith("Zxid:"):
            return int(line.split(":", 1)[1].strip(), 16)
    raise RuntimeError("ZooKeeper srvr did not report a Zxid")
