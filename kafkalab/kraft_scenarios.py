"""Scenarios on a real KRaft cluster (Kafka 4.x, three combined nodes), each recorded as a timed `Phase`, in the
patterns of the ZooKeeper-mode scenarios (`kafkalab.scenarios`).

A KRaft cluster's controller is the quorum's leader, and with three combined nodes the quorum is the brokers:
two nodes down at once stop every metadata change. So the faults here never take two nodes down together, and
one node, `KRaftLab.keep`, is never killed with SIGKILL: zkledger's collector follows its metadata log, which
holds the whole cluster's history (a killed quorum leader can come back with an uncommitted tail and truncate
its log). Scenarios leave every node up and every ISR full, so one cluster serves them all in sequence.

- the unclean election keeps a follower alive but out of the ISR (it was stopped while data was written, then
  restarted with its fetches throttled), then kills the ISR's only member: the controller fences it and elects
  the out-of-sync follower because the topic allows unclean elections;
- a topic deleted with a broker down is gone at once (KRaft writes one `RemoveTopicRecord`; the stopped broker
  drops its replica when it returns).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kafkalab.kraft import KRaftCluster
from kafkalab.scenarios import FAULT, ROUTINE, Phase
from kafkalab.truth import NO_LEADER, GroundTruthRecorder, PartitionView, admin_client
from services.errors import UserError

THROTTLE_BYTES_S = 8 * 1024
"""The out-of-sync follower's fetch rate in the unclean election: far below what it has to catch up on."""

View = dict[tuple[str, int], PartitionView]


