"""An embedded, real ZooKeeper server run from the jars that ship inside PySpark.

`java -cp <pyspark>/jars/* org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg` is a standalone ZooKeeper
3.9 server; no separate install is needed. The server runs in its own process group so that it outlives the
`zkledger zk start` process, and it leaves a state file in its data dir so `status`/`stop` can find it later.

    with EmbeddedZooKeeper(tmp / "zk") as zk:
        KazooClient(hosts=zk.hosts)...
        zk.restart()            # same port, same data (for collector reconnect tests)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from services.errors import ZooKeeperServerError

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
STATE_FILE = "zkledger-zk.json"
LOG_FILE = "zookeeper.log"
HOST = "127.0.0.1"

_LOG4J2 = """\
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = stdout
appender.stdout.type = Console
appender.stdout.name = stdout
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = %d{ISO8601} %p [%t] %c{1}: %m%n%ex
"""


@dataclass(frozen=True)
class ServerState:
    """What `start` records in `<data_dir>/zkledger-zk.json`."""

    pid: int
    port: int
    data_dir: str
    started_at: float

    @property
    def hosts(self) -> str:
        return f"{HOST}:{self.port}"


def pyspark_jars_dir() -> Path:
    """`<pyspark dir>/jars`, which holds zookeeper-3.9.x.jar and its dependencies."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise ZooKeeperServerError(f"no zookeeper jar in {jars}; is pyspark installed correctly?")
    return jars


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ZooKeeperServerError("java not found: install Java 17+ (apt-get install -y openjdk-17-jre-headless)")
    return found


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PICK = random.SystemRandom()  # not the seeded global generator: parallel test workers would pick alike


_HANDED_OUT: set[int] = set()
"""Every port ``free_port`` gave in this process: servers picked together (a Kafka cluster's brokers) are
started after all their ports are picked, so a port that is free now may already be promised."""


def free_port() -> int:
    """A port nothing is bound to and not given before in this process, from just below the kernel's ephemeral
    range: a port from that range (what binding port 0 gives) can be handed to another process's outgoing
    connection before the server meant to listen on it starts, and a Kafka node formats its storage for seconds
    first."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        port = _PICK.randrange(max(1024, low - 12_000), low)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def four_letter_word(port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command (`ruok`, `srvr`, `stat`...) and return the answer ('' on failure)."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def read_state(data_dir: str | Path) -> ServerState | None:
    """The recorded server of `data_dir`, or None if none was recorded or the file is unreadable."""
    path = Path(data_dir) / STATE_FILE
    try:
        raw = json.loads(path.read_text())
        return ServerState(int(raw["pid"]), int(raw["port"]), str(raw["data_dir"]), float(raw["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pid_is_zookeeper(pid: int) -> bool:
    """True if `pid` is alive and (where /proc tells) is a ZooKeeper server, so a recycled pid is not trusted."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            return MAIN_CLASS.encode() in cmdline.read_bytes()
        except OSError:
            return False
    return True


def running_state(data_dir: str | Path) -> ServerState | None:
    """The recorded server of `data_dir` if it is still alive; a stale state file is removed."""
    state = read_state(data_dir)
    if state is None:
        return None
    if pid_is_zookeeper(state.pid):
        return state
    (Path(data_dir) / STATE_FILE).unlink(missing_ok=True)
    return None


