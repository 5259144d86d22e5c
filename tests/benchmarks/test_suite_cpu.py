"""`benchmarks.suite_cpu`: each process of a run counted once, under the kind its command line and parent give."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.suite_cpu import ProcessKind as K
from benchmarks.suite_cpu import kind_of, main, profile

SPARK = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /v/pyspark/conf org.apache.spark.deploy.SparkSubmit " \
        "--conf spark.master=local[2] pyspark-shell"


def test_a_process_kind_comes_from_its_command_line_and_its_parent() -> None:
    assert kind_of(SPARK, K.TEST_PROCESS) is K.SPARK_DRIVER_OF_TESTS
    assert kind_of(SPARK, K.ZKLEDGER_COMMAND) is K.SPARK_DRIVER_OF_COMMANDS
    assert kind_of(SPARK, None) is K.SPARK_DRIVER_OF_COMMANDS
    submitted = SPARK.replace("pyspark-shell", "/repo/jobs/rebuild.py --lake /l")
    assert kind_of(submitted, K.TEST_PROCESS) is K.SPARK_DRIVER_OF_COMMANDS
    assert kind_of("/usr/bin/java -Xmx320m -cp /j/kafka-3.9/a.jar kafka.Kafka /lab/server.properties", None) is K.KAFKA
    assert kind_of("/usr/bin/java -cp /j/zk.jar org.apache.zookeeper.server.quorum.QuorumPeerMain z.cfg",
                   None) is K.ZOOKEEPER
    assert kind_of("/usr/bin/java -cp x org.apache.spark.executor.CoarseGrainedExecutorBackend --app-id a",
                   None) is K.SPARK_CLUSTER
    assert kind_of("/usr/bin/java -jar something.jar", None) is K.OTHER_JVM
    assert kind_of("/v/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", K.TEST_PROCESS) \
        is K.TEST_PROCESS
    assert kind_of("/v/bin/python -m pytest -q tests", None) is K.TEST_PROCESS
    assert kind_of("/v/bin/pytest tests/models", None) is K.TEST_PROCESS
    # pytest's temporary directories in a command's arguments do not make it a test process
    assert kind_of("/v/bin/python /v/bin/zkledger --lake /tmp/pytest-of-root/pytest-3/lake0 rebuild",
                   K.TEST_PROCESS) is K.ZKLEDGER_COMMAND
    assert kind_of("/usr/bin/java -cp /tmp/pytest-of-root/x.jar kafka.Kafka /tmp/pytest-of-root/s.properties",
                   K.TEST_PROCESS) is K.KAFKA
    assert kind_of("/v/bin/python -m pyspark.daemon", K.SPARK_DRIVER_OF_TESTS) is K.PYSPARK_WORKER
    assert kind_of("/v/bin/python /v/bin/zkledger --lake /l rebuild", K.TEST_PROCESS) is K.ZKLEDGER_COMMAND
    assert kind_of("/v/bin/python /repo/jobs/monitor.py --lake /l", None) is K.ZKLEDGER_COMMAND
    assert kind_of("make test", None) is K.OTHER


BUSY_CHILD = "import time\nwhile time.process_time() < 1.0: pass"  # a CPU-second, however busy the machine


def test_a_profile_counts_a_child_under_its_kind_against_the_machines_cpu() -> None:
    # the child names pytest in its arguments (the parent's own command line must not): a test process, started
    # by a process of another kind
    parent = (f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BUSY_CHILD!r}, 'py' + 'test'], "
              "check=True)")
    result = profile([sys.executable, "-c", parent], interval_s=0.2)
    assert result["exit_code"] == 0
    tests = result["kinds"][K.TEST_PROCESS.name]
    assert tests["processes"] == 1 and 0.8 <= tests["cpu_s"] <= 2.0
    assert result["machine_busy_cpu_s"] >= result["attributed_cpu_s"] * 0.9 >= 0.8
    assert result["summary"][0].startswith(f"{sys.executable} -c ")


def test_the_command_exit_code_is_the_benchmarks_and_the_profile_is_written(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path), "--interval", "0.1", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert '"exit_code": 3' in (tmp_path / "suite_cpu.json").read_text()
