"""A KRaft-mode Kafka cluster of real nodes, each a JVM process started from a pinned jar set, and Kafka's own
reader of the metadata log (`kafka.tools.DumpLogSegments --cluster-metadata-decoder`) to check ours against.

The jars come from ``jvm/kafka-<line>/pom.xml`` (installed into ``.jvm/kafka-<line>/`` by ``make jars``). By
default the cluster is three combined nodes (``process.roles=broker,controller``, ids 1..3, all three voters of
a static ``controller.quorum.voters``), which is the lightest real quorum on two cores; ``separate_controllers``
gives controllers 1..3 and brokers 4..6. Each node gets ``node-N/server.properties`` and
``node-N/log4j2.properties``, keeps its logs and metadata log in ``node-N/data`` (formatted once with Kafka's
storage tool) and writes ``server.log``, ``controller.log`` and ``state-change.log`` into ``logs/node-N/``.

    with KRaftCluster(tmp / "kraft", overrides=metadata_log_options()) as cluster:
        cluster.quorum_leader()       # from the nodes' quorum-state files
        cluster.kill(2)               # SIGKILL; cluster.stop_node(2) is a controlled shutdown
        cluster.start_node(2)
        records = dump_metadata_log(cluster.metadata_log_files(1))
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from kafkalab.cluster import die_with_parent, failure_reason, signal_group, wait_or_kill
from services.errors import UserError
from services.jvm import class_data_options, installed_jars
from services.zookeeper import HOST, find_java, free_port

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
DUMP_LOG_TOOL = "kafka.tools.DumpLogSegments"
METADATA_TOPIC_DIR = "__cluster_metadata-0"
LOG_FILES = ("server.log", "controller.log", "state-change.log")


@dataclass(frozen=True)
class KRaftLine:
    """One KRaft-only Kafka release line the lab can run (ZooKeeper-mode lines are `kafkalab.cluster.LINES`)."""

    name: str
    version: str
    jar_set: str


KRAFT_LINES: dict[str, KRaftLine] = {"4.1": KRaftLine("4.1", "4.1.1", "kafka-4.1")}
KRAFT_4_1 = KRAFT_LINES["4.1"]


def kraft_line(name: str) -> KRaftLine:
    if name not in KRAFT_LINES:
        raise UserError(f"unknown KRaft Kafka line {name!r}; the lab runs {', '.join(KRAFT_LINES)}")
    return KRAFT_LINES[name]


def metadata_log_options(*, segment_bytes: int = 16 * 1024, segment_ms: int | None = None,
                         snapshot_bytes: int = 8 * 1024, snapshot_interval_ms: int = 10_000,
                         retention_bytes: int | None = None, retention_ms: int | None = None) -> dict[str, str]:
    """Overrides that make a short run leave several metadata-log segments and snapshots (defaults: 1 GiB or
    7-day segments, a snapshot per 20 MiB or hour), and, with `retention_*`, delete the segments a snapshot
    covers.

    `metadata.log.segment.bytes` refuses less than 8 MiB; 4.1's testing-only
    `internal.metadata.log.segment.bytes` takes precedence and has no such floor. An idle cluster still
    appends a NoOpRecord every 500 ms (`metadata.max.idle.interval.ms`), so `segment_ms` rolls segments on
    time too."""
    opts = {
        "internal.metadata.log.segment.bytes": str(segment_bytes),
        "metadata.log.max.record.bytes.between.snapshots": str(snapshot_bytes),
        "metadata.log.max.snapshot.interval.ms": str(snapshot_interval_ms),
    }
    if segment_ms is not None:
        opts["metadata.log.segment.ms"] = str(segment_ms)
    if retention_bytes is not None:
        opts["metadata.max.retention.bytes"] = str(retention_bytes)
    if retention_ms is not None:
        opts["metadata.max.retention.ms"] = str(retention_ms)
    return opts


# The split of Kafka 4's shipped config/log4j2.yaml, as properties: the quorum controller's logger to
# controller.log, state.change.logger to state-change.log, requests at WARN, the rest to server.log. Plain
# (non-rolling) files and no console, since the lab reads whole files and stdout is kept only for crashes.
_LOG4J2 = """\
status = warn
property.pattern = [%d] %p %m (%c)%n
appender.server.type = File
appender.server.name = server
appender.server.fileName = ${sys:kafka.logs.dir}/server.log
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = ${pattern}
appender.stateChange.type = File
appender.stateChange.name = stateChange
appender.stateChange.fileName = ${sys:kafka.logs.dir}/state-change.log
appender.stateChange.layout.type = PatternLayout
appender.stateChange.layout.pattern = ${pattern}
appender.controller.type = File
appender.controller.name = controller
appender.controller.fileName = ${sys:kafka.logs.dir}/controller.log
appender.controller.layout.type = PatternLayout
appender.controller.layout.pattern = ${pattern}
rootLogger.level = info
rootLogger.appenderRef.server.ref = server
logger.kafka.name = kafka
logger.kafka.level = info
logger.apacheKafka.name = org.apache.kafka
logger.apacheKafka.level = info
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.requestChannel.name = kafka.network.RequestChannel$
logger.requestChannel.level = warn
logger.controller.name = org.apache.kafka.controller
logger.controller.level = info
logger.controller.additivity = false
logger.controller.appenderRef.controller.ref = controller
logger.stateChange.name = state.change.logger
logger.stateChange.level = info
logger.stateChange.additivity = false
logger.stateChange.appenderRef.stateChange.ref = stateChange
"""

# The tools print their results on stdout; their own logging only matters when it is a warning.
_TOOL_LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""

# Short timeouts so a killed node is fenced and a new quorum leader elected within seconds; few threads and
# small internal topics so six JVMs' worth of work fits two shared cores.
_NODE_DEFAULTS: dict[str, str] = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.replica.fetchers": "1",
    "num.recovery.threads.per.data.dir": "1",
    "log.segment.bytes": str(8 * 1024 * 1024),
    "log.index.size.max.bytes": str(1024 * 1024),
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.socket.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "1000",
    "broker.session.timeout.ms": "6000",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.request.timeout.ms": "2000",
    "controlled.shutdown.enable": "true",
    "auto.leader.rebalance.enable": "false",  # preferred elections happen only when a test asks
    "auto.create.topics.enable": "false",
    "unclean.leader.election.enable": "false",
    "leader.imbalance.check.interval.seconds": "3600",
}

_JVM_OPTS = ("-Xmx384m", "-Xms64m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-XX:MaxDirectMemorySize=128m", "-Djava.awt.headless=true")
_TOOL_JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")


def new_cluster_id() -> str:
    """A cluster id as `kafka-storage random-uuid` prints it: a random UUID in unpadded base64url."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass
