"""Scenarios on a real cluster: routine operations and injected faults, each recorded as a timed phase.

A `Lab` is one cluster with the ground-truth recorder running; each scenario function drives it and returns the
`Phase` it produced (its time window, the topics it touched, whether it is routine or a fault). Scenarios leave
the cluster whole (every broker up, every ISR full), so one cluster serves them all in sequence.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kafkalab.cluster import KafkaCluster
from kafkalab.truth import NO_LEADER, GroundTruthRecorder, PartitionView, admin_client
from services.errors import UserError

ROUTINE = "routine"
FAULT = "fault"


@dataclass
class Phase:
    name: str
    kind: str  # ROUTINE or FAULT
    start: datetime
    end: datetime | None = None
    topics: set[str] = field(default_factory=set)
    notes: dict[str, Any] = field(default_factory=dict)  # what the scenario did: broker ids, controllers


@dataclass
class Lab:
    cluster: KafkaCluster
    recorder: GroundTruthRecorder
    phases: list[Phase] = field(default_factory=list)
    wait_s: float = 90.0

    # -- helpers the scenarios share ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str, kind: str, *topics: str) -> Iterator[Phase]:
        ph = Phase(name, kind, datetime.now(UTC), topics=set(topics))
        self.phases.append(ph)
        yield ph
        ph.end = datetime.now(UTC)

    def admin(self) -> Any:
        return admin_client(self.cluster.bootstrap, request_timeout_ms=15000)

    def view(self) -> dict[tuple[str, int], PartitionView]:
        """Kafka's answer asked now (not from the recorder), so a wait sees the freshest state."""
        sample = self.recorder.sample_once()
        return sample.partitions if sample is not None else {}

    def wait_until(self, check: Callable[[dict[tuple[str, int], PartitionView]], bool], what: str,
                   timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.wait_s)
        while time.monotonic() < deadline:
            if check(self.view()):
                return
            time.sleep(0.3)
        raise UserError(f"timed out waiting for {what}; last view: {self.view()}")

    def wait_healthy(self, topics: set[str] | None = None) -> None:
        """Every partition (of `topics`) led and with its full ISR, as Kafka reports it."""
        def ok(view: dict[tuple[str, int], PartitionView]) -> bool:
            parts = [v for k, v in view.items() if topics is None or k[0] in topics]
            return bool(parts) and all(v.leader != NO_LEADER and set(v.isr) == set(v.replicas) for v in parts)

        self.wait_until(ok, f"full ISRs{'' if topics is None else ' of ' + ', '.join(sorted(topics))}")

    def wait_topics(self, present: set[str], absent: frozenset[str] | set[str] = frozenset()) -> None:
        def ok(view: dict[tuple[str, int], PartitionView]) -> bool:
            names = {k[0] for k in view}
            zk_gone = all(not self.cluster.zk_children(f"/brokers/topics/{t}") for t in absent)
            return present <= names and not (absent & names) and zk_gone

        self.wait_until(ok, f"topics {sorted(present)} present and {sorted(absent)} gone")

    def controller(self) -> int:
        ctl = self.cluster.controller()
        if ctl is None:
            self.cluster.wait_for(lambda: self.cluster.controller() is not None, "a controller")
            ctl = self.cluster.controller()
        assert ctl is not None
        return ctl

    def wait_new_controller(self, old: int, timeout_s: float = 60.0) -> int:
        self.cluster.wait_for(lambda: self.cluster.controller() not in (None, old),
                              f"a controller other than {old}", timeout_s)
        return self.controller()

    def wait_deregistered(self, broker_id: int, timeout_s: float = 60.0) -> None:
        self.cluster.wait_for(lambda: broker_id not in self.cluster.registered(),
                              f"broker {broker_id}'s registration to go", timeout_s)

    def create_topics(self, topics: dict[str, dict[str, Any]]) -> None:
        by_zk = {} if self.cluster.kline.admin_assignments else {t: o for t, o in topics.items() if "assignments" in o}
        for topic, options in by_zk.items():  # AdminZkClient's order: the topic's config first, then its assignment
            self.cluster.zk_create(f"/config/topics/{topic}", {"version": 1, "config": options.get("configs", {})})
            self.cluster.zk_create(f"/brokers/topics/{topic}", {"version": 1, "partitions": {
                str(p): list(r) for p, r in options["assignments"].items()}})
        by_admin = {t: o for t, o in topics.items() if t not in by_zk}
        if by_admin:
            admin = self.admin()
            try:
                admin.create_topics(by_admin, timeout_ms=15000)
            finally:
                admin.close()
        self.wait_topics(set(topics))

    def delete_topics(self, topics: list[str]) -> None:
        admin = self.admin()
        try:
            admin.delete_topics(topics, timeout_ms=2000, raise_errors=False)
        finally:
            admin.close()

    def produce(self, topic: str, count: int = 200, acks: int | str = "all") -> int:
        """Send `count` small records; the number acknowledged."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.cluster.bootstrap, acks=acks, linger_ms=5, retries=5,
                                 request_timeout_ms=10000, client_id="kafkalab-producer")
        try:
            futures = [producer.send(topic, f"{topic}-{i}".encode(), partition=None) for i in range(count)]
            producer.flush(30)
            return sum(1 for f in futures if f.succeeded())
        finally:
            producer.close(5)

    def others(self, *exclude: int) -> list[int]:
        return [b for b in self.cluster.brokers if b not in exclude]


# -- routine operations ---------------------------------------------------------------------------------------
def create(lab: Lab) -> Phase:
    """Topics at RF 3 and RF 1, with data."""
    with lab.phase("create", ROUTINE, "rf3", "rf1") as ph:
        lab.create_topics({"rf3": {"num_partitions": 3, "replication_factor": 3},
                           "rf1": {"num_partitions": 3, "replication_factor": 1}})
        lab.wait_healthy({"rf3", "rf1"})
        ph.notes["produced"] = lab.produce("rf3") + lab.produce("rf1")
    return ph


def rolling_restart(lab: Lab) -> Phase:
    """Each broker in turn: controlled shutdown (SIGTERM), start again, wait for full ISRs; the controller last."""
    with lab.phase("rolling-restart", ROUTINE) as ph:
        ctl = lab.controller()
        order = [*lab.others(ctl), ctl]
        ph.notes["order"] = order
        for bid in order:
            lab.cluster.stop_broker(bid)
            lab.wait_deregistered(bid)
            lab.cluster.start_broker(bid)
            lab.wait_healthy()
    return ph


def preferred_election(lab: Lab) -> Phase:
    """Move every partition's leadership back to its preferred (first) replica."""
    with lab.phase("preferred-election", ROUTINE, "rf3") as ph:
        view = lab.view()
        moved = sorted(k for k, v in view.items() if v.replicas and v.leader != v.replicas[0])
        ph.notes["not_preferred_before"] = [f"{t}-{p}" for t, p in moved]
        if lab.cluster.kline.admin_elections and moved:
            from kafka.errors import KafkaError

            admin = lab.admin()
            try:
                admin.elect_leaders(0, {t: [p for tt, p in moved if tt == t] for t, _ in moved},
                                    timeout_ms=15000, raise_errors=False)
            except KafkaError as exc:  # the controller still carries it out; the wait below decides
                ph.notes["elect_error"] = type(exc).__name__
            finally:
                admin.close()
        elif moved:
            lab.cluster.zk_create("/admin/preferred_replica_election", {
                "version": 1, "partitions": [{"topic": t, "partition": p} for t, p in moved]})
        lab.wait_until(lambda v: all(x.leader == x.replicas[0] for x in v.values()), "preferred leaders")
    return ph