@dataclass
class KRaftLab:
    """One KRaft cluster with the ground-truth recorder running; `keep` is the node whose metadata log is
    collected (never SIGKILLed)."""

    cluster: KRaftCluster
    recorder: GroundTruthRecorder
    keep: int
    phases: list[Phase] = field(default_factory=list)
    wait_s: float = 90.0

    # -- helpers the scenarios share ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str, kind: str, *topics: str) -> Iterator[Phase]:
        ph = Phase(name, kind, datetime.now(UTC), topics=set(topics))
        self.phases.append(ph)
        yield ph
        ph.end = datetime.now(UTC)

    def running_bootstrap(self) -> list[str]:
        return [self.cluster.nodes[n].address for n in self.cluster.broker_ids if self.cluster.nodes[n].running]

    def admin(self) -> Any:
        return admin_client(self.running_bootstrap(), request_timeout_ms=15000)

    def view(self) -> View:
        """Kafka's answer asked now (not from the recorder), so a wait sees the freshest state."""
        sample = self.recorder.sample_once()
        return sample.partitions if sample is not None else {}

    def wait_until(self, check: Callable[[View], bool], what: str, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.wait_s)
        while time.monotonic() < deadline:
            if check(self.view()):
                return
            time.sleep(0.3)
        raise UserError(f"timed out waiting for {what}; last view: {self.view()}")

    def wait_healthy(self, topics: set[str] | None = None) -> None:
        """Every partition (of `topics`) led and with its full ISR, as Kafka reports it."""
        def ok(view: View) -> bool:
            parts = [v for k, v in view.items() if topics is None or k[0] in topics]
            return bool(parts) and all(v.leader != NO_LEADER and set(v.isr) == set(v.replicas) for v in parts)

        self.wait_until(ok, f"full ISRs{'' if topics is None else ' of ' + ', '.join(sorted(topics))}")

    def wait_topics(self, present: set[str], absent: frozenset[str] | set[str] = frozenset()) -> None:
        def ok(view: View) -> bool:
            names = {k[0] for k in view}
            return present <= names and not (absent & names)

        self.wait_until(ok, f"topics {sorted(present)} present and {sorted(absent)} gone")

    def partition(self, topic: str, part: int = 0) -> Callable[[Callable[[PartitionView], bool]], Callable[[View], bool]]:
        """`lab.wait_until(lab.partition("t")(lambda p: p.leader == 2), ...)`: a check of one partition's view."""
        def wrap(test: Callable[[PartitionView], bool]) -> Callable[[View], bool]:
            return lambda view: (p := view.get((topic, part))) is not None and test(p)
        return wrap

    def quorum_leader(self) -> int:
        return self.cluster.wait_quorum_leader(timeout_s=self.wait_s)[0]

    def create_topics(self, topics: dict[str, dict[str, Any]]) -> None:
        admin = self.admin()
        try:
            admin.create_topics(topics, timeout_ms=15000)
        finally:
            admin.close()
        self.wait_topics(set(topics))

    def delete_topics(self, topics: list[str]) -> None:
        admin = self.admin()
        try:
            admin.delete_topics(topics, timeout_ms=15000, raise_errors=False)
        finally:
            admin.close()

    def set_broker_config(self, broker: int, configs: dict[str, str | None]) -> None:
        """Incremental AlterConfigs of one broker's dynamic configs; a value of None deletes the key."""
        from kafka.admin import ConfigResource, ConfigResourceType

        values: dict[str, Any] = {k: (("DELETE", None) if v is None else v) for k, v in configs.items()}
        admin = self.admin()
        try:
            admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(broker), configs=values)],
                               raise_on_unknown=False)
        finally:
            admin.close()

    def produce(self, topic: str, count: int = 200, acks: int | str = "all", size: int = 0) -> int:
        """Send `count` records (of about `size` bytes, or small); the number acknowledged."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.running_bootstrap(), acks=acks, linger_ms=5, retries=5,
                                 request_timeout_ms=10000, client_id="kafkalab-producer")
        pad = b"x" * size
        try:
            futures = [producer.send(topic, f"{topic}-{i}".encode() + pad) for i in range(count)]
            producer.flush(60)
            return sum(1 for f in futures if f.succeeded())
        finally:
            producer.close(5)

    def stop_node(self, node: int) -> None:
        """SIGTERM (a controlled shutdown), then wait until the brokers no longer list it."""
        self.cluster.stop_node(node)
        self.cluster.wait_fenced(node, timeout_s=self.wait_s)

    def kill(self, node: int) -> None:
        """SIGKILL, then wait until the controller fences it (its broker session times out)."""
        if node == self.keep:
            raise UserError(f"node {node}'s metadata log is being collected: it is not to be killed")
        self.cluster.kill(node)
        self.cluster.wait_quorum_leader(other_than=node, timeout_s=self.wait_s)
        self.cluster.wait_fenced(node, timeout_s=self.wait_s)

    def others(self, *exclude: int) -> list[int]:
        return [b for b in self.cluster.broker_ids if b not in exclude]


# -- routine operations ---------------------------------------------------------------------------------------
def create(lab: KRaftLab) -> Phase:
    """Topics at RF 3 and RF 1 (three partitions each, so every node holds one RF 1 partition), with data."""
    with lab.phase("create", ROUTINE, "rf3", "rf1") as ph:
        lab.create_topics({"rf3": {"num_partitions": 3, "replication_factor": 3},
                           "rf1": {"num_partitions": 3, "replication_factor": 1}})
        lab.wait_healthy({"rf3", "rf1"})
        ph.notes["produced"] = lab.produce("rf3") + lab.produce("rf1")
    return ph


def rolling_restart(lab: KRaftLab) -> Phase:
    """Each node in turn: controlled shutdown (SIGTERM), start again, wait for full ISRs; the quorum leader last."""
    with lab.phase("rolling-restart", ROUTINE) as ph:
        leader = lab.quorum_leader()
        order = [*lab.others(leader), leader]
        ph.notes["order"] = order
        for node in order:
            lab.stop_node(node)
            lab.cluster.start_node(node)
            lab.wait_healthy()
        ph.notes["quorum_leader_after"] = lab.quorum_leader()
    return ph


def preferred_election(lab: KRaftLab) -> Phase:
    """Move every partition's leadership back to its preferred (first) replica with ElectLeaders."""
    with lab.phase("preferred-election", ROUTINE, "rf3") as ph:
        view = lab.view()
        moved = sorted(k for k, v in view.items() if v.replicas and v.leader != v.replicas[0])
        ph.notes["not_preferred_before"] = [f"{t}-{p}" for t, p in moved]
        if moved:
            from kafka.errors import KafkaError

            admin = lab.admin()
            try:
                admin.elect_leaders(0, {t: [p for tt, p in moved if tt == t] for t, _ in moved},
                                    timeout_ms=15000, raise_errors=False)
            except KafkaError as exc:  # the controller still carries it out; the wait below decides
                ph.notes["elect_error"] = type(exc).__name__
            finally:
                admin.close()
        lab.wait_until(lambda v: all(x.leader == x.replicas[0] for x in v.values()), "preferred leaders")
    return ph


