"""A real ZooKeeper -> KRaft migration (KIP-866) on Kafka 3.9, with zkledger's collectors recording it into one lake.

The documented procedure, step by step, each step waiting for Kafka's own signal before the next:

1. ZooKeeper (embedded) and three ZooKeeper-mode brokers (ids 1..3) of the 3.9 line; topics with some data.
2. A KRaft controller quorum (ids 3000.., one node by default) formatted with the ZooKeeper cluster's id (the
   ``/cluster/id`` znode) and started with ``zookeeper.metadata.migration.enable=true`` and ``zookeeper.connect``.
3. The brokers rolled one at a time into migration mode (the same flag, the quorum's voters and listener,
   ``inter.broker.protocol.version=3.9``); once every broker has registered with it, the quorum leader copies
   ZooKeeper's metadata into its log and enters dual-write (``wait_dual_write``).
4. ``during_dual_write`` actions (create, delete, reassign, an out-of-band znode write by a plain client).
5. The brokers rolled one at a time to KRaft mode (``process.roles=broker``, no ZooKeeper), then finalization:
   the controllers restarted without the migration flag and without ``zookeeper.connect``.

    with MigrationLab(tmp / "migration") as lab:    # ZooKeeper, collectors, brokers, topics
        lab.start_controllers()
        lab.roll_brokers(BrokerMode.MIGRATING)
        lab.wait_dual_write()
        lab.during_dual_write(lambda lab: lab.create_topic("fresh"))
        lab.roll_brokers(BrokerMode.KRAFT)
        lab.finalize()
    # on exit: collectors settled and stopped, brokers, controllers, ZooKeeper stopped
    Lake(lab.lake_root, cluster=lab.cluster_name)

Before finalization the documented revert ("Reverting to ZooKeeper mode During the Migration", Kafka 3.9's
ops.html, row "Migrating brokers to KRaft") is `rollback()`: the brokers rolled back to migration mode, the
controllers deprovisioned, ``/controller`` deleted so that a ZooKeeper broker is elected, the brokers rolled to
plain ZooKeeper mode. That row does not say to delete ``/migration`` (only the row for brokers still in migration
mode does, KAFKA-17146), so a later attempt (`start_next_attempt()`) finds it.

`kafkalab.migration_story.brokers_to_kraft` plays steps 2 to 5 up to the brokers on KRaft. Every log (brokers'
``logs/broker-N/``, controllers' ``logs/controller-N/``) is under ``logs_root``, which ``zkledger collect logs``
follows; ``collect txnlog`` follows ZooKeeper's data dir and ``collect kraft`` the first controller's
``__cluster_metadata-0``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any

from kafkalab.cluster import (
    BROKER_JVM_OPTS,
    BROKER_LOG4J,
    Broker,
    KafkaCluster,
    die_with_parent,
    kafka_line,
    kazoo_session,
)
from kafkalab.kraft import (
    KRaftCluster,
    KRaftLine,
    Node,
    admin_client_on,
)
from kafkalab.truth import NO_LEADER, GroundTruthRecorder, PartitionView, admin_client
from services.errors import UserError
from services.jvm import installed_jars
from services.zookeeper import HOST, EmbeddedZooKeeper, free_port

LINE = "3.9"
"""The last line with ZooKeeper mode and the one the migration is documented for."""
IBP = "3.9"
"""`inter.broker.protocol.version` the migrating brokers pin, as the documented procedure asks: the version the
brokers already run, set explicitly for the roll into migration mode."""
CONTROLLER_FIRST_ID = 3000
"""Controller node ids: apart from the broker ids 1..N, as in the docs' example (3000)."""
CONTROLLER_LISTENER = "CONTROLLER"
MIGRATION_ZNODE = "/migration"
CLUSTER_ID_ZNODE = "/cluster/id"
MIGRATION_FLAG = "zookeeper.metadata.migration.enable"
MIGRATION_DONE_LOG = "Completed migration of metadata from ZooKeeper to KRaft"
"""The quorum leader's server.log line when it has copied ZooKeeper's metadata into its log."""
DUAL_WRITE_LOG = "to DUAL_WRITE state"
"""The migration driver's server.log line when it starts writing every metadata change to ZooKeeper too."""
FINALIZED_LOG = "changing the migration state from MIGRATION to POST_MIGRATION"
"""The quorum leader's server.log line when, started without the flag, it finalizes the migration."""
STALE_IMAGE_LOG = "which does not contain a superset of the metadata in ZK"
"""The driver's server.log line when it has claimed ZooKeeper but its log is behind the offset ``/migration`` holds:
it skipped the load (the offset says it was done) and waits in SYNC_KRAFT_TO_ZK (KAFKA-17146)."""
CONTROLLER_ZNODE = "/controller"
UPDATE_METADATA_FROM = "in response to UpdateMetadata request sent by controller {controller} epoch"
"""A broker's state-change.log line when it has cached an UpdateMetadata from `controller`: after it, the broker
names that controller (a migrating broker still caching the KRaft controller waits, at its controlled shutdown, up
to five minutes for that controller's approval; its Metadata answer names a random live broker then, so it cannot
tell the two apart)."""
STARTED_LOG = "Kafka Server started"
DRIVER_LOGGER = "org.apache.kafka.metadata.migration"
"""The migration driver's logger: its lines name the driver's state and what it waits for."""
SETTLE_S = 2.0
"""Before the collectors stop: a txnlog / log collector polls every 0.2 s, kraft commits at most every second."""