def terminate(pid: int, timeout_s: float = 15.0) -> None:
    """SIGTERM the server's process group, wait, then SIGKILL if it does not go."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)
    log.warning("ZooKeeper pid %s did not exit", pid)


def _wait_port_closed(port: int, timeout_s: float = 10.0) -> None:
    """Return once nothing accepts connections on `port` (the kernel closes a dead server's socket at once; this
    bounds a slow teardown), so that `stop` then `start --port` on the same port works."""
    deadline = time.monotonic() + timeout_s
    while port_in_use(port) and time.monotonic() < deadline:
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        reaped, _ = os.waitpid(pid, os.WNOHANG)  # reap it if it is our child, or it stays a zombie
        if reaped == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a JVM's main thread can be a zombie while its other threads still hold the sockets open: the process is
    # gone only when every thread is
    tasks = Path(f"/proc/{pid}/task")
    try:
        stats = [task / "stat" for task in tasks.iterdir()]
    except OSError:
        return True
    for stat in stats:
        with contextlib.suppress(OSError):
            if stat.read_text().split(") ", 1)[1][:1] not in ("Z", "X"):
                return True
    return False


class EmbeddedZooKeeper:
    """A standalone ZooKeeper server on 127.0.0.1 with its data (and transaction log) in `data_dir`."""

    def __init__(
        self,
        data_dir: str | Path,
        port: int = 0,
        *,
        start_timeout_s: float = 60.0,
        tick_ms: int = 500,
        max_session_timeout_ms: int = 60_000,
        stop_at_exit: bool = True,
        extra_config: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.port = port
        self.start_timeout_s = start_timeout_s
        self.tick_ms = tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        # a server started from Python dies with its interpreter (no orphans after a crashed test run);
        # `zkledger zk start` passes False so the server outlives the command
        self.stop_at_exit = stop_at_exit
        # more zoo.cfg lines, e.g. a TLS `secureClientPort` with its `ssl.*` stores (the plain port stays, for
        # the readiness check and `status`)
        self.extra_config = dict(extra_config or {})
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    # -- public API ---------------------------------------------------------------------------------------------
    @property
    def hosts(self) -> str:
        """`127.0.0.1:PORT` for kazoo (append a chroot yourself)."""
        if not self.port:
            raise ZooKeeperServerError("ZooKeeper has no port yet: call start() first")
        return f"{HOST}:{self.port}"

    @property
    def txnlog_dir(self) -> Path:
        """Where ZooKeeper writes `log.<zxid>` and `snapshot.<zxid>` files."""
        return self.data_dir / "version-2"

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def running(self) -> bool:
        return self._pid is not None and _alive(self._pid)

    def start(self) -> EmbeddedZooKeeper:
        """Start the server and block until it serves requests; one-line ZooKeeperServerError on failure."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        existing = running_state(self.data_dir)
        if existing is not None:
            raise ZooKeeperServerError(
                f"ZooKeeper already running for {self.data_dir} at {existing.hosts} (pid {existing.pid})"
            )
        if self.port and port_in_use(self.port):
            raise ZooKeeperServerError(f"port {self.port} on {HOST} is already in use; choose another --port")
        port = self.port or free_port()
        cfg = self._write_config(port)
        self._launch(cfg)
        self.port = port
        self._wait_ready()
        self._write_state()
        if self.stop_at_exit:
            atexit.register(self._stop_quietly)
        log.info("ZooKeeper listening on %s (data %s)", self.hosts, self.data_dir)
        return self

    def stop(self) -> None:
        """SIGTERM the server, wait for it, and forget it. Safe to call twice."""
        if self._pid is not None:
            terminate(self._pid)
        if self._proc is not None:
            self._proc.wait(timeout=10)
        if self._pid is not None and self.port:
            _wait_port_closed(self.port)
        self._proc = None
        self._pid = None
        atexit.unregister(self._stop_quietly)
        (self.data_dir / STATE_FILE).unlink(missing_ok=True)

    def _stop_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()

    def restart(self) -> EmbeddedZooKeeper:
        """Stop and start again on the same port with the same data (sessions survive if they reconnect in time)."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @classmethod
    def attach(cls, data_dir: str | Path) -> EmbeddedZooKeeper | None:
        """A handle on a server started earlier (e.g. by `zkledger zk start`), or None if none is running."""
        state = running_state(data_dir)
        if state is None:
            return None
        server = cls(data_dir, state.port)
        server._pid = state.pid
        return server

    def __enter__(self) -> EmbeddedZooKeeper:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedZooKeeper(data_dir={str(self.data_dir)!r}, port={self.port})"

    # -- internals ----------------------------------------------------------------------------------------------
    def _write_config(self, port: int) -> Path:
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join([
                f"tickTime={self.tick_ms}",
                f"dataDir={self.data_dir}",
                f"clientPort={port}",
                f"clientPortAddress={HOST}",
                "maxClientCnxns=0",
                f"maxSessionTimeout={self.max_session_timeout_ms}",
                "admin.enableServer=false",
                "4lw.commands.whitelist=*",
                "snapCount=1000000",  # few snapshots: the transaction log stays the full history
                "preAllocSize=1024",  # KB; the 64 MB default is wasteful for tests
                "snapshot.trust.empty=true",
                *(f"{key}={value}" for key, value in self.extra_config.items()),
                "",
            ])
        )
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2)
        return cfg

    def _command(self, cfg: Path) -> list[str]:
        return [
            find_java(),
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # faster start-up; the server does little work
            f"-Dlog4j2.configurationFile=file:{self.data_dir / 'log4j2.properties'}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            str(pyspark_jars_dir() / "*"),
            MAIN_CLASS,
            str(cfg),
        ]

    def _launch(self, cfg: Path) -> None:
        with self.log_path.open("ab") as logfile:
            # own session/process group: survives the starting CLI and can be signalled as a whole
            self._proc = subprocess.Popen(
                self._command(cfg),
                stdin=subprocess.DEVNULL,
                stdout=logfile,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        self._pid = self._proc.pid

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._forget()
                raise ZooKeeperServerError(f"ZooKeeper exited during start-up: {self._failure_reason()}")
            # `ruok` answers before the database is loaded; `srvr` reports a Mode only once it serves requests
            if "Mode: " in four_letter_word(self.port, "srvr", timeout_s=1.0):
                return
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperServerError(f"ZooKeeper did not answer on {self.hosts} within {self.start_timeout_s:.0f}s")

    def _failure_reason(self) -> str:
        tail = self.log_tail(200).splitlines()
        for line in tail:
            if "Address already in use" in line or "BindException" in line:
                return f"port {self.port} on {HOST} is already in use"
        errors = [line for line in tail if " ERROR " in line or "Exception" in line]
        return (errors[-1] if errors else "see " + str(self.log_path)).strip()

    def _forget(self) -> None:
        self._proc = None
        self._pid = None

    def _write_state(self) -> None:
        assert self._pid is not None
        state = ServerState(self._pid, self.port, str(self.data_dir), time.time())
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(state)))
        tmp.replace(self.data_dir / STATE_FILE)
