"""The one SparkSession factory of the project (nothing else calls `SparkSession.builder`)."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from conf.settings import LocalCompiler, Settings
from services.errors import UserError
from services.jvm import DELTA, installed_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
# Tables Spark creates keep the protocol delta-rs also reads and writes (lakehouse.maintenance has the tested
# list): these Delta defaults stay off even where a cluster's own spark-defaults turn them on.
DELTA_FEATURE_DEFAULTS = {
    "spark.databricks.delta.properties.defaults.minReaderVersion": "1",
    "spark.databricks.delta.properties.defaults.minWriterVersion": "2",
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
    "spark.databricks.delta.properties.defaults.columnMapping.mode": "none",
    "spark.databricks.delta.properties.defaults.checkpointPolicy": "classic",
    "spark.databricks.delta.properties.defaults.enableRowTracking": "false",
    "spark.databricks.delta.properties.defaults.enableTypeWidening": "false",
    "spark.databricks.delta.properties.defaults.enableInCommitTimestamps": "false",
}

# Spark's default log4j2 profile prints a banner and INFO startup lines before setLogLevel can run; a config of
# our own keeps the console at WARN from the first line and mutes known-harmless warnings (a state value read
# before its first write is one: a key's first micro-batch reads its state without asking whether it exists). With a log file
# (`spark_logs_to_file`: the CLI without -v) the lines go to that file instead of the terminal.
_LOG4J2_CONSOLE = """\
appender.console.type = Console
appender.console.name = out
appender.console.target = SYSTEM_ERR
"""
_LOG4J2_FILE = """\
appender.file.type = File
appender.file.name = out
appender.file.fileName = {file}
appender.file.append = true
"""
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
{appender}\
appender.{kind}.layout.type = PatternLayout
appender.{kind}.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.shutdown.name = org.apache.hadoop.util.ShutdownHookManager
logger.shutdown.level = error
logger.rocksdb.name = org.apache.spark.sql.execution.streaming.state
logger.rocksdb.level = error
logger.valuestate.name = org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.statevariables.ValueStateImpl
logger.valuestate.level = error
logger.pystate.name = org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer
logger.pystate.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.zookeeper.name = org.apache.zookeeper
logger.zookeeper.level = error
"""

SPARK_LOG = Path("_logs") / "spark.log"
"""Where, under the lake, a command's Spark logs go (`spark_logs_to_file`)."""

_logs_to_file = False


def spark_logs_to_file(enabled: bool) -> None:
    """Send the Spark sessions built from now on to log into ``<lake>/_logs/spark.log`` (the CLI, without -v)
    rather than the terminal: the JVM's log4j2 lines, and whatever the JVM and its Python workers write to
    stderr. Off by default: tests, benchmarks and notebooks keep Spark's warnings on stderr."""
    global _logs_to_file
    _logs_to_file = enabled


def spark_log_file(settings: Settings) -> Path | None:
    """The file a session built now logs into, None for the terminal."""
    return Path(settings.lake.root) / SPARK_LOG if _logs_to_file else None


def build_spark(settings: Settings, app_name: str | None = None) -> SparkSession:
    """Build (or reuse) the SparkSession configured from `settings.spark`.

    The session has Delta Lake's connector (the pinned jars of `make jars`, its SQL extension and catalog, as
    delta-spark's ``configure_spark_with_delta_pip`` sets up), runs Python workers with this interpreter
    (otherwise UDFs fail with `No module named ...`), uses the RocksDB state store (required by
    transformWithStateInPandas), UTC, no UI and quiet logs.
    """
    from pyspark.sql import SparkSession

    _set_worker_environment()
    master = submitted_master() or settings.spark.master
    conf = spark_conf(settings, master)
    builder = SparkSession.builder.master(master).appName(app_name or settings.spark.app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    log_file = spark_log_file(settings)
    with _stderr_into(log_file if log_file and not _jvm_running() else None), _jvm_malloc_arenas():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark.log_level.upper())
    _require_delta(spark)
    log.debug("spark session %s on %s", spark.sparkContext.applicationId, master)
    return spark


SUBMIT_DELTA_HINT = (
    "spark-submit needs Delta Lake's connector: add --jars $(ls .jvm/delta/*.jar | paste -sd,) "
    f"(or --packages io.delta:delta-spark_4.1_2.13:4.4.0) --conf spark.sql.extensions={DELTA_EXTENSION} "
    f"--conf spark.sql.catalog.spark_catalog={DELTA_CATALOG}"
)