def log_size(path: Path) -> int:
    """Where a log file ends now (0 before it exists), to read only what is logged after."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_since(path: Path, since: int) -> str:
    """A log file's text from byte offset `since` ("" before it exists)."""
    try:
        with path.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def warnings_since(logs: dict[int, tuple[Path, int]], per_log: int = 5) -> str:
    """The last WARN and ERROR lines of each node's log after its byte offset: node id -> (log, offset). What a
    failed wait leaves to explain it, since a lab's directory goes with the lab."""
    return last_lines_since(logs, lambda line: " WARN " in line or " ERROR " in line, per_log)


def last_lines_since(logs: dict[int, tuple[Path, int]], keep: Callable[[str], bool], per_log: int) -> str:
    """The last `per_log` lines `keep` accepts of each node's log after its byte offset, one clause per node."""
    said = []
    for node, (path, since) in logs.items():
        lines = [line for line in log_since(path, since).splitlines() if keep(line)]
        said.append(f"{node}: " + (" | ".join(lines[-per_log:]) or "none"))
    return "; ".join(said)


class BrokerMode(StrEnum):
    """How a broker of the migrating cluster is configured."""

    ZK = "zk"  # a plain ZooKeeper-mode broker
    MIGRATING = "migrating"  # ZooKeeper mode, registered with the KRaft quorum too (the migration flag)
    KRAFT = "kraft"  # process.roles=broker: metadata from the quorum only


KRAFT_3_9 = KRaftLine(LINE, kafka_line(LINE).version, kafka_line(LINE).jar_set)
"""The 3.9 jar set run as KRaft controllers (it logs with reload4j, not log4j2 as 4.x does)."""

# The controllers log as the 3.9 brokers do (Kafka's shipped config/log4j.properties): only `kafka.controller`
# goes to controller.log, so the quorum controller (org.apache.kafka.controller) and the migration driver
# (org.apache.kafka.metadata.migration), whose lines are the migration's signals, write to server.log.
_CONTROLLER_LOG4J = BROKER_LOG4J.replace("{state_change_level}", kafka_line(LINE).state_change_level)

_CONTROLLER_DEFAULTS: dict[str, str] = {
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.request.timeout.ms": "2000",
    "broker.session.timeout.ms": "6000",
    "zookeeper.session.timeout.ms": "6000",
    "zookeeper.connection.timeout.ms": "15000",
}