def reassignment(lab: KRaftLab) -> Phase:
    """An RF 2 partition moved from two brokers to a different pair (data copied, old replica dropped)."""
    with lab.phase("reassignment", ROUTINE, "moving") as ph:
        a, b, c = sorted(lab.cluster.broker_ids)[:3]
        lab.create_topics({"moving": {"num_partitions": -1, "replication_factor": -1, "assignments": {0: [a, b]}}})
        lab.wait_healthy({"moving"})
        lab.produce("moving")
        target = [b, c]
        ph.notes["from"], ph.notes["to"] = [a, b], target
        from kafka import TopicPartition

        admin = lab.admin()
        try:
            admin.alter_partition_reassignments({TopicPartition("moving", 0): target}, timeout_ms=15000)
        finally:
            admin.close()
        lab.wait_until(lab.partition("moving")(lambda m: m.replicas == tuple(target) and set(m.isr) == set(target)),
                       "the reassignment to finish")
    return ph


def deletion(lab: KRaftLab) -> Phase:
    """Delete topics with every node up; then delete one while a replica's node is down, and bring it back."""
    with lab.phase("deletion", ROUTINE, "rf1", "unclean", "doomed") as ph:
        gone = [t for t in ("rf1", "unclean") if any(k[0] == t for k in lab.view())]
        if gone:
            lab.delete_topics(gone)
            lab.wait_topics(set(), set(gone))
        lab.create_topics({"doomed": {"num_partitions": 2, "replication_factor": 3}})
        lab.wait_healthy({"doomed"})
        lab.produce("doomed", 50)
        down = lab.others(lab.quorum_leader(), lab.keep)[0]
        ph.notes["down"] = down
        lab.stop_node(down)
        lab.delete_topics(["doomed"])
        lab.wait_topics(set(), {"doomed"})  # KRaft deletes at once, the stopped broker's replica included
        ph.notes["deleted_while_down"] = not lab.cluster.nodes[down].running
        lab.cluster.start_node(down)
        lab.wait_healthy()
    return ph


# -- faults ---------------------------------------------------------------------------------------------------
def offline_partition(lab: KRaftLab) -> Phase:
    """SIGKILL the only replica of an RF 1 partition (a node neither leading the quorum nor collected): once
    its session times out the controller fences it and the partition has no leader."""
    with lab.phase("offline-partition", FAULT, "rf1") as ph:
        spare = lab.others(lab.quorum_leader(), lab.keep)
        view = lab.view()
        key = next(k for k, v in sorted(view.items()) if k[0] == "rf1" and v.replicas[0] in spare)
        victim = view[key].replicas[0]
        ph.notes.update(broker=victim, partition=f"{key[0]}-{key[1]}")
        lab.kill(victim)
        lab.wait_until(lab.partition(*key)(lambda p: p.leader == NO_LEADER), f"{key} offline")
        time.sleep(1.0)
        lab.cluster.start_node(victim)
        lab.wait_healthy()
    return ph


def controller_failover(lab: KRaftLab) -> Phase:
    """SIGKILL the active controller (the quorum's leader): the other voters elect a new leader in a higher
    epoch, which fences the killed node's broker; it is started again and rejoins."""
    old = lab.quorum_leader()
    if old == lab.keep:  # the collected node is never killed: move the quorum's leadership away first
        lab.stop_node(old)
        lab.cluster.wait_quorum_leader(other_than=old, timeout_s=lab.wait_s)
        lab.cluster.start_node(old)
        lab.wait_healthy()
        old = lab.quorum_leader()
    with lab.phase("controller-failover", FAULT) as ph:
        before = lab.cluster.quorum_leader()
        lab.kill(old)
        new, epoch = lab.cluster.wait_quorum_leader(other_than=old, timeout_s=lab.wait_s)
        ph.notes.update(old=old, new=new, old_epoch=before[1] if before else None, new_epoch=epoch)
        lab.cluster.start_node(old)
        lab.wait_healthy()
    return ph