class Node:
    node_id: int
    roles: tuple[str, ...]  # ("broker", "controller"), ("controller",) or ("broker",)
    home: Path  # node-N/: server.properties, log4j2.properties, stdout.log, data/
    log_dir: Path  # logs/node-N/: server.log, controller.log, state-change.log
    broker_port: int | None = None
    controller_port: int | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def address(self) -> str:
        """The client (PLAINTEXT) listener; a controller-only node has none."""
        if self.broker_port is None:
            raise UserError(f"node {self.node_id} is a controller only: it has no client listener")
        return f"{HOST}:{self.broker_port}"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class KRaftCluster:
    """Three combined nodes (ids 1..3), or with `separate_controllers` controllers 1..3 and brokers 4..6."""

    base: Path
    line: str = "4.1"
    separate_controllers: bool = False
    overrides: Mapping[str, str] = field(default_factory=dict)
    cluster_id: str = field(default_factory=new_cluster_id)
    start_timeout_s: float = 90.0
    die_with_parent: bool = True  # nodes get SIGKILL when this process dies
    archive_classes_to: Path | None = None  # the first node writes the classes it loaded here as it exits
    nodes: dict[int, Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kline = kraft_line(self.line)
        self.base = Path(self.base).absolute()
        self.classpath = ":".join(str(p) for p in installed_jars(self.kline.jar_set))
        combined: tuple[str, ...] = ("broker", "controller")
        layout = ([(n, combined[1:]) for n in (1, 2, 3)] + [(n, combined[:1]) for n in (4, 5, 6)]
                  if self.separate_controllers else [(n, combined) for n in (1, 2, 3)])
        for nid, roles in layout:
            self.nodes[nid] = Node(nid, roles, self.base / f"node-{nid}", self.base / "logs" / f"node-{nid}",
                                   broker_port=free_port() if "broker" in roles else None,
                                   controller_port=free_port() if "controller" in roles else None)

    # -- topology -----------------------------------------------------------------------------------------------
    @property
    def logs_root(self) -> Path:
        return self.base / "logs"

    @property
    def controller_ids(self) -> list[int]:
        return [n.node_id for n in self.nodes.values() if n.is_controller]

    @property
    def broker_ids(self) -> list[int]:
        return [n.node_id for n in self.nodes.values() if n.is_broker]

    def bootstrap(self) -> list[str]:
        """The client listeners of the brokers."""
        return [self.nodes[n].address for n in self.broker_ids]

    def voters(self) -> str:
        """The static `controller.quorum.voters`: id@host:port of every controller."""
        return ",".join(f"{n}@{HOST}:{self.nodes[n].controller_port}" for n in self.controller_ids)

    def metadata_log_dir(self, node_id: int) -> Path:
        """The node's `__cluster_metadata-0` folder: segments, snapshots, quorum-state."""
        return self.nodes[node_id].data_dir / METADATA_TOPIC_DIR

    def metadata_log_files(self, node_id: int, folder: Path | None = None) -> list[Path]:
        """The segments (`*.log`) and snapshots (`*.checkpoint`) of a node's metadata log (or of a copy of it
        in `folder`), in offset order."""
        root = folder or self.metadata_log_dir(node_id)
        return sorted([*root.glob("*.log"), *root.glob("*.checkpoint")], key=lambda p: (p.stem, p.suffix))

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> KRaftCluster:
        return self.launch().wait_started()

    def launch(self) -> KRaftCluster:
        """Format every node and start its process without waiting for it (`wait_started` waits)."""
        for nid in self.nodes:
            self.format_node(nid)
        for nid in self.nodes:
            self.start_node(nid, wait=False)
        return self

    def wait_started(self) -> KRaftCluster:
        """Until the quorum has a leader and every launched node has joined."""
        self.wait_quorum_leader()
        for nid in self.nodes:
            self.wait_node(nid)
        return self

    def stop(self) -> None:
        """SIGTERM every node (brokers first, so their controlled shutdown still has a quorum), SIGKILL what
        does not exit."""
        order = [*self.broker_ids, *[n for n in self.controller_ids if n not in self.broker_ids]]
        deadline = time.monotonic() + 45
        for group in ([n for n in order if not self.nodes[n].is_controller], order):
            for nid in group:
                self._signal(self.nodes[nid], signal.SIGTERM)
            for nid in group:
                self._wait_exit(self.nodes[nid], max(0.1, deadline - time.monotonic()))

    def __enter__(self) -> KRaftCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def format_node(self, node_id: int) -> None:
        """Kafka's storage tool writes meta.properties and the bootstrap snapshot (features) once per node."""
        node = self.nodes[node_id]
        props = self._write_config(node)
        if (node.data_dir / "meta.properties").is_file():
            return
        out = run_tool(self.kline.jar_set, STORAGE_TOOL,
                       # "=": an id may start with "-", which the tool's parser would take for an option
                       ["format", f"--cluster-id={self.cluster_id}", "--config", str(props)], timeout_s=120)
        if not (node.data_dir / "meta.properties").is_file():
            raise UserError(f"formatting node {node_id} left no meta.properties: {out.strip()[-400:]}")

    def start_node(self, node_id: int, *, wait: bool = True) -> None:
        node = self.nodes[node_id]
        if node.running:
            raise UserError(f"node {node_id} is already running")
        self.format_node(node_id)
        node.log_dir.mkdir(parents=True, exist_ok=True)
        archive_to = self.archive_classes_to if node_id == min(self.nodes) else None
        cmd = [find_java(), *self._jvm_options(node), *class_data_options(self.kline.jar_set, archive_to),
               f"-Dkafka.logs.dir={node.log_dir}",
               "-cp", self.classpath, MAIN_CLASS, str(node.home / "server.properties")]
        with (node.home / "stdout.log").open("ab") as out:
            node.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=node.home, start_new_session=True,
                                         preexec_fn=die_with_parent(signal.SIGKILL) if self.die_with_parent else None)
        if wait:
            self.wait_node(node_id)

    def _jvm_options(self, node: Node) -> list[str]:
        """Heap and GC settings, and the line's logging configuration (log4j2 from Kafka 4)."""
        return [*_JVM_OPTS, f"-Dlog4j2.configurationFile={node.home / 'log4j2.properties'}"]

    def stop_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM: Kafka's shutdown hook runs a controlled shutdown (a broker's leaders move away first)."""
        node = self.nodes[node_id]
        self._signal(node, signal.SIGTERM)
        if not self._wait_exit(node, timeout_s):
            raise UserError(f"node {node_id} did not shut down within {timeout_s:.0f}s")

    def kill(self, node_id: int) -> None:
        """SIGKILL: no controlled shutdown; the quorum leader fences the broker when its session times out."""
        node = self.nodes[node_id]
        self._signal(node, signal.SIGKILL)
        self._wait_exit(node, 30)

    # -- the quorum's view --------------------------------------------------------------------------------------
    def quorum_state(self, node_id: int) -> dict[str, Any] | None:
        """The node's `quorum-state` file (leaderId, leaderEpoch, votedId, ...), None before it has one."""
        try:
            return dict(json.loads((self.metadata_log_dir(node_id) / "quorum-state").read_text()))
        except (OSError, ValueError):
            return None

    def quorum_leader(self) -> tuple[int, int] | None:
        """(leader id, epoch) of the highest epoch a running controller's quorum-state names a leader for.

        A node rewrites the file at every election it takes part in, so among running controllers the highest
        epoch is current; a dead node's file is stale and not read."""
        best: tuple[int, int] | None = None
        for nid in self.controller_ids:
            state = self.quorum_state(nid) if self.nodes[nid].running else None
            if state is None or int(state.get("leaderId", -1)) < 0:
                continue
            cand = (int(state["leaderId"]), int(state["leaderEpoch"]))
            if best is None or cand[1] > best[1]:
                best = cand
        return best

    def wait_quorum_leader(self, *, other_than: int | None = None, timeout_s: float | None = None) -> tuple[int, int]:
        """Wait until a running controller leads the quorum (one other than `other_than`, if given)."""
        found: list[tuple[int, int]] = []

        def elected() -> bool:
            self._check_alive()
            leader = self.quorum_leader()
            if leader is None or leader[0] == other_than or not self.nodes[leader[0]].running:
                return False
            found.append(leader)
            return True

        what = "a quorum leader" + (f" other than node {other_than}" if other_than is not None else "")
        self.wait_for(elected, what, timeout_s or self.start_timeout_s)
        return found[-1]

    def admin(self, request_timeout_ms: int = 5000) -> Any:
        """A kafka-python Admin client on the running brokers."""
        from kafkalab.truth import admin_client

        running = [self.nodes[n].address for n in self.broker_ids if self.nodes[n].running]
        return admin_client(running or self.bootstrap(), request_timeout_ms)

    def unfenced_brokers(self) -> set[int]:
        """The brokers the cluster serves from: DescribeCluster lists only registered, unfenced brokers (none
        when no broker answers)."""
        return self._described_unfenced() or set()

    def _described_unfenced(self) -> set[int] | None:
        """The unfenced brokers as the first broker that answers DescribeCluster lists them; None if none answers."""
        for nid in self.broker_ids:
            if not self.nodes[nid].running or not self.accepts_connections(nid):
                continue
            with contextlib.suppress(Exception):
                admin = admin_client_on(self.nodes[nid].address)
                try:
                    brokers = admin.describe_cluster()["brokers"]
                    return {int(b["broker_id"]) for b in brokers if not b.get("is_fenced")}
                finally:
                    admin.close()
        return None

    def wait_node(self, node_id: int, timeout_s: float | None = None) -> None:
        """A broker: listening and unfenced (so clients told about it can use it). A controller only: in the
        quorum, i.e. its quorum-state names a leader."""
        node = self.nodes[node_id]

        def up() -> bool:
            if not node.running:
                raise UserError(f"node {node_id} exited during start-up: {self.failure_reason(node_id)}")
            if node.is_broker:
                return self.accepts_connections(node_id) and node_id in self.unfenced_brokers()
            state = self.quorum_state(node_id)
            return state is not None and int(state.get("leaderId", -1)) >= 0

        self.wait_for(up, f"node {node_id} to join the cluster", timeout_s or self.start_timeout_s)

    def wait_fenced(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Wait until a broker answers without listing `node_id` (its session expired or it shut down); a round
        in which no broker answers (a quorum election under way) proves nothing."""

        def fenced() -> bool:
            listed = self._described_unfenced()
            return listed is not None and node_id not in listed

        self.wait_for(fenced, f"broker {node_id} to be fenced", timeout_s)

    def accepts_connections(self, node_id: int) -> bool:
        node = self.nodes[node_id]
        port = node.broker_port if node.broker_port is not None else node.controller_port
        try:
            with socket.create_connection((HOST, int(port or 0)), timeout=1.0):
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

    def failure_reason(self, node_id: int) -> str:
        node = self.nodes[node_id]
        return failure_reason(node.home, node.log_dir)

    # -- internals ----------------------------------------------------------------------------------------------
    def _check_alive(self) -> None:
        """Fail fast when a node that was started has died on its own (a bad config, a format mismatch)."""
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() not in (None, -signal.SIGKILL, -signal.SIGTERM, 143):
                raise UserError(f"node {node.node_id} exited: {self.failure_reason(node.node_id)}")

    def _write_config(self, node: Node) -> Path:
        node.home.mkdir(parents=True, exist_ok=True)
        listeners, protocols = [], ["CONTROLLER:PLAINTEXT"]
        if node.is_broker:
            listeners.append(f"PLAINTEXT://{HOST}:{node.broker_port}")
            protocols.append("PLAINTEXT:PLAINTEXT")
        if node.is_controller:
            listeners.append(f"CONTROLLER://{HOST}:{node.controller_port}")
        props = {
            **_NODE_DEFAULTS,
            "process.roles": ",".join(node.roles),
            "node.id": str(node.node_id),
            "controller.quorum.voters": self.voters(),
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(node.data_dir),
            "metadata.log.dir": str(node.data_dir),
            **self.overrides,
        }
        if node.is_broker:
            props["advertised.listeners"] = f"PLAINTEXT://{node.address}"
            props["inter.broker.listener.name"] = "PLAINTEXT"
        path = node.home / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (node.home / "log4j2.properties").write_text(_LOG4J2)
        return path

    @staticmethod
    def _signal(node: Node, sig: signal.Signals) -> None:
        signal_group(node.proc, sig)

    @staticmethod
    def _wait_exit(node: Node, timeout_s: float) -> bool:
        return wait_or_kill(node.proc, timeout_s)


def admin_client_on(address: str, request_timeout_ms: int = 3000) -> Any:
    """An Admin client bound to one broker, so its answer is that broker's view."""
    from kafkalab.truth import admin_client

    return admin_client([address], request_timeout_ms)


def run_tool(jar_set: str, main_class: str, args: Iterable[str], timeout_s: float = 300) -> str:
    """Run one of Kafka's command-line tools from a jar set; its stdout, or a UserError with its output."""
    classpath = ":".join(str(p) for p in installed_jars(jar_set))
    with tempfile.TemporaryDirectory(prefix="kafkalab-tool-") as tmp:
        log_conf = Path(tmp) / "log4j2.properties"
        log_conf.write_text(_TOOL_LOG4J2)
        cmd = [find_java(), *_TOOL_JVM_OPTS, *class_data_options(jar_set), f"-Dlog4j2.configurationFile={log_conf}",
               "-cp", classpath, main_class, *args]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                              check=False, preexec_fn=die_with_parent(signal.SIGKILL))
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip())[-600:]
        raise UserError(f"{main_class.rsplit('.', 1)[-1]} exited with {proc.returncode}: {tail}")
    return proc.stdout


