"""The one SparkSession factory of the project (nothing else calls `SparkSession.builder`)."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from conf.settings import Settings
from services.errors import UserError
from services.jvm import DELTA, installed_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
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
# our own keeps the console at WARN from the first line and mutes known-harmless warnings.
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.shutdown.name = org.apache.hadoop.util.ShutdownHookManager
logger.shutdown.level = error
logger.rocksdb.name = org.apache.spark.sql.execution.streaming.state
logger.rocksdb.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.zookeeper.name = org.apache.zookeeper
logger.zookeeper.level = error
"""


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
    log4j = _log4j2_file(settings.spark.log_level.upper())
    # System.gc() (Spark's periodic GC below) starts a concurrent G1 cycle rather than a full pause
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Duser.timezone=UTC -XX:+ExplicitGCInvokesConcurrent"
    conf = {
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        **DELTA_FEATURE_DEFAULTS,
        # Delta rebuilds a snapshot's state with this many tasks (default 50: slow for small metadata tables)
        "spark.databricks.delta.snapshotPartitions": str(settings.spark.shuffle_partitions),
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # each micro-batch uploads the changed keys only, not a snapshot of the whole store
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
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
        # literal (the collectors' commits carry no .crc), so a monitor compiles new classes every micro-batch.
        # Only a concurrent GC cycle unloads them, and a driver with a quiet heap may never start one.
        "spark.cleaner.periodicGC.interval": "5min",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # launched by spark-submit, the jars come from its --jars/--packages (they must be on the JVM's
        # classpath before it starts); otherwise the project's pinned, installed copy
        conf["spark.jars"] = ",".join(str(p) for p in installed_jars(DELTA))
    if (master or settings.spark.master).startswith("local"):
        # loopback only: no hostname lookups, no "resolves to a loopback address" warning
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        # local mode runs every task in the driver JVM, and jobs collect each increment's tables to the
        # driver as Arrow: Spark's 1g default heap dies on a rebuild of a few million events
        conf["spark.driver.memory"] = "6g"
        conf["spark.driver.maxResultSize"] = "4g"
    conf.update(settings.spark.extra)
    return conf


def _set_worker_environment() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _log4j2_file(level: str) -> Path:
    """Write the log4j2 config once per content into the temp dir and return its path."""
    text = _LOG4J2.format(level=level.lower())
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"zkledger-log4j2-{digest}.properties"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: concurrent sessions never read a half-written file
    return path