def reassignment(lab: Lab) -> Phase:
    """An RF 2 partition moved from two brokers to a different pair (data copied, old replica dropped)."""
    with lab.phase("reassignment", ROUTINE, "moving") as ph:
        a, b, c = sorted(lab.cluster.brokers)[:3]
        lab.create_topics({"moving": {"num_partitions": -1, "replication_factor": -1, "assignments": {0: [a, b]}}})
        lab.wait_healthy({"moving"})
        lab.produce("moving")
        target = [b, c]
        ph.notes["from"], ph.notes["to"] = [a, b], target
        if lab.cluster.kline.admin_reassignments:
            from kafka import TopicPartition

            admin = lab.admin()
            try:
                admin.alter_partition_reassignments({TopicPartition("moving", 0): target}, timeout_ms=15000)
            finally:
                admin.close()
        else:
            lab.cluster.zk_create("/admin/reassign_partitions", {
                "version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": target}]})
        lab.wait_until(lambda v: (m := v.get(("moving", 0))) is not None and m.replicas == tuple(target)
                       and set(m.isr) == set(target), "the reassignment to finish")
    return ph


def deletion(lab: Lab) -> Phase:
    """Delete topics with every broker up; then delete one while a replica's broker is down, and bring it back."""
    with lab.phase("deletion", ROUTINE, "rf1", "unclean", "doomed") as ph:
        gone = [t for t in ("rf1", "unclean") if any(k[0] == t for k in lab.view())]
        if gone:
            lab.delete_topics(gone)
            lab.wait_topics(set(), set(gone))
        lab.create_topics({"doomed": {"num_partitions": 2, "replication_factor": 3}})
        lab.wait_healthy({"doomed"})
        lab.produce("doomed", 50)
        down = lab.others(lab.controller())[0]
        ph.notes["down"] = down
        lab.cluster.stop_broker(down)
        lab.wait_deregistered(down)
        lab.delete_topics(["doomed"])
        time.sleep(3.0)  # the deletion waits for the broker that holds a replica
        ph.notes["pending_while_down"] = bool(lab.cluster.zk_children("/brokers/topics/doomed")
                                              or lab.cluster.zk_get("/brokers/topics/doomed") is not None)
        lab.cluster.start_broker(down)
        lab.wait_topics(set(), {"doomed"})
        lab.wait_healthy()
    return ph