# -- Kafka's own reader of the metadata log ---------------------------------------------------------------------
# DumpLogSegments prints, per file, a header line, then per batch one line of `key: value` pairs, and with
# --deep-iteration one line per record starting with "| ". A metadata record's line ends with
# ` payload: {"type":"TOPIC_RECORD","version":0,"data":{...}}`; a control record's with the record's name and its
# JSON (`SnapshotHeader {...}`, `KRaftVersion {...}`, `KRaftVoters {...}`) or `controlType: NAME(id)` for
# control types it does not decode.
_BATCH = re.compile(r"^baseOffset: (?P<base>-?\d+) lastOffset: (?P<last>-?\d+) count: (?P<count>\S+) .*?"
                    r"partitionLeaderEpoch: (?P<epoch>-?\d+) isTransactional: (?P<txn>\w+) "
                    r"isControl: (?P<control>\w+)")
_RECORD = re.compile(r"^\| offset: (?P<offset>\d+) (?P<tstype>\w+): (?P<ts>-?\d+) keySize: (?P<key>-?\d+) "
                     r"valueSize: (?P<value>-?\d+)(?: sequence: -?\d+ headerKeys: \[(?P<headers>[^\]]*)\])?"
                     r"(?P<rest>.*)$")
_CONTROL_JSON = re.compile(r"^ (?P<name>[A-Za-z]+):? (?P<json>\{.*\})$")
_CONTROL_TYPE = re.compile(r"^ controlType: (?P<name>\w+)\((?P<id>-?\d+)\)$")