def _require_delta(spark: SparkSession) -> None:
    """A session without Delta's classes or its extension fails here with the fix, not at its first read."""
    jvm = spark.sparkContext._jvm
    try:
        assert jvm is not None
        jvm.java.lang.Class.forName(DELTA_EXTENSION, False, jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader())
    except Exception:
        raise UserError(f"Delta Lake's connector is not on this Spark's classpath; {SUBMIT_DELTA_HINT}") from None
    if DELTA_EXTENSION not in (spark.conf.get("spark.sql.extensions", None) or ""):
        raise UserError(f"this Spark session lacks Delta's SQL extension; {SUBMIT_DELTA_HINT}")


def submitted_master() -> str | None:
    """The `--master` spark-submit was given, when this driver was launched by spark-submit.

    spark-submit starts the JVM first and hands the Python driver its gateway; the master it was given is in
    that JVM's conf and must win over the settings' default (`local[2]`), or a submitted job silently runs
    locally.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    master = SparkConf().get("spark.master", None)
    return str(master) if master else None


def spark_conf(settings: Settings, master: str | None = None) -> dict[str, str]:
    """The Spark conf `build_spark` applies; `settings.spark.extra` wins over the defaults."""
    level = settings.spark.log_level.upper()
    log_file = spark_log_file(settings)
    # System.gc() (Spark's periodic GC below) starts a concurrent G1 cycle rather than a full pause
    jvm_opts = "-Duser.timezone=UTC -XX:+ExplicitGCInvokesConcurrent"
    java_opts = f"-Dlog4j2.configurationFile=file:{_log4j2_file(level, log_file)} {jvm_opts}"
    # executors on other hosts keep logging to their stderr (their worker's log): the lake's path is the driver's
    local = (master or settings.spark.master).startswith("local")
    executor_opts = java_opts if local else f"-Dlog4j2.configurationFile=file:{_log4j2_file(level, None)} {jvm_opts}"
    if local:
        java_opts += LOCAL_COMPILER_OPTS[LocalCompiler(settings.spark.local_compiler)]
    conf = {
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        **DELTA_FEATURE_DEFAULTS,
        # Delta rebuilds a snapshot's state with this many tasks (default 50: slow for small metadata tables)
        "spark.databricks.delta.snapshotPartitions": str(settings.spark.shuffle_partitions),
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.metricsEnabled": "true",  # each query's progress in Spark's metrics system (sinks)
        # each micro-batch uploads the changed keys only, not a snapshot of the whole store
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # the streaming checkpoint's files (offsets, commits, state store) through Hadoop's FileSystem API: the
        # default FileContext one runs `readlink` twice per rename and `chmod` per file as child processes on
        # a local disk without Hadoop's native library (154 processes in a 1 M-event rebuild, which then took
        # 9.6-10.7 s against 10.9-11.2 s, alternating). A checkpoint has one query writing it.
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # below Int.MaxValue Spark measures the Arrow batch it sends a Python worker after every row (the bronze
        # rows of a storm reached the route tasks in 0.62-0.73 s instead of 0.86-1.10 s); batches stay bounded
        # by spark.sql.execution.arrow.maxRecordsPerBatch (10,000 rows)
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # the status store keeps finished jobs, stages, tasks and SQL executions even without a UI: a monitor
        # runs several per micro-batch, so Spark's defaults (1,000 of each, 100,000 tasks) grow its heap for hours
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "100",
        "spark.ui.retainedTasks": "2000",
        "spark.sql.ui.retainedExecutions": "50",
        "spark.sql.streaming.ui.retainedProgressUpdates": "50",
        # Delta reads a new table version's protocol and metadata with a query that has the version as a
        # literal when the version has no checksum file (a table's versions before its first checksum), so a
        # monitor may compile new classes every micro-batch. Only a concurrent GC cycle unloads them, and a
        # driver with a quiet heap may never start one.
        "spark.cleaner.periodicGC.interval": "5min",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": executor_opts,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # the Python workers' Arrow buffers from the C library's malloc, as the zkledger commands' own
        # (pipelines.parallel.use_system_allocator): the fold runs faster on it; the route's tasks take their own
        # pool (engine.stateful.ROUTE_ARROW_POOL)
        "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": WORKER_ARROW_POOL,
        WORKER_MMAP_THRESHOLD_CONF: WORKER_MMAP_THRESHOLD,
    }
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # launched by spark-submit, the jars come from its --jars/--packages (they must be on the JVM's
        # classpath before it starts); otherwise the project's pinned, installed copy
        conf["spark.jars"] = ",".join(str(p) for p in installed_jars(DELTA))
    if (master or settings.spark.master).startswith("local"):
        # loopback only: no hostname lookups, no "resolves to a loopback address" warning
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        # local mode runs every task in the driver JVM; the heap is set here so a cluster's spark-defaults do
        # not size a local session. G1 grows a heap towards its cap over many micro-batches, so a larger one
        # only makes a long rebuild's peak higher: 2g was no faster than 1g once the pages below left the heap
        conf["spark.driver.memory"] = LOCAL_DRIVER_MEMORY
        # the tasks' sort and shuffle pages (the routed events' packed blobs) in a fixed pool off the heap: on it
        # they are humongous objects G1 keeps growing the heap for, micro-batch after micro-batch
        conf["spark.memory.offHeap.enabled"] = "true"
        conf["spark.memory.offHeap.size"] = LOCAL_OFF_HEAP
        conf["spark.driver.maxResultSize"] = "4g"
        if Path(__file__).is_file():  # the workers import it as the driver did (not from a --py-files archive)
            conf[PYTHON_DAEMON_CONF] = WORKER_DAEMON
    conf.update(settings.spark.extra)
    return conf


def _set_worker_environment() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


LOCAL_COMPILER_OPTS = {LocalCompiler.C1: " -XX:TieredStopAtLevel=1", LocalCompiler.C2: ""}
"""The driver's JVM options of a local session per ``spark.local_compiler``."""
PYTHON_DAEMON_CONF = "spark.python.daemon.module"
WORKER_DAEMON = "services.worker_daemon"
"""The Python workers' daemon of a local session (``spark.python.daemon.module``): PySpark's, less its per-task
costs that do not follow the work."""
LOCAL_DRIVER_MEMORY = "1g"
"""The JVM heap of a ``local[*]`` session, which runs the executors' tasks too (``spark.driver.memory``)."""
LOCAL_OFF_HEAP = "256m"
"""The execution memory of a ``local[*]`` session's tasks, off the JVM heap (``spark.memory.offHeap.size``)."""
WORKER_ARROW_POOL = "system"
"""``ARROW_DEFAULT_MEMORY_POOL`` of the session's Python workers (``spark.executorEnv``); the route's tasks run on
``engine.stateful.ROUTE_ARROW_POOL``."""
WORKER_MMAP_THRESHOLD_CONF = "spark.executorEnv.MALLOC_MMAP_THRESHOLD_"
WORKER_MMAP_THRESHOLD = "1048576"
"""``MALLOC_MMAP_THRESHOLD_`` of the session's Python workers: glibc otherwise raises its threshold each time a
large block is freed and serves later ones from its heap, which a worker then keeps after its task (a worker's
peak stays its resident size between micro-batches); fixed, every buffer of 1 MiB or more goes back at once. A
bucket's arrays (tens of thousands of events, a few hundred KiB each) stay below it: mapped afresh each time,
they cost the fold half again its CPU in page faults (``benchmarks.worker_allocator``)."""
JVM_MALLOC_ARENAS = "2"
"""``MALLOC_ARENA_MAX`` of the JVM a session starts: glibc gives each of its many threads a malloc arena of its
own, which holds freed native memory (Arrow's buffers to and from the Python workers); two keep a rebuild's JVM
about a gigabyte smaller."""


