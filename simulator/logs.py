"""controller.log and state-change.log lines as Kafka of a given version writes them (docs/log-templates.md).

Layout `[%d] %p %m (%c)%n` (config/log4j.properties). Timestamps come from `SimClock`, a simulated clock
derived from the seed, so a seeded run writes byte-identical logs (wall-clock time is not used anywhere).
An exception attached to an ERROR record is written on the following line as `<class>: <message>`, the way
log4j prints a throwable after the message (stack frames are left out).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO

from models.states import parse_kafka_version

log = logging.getLogger(__name__)

CONTROLLER_LOGGER = "kafka.controller.KafkaController"
STATE_CHANGE_LOGGER = "state.change.logger"
SIM_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class SimClock:
    """The clock log lines are stamped with.

    ``wall=False`` (tests, reproducible runs): deterministic, starts at SIM_EPOCH + seed minutes and advances a
    few ms per tick, so the same seed writes byte-identical logs. ``wall=True`` (demo, CLI default): follows
    the real clock, like a real broker, so log timestamps line up with the times ZooKeeper stamps on its
    transactions (the pipelines correlate the two).
    """

    def __init__(self, seed: int, wall: bool = False) -> None:
        self._rng = random.Random(seed ^ 0x5EED)
        self.wall = wall
        self.now = datetime.now(UTC) if wall else SIM_EPOCH + timedelta(minutes=seed % 100_000)

    def tick(self, max_ms: int = 5) -> datetime:
        if self.wall:  # never go backwards, never repeat a millisecond
            self.now = max(datetime.now(UTC), self.now + timedelta(milliseconds=1))
            return self.now
        self.now += timedelta(milliseconds=1 + self._rng.randrange(max_ms))
        return self.now

    def advance(self, seconds: float) -> datetime:
        if self.wall:  # real time passes by itself
            return self.tick()
        self.now += timedelta(seconds=seconds)
        return self.now

    def ms(self) -> int:
        return int(self.now.timestamp() * 1000)


def format_ts(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S") + f",{ts.microsecond // 1000:03d}"


def tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def csv(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def scala_list(ids: Iterable[int]) -> str:
    return "List(" + ", ".join(str(i) for i in ids) + ")"


def scala_set(ids: Iterable[int]) -> str:
    return "Set(" + ", ".join(str(i) for i in sorted(ids)) + ")"


@dataclass
class BrokerLogs:
    """The two log files of one broker; opened lazily, appended to."""

    broker_id: int
    directory: Path | None
    clock: SimClock
    lines_written: int = 0
    _files: dict[str, TextIO] = field(default_factory=dict)

    def paths(self) -> list[Path]:
        if self.directory is None:
            return []
        return [self.directory / "controller.log", self.directory / "state-change.log"]

    def _write(self, name: str, level: str, message: str, logger: str, exc: str | None) -> None:
        if self.directory is None:
            return
        handle = self._files.get(name)
        if handle is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle = self._files[name] = (self.directory / name).open("a", encoding="utf-8")
        handle.write(f"[{format_ts(self.clock.tick())}] {level} {message} ({logger})\n")
        if exc is not None:
            handle.write(exc + "\n")
        self.lines_written += 1

    def controller(self, level: str, message: str, exc: str | None = None) -> None:
        self._write("controller.log", level, f"[Controller id={self.broker_id}] {message}", CONTROLLER_LOGGER, exc)

    def state_change(self, level: str, message: str, epoch: int | None = None, exc: str | None = None) -> None:
        # Controller-side records carry `[Controller id=N epoch=E] `, broker-side `[Broker id=N] ` (commit ae3eeb3).
        prefix = f"[Controller id={self.broker_id} epoch={epoch}] " if epoch is not None else f"[Broker id={self.broker_id}] "
        self._write("state-change.log", level, prefix + message, STATE_CHANGE_LOGGER, exc)

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


class Templates:
    """The message texts of one Kafka version."""

    def __init__(self, kafka_version: str) -> None:
        self.version = parse_kafka_version(kafka_version)

    # -- controller.log ---------------------------------------------------------------------------------
    def elected(self, broker_id: int, epoch: int, epoch_zk_version: int) -> list[str]:
        if self.version >= (2, 1):
            return [
                f"{broker_id} successfully elected as the controller. Epoch incremented to {epoch} "
                f"and epoch zk version is now {epoch_zk_version}"
            ]
        if self.version >= (1, 1):
            return [f"{broker_id} successfully elected as the controller", f"Epoch incremented to {epoch}"]
        return [f"{broker_id} successfully elected as the controller", f"Incremented epoch to {epoch}"]

    def failover_milestones(self, epoch: int) -> list[str]:
        """onControllerFailover's INFO lines (1.1+): four before the context is read, the rest after, then Ready.

        The context dumps that name live brokers and topics ("Initialized broker epochs cache: ...", "Currently
        active brokers ...") are left out: their contents are not known here, and a line Kafka never writes
        would be worse than a missing one.
        """
        replica_startup = ["Initializing replica state", "Triggering online replica state changes"]
        if self.version >= (2, 3):  # KAFKA-3143: offline replicas moved to OfflineReplica at startup
            replica_startup.append("Triggering offline replica state changes")
        return [
            "Registering handlers",
            "Deleting log dir event notifications",
            "Deleting isr change notifications",
            "Initializing controller context",
            "Fetching topic deletions in progress",
            "Initializing topic deletion manager",
            "Sending update metadata request",
            *replica_startup,
            "Initializing partition state",
            "Triggering online partition state changes",
            f"Ready to serve as the new controller with epoch {epoch}",
        ]

    def broker_change(self, added: Sequence[int], deleted: Sequence[int], bounced: Sequence[int], live: Sequence[int]) -> str:
        if self.version >= (2, 2):  # the `bounced` field exists from 2.2 (KIP-380)
            return (
                f"Newly added brokers: {csv(added)}, deleted brokers: {csv(deleted)}, "
                f"bounced brokers: {csv(bounced)}, all live brokers: {csv(sorted(live))}"
            )
        return f"Newly added brokers: {csv(added)}, deleted brokers: {csv(deleted)}, all live brokers: {csv(sorted(live))}"

    @staticmethod
    def controller_moved(event: str) -> str:
        return f"Controller moved to another broker when processing {event}."

    # -- state-change.log -------------------------------------------------------------------------------
    def partition_level(self, to_state: str) -> str:
        # KAFKA-8470 (2.6): New and Online at INFO, Offline/NonExistent stay TRACE.
        if self.version >= (2, 6) and to_state in ("NewPartition", "OnlinePartition"):
            return "INFO"
        return "TRACE"

    def leader_and_isr(self, leader: int, leader_epoch: int, isr: Sequence[int], zk_version: int, recovering: bool = False) -> str:
        lrs = "RECOVERING" if recovering else "RECOVERED"
        if self.version >= (3, 5):
            states = ", ".join(f"BrokerState(brokerId={b}, brokerEpoch=-1)" for b in isr)
            return (
                f"LeaderAndIsr(leader={leader}, leaderEpoch={leader_epoch}, isrWithBrokerEpoch=List({states}), "
                f"leaderRecoveryState={lrs}, partitionEpoch={zk_version})"
            )
        if self.version >= (3, 3):
            return (
                f"LeaderAndIsr(leader={leader}, leaderEpoch={leader_epoch}, isr={scala_list(isr)}, "
                f"leaderRecoveryState={lrs}, partitionEpoch={zk_version})"
            )
        if self.version >= (3, 2):
            return (
                f"LeaderAndIsr(leader={leader}, leaderEpoch={leader_epoch}, isr={scala_list(isr)}, "
                f"leaderRecoveryState={lrs}, zkVersion={zk_version})"
            )
        return f"LeaderAndIsr(leader={leader}, leaderEpoch={leader_epoch}, isr={scala_list(isr)}, zkVersion={zk_version})"

    @staticmethod
    def partition_new(topic: str, partition: int, replicas: Sequence[int]) -> str:
        return (
            f"Changed partition {tp(topic, partition)} state from NonExistentPartition to NewPartition "
            f"with assigned replicas {csv(replicas)}"
        )

    @staticmethod
    def partition_online(topic: str, partition: int, from_state: str, lai: str) -> str:
        return f"Changed partition {tp(topic, partition)} from {from_state} to OnlinePartition with state {lai}"

    @staticmethod
    def partition_changed(topic: str, partition: int, from_state: str, to_state: str) -> str:
        return f"Changed partition {tp(topic, partition)} state from {from_state} to {to_state}"

    @staticmethod
    def replica_changed(replica: int, topic: str, partition: int, from_state: str, to_state: str) -> str:
        return f"Changed state of replica {replica} for partition {tp(topic, partition)} from {from_state} to {to_state}"

    def partition_failed(self, controller_id: int, epoch: int, topic: str, partition: int, from_state: str, to_state: str) -> str:
        return (
            f"Controller {controller_id} epoch {epoch} failed to change state for partition "
            f"{tp(topic, partition)} from {from_state} to {to_state}"
        )

    @staticmethod
    def invalid_partition_transition(topic: str, partition: int, valid: Sequence[str], to_state: str, current: str) -> str:
        return (
            f"java.lang.IllegalStateException: Partition {tp(topic, partition)} should be in one of "
            f"{','.join(valid)} states before moving to {to_state} state. Instead it is in {current} state"
        )

    def replica_failed(self, controller_id: int, epoch: int, replica: int, topic: str, partition: int, from_state: str, to_state: str) -> str:
        return (
            f"Controller {controller_id} epoch {epoch} initiated state change of replica {replica} for partition "
            f"{tp(topic, partition)} from {from_state} to {to_state} failed"
        )

    @staticmethod
    def invalid_replica_transition(topic: str, partition: int, replica: int, valid: Sequence[str], to_state: str, current: str) -> str:
        return (
            f"java.lang.IllegalStateException: Replica [Topic={topic},Partition={partition},Replica={replica}] should be "
            f"in the {','.join(valid)} states before moving to {to_state} state. Instead it is in {current} state"
        )

    def election_strategy(self, name: str) -> str:
        return f"{name}(false)" if self.version >= (2, 4) and name == "OfflinePartitionLeaderElectionStrategy" else name

    def no_leader_cause(self, topic: str, partition: int, strategy: str) -> str:
        return (
            "kafka.common.StateChangeFailedException: Failed to elect leader for partition "
            f"{tp(topic, partition)} under strategy {self.election_strategy(strategy)}"
        )

    # requests ------------------------------------------------------------------------------------------
    @property
    def summarised_requests(self) -> bool:
        return self.version >= (2, 6)

    @staticmethod
    def lai_request_summary(broker: int, leaders: int, followers: int) -> str:
        return f"Sending LeaderAndIsr request to broker {broker} with {leaders} become-leader and {followers} become-follower partitions"

    @staticmethod
    def lai_request_partition(kind: str, state: str, broker: int, topic: str, partition: int) -> str:
        return f"Sending {kind} LeaderAndIsr request {state} to broker {broker} for partition {tp(topic, partition)}"

    @staticmethod
    def update_metadata_summary(brokers: Iterable[int], n: int) -> str:
        return f"Sending UpdateMetadata request to brokers {scala_set(brokers)} for {n} partitions"

    @staticmethod
    def broker_handling(correlation_id: int, controller_id: int, n: int) -> str:
        return f"Handling LeaderAndIsr request correlationId {correlation_id} from controller {controller_id} for {n} partitions"

    @staticmethod
    def stale_lai(controller_id: int, correlation_id: int, epoch: int, latest: int) -> str:
        return (
            f"Ignoring LeaderAndIsr request from controller {controller_id} with correlation id {correlation_id} "
            f"since its controller epoch {epoch} is old. Latest known controller epoch is {latest}"
        )