def dump_metadata_log(files: Iterable[Path], jar_set: str = KRAFT_4_1.jar_set) -> list[dict[str, Any]]:
    """Every record of metadata-log segments and snapshots as Kafka's `DumpLogSegments
    --cluster-metadata-decoder --deep-iteration --print-data-log` reads them, in file order.

    Each dict: file, offset, timestamp, timestamp_type, key_size, value_size, header_keys, batch_base_offset,
    batch_last_offset, leader_epoch (the batch's partitionLeaderEpoch), is_control, and
    - a metadata record: type (e.g. "TOPIC_RECORD"), version and data (Kafka's JSON of the record);
    - a control record Kafka decodes: type (e.g. "SnapshotHeader"), version None, data (its JSON);
    - one it does not: type (e.g. "LEADER_CHANGE"), control_type_id, data None.
    A record Kafka could not decode has `error` (its message) instead of type/version/data.
    """
    paths = [Path(f).absolute() for f in files]
    if not paths:
        return []
    out = run_tool(jar_set, DUMP_LOG_TOOL, ["--cluster-metadata-decoder", "--deep-iteration", "--print-data-log",
                                              "--files", ",".join(str(p) for p in paths)])
    return parse_dump(out)


def parse_dump(text: str) -> list[dict[str, Any]]:
    """Parse DumpLogSegments' output (see `dump_metadata_log`); a line it cannot place is an error, so a change
    of Kafka's format fails loudly instead of dropping records."""
    records: list[dict[str, Any]] = []
    file: str | None = None
    batch: dict[str, Any] | None = None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            file, batch = line[len("Dumping "):].strip(), None
            continue
        if not line.strip() or line.startswith(("Log starting offset:", "Snapshot end offset:",
                                                "KRaft bootstrap snapshot")):
            continue
        if m := _BATCH.match(line):
            batch = {"batch_base_offset": int(m["base"]), "batch_last_offset": int(m["last"]),
                     "leader_epoch": int(m["epoch"]), "is_control": m["control"] == "true",
                     "is_transactional": m["txn"] == "true"}
            continue
        m = _RECORD.match(line)
        if m is None or batch is None:
            raise ValueError(f"unexpected DumpLogSegments line in {file}: {line[:300]}")
        rec: dict[str, Any] = {"file": file, "offset": int(m["offset"]), "timestamp": int(m["ts"]),
                               "timestamp_type": m["tstype"], "key_size": int(m["key"]),
                               "value_size": int(m["value"]),
                               "header_keys": [h for h in (m["headers"] or "").split(",") if h], **batch}
        rest = m["rest"]
        if batch["is_control"]:
            if cj := _CONTROL_JSON.match(rest):
                rec.update(type=cj["name"], version=None, data=json.loads(cj["json"]))
            elif ct := _CONTROL_TYPE.match(rest):
                rec.update(type=ct["name"], control_type_id=int(ct["id"]), version=None, data=None)
            else:
                raise ValueError(f"unexpected control record in {file}: {line[:300]}")
        elif rest.startswith(" payload: "):
            payload = rest[len(" payload: "):]
            if payload.startswith("{"):
                body = json.loads(payload)
                rec.update(type=body["type"], version=int(body["version"]), data=body["data"])
            else:  # "Error at <offset>, skipping. <message>"
                rec["error"] = payload
        else:
            raise ValueError(f"metadata record without payload in {file}: {line[:300]}")
        records.append(rec)
    return records