# -- the controllers ---------------------------------------------------------------------------------------------
@dataclass
class MigrationControllers(KRaftCluster):
    """The KRaft controller quorum of a migration: `size` controller-only 3.9 nodes (ids 3000..), started with
    the migration flag and ZooKeeper's address until `migrating` is turned off (finalization)."""

    zk_connect: str = ""  # host:port/chroot of the ZooKeeper cluster being migrated
    size: int = 1
    migrating: bool = True

    def __post_init__(self) -> None:
        if self.size not in (1, 3):
            raise UserError(f"a controller quorum of 1 or 3 nodes, not {self.size}")
        self.kline = KRAFT_3_9
        self.base = Path(self.base).absolute()
        self.classpath = ":".join(str(p) for p in installed_jars(self.kline.jar_set))
        for nid in range(CONTROLLER_FIRST_ID, CONTROLLER_FIRST_ID + self.size):
            self.nodes[nid] = Node(nid, ("controller",), self.base / f"controller-{nid}",
                                   self.base / "logs" / f"controller-{nid}", controller_port=free_port())

    def _jvm_options(self, node: Node) -> list[str]:
        """The 3.9 line logs through reload4j (the brokers' log4j.properties, rewritten with the config)."""
        return [*BROKER_JVM_OPTS, f"-Dlog4j.configuration=file:{node.home / 'log4j.properties'}"]

    def roll(self, timeout_s: float | None = None) -> None:
        """Restart the controllers one at a time with the current settings, each started again before the next
        goes down (so a three-node quorum keeps its majority)."""
        for nid in self.controller_ids:
            mark = self.server_log_size(nid)
            self.stop_node(nid)
            self.start_node(nid, wait=False)
            self.wait_logged(STARTED_LOG, f"controller {nid} to start again", [nid], mark, timeout_s)

    def server_log_size(self, node_id: int) -> int:
        """Where the node's server.log ends now, to read only what it logs after (the file is appended to)."""
        return log_size(self.nodes[node_id].log_dir / "server.log")

    def wait_logged(self, text: str, what: str, node_ids: list[int] | None = None, since: int | dict[int, int] = 0,
                    timeout_s: float | None = None) -> int:
        """Wait until one of `node_ids` (default: every controller) logs `text` in server.log after byte offset
        `since` (one for all, or one per node); the node that did."""
        ids = node_ids or self.controller_ids
        found: list[int] = []

        def logged() -> bool:
            self._check_alive()
            for nid in ids:
                start = since.get(nid, 0) if isinstance(since, dict) else since
                if text in self.server_log(nid, start):
                    found.append(nid)
                    return True
            return False

        try:
            self.wait_for(logged, what, timeout_s or self.start_timeout_s)
        except UserError as timed_out:
            logs = {nid: (self.nodes[nid].log_dir / "server.log",
                          since.get(nid, 0) if isinstance(since, dict) else since) for nid in ids}
            raise UserError(f"{timed_out}; the migration driver's last lines: "
                            f"{last_lines_since(logs, lambda line: DRIVER_LOGGER in line, 4)}; "
                            f"warnings: {warnings_since(logs)}") from None
        return found[-1]

    def server_log(self, node_id: int, since: int = 0) -> str:
        """The node's server.log from byte offset `since`."""
        return log_since(self.nodes[node_id].log_dir / "server.log", since)

    def _write_config(self, node: Node) -> Path:
        node.home.mkdir(parents=True, exist_ok=True)
        props = {
            **_CONTROLLER_DEFAULTS,
            "process.roles": "controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": self.voters(),
            "controller.listener.names": CONTROLLER_LISTENER,
            "listeners": f"{CONTROLLER_LISTENER}://{HOST}:{node.controller_port}",
            # the controller sends the ZooKeeper-mode brokers LeaderAndIsr/UpdateMetadata on their listener
            "listener.security.protocol.map": f"{CONTROLLER_LISTENER}:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.data_dir),
            "metadata.log.dir": str(node.data_dir),
            **self.overrides,
        }
        if self.migrating:
            props[MIGRATION_FLAG] = "true"
            props["zookeeper.connect"] = self.zk_connect
        path = node.home / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (node.home / "log4j.properties").write_text(_CONTROLLER_LOG4J)
        return path