# -- faults ---------------------------------------------------------------------------------------------------
def offline_partition(lab: Lab) -> Phase:
    """SIGKILL the only replica of an RF 1 partition (not the controller): the partition goes offline."""
    with lab.phase("offline-partition", FAULT, "rf1") as ph:
        ctl = lab.controller()
        view = lab.view()
        victim_key = next(k for k, v in sorted(view.items()) if k[0] == "rf1" and v.replicas[0] != ctl)
        victim = view[victim_key].replicas[0]
        ph.notes.update(broker=victim, partition=f"{victim_key[0]}-{victim_key[1]}")
        lab.cluster.kill(victim)
        lab.wait_until(lambda v: (x := v.get(victim_key)) is not None and x.leader == NO_LEADER,
                       f"{victim_key} offline")
        time.sleep(1.0)
        lab.cluster.start_broker(victim)
        lab.wait_healthy()
    return ph


def controller_failover(lab: Lab) -> Phase:
    """SIGKILL the active controller; another broker takes over once its ZooKeeper session expires."""
    with lab.phase("controller-failover", FAULT) as ph:
        old = lab.controller()
        lab.cluster.kill(old)
        new = lab.wait_new_controller(old)
        ph.notes.update(old=old, new=new)
        lab.cluster.start_broker(old)
        lab.wait_healthy()
    return ph


def zombie_controller(lab: Lab, pause_s: float | None = None) -> Phase:
    """SIGSTOP the active controller past its ZooKeeper session timeout, let another take over, then SIGCONT."""
    with lab.phase("zombie-controller", FAULT) as ph:
        old = lab.controller()
        lab.cluster.pause(old)
        new = lab.wait_new_controller(old)
        time.sleep(pause_s if pause_s is not None else 2.0)
        lab.cluster.resume(old)
        ph.notes.update(old=old, new=new)
        lab.cluster.wait_registered(old)
        lab.wait_healthy()
    return ph


def unclean_election(lab: Lab) -> Phase:
    """RF 2 topic with unclean.leader.election.enable: the follower stopped (ISR shrinks), data written, the
    leader SIGKILLed (offline), the out-of-sync follower brought back (elected uncleanly), the old leader back."""
    with lab.phase("unclean-election", FAULT, "unclean") as ph:
        ctl = lab.controller()
        leader, follower = lab.others(ctl)[:2]
        lab.create_topics({"unclean": {"num_partitions": -1, "replication_factor": -1,
                                       "assignments": {0: [leader, follower]},
                                       "configs": {"unclean.leader.election.enable": "true"}}})
        lab.wait_healthy({"unclean"})
        lab.produce("unclean", 50)
        lab.cluster.stop_broker(follower)
        lab.wait_until(lambda v: (x := v.get(("unclean", 0))) is not None and x.isr == (leader,), "the ISR to shrink to the leader")
        lab.produce("unclean", 50, acks=1)
        lab.cluster.kill(leader)
        lab.wait_until(lambda v: (x := v.get(("unclean", 0))) is not None and x.leader == NO_LEADER,
                       "the partition to go offline")
        lab.cluster.start_broker(follower)
        lab.wait_until(lambda v: (x := v.get(("unclean", 0))) is not None and x.leader == follower,
                       "the out-of-sync follower to lead")
        ph.notes.update(leader=leader, follower=follower)
        lab.cluster.start_broker(leader)
        lab.wait_healthy()
    return ph


SCENARIOS: dict[str, Callable[[Lab], Phase]] = {
    "create": create,
    "offline-partition": offline_partition,
    "controller-failover": controller_failover,
    "zombie-controller": zombie_controller,
    "unclean-election": unclean_election,
    "deletion": deletion,
    "rolling-restart": rolling_restart,
    "preferred-election": preferred_election,
    "reassignment": reassignment,
}
"""Every scenario in the order `run_all` plays them on one cluster (each relies only on `create` before it)."""

DEMO = ("create", "controller-failover", "zombie-controller")
