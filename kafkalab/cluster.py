"""A ZooKeeper-mode Kafka cluster of real brokers, each a JVM process started from a pinned jar set.

The jars come from ``jvm/kafka-<line>/pom.xml`` (installed into ``.jvm/kafka-<line>/`` by ``make jars``; offline
after). Every broker gets its own ``server.properties`` and ``log4j.properties`` under ``<base>/broker-N/`` and
writes ``server.log``, ``controller.log`` and ``state-change.log`` into ``<base>/logs/broker-N/`` with the
loggers and levels of Kafka's shipped ``config/log4j.properties`` (controller at TRACE, state changes at
INFO). Heaps are small and timeouts short so three brokers, ZooKeeper and Spark share two cores.

    with KafkaCluster("3.9", zk.hosts, "/lab", tmp / "kafka") as cluster:
        cluster.controller()          # id in /controller
        cluster.kill(2)               # SIGKILL; cluster.stop_broker(2) is a controlled shutdown
        cluster.start_broker(2)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from services.errors import UserError
from services.jvm import class_data_options, installed_jars
from services.zookeeper import HOST, find_java, free_port

MAIN_CLASS = "kafka.Kafka"
LOG_FILES = ("server.log", "controller.log", "state-change.log")


@dataclass(frozen=True)
class KafkaLine:
    """One Kafka release line the lab can run: its jar set and what its controller does with stale epochs."""

    name: str
    version: str
    jar_set: str
    fences_zk_writes: bool  # the controller's ZooKeeper writes check /controller_epoch's version (2.1+)
    admin_elections: bool  # ElectLeaders (2.2+); older lines use /admin/preferred_replica_election
    admin_reassignments: bool  # AlterPartitionReassignments (2.4+); older lines use /admin/reassign_partitions
    # CreateTopics with an explicit assignment (2.4+, KIP-464); older lines get the assignment written to
    # ZooKeeper, as their `kafka-topics --zookeeper` did
    admin_assignments: bool
    # How the line's brokers answer Metadata, for the ground truth:
    # before 2.7 a leader's ISR change reaches the controller, and so every broker's cache, through
    # /isr_change_notification, which brokers batch: at most every 5 s, at least every 60 s (ReplicaManager)
    isr_via_notifications: bool
    # 2.8+ report a leaderless partition's leader epoch and ISR; 2.1 answers epoch -1 and an empty ISR
    leaderless_detail: bool
    # the level of state.change.logger in the line's shipped config/log4j.properties: older lines shipped TRACE,
    # where the state machines' steps are logged
    state_change_level: str


LINES: dict[str, KafkaLine] = {
    "3.9": KafkaLine("3.9", "3.9.1", "kafka-3.9", True, True, True, True, False, True, "INFO"),
    "2.8": KafkaLine("2.8", "2.8.2", "kafka-2.8", True, True, True, True, False, True, "INFO"),
    "2.1": KafkaLine("2.1", "2.1.1", "kafka-2.1", True, False, False, False, True, False, "TRACE"),
}
"""The lines with a pinned jar set, newest first. `kafka_line` gives a clear error for any other."""


def kafka_line(name: str) -> KafkaLine:
    if name not in LINES:
        raise UserError(f"unknown Kafka line {name!r}; the lab runs {', '.join(LINES)}")
    return LINES[name]


def failure_reason(home: Path, log_dir: Path) -> str:
    """Why a Kafka node that died on its own died, from its stdout and server.log: the root cause of a fatal
    error when it has one (Kafka logs harmless ERROR lines at start-up too), else the first error line."""
    lines: list[str] = []
    for path in (home / "stdout.log", log_dir / "server.log"):
        with contextlib.suppress(OSError):
            lines += path.read_text(errors="replace").splitlines()
    causes = [ln for ln in lines if ln.startswith("Caused by:")]
    errors = [ln for ln in lines if "ERROR" in ln or "Exception" in ln or "Error:" in ln]
    return (causes[-1] if causes else errors[0] if errors else f"see {home}/stdout.log").strip()[:400]


# Loggers, appenders and levels as in Kafka's shipped config/log4j.properties: controller.log takes
# kafka.controller at TRACE, state-change.log takes state.change.logger at INFO, the rest goes to server.log.
BROKER_LOG4J = """\
log4j.rootLogger=INFO, kafkaAppender
log4j.appender.kafkaAppender=org.apache.log4j.FileAppender
log4j.appender.kafkaAppender.File=${kafka.logs.dir}/server.log
log4j.appender.kafkaAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.kafkaAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stateChangeAppender=org.apache.log4j.FileAppender
log4j.appender.stateChangeAppender.File=${kafka.logs.dir}/state-change.log
log4j.appender.stateChangeAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.stateChangeAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.controllerAppender=org.apache.log4j.FileAppender
log4j.appender.controllerAppender.File=${kafka.logs.dir}/controller.log
log4j.appender.controllerAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.controllerAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=INFO
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.log.LogCleaner=INFO
log4j.logger.kafka.controller=TRACE, controllerAppender
log4j.additivity.kafka.controller=false
log4j.logger.state.change.logger={state_change_level}, stateChangeAppender
log4j.additivity.state.change.logger=false
"""

# Short timeouts so failures are noticed within seconds; one of everything so the brokers stay light.
_BROKER_DEFAULTS: dict[str, str] = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.replica.fetchers": "1",
    "num.recovery.threads.per.data.dir": "1",
    "log.segment.bytes": str(8 * 1024 * 1024),
    "log.index.size.max.bytes": str(1024 * 1024),
    "zookeeper.session.timeout.ms": "6000",
    "zookeeper.connection.timeout.ms": "15000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.socket.timeout.ms": "4000",
    "controller.socket.timeout.ms": "4000",
    "controlled.shutdown.enable": "true",
    "controlled.shutdown.max.retries": "2",
    "controlled.shutdown.retry.backoff.ms": "500",
    "auto.leader.rebalance.enable": "false",  # preferred elections happen only when a scenario asks
    "delete.topic.enable": "true",
    "auto.create.topics.enable": "false",
    "unclean.leader.election.enable": "false",
    "leader.imbalance.check.interval.seconds": "3600",
}

BROKER_JVM_OPTS = ("-Xmx320m", "-Xms64m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   "-XX:MaxDirectMemorySize=128m", "-Djava.awt.headless=true")


def die_with_parent(sig: signal.Signals) -> Callable[[], None]:
    """A `preexec_fn` asking Linux to send `sig` to the child when its parent dies (no orphans after a killed
    test run); a no-op where prctl is not available."""
    def arm() -> None:
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
    return arm


@dataclass
class Broker:
    broker_id: int
    port: int
    home: Path  # broker-N/: server.properties, log4j.properties, data/
    log_dir: Path  # logs/broker-N/: server.log, controller.log, state-change.log
    proc: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # SIGSTOPped

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class KafkaCluster:
    """`size` brokers (ids 1..size) of one Kafka line on ZooKeeper `zk_hosts` under `chroot`."""

    line: str
    zk_hosts: str
    chroot: str
    base: Path
    size: int = 3
    overrides: Mapping[str, str] = field(default_factory=dict)
    start_timeout_s: float = 90.0
    die_with_parent: bool = True  # brokers get SIGKILL when this process dies (`kafka-lab start` turns it off)
    archive_classes_to: Path | None = None  # broker 1 writes the classes it loaded here as it exits
    brokers: dict[int, Broker] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kline = kafka_line(self.line)
        if not self.chroot.startswith("/") or self.chroot == "/":
            raise UserError(f"the cluster needs its own ZooKeeper chroot like /kafka, got {self.chroot!r}")
        self.base = Path(self.base).absolute()
        self.classpath = ":".join(str(p) for p in installed_jars(self.kline.jar_set))
        for bid in range(1, self.size + 1):
            self.brokers[bid] = Broker(bid, free_port(), self.base / f"broker-{bid}", self.base / "logs" / f"broker-{bid}")

    # -- lifecycle ----------------------------------------------------------------------------------------------
    @property
    def logs_root(self) -> Path:
        """The folder holding one `broker-N/` log folder per broker (what `collect logs --path` reads)."""
        return self.base / "logs"

    @property
    def bootstrap(self) -> list[str]:
        return [b.address for b in self.brokers.values()]

    def start(self) -> KafkaCluster:
        self._ensure_chroot()
        for bid in self.brokers:
            self.start_broker(bid, wait=False)
        for bid in self.brokers:
            self.wait_registered(bid)
        self.wait_for(lambda: self.controller() is not None, "a controller to be elected")
        return self

    def stop(self) -> None:
        """Stop every broker (SIGCONT first for a stopped one), SIGKILL whatever does not exit."""
        for broker in self.brokers.values():
            if broker.stopped and broker.running:
                self.resume(broker.broker_id)
        for broker in self.brokers.values():
            if broker.running:
                self._signal(broker, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for broker in self.brokers.values():
            self._wait_exit(broker, max(0.1, deadline - time.monotonic()))

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start_broker(self, broker_id: int, *, wait: bool = True) -> None:
        broker = self.brokers[broker_id]
        if broker.running:
            raise UserError(f"broker {broker_id} is already running")
        broker.home.mkdir(parents=True, exist_ok=True)
        broker.log_dir.mkdir(parents=True, exist_ok=True)
        props = broker.home / "server.properties"
        props.write_text(self._server_properties(broker))
        (broker.home / "log4j.properties").write_text(BROKER_LOG4J.replace("{state_change_level}", self.kline.state_change_level))
        archive_to = self.archive_classes_to if broker_id == 1 else None
        cmd = [find_java(), *BROKER_JVM_OPTS, *class_data_options(self.kline.jar_set, archive_to),
               f"-Dkafka.logs.dir={broker.log_dir}",
               f"-Dlog4j.configuration=file:{broker.home / 'log4j.properties'}",
               "-cp", self.classpath, MAIN_CLASS, str(props)]
        with (broker.home / "stdout.log").open("ab") as out:
            broker.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                           cwd=broker.home, start_new_session=True,
                                           preexec_fn=die_with_parent(signal.SIGKILL) if self.die_with_parent else None)
        broker.stopped = False
        if wait:
            self.wait_registered(broker_id)

    def stop_broker(self, broker_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM: Kafka's shutdown hook runs a controlled shutdown (leaders moved away first)."""
        broker = self.brokers[broker_id]
        self._signal(broker, signal.SIGTERM)
        if not self._wait_exit(broker, timeout_s):
            raise UserError(f"broker {broker_id} did not shut down within {timeout_s:.0f}s")

    def kill(self, broker_id: int) -> None:
        """SIGKILL: no controlled shutdown; ZooKeeper notices when the session times out."""
        broker = self.brokers[broker_id]
        self._signal(broker, signal.SIGKILL)
        self._wait_exit(broker, 30)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the whole JVM: it keeps its sockets but stops heart-beating to ZooKeeper."""
        broker = self.brokers[broker_id]
        self._signal(broker, signal.SIGSTOP)
        broker.stopped = True

    def resume(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        self._signal(broker, signal.SIGCONT)
        broker.stopped = False

    # -- ZooKeeper view -----------------------------------------------------------------------------------------
    def zk_get(self, path: str) -> dict[str, Any] | None:
        """The JSON payload of `<chroot><path>`, or None when the znode does not exist."""
        from kazoo.exceptions import NoNodeError

        with self._kazoo() as zk:
            try:
                data, _ = zk.get(self.chroot + path)
            except NoNodeError:  # e.g. /controller between a controller's death and the next election
                return None
        return json.loads(data) if data else None

    def zk_create(self, path: str, payload: Mapping[str, Any]) -> None:
        with self._kazoo() as zk:
            zk.create(self.chroot + path, json.dumps(payload).encode(), makepath=True)

    def zk_children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        with self._kazoo() as zk:
            try:
                return list(zk.get_children(self.chroot + path))
            except NoNodeError:
                return []

    def controller(self) -> int | None:
        payload = self.zk_get("/controller")
        return None if payload is None else int(payload["brokerid"])

    def registered(self) -> set[int]:
        return {int(c) for c in self.zk_children("/brokers/ids")}

    def wait_registered(self, broker_id: int) -> None:
        """Registered in ZooKeeper and accepting connections: a broker registers before it opens its listener,
        so a client told about it by the metadata could otherwise be refused."""
        broker = self.brokers[broker_id]

        def up() -> bool:
            if not broker.running:
                raise UserError(f"broker {broker_id} exited during start-up: {self.failure_reason(broker_id)}")
            return broker_id in self.registered() and self.accepts_connections(broker_id)

        self.wait_for(up, f"broker {broker_id} to register and listen", self.start_timeout_s)

    def accepts_connections(self, broker_id: int) -> bool:
        broker = self.brokers[broker_id]
        try:
            with socket.create_connection((HOST, broker.port), timeout=1.0):
                return True
        except OSError:
            return False

    def wait_for(self, check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise UserError(f"timed out after {timeout_s:.0f}s waiting for {what}")

    def failure_reason(self, broker_id: int) -> str:
        broker = self.brokers[broker_id]
        return failure_reason(broker.home, broker.log_dir)

    # -- internals ----------------------------------------------------------------------------------------------
    def _server_properties(self, broker: Broker) -> str:
        props = {
            **_BROKER_DEFAULTS,
            "broker.id": str(broker.broker_id),
            "listeners": f"PLAINTEXT://{broker.address}",
            "advertised.listeners": f"PLAINTEXT://{broker.address}",
            "log.dirs": str(broker.home / "data"),
            "zookeeper.connect": self.zk_hosts + self.chroot,
            **self.overrides,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _ensure_chroot(self) -> None:
        with self._kazoo() as zk:
            zk.ensure_path(self.chroot)

    def _kazoo(self) -> contextlib.AbstractContextManager[Any]:
        return kazoo_session(self.zk_hosts)

    @staticmethod
    def _signal(broker: Broker, sig: signal.Signals) -> None:
        signal_group(broker.proc, sig)

    @staticmethod
    def _wait_exit(broker: Broker, timeout_s: float) -> bool:
        return wait_or_kill(broker.proc, timeout_s)


@contextlib.contextmanager
def kazoo_session(hosts: str) -> Iterator[Any]:
    """A plain kazoo client on ``hosts`` (host:port[/chroot]), closed on exit: a session that is not Kafka's."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=15)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def signal_group(proc: subprocess.Popen[bytes] | None, sig: signal.Signals) -> None:
    """``sig`` to a started JVM's process group (each node runs in a session of its own), if it still runs."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def wait_or_kill(proc: subprocess.Popen[bytes] | None, timeout_s: float) -> bool:
    """Wait for ``proc`` to exit; after ``timeout_s`` SIGKILL its group. True when it exited by itself."""
    if proc is None:
        return True
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return False
    return True