# -- the brokers -------------------------------------------------------------------------------------------------
@dataclass
class MigratingKafkaCluster(KafkaCluster):
    """ZooKeeper-mode 3.9 brokers whose configuration follows each broker's `BrokerMode`; `voters` is the
    controller quorum's `controller.quorum.voters` once it exists."""

    voters: str = ""
    modes: dict[int, BrokerMode] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        for bid in self.brokers:
            self.modes.setdefault(bid, BrokerMode.ZK)

    def restart_as(self, broker_id: int, mode: BrokerMode, timeout_s: float | None = None) -> None:
        """Controlled shutdown, then a start in `mode`; returns when the broker serves again."""
        self.stop_broker(broker_id)
        self.modes[broker_id] = mode
        self.start_broker(broker_id, wait=False)
        self.wait_serving(broker_id, timeout_s)

    def wait_serving(self, broker_id: int, timeout_s: float | None = None) -> None:
        """A ZooKeeper-mode broker: registered in ZooKeeper and listening. A KRaft broker: listening and unfenced
        (it never registers in ZooKeeper)."""
        if self.modes[broker_id] is not BrokerMode.KRAFT:
            self.wait_registered(broker_id)
            return
        broker = self.brokers[broker_id]

        def up() -> bool:
            if not broker.running:
                raise UserError(f"broker {broker_id} exited during start-up: {self.failure_reason(broker_id)}")
            return self.accepts_connections(broker_id) and broker_id in self.unfenced_brokers()

        self.wait_for(up, f"KRaft broker {broker_id} to be unfenced", timeout_s or self.start_timeout_s)

    def unfenced_brokers(self) -> set[int]:
        """The brokers DescribeCluster lists as unfenced, asked of any running broker."""
        for broker in self.brokers.values():
            if not broker.running or not self.accepts_connections(broker.broker_id):
                continue
            with contextlib.suppress(Exception):
                admin = admin_client_on(broker.address)
                try:
                    listed = admin.describe_cluster()["brokers"]
                    return {int(b["broker_id"]) for b in listed if not b.get("is_fenced")}
                finally:
                    admin.close()
        return set()

    def _server_properties(self, broker: Broker) -> str:
        """The ZooKeeper-mode properties `KafkaCluster` writes, changed for the broker's mode."""
        props = dict(line.split("=", 1) for line in super()._server_properties(broker).splitlines())
        mode = self.modes.get(broker.broker_id, BrokerMode.ZK)
        if mode is BrokerMode.ZK:
            return "".join(f"{k}={v}\n" for k, v in props.items())
        if not self.voters:
            raise UserError(f"broker {broker.broker_id} cannot leave ZooKeeper mode before the controllers run")
        props.update({
            "controller.quorum.voters": self.voters,
            "controller.listener.names": CONTROLLER_LISTENER,
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,{CONTROLLER_LISTENER}:PLAINTEXT",
        })
        if mode is BrokerMode.MIGRATING:
            props.update({MIGRATION_FLAG: "true", "inter.broker.protocol.version": IBP})
        else:  # KRaft: the broker id becomes the node id, ZooKeeper is gone
            del props["broker.id"], props["zookeeper.connect"]
            props.update({"process.roles": "broker", "node.id": str(broker.broker_id),
                          "broker.heartbeat.interval.ms": "1000"})
        props.update(self.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())


# -- the lab -----------------------------------------------------------------------------------------------------
TOPICS_BEFORE: dict[str, dict[str, Any]] = {
    "orders": {"num_partitions": 3, "replication_factor": 3},
    "payments": {"num_partitions": 2, "replication_factor": 2},
    "doomed": {"num_partitions": 1, "replication_factor": 2},
    "moving": {"num_partitions": -1, "replication_factor": -1, "assignments": {0: [1, 2]}},
}
"""Created in ZooKeeper mode; `doomed` and `moving` are there for the deletion and the reassignment."""


@dataclass
class Step:
    """A step of the procedure and when it ran (epoch seconds), so a history can be cut by step."""

    name: str
    start: float
    end: float | None = None