def unclean_election(lab: KRaftLab) -> Phase:
    """RF 2 topic with unclean.leader.election.enable: the follower stopped (the ISR shrinks to the leader), data
    written, the follower started again with its fetches throttled (alive, out of the ISR), the leader SIGKILLed:
    the controller fences it and elects the out-of-sync follower. The throttle is lifted and the old leader
    started again (it truncates to the new leader's log).

    The follower cannot simply stay down as in the ZooKeeper-mode scenario: with three combined nodes, two down
    leave the quorum without a majority, and nothing would be elected."""
    with lab.phase("unclean-election", FAULT, "unclean") as ph:
        quorum = lab.quorum_leader()
        leader = lab.others(quorum, lab.keep)[0]
        follower = next(n for n in lab.others(leader) if n != quorum) if lab.keep == quorum else lab.keep
        ph.notes.update(leader=leader, follower=follower)
        lab.create_topics({"unclean": {
            "num_partitions": -1, "replication_factor": -1, "assignments": {0: [leader, follower]},
            "configs": {"unclean.leader.election.enable": "true",
                        "follower.replication.throttled.replicas": f"0:{follower}"}}})
        lab.wait_healthy({"unclean"})
        lab.produce("unclean", 50)
        lab.set_broker_config(follower, {"follower.replication.throttled.rate": str(THROTTLE_BYTES_S)})
        lab.stop_node(follower)
        in_sync = lab.partition("unclean")
        lab.wait_until(in_sync(lambda p: p.isr == (leader,)), "the ISR to shrink to the leader")
        ph.notes["produced_out_of_sync"] = lab.produce("unclean", 3000, acks=1, size=1024)
        lab.cluster.start_node(follower)
        time.sleep(2.0)  # the follower fetches, throttled: it must still be out of the ISR
        now = lab.view().get(("unclean", 0))
        if now is None or now.isr != (leader,):
            raise UserError(f"the throttled follower rejoined the ISR: nothing unclean to elect ({now}, "
                            f"{ph.notes['produced_out_of_sync']} records produced out of sync)")
        lab.kill(leader)
        try:
            lab.wait_until(in_sync(lambda p: p.leader == follower), "the out-of-sync follower to lead", 30)
        except UserError:  # not elected at the fencing: ask for the unclean election
            admin = lab.admin()
            try:
                admin.elect_leaders(1, {"unclean": [0]}, timeout_ms=15000, raise_errors=False)
            finally:
                admin.close()
            ph.notes["asked_unclean_election"] = True
            lab.wait_until(in_sync(lambda p: p.leader == follower), "the out-of-sync follower to lead")
        lab.set_broker_config(follower, {"follower.replication.throttled.rate": None})
        lab.cluster.start_node(leader)
        lab.wait_healthy()
    return ph


SCENARIOS: dict[str, Callable[[KRaftLab], Phase]] = {
    "create": create,
    "offline-partition": offline_partition,
    "controller-failover": controller_failover,
    "unclean-election": unclean_election,
    "deletion": deletion,
    "rolling-restart": rolling_restart,
    "preferred-election": preferred_election,
    "reassignment": reassignment,
}
"""Every KRaft scenario in the order they are played on one cluster (each relies only on `create` before it;
`deletion` removes the RF 1 topic, so the rolling restart takes no partition offline)."""

EXPECTED: dict[str, frozenset[str]] = {
    "offline-partition": frozenset({"OFFLINE_PARTITION", "UNCLEAN_LEADER_ELECTION"}),
    "controller-failover": frozenset({"OFFLINE_PARTITION", "UNCLEAN_LEADER_ELECTION"}),
    "unclean-election": frozenset({"UNCLEAN_LEADER_ELECTION", "OFFLINE_PARTITION"}),
}
"""The anomaly kinds each fault must raise, and no other. A SIGKILLed node's RF 1 partition goes offline until the
node returns (in the failover and the unclean election too). Kafka 4.1 keeps eligible leader replicas (KIP-966,
on by default): fencing the partition's only ISR member leaves the ISR empty and the member in the ELR; a broker
that comes back from an unclean shutdown is dropped from the ELR, so the controller elects it from the last known
ELR and marks the partition's leader recovery state RECOVERING, its own mark of an unclean election. zkledger
reports that election as UNCLEAN_LEADER_ELECTION, as it does the out-of-sync follower's."""

DEMO = ("create", "controller-failover", "offline-partition", "unclean-election")