@contextmanager
def _jvm_malloc_arenas() -> Iterator[None]:
    """``MALLOC_ARENA_MAX`` set (unless the user set it) for the JVM started inside, and for nothing this process
    starts later (brokers, collectors)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        yield
        return
    os.environ["MALLOC_ARENA_MAX"] = JVM_MALLOC_ARENAS
    try:
        yield
    finally:
        os.environ.pop("MALLOC_ARENA_MAX", None)


@contextmanager
def _stderr_into(log_file: Path | None) -> Iterator[None]:
    """With a file: this process's stderr (fd 2) is that file while inside, so the JVM launched here, and the
    Python workers it starts later, inherit it as their stderr (JVM warnings, the workers' prints)."""
    if log_file is None:
        yield
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def _jvm_running() -> bool:
    """A JVM is already up (a session built before, spark-submit's): its stderr is settled."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def _log4j2_file(level: str, log_file: Path | None = None) -> Path:
    """Write the log4j2 config (console, or ``log_file``) once per content into the temp dir; return its path."""
    if log_file is None:
        appender, kind = _LOG4J2_CONSOLE, "console"
    else:
        appender, kind = _LOG4J2_FILE.format(file=log_file.resolve()), "file"
    text = _LOG4J2.format(level=level.lower(), appender=appender, kind=kind)
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"zkledger-log4j2-{digest}.properties"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: concurrent sessions never read a half-written file
    return path