@dataclass
class MigrationLab:
    """One migration under `work_dir`: `zookeeper/` (unless `zk` is given), `kafka/` (brokers, `logs/`),
    `controllers/`, the collectors' lake (`lake_root`: relative, under `work_dir`), the collectors' output in
    `collect-<name>.log`."""

    work_dir: Path
    controllers_size: int = 1
    brokers_size: int = 3
    cluster_name: str = "migration-3.9"
    zk: EmbeddedZooKeeper | None = None
    topics: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: dict(TOPICS_BEFORE))
    produce_count: int = 100
    wait_s: float = 120.0
    out: Any = None  # a text stream for progress lines
    steps: list[Step] = field(default_factory=list)
    collectors: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    collector_codes: dict[str, int] = field(default_factory=dict)
    lake_root: Path = Path("lake")

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir).absolute()
        if (self.work_dir / "kafka").exists():
            raise UserError(f"{self.work_dir} already holds a migration lab; use a fresh directory")
        self.owns_zk = self.zk is None
        self.chroot = f"/migration-{uuid.uuid4().hex[:8]}"
        self.lake_root = self.work_dir / self.lake_root  # an absolute lake_root stays itself
        self.cluster_id: str | None = None
        self.kafka: MigratingKafkaCluster | None = None
        self.controllers: MigrationControllers | None = None

    # -- paths and names --------------------------------------------------------------------------------------
    @property
    def zookeeper(self) -> EmbeddedZooKeeper:
        if self.zk is None:
            raise UserError("the lab's ZooKeeper is not started")
        return self.zk

    @property
    def zk_data_dir(self) -> Path:
        """ZooKeeper's data dir: `version-2/log.*` is its transaction log."""
        return Path(self.zookeeper.data_dir)

    @property
    def logs_root(self) -> Path:
        """`broker-N/` and `controller-N/` folders of server.log, controller.log, state-change.log."""
        return self.work_dir / "kafka" / "logs"

    def broker_log_dir(self, broker_id: int) -> Path:
        return self.logs_root / f"broker-{broker_id}"

    def controller_log_dir(self, node_id: int) -> Path:
        return self.logs_root / f"controller-{node_id}"

    @property
    def controller_ids(self) -> list[int]:
        return list(range(CONTROLLER_FIRST_ID, CONTROLLER_FIRST_ID + self.controllers_size))

    def metadata_log_dir(self, node_id: int = CONTROLLER_FIRST_ID) -> Path:
        """A controller's `__cluster_metadata-0` (segments, snapshots, quorum-state)."""
        return self.quorum.metadata_log_dir(node_id)

    @property
    def cluster(self) -> MigratingKafkaCluster:
        if self.kafka is None:
            raise UserError("the lab's brokers are not started")
        return self.kafka

    @property
    def quorum(self) -> MigrationControllers:
        if self.controllers is None:
            raise UserError("the lab's controllers are not started")
        return self.controllers

    def _say(self, text: str) -> None:
        if self.out is not None:
            print(f"[migration {time.strftime('%H:%M:%S')}] {text}", file=self.out, flush=True)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[Step]:
        st = Step(name, time.time())
        self.steps.append(st)
        t0 = time.monotonic()
        yield st
        st.end = time.time()
        self._say(f"{name}: {time.monotonic() - t0:.1f}s")

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> MigrationLab:
        """ZooKeeper, the txnlog and logs collectors, the ZooKeeper-mode brokers and the topics."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            with self.step("zookeeper-mode"):
                if self.zk is None:
                    self.zk = EmbeddedZooKeeper(self.work_dir / "zookeeper").start()
                self._ensure_chroot()
                self.kafka = MigratingKafkaCluster(LINE, self.zookeeper.hosts, self.chroot, self.work_dir / "kafka",
                                                   size=self.brokers_size)
                self.controllers = MigrationControllers(self.work_dir / "kafka", line=LINE, size=self.controllers_size,
                                                        zk_connect=self.zookeeper.hosts + self.chroot)
                self.logs_root.mkdir(parents=True, exist_ok=True)
                self._start_collector("txnlog", ["txnlog", "--dir", str(self.zk_data_dir), "--follow",
                                                 "--chroot", self.chroot])
                self._start_collector("logs", ["logs", "--path", str(self.logs_root), "--follow"])
                self.cluster.start()
                self.create_topics(self.topics)
                for topic in self.topics:
                    self.produce(topic, self.produce_count)
                self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def start_controllers(self) -> None:
        """Format with ZooKeeper's cluster id and start the quorum in migration mode; collect its metadata log."""
        with self.step("controllers"):
            self.cluster_id = self.zk_cluster_id()
            self.quorum.cluster_id = self.cluster_id
            self.cluster.voters = self.quorum.voters()
            for nid in self.quorum.controller_ids:
                self.quorum.start_node(nid, wait=False)
            leader, epoch = self.quorum.wait_quorum_leader(timeout_s=self.wait_s)
            self._say(f"controller quorum up, leader {leader} (epoch {epoch}), cluster id {self.cluster_id}")
            self._start_collector("kraft", ["kraft", "--dir", str(self.metadata_log_dir()), "--follow"])

    def roll_brokers(self, mode: BrokerMode) -> None:
        """Restart the brokers one at a time in `mode`, each back and every ISR full before the next."""
        with self.step(f"roll-{mode}"):
            for bid in sorted(self.cluster.brokers):
                self.cluster.restart_as(bid, mode, self.wait_s)
                self.wait_healthy()
                self._say(f"broker {bid} restarted in {mode} mode")

    def wait_dual_write(self) -> dict[str, Any]:
        """Until the quorum leader has copied ZooKeeper's metadata and writes to both: its server.log says the
        driver moved to DUAL_WRITE, and `/migration` names it. The `/migration` payload then."""
        with self.step("migration"):
            self.quorum.wait_logged(MIGRATION_DONE_LOG, "the controller to copy ZooKeeper's metadata",
                                    timeout_s=self.wait_s)
            leader = self.quorum.wait_logged(DUAL_WRITE_LOG, "the controller to migrate ZooKeeper's metadata and "
                                             "enter dual-write", timeout_s=self.wait_s)
            payload = self.zk_json(MIGRATION_ZNODE)
            if payload is None or payload.get("kraft_controller_id") != leader:
                raise UserError(f"controller {leader} is in dual-write but {MIGRATION_ZNODE} reads {payload}")
            self._say(f"dual-write: {MIGRATION_ZNODE} = {payload}")
            return payload

    def during_dual_write(self, actions: Callable[[MigrationLab], None]) -> None:
        with self.step("dual-write"):
            actions(self)

    def finalize(self) -> None:
        """Restart the controllers without the migration flag and without ZooKeeper; wait for a leader."""
        with self.step("finalize"):
            marks = {nid: self.quorum.server_log_size(nid) for nid in self.quorum.controller_ids}
            self.quorum.migrating = False
            self.quorum.roll(self.wait_s)
            leader = self.quorum.wait_logged(FINALIZED_LOG, "the controller to finalize the migration",
                                             since=marks, timeout_s=self.wait_s)
            self._say(f"controller {leader} finalized the migration (POST_MIGRATION)")
            self.wait_healthy()

    # -- the documented revert, before finalization ----------------------------------------------------------------
    def rollback(self) -> int:
        """Kafka 3.9's revert after "Migrating brokers to KRaft" (ops.html, "Reverting to ZooKeeper mode During
        the Migration"): the brokers rolled back to ZooKeeper mode with the migration flag still on (they register
        in ZooKeeper again and with the quorum as ZooKeeper brokers), the controllers deprovisioned, ``/controller``
        deleted so that a broker is elected, the brokers rolled to plain ZooKeeper mode. ``/migration`` stays, as
        that row of the docs leaves it. The ZooKeeper broker elected controller."""
        if not self.quorum.migrating:
            raise UserError("the migration is finalized: Kafka has no way back to ZooKeeper mode")
        self.roll_brokers(BrokerMode.MIGRATING)
        self.deprovision_controllers()
        elected = self.elect_zk_controller()
        self.roll_brokers(BrokerMode.ZK)
        return elected

    def deprovision_controllers(self) -> None:
        """Stop the controllers and delete their data (configuration, metadata log); the metadata log's collector
        stops first, after a settle, since the log it follows goes. Their server.log stays under ``logs_root``."""
        with self.step("deprovision"):
            self.stop_collector("kraft")
            self.quorum.stop()
            for nid in self.quorum.controller_ids:
                shutil.rmtree(self.quorum.nodes[nid].home, ignore_errors=True)

    def elect_zk_controller(self) -> int:
        """``rmr /controller`` from a plain ZooKeeper client, as the docs do with zookeeper-shell.sh; returns when a
        ZooKeeper broker holds ``/controller`` (``kraftControllerEpoch`` -1), every broker names it controller,
        and every partition is led. The elected broker."""
        from kazoo.exceptions import NoNodeError

        with self.step("zk-controller"):
            marks = {bid: log_size(self._state_change_log(bid)) for bid in self.cluster.brokers}
            with self.kazoo() as zk, contextlib.suppress(NoNodeError):
                zk.delete(CONTROLLER_ZNODE, recursive=True)
            elected: list[int] = []

            def zk_broker_leads() -> bool:
                payload = self.zk_json(CONTROLLER_ZNODE)
                if payload is None or self._kraft_claim(payload):
                    return False
                elected.append(int(payload["brokerid"]))
                return elected[-1] in self.cluster.brokers

            self.cluster.wait_for(zk_broker_leads, "a ZooKeeper broker to be elected controller", self.wait_s)
            self.wait_controller_known(elected[-1], marks)
            self.wait_healthy()
            self._say(f"broker {elected[-1]} elected controller in ZooKeeper")
            return elected[-1]

    def start_next_attempt(self) -> str:
        """A new migration attempt after `rollback`: the controllers formatted anew (their data was deleted) and
        started in migration mode, the brokers rolled into migration mode until the quorum leader claims
        ``/controller``. Not collected: the lake holds one metadata log per cluster, and a new log's offsets
        start at 0 again. Returns the driver's server.log line that tells how the attempt began: the load done
        (`MIGRATION_DONE_LOG`), or skipped because ``/migration`` still held the last attempt's offset
        (`STALE_IMAGE_LOG`)."""
        with self.step("next-attempt"):
            marks = {nid: self.quorum.server_log_size(nid) for nid in self.quorum.controller_ids}
            self.quorum.migrating = True
            for nid in self.quorum.controller_ids:
                self.quorum.start_node(nid, wait=False)
            self.quorum.wait_quorum_leader(timeout_s=self.wait_s)
            for bid in sorted(self.cluster.brokers):
                self.cluster.restart_as(bid, BrokerMode.MIGRATING, self.wait_s)
                self._say(f"broker {bid} restarted in {BrokerMode.MIGRATING} mode")

            def claimed() -> bool:
                payload = self.zk_json(CONTROLLER_ZNODE)
                return payload is not None and self._kraft_claim(payload)

            self.cluster.wait_for(claimed, "the new quorum to claim /controller", self.wait_s)
            found: list[str] = []

            def began() -> bool:
                found.extend(t for nid in self.quorum.controller_ids for t in (STALE_IMAGE_LOG, MIGRATION_DONE_LOG)
                             if t in self.quorum.server_log(nid, marks[nid]))
                return bool(found)

            self.quorum.wait_for(began, "the new attempt's controller to load ZooKeeper or skip it", self.wait_s)
            self._say(f"second attempt: {found[0]!r}")
            return found[0]

    def stop(self) -> None:
        """Collectors (after a settle, so they read the last writes), brokers, controllers, ZooKeeper."""
        try:
            self.stop_collectors()
        finally:
            try:
                if self.kafka is not None:
                    self.kafka.stop()
            finally:
                try:
                    if self.controllers is not None:
                        self.controllers.stop()
                finally:
                    if self.owns_zk and self.zk is not None:
                        self.zk.stop()

    def __enter__(self) -> MigrationLab:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- collectors ---------------------------------------------------------------------------------------------
    def collector_log(self, name: str) -> Path:
        return self.work_dir / f"collect-{name}.log"

    def collector_output(self, name: str) -> str:
        try:
            return self.collector_log(name).read_text(errors="replace")
        except OSError:
            return ""

    def _start_collector(self, name: str, args: list[str]) -> None:
        cmd = [sys.executable, "-m", "zkledger.cli", "--lake", str(self.lake_root), "--cluster", self.cluster_name,
               "collect", *args]
        with self.collector_log(name).open("ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                    preexec_fn=die_with_parent(signal.SIGTERM))
        self.collectors[name] = proc
        time.sleep(0.5)
        if proc.poll() is not None:
            raise UserError(f"collect {name} exited at start: {self.collector_output(name)[-400:]}")

    def stop_collector(self, name: str) -> int | None:
        """SIGTERM one collector after a settle and wait for its flush; its exit code (None: it was not running)."""
        proc = self.collectors.pop(name, None)
        if proc is None:
            return None
        time.sleep(SETTLE_S)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            self.collector_codes[name] = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.collector_codes[name] = proc.wait(10)
        return self.collector_codes[name]

    def stop_collectors(self) -> dict[str, int]:
        """SIGTERM each collector after a settle and wait for its flush; the exit codes by name."""
        if not self.collectors:
            return self.collector_codes
        time.sleep(SETTLE_S)
        for proc in self.collectors.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.collectors.items():
            try:
                self.collector_codes[name] = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                self.collector_codes[name] = proc.wait(10)
        self.collectors.clear()
        return self.collector_codes

    # -- ZooKeeper ----------------------------------------------------------------------------------------------
    def kazoo(self) -> contextlib.AbstractContextManager[Any]:
        """A plain ZooKeeper client on the cluster's chroot (an out-of-band writer: not Kafka's session)."""
        return kazoo_session(self.zookeeper.hosts + self.chroot)

    def zk_json(self, path: str) -> dict[str, Any] | None:
        """The JSON payload of `<chroot><path>`, None when the znode does not exist."""
        from kazoo.exceptions import NoNodeError

        with self.kazoo() as zk:
            try:
                data, _ = zk.get(path)
            except NoNodeError:
                return None
        return dict(json.loads(data)) if data else None

    @staticmethod
    def _kraft_claim(controller: Mapping[str, Any]) -> bool:
        """A ``/controller`` payload written by a KRaft controller: 3.4+ ZooKeeper brokers write
        ``kraftControllerEpoch`` -1, a KRaft controller its epoch."""
        return int(controller.get("kraftControllerEpoch", -1)) >= 0

    def zk_cluster_id(self) -> str:
        payload = self.zk_json(CLUSTER_ID_ZNODE)
        if payload is None or not payload.get("id"):
            raise UserError(f"no {CLUSTER_ID_ZNODE} under {self.chroot}: the ZooKeeper-mode brokers never ran")
        return str(payload["id"])

    def zk_write(self, path: str, payload: Mapping[str, Any]) -> int:
        """Set (or create) `path` to `payload` from a plain client, bypassing Kafka; the new znode version."""
        data = json.dumps(payload).encode()
        with self.kazoo() as zk:
            if zk.exists(path) is None:
                zk.create(path, data, makepath=True)
                return 0
            return int(zk.set(path, data).version)

    def _ensure_chroot(self) -> None:
        with kazoo_session(self.zookeeper.hosts) as zk:
            zk.ensure_path(self.chroot)

    # -- the cluster through clients ----------------------------------------------------------------------------
    def running_bootstrap(self) -> list[str]:
        return [b.address for b in self.cluster.brokers.values() if b.running]

    def admin(self) -> Any:
        return admin_client(self.running_bootstrap(), request_timeout_ms=15000)

    def view(self) -> dict[tuple[str, int], PartitionView]:
        """What every running broker agrees on now: (topic, partition) -> leader, ISR, replicas."""
        recorder = GroundTruthRecorder(self.running_bootstrap(), sorted(self.cluster.brokers))
        try:
            sample = recorder.sample_once()
        finally:
            recorder.stop()
        return sample.partitions if sample is not None else {}

    def wait_until(self, check: Callable[[dict[tuple[str, int], PartitionView]], bool], what: str) -> None:
        marks = {bid: log_size(self._server_log(bid)) for bid in self.cluster.brokers}
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            if check(self.view()):
                return
            time.sleep(0.3)
        raise UserError(f"timed out waiting for {what}; last view: {self.view()}; "
                        f"the brokers' warnings meanwhile: "
                        f"{warnings_since({bid: (self._server_log(bid), at) for bid, at in marks.items()})}")

    def _server_log(self, broker_id: int) -> Path:
        return self.cluster.brokers[broker_id].log_dir / "server.log"

    def wait_controller_known(self, controller: int, marks: dict[int, int]) -> None:
        """Until every broker's state-change.log, after its byte offset in `marks`, shows an UpdateMetadata from
        `controller` (`UPDATE_METADATA_FROM`)."""
        line = UPDATE_METADATA_FROM.format(controller=controller)

        def every_broker_cached_it() -> bool:
            return all(line in log_since(self._state_change_log(bid), since) for bid, since in marks.items())

        self.cluster.wait_for(every_broker_cached_it, f"every broker to name controller {controller}", self.wait_s)

    def _state_change_log(self, broker_id: int) -> Path:
        return self.cluster.brokers[broker_id].log_dir / "state-change.log"

    def wait_healthy(self) -> None:
        """Every partition led, its ISR full, as every running broker reports it."""
        def ok(view: dict[tuple[str, int], PartitionView]) -> bool:
            return bool(view) and all(v.leader != NO_LEADER and set(v.isr) == set(v.replicas) for v in view.values())

        self.wait_until(ok, "every partition led with a full ISR")

    def wait_topics(self, present: set[str], absent: set[str] | frozenset[str] = frozenset()) -> None:
        def ok(view: dict[tuple[str, int], PartitionView]) -> bool:
            names = {k[0] for k in view}
            return present <= names and not (absent & names)

        self.wait_until(ok, f"topics {sorted(present)} present and {sorted(absent)} gone")

    def create_topics(self, topics: Mapping[str, Mapping[str, Any]]) -> None:
        admin = self.admin()
        try:
            admin.create_topics({t: dict(o) for t, o in topics.items()}, timeout_ms=15000)
        finally:
            admin.close()
        self.wait_topics(set(topics))

    def create_topic(self, topic: str, partitions: int = 2, replication: int = 2) -> None:
        self.create_topics({topic: {"num_partitions": partitions, "replication_factor": replication}})

    def delete_topic(self, topic: str) -> None:
        admin = self.admin()
        try:
            admin.delete_topics([topic], timeout_ms=15000, raise_errors=False)
        finally:
            admin.close()
        self.wait_topics(set(), {topic})

    def reassign(self, topic: str, partition: int, target: list[int]) -> None:
        """AlterPartitionReassignments, then wait until the replicas are `target` and all in sync."""
        from kafka import TopicPartition

        admin = self.admin()
        try:
            admin.alter_partition_reassignments({TopicPartition(topic, partition): target}, timeout_ms=15000)
        finally:
            admin.close()
        self.wait_until(lambda v: (p := v.get((topic, partition))) is not None and p.replicas == tuple(target)
                        and set(p.isr) == set(target), f"{topic}-{partition} to move to {target}")

    def produce(self, topic: str, count: int = 100) -> int:
        """Send `count` small records; the number acknowledged."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.running_bootstrap(), acks="all", linger_ms=5, retries=5,
                                 request_timeout_ms=10000, client_id="kafkalab-producer")
        try:
            futures = [producer.send(topic, f"{topic}-{i}".encode()) for i in range(count)]
            producer.flush(30)
            return sum(1 for f in futures if f.succeeded())
        finally:
            producer.close(5)
