"""The SparkSession factory: a real session whose Python workers run this interpreter."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from conf.settings import load_settings
from services.spark_session import (
    CHECKPOINT_FILE_MANAGER,
    PYTHON_DAEMON_CONF,
    ROCKSDB_PROVIDER,
    WORKER_DAEMON,
    spark_conf,
)

pytestmark = pytest.mark.spark


def test_python_udf_runs_on_the_project_interpreter(spark: object) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, udf

    assert isinstance(spark, SparkSession)

    def worker_python(x):  # type: ignore[no-untyped-def]  # untyped: Spark would read hints as a pandas UDF
        import sys as worker_sys

        return f"{worker_sys.executable}|{x * 2}"

    rows = spark.range(3).select(udf(worker_python, "string")(col("id")).alias("v")).collect()
    assert sorted(r.v for r in rows) == [f"{sys.executable}|{n}" for n in (0, 2, 4)]


def test_session_is_configured_as_the_project_needs(spark: object) -> None:
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    get = spark.conf.get
    assert get("spark.sql.session.timeZone") == "UTC"
    assert get("spark.sql.streaming.stateStore.providerClass") == ROCKSDB_PROVIDER
    assert get("spark.sql.shuffle.partitions") == "2"
    assert get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert spark.sparkContext.master == "local[2]"
    assert spark.sparkContext.uiWebUrl is None


def test_streaming_checkpoints_are_written_without_child_processes(spark: Any, tmp_path: Path) -> None:
    """Spark's checkpoint files go through the FileSystem API, which on a local disk renames and creates them
    in the JVM (the FileContext one starts `readlink` and `chmod` processes for each)."""
    jvm = spark.sparkContext._jvm
    hadoop_conf = spark._jsparkSession.sessionState().newHadoopConf()
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        jvm.org.apache.hadoop.fs.Path(str(tmp_path)), hadoop_conf)
    assert manager.getClass().getName() == CHECKPOINT_FILE_MANAGER
    spark.range(3).write.parquet(str(tmp_path / "in"))
    q = spark.readStream.schema("id long").parquet(str(tmp_path / "in")).writeStream.format("noop").option(
        "checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start()
    q.awaitTermination()
    assert sorted(p.name for p in (tmp_path / "ckpt" / "offsets").iterdir() if not p.name.startswith(".")) == ["0"]


def test_extra_conf_from_settings_wins() -> None:
    settings = load_settings(overrides={"spark.extra": {"spark.sql.session.timeZone": "Europe/Paris", "x.y": 1}})
    conf = spark_conf(settings)
    assert conf["spark.sql.session.timeZone"] == "Europe/Paris" and conf["x.y"] == "1"
    assert conf["spark.pyspark.python"] == sys.executable


def test_a_local_session_s_jvm_compiles_with_the_settings_compilers_and_a_cluster_s_with_the_jvm_s() -> None:
    def driver_opts(compiler: str) -> str:
        settings = load_settings(overrides={"spark.local_compiler": compiler})
        return spark_conf(settings, "local[2]")["spark.driver.extraJavaOptions"]

    assert driver_opts("c1").endswith(" -XX:TieredStopAtLevel=1")
    assert "TieredStopAtLevel" not in driver_opts("c2")
    assert "TieredStopAtLevel" not in " ".join(spark_conf(load_settings(), "spark://master:7077").values())


def test_the_local_session_s_jvm_runs_c1_alone(spark: object) -> None:
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    assert "-XX:TieredStopAtLevel=1" in list(management.getRuntimeMXBean().getInputArguments())


def test_a_local_session_s_workers_fork_from_the_project_s_daemon_unless_the_settings_say_otherwise() -> None:
    """On a cluster the executors may not import zkledger before a task ships it (``--py-files``)."""
    assert spark_conf(load_settings(), "local[2]")[PYTHON_DAEMON_CONF] == WORKER_DAEMON
    assert PYTHON_DAEMON_CONF not in spark_conf(load_settings(), "spark://master:7077")
    pyspark_s = load_settings(overrides={"spark.extra": {PYTHON_DAEMON_CONF: "pyspark.daemon"}})
    assert spark_conf(pyspark_s, "local[2]")[PYTHON_DAEMON_CONF] == "pyspark.daemon"


def test_the_driver_jvm_unloads_generated_code_without_a_full_gc_pause(spark: object) -> None:
    """Spark's periodic System.gc() starts a concurrent G1 cycle (class unloading included), not a full GC."""
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    assert spark.sparkContext.getConf().get("spark.cleaner.periodicGC.interval") == "5min"
    jvm = spark.sparkContext._jvm
    management = jvm.java.lang.management.ManagementFactory
    assert "-XX:+ExplicitGCInvokesConcurrent" in list(management.getRuntimeMXBean().getInputArguments())
    beans = {bean.getName(): bean for bean in management.getGarbageCollectorMXBeans()}
    full, young = beans["G1 Old Generation"], beans["G1 Young Generation"]
    full_before, young_before = full.getCollectionCount(), young.getCollectionCount()
    jvm.java.lang.System.gc()
    assert young.getCollectionCount() > young_before  # the cycle's initial-mark pause
    assert full.getCollectionCount() == full_before


def test_only_the_session_s_jvm_gets_fewer_malloc_arenas(spark: object) -> None:
    """The JVM (and the Python workers it starts) runs with ``MALLOC_ARENA_MAX``; this process and what it starts
    later (brokers, collectors) do not inherit it."""
    import os

    from pyspark.sql import SparkSession

    from services.spark_session import JVM_MALLOC_ARENAS

    assert isinstance(spark, SparkSession)
    jvm = spark.sparkContext._jvm
    assert jvm is not None and jvm.java.lang.System.getenv("MALLOC_ARENA_MAX") == JVM_MALLOC_ARENAS
    assert "MALLOC_ARENA_MAX" not in os.environ


def test_the_python_workers_allocate_arrow_buffers_with_the_system_allocator(spark: object) -> None:
    """What pipelines.parallel.use_system_allocator gives the driver-side commands, the workers get from the
    session's conf (``spark.executorEnv``), here and on a cluster's executors; and a fixed mmap threshold, so
    that a worker hands its large buffers back once its task is done."""
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from services.spark_session import WORKER_ARROW_POOL, WORKER_MMAP_THRESHOLD

    def backend(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"pool": pa.default_memory_pool().backend_name,
                                           "mmap": os.environ.get("MALLOC_MMAP_THRESHOLD_")}])

    assert isinstance(spark, SparkSession)
    workers = {(r["pool"], r["mmap"]) for r in
               spark.range(2, numPartitions=2).mapInArrow(backend, "pool string, mmap string").collect()}
    assert workers == {(WORKER_ARROW_POOL, WORKER_MMAP_THRESHOLD)}


def test_a_local_session_s_tasks_sort_and_shuffle_off_the_heap(spark: object) -> None:
    """Local mode: the tasks' execution memory is Tungsten's off-heap pool of LOCAL_OFF_HEAP, not the JVM heap."""
    from pyspark.sql import SparkSession

    from services.spark_session import LOCAL_OFF_HEAP

    assert isinstance(spark, SparkSession)
    env = spark.sparkContext._jvm.org.apache.spark.SparkEnv.get()
    assert env.memoryManager().tungstenMemoryMode().toString() == "OFF_HEAP"
    assert spark.sparkContext.getConf().get("spark.memory.offHeap.size") == LOCAL_OFF_HEAP
    rows = spark.range(200_000, numPartitions=2).selectExpr("id % 1000 AS k").groupBy("k").count().collect()
    assert len(rows) == 1000 and sum(r["count"] for r in rows) == 200_000  # a shuffle and a sort ran in it


def test_a_local_session_s_jvm_heap_is_capped_at_the_local_driver_memory(spark: object) -> None:
    """Local mode runs the executors' tasks in the driver JVM: its heap cap is LOCAL_DRIVER_MEMORY, whatever
    Spark's default, and the settings' ``spark.extra`` can raise it."""
    from pyspark.sql import SparkSession

    from services.spark_session import LOCAL_DRIVER_MEMORY

    assert isinstance(spark, SparkSession)
    assert spark.sparkContext.getConf().get("spark.driver.memory") == LOCAL_DRIVER_MEMORY
    runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    assert runtime.maxMemory() <= 2 * 1024 ** 3
    raised = spark_conf(load_settings(overrides={"spark.extra": {"spark.driver.memory": "3g"}}))
    assert raised["spark.driver.memory"] == "3g" != LOCAL_DRIVER_MEMORY


def test_the_python_workers_import_the_installed_packages_and_collect_only_their_task_s_objects(spark: object) -> None:
    """A local session's workers come from ``services.worker_daemon``: no archive of the installed pyspark on
    their path (each task would read its directory again), and the modules imported before the fork frozen out
    of the collector that runs after every task."""
    from collections.abc import Iterator

    import pyarrow as pa
    import pyspark
    from pyspark.sql import SparkSession

    def worker_imports(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import gc
        import sys

        import pyspark as worker_pyspark

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"archives": sum(p.endswith("pyspark.zip") for p in sys.path),
                                           "pyspark": worker_pyspark.__file__, "frozen": gc.get_freeze_count()}])

    assert isinstance(spark, SparkSession)
    assert spark.sparkContext.getConf().get(PYTHON_DAEMON_CONF) == WORKER_DAEMON
    rows = spark.range(2, numPartitions=2).mapInArrow(worker_imports, "archives long, pyspark string, frozen long").collect()
    assert {(r["archives"], r["pyspark"]) for r in rows} == {(0, pyspark.__file__)}
    assert min(r["frozen"] for r in rows) > 10_000
