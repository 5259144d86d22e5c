"""Shared fixtures: a real ZooKeeper, a real Spark session, a Lake on disk, default settings; and the one
comparison of derived tables that every differential test uses (`assert_same_tables`).

Each test is marked from the fixtures it uses (`FIXTURE_MARKS`): `spark`, `zookeeper`, `kafka`, `cluster`
(each needs a JVM) and `slow` (minutes). A test or fixture that starts a JVM without one of the fixtures
below requests a no-op fixture that states it (`starts_zookeeper`, `starts_spark`, ...). `make test-fast` runs
the tests with none of the JVM markers.

Nothing here imports another package's module at import time but the pure `models` (not lakehouse, collectors,
...), so this file keeps working while those packages are being written.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conf.settings import Settings, load_settings
from models.tables import DERIVED_TABLES
from services.zookeeper import EmbeddedZooKeeper
from tests.spark_cds import driver_opts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Every Spark driver the tests start (this session's, each zkledger process and spark-submit a test runs) lives
# seconds to minutes on small data: the JIT's optimising compiler (C2) costs such a JVM more CPU than it earns back.
# With C1 alone a test of Spark queries spends about a third less CPU (tests/engine/test_rebuild.py: 71 against
# 98 CPU-seconds, same wall time), which four workers on two cores get back as time. Kafka's and ZooKeeper's lab
# JVMs set the same (kafkalab, services.zookeeper). A user's long-running driver keeps the JVM's default. When
# `make test` built the class-data archive (tests/spark_cds.py), the drivers map their classes from it.
os.environ.setdefault("SPARK_SUBMIT_OPTS", driver_opts())

# the session's ZooKeeper, so the failure hook below can attach its log
_ZK: dict[str, EmbeddedZooKeeper] = {}


@pytest.fixture(scope="session", autouse=True)
def buckets_of_small_histories() -> Iterator[None]:
    """A query begun in this process gives a cluster one bucket per partition (up to its ``buckets``): the tests'
    histories have a few partitions, and the routing they check is that of a large cluster's many buckets
    (``pipelines.bucket_fold.BucketLayout``; tests/engine/test_checkpoint_buckets.py sizes as shipped)."""
    from pipelines import bucket_fold

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bucket_fold, "PARTITIONS_PER_BUCKET", 1)
        yield


@pytest.fixture(scope="session")
def settings() -> Settings:
    """The defaults from conf/base.toml."""
    return load_settings()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedZooKeeper]:
    """A real standalone ZooKeeper for the whole run; `.hosts` is "127.0.0.1:PORT". Tests use chroots."""
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper") / "data").start()
    _ZK["server"] = server
    try:
        yield server
    finally:
        _ZK.pop("server", None)
        server.stop()


@pytest.fixture
def zk_hosts(zk_server: EmbeddedZooKeeper) -> str:
    """A fresh, empty chroot on the session ZooKeeper: "127.0.0.1:PORT/t-<hex>"."""
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    make_chroot(zk_server.hosts, chroot)
    return zk_server.hosts + chroot


def make_chroot(hosts: str, chroot: str) -> None:
    """Create the empty znode ``chroot`` on the ZooKeeper at ``hosts``."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=15)
    client.start(timeout=15)
    try:
        client.create(chroot)
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] session for the whole run (2 shuffle partitions), built by services.spark_session.build_spark."""
    from services.spark_session import build_spark

    os.environ["SPARK_TESTING"] = "1"
    test_settings = load_settings(overrides={"spark.master": "local[2]", "spark.shuffle_partitions": 2})
    session = build_spark(test_settings, app_name="zkledger-tests")
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path: Path) -> Any:
    """A `lakehouse.Lake` on `tmp_path/lake` (cluster "test")."""
    from lakehouse import Lake

    return Lake(tmp_path / "lake", cluster="test")


# No-op fixtures that state a need the test's other fixtures do not show: a JVM it starts by itself (a
# subprocess, a server object), or minutes of run time. Session scope, so that fixtures of any scope can
# request them too.
@pytest.fixture(scope="session")
def starts_zookeeper() -> None:
    """The test starts a Java ZooKeeper of its own (EmbeddedZooKeeper, `zkledger zk start`)."""


@pytest.fixture(scope="session")
def starts_spark() -> None:
    """The test runs a process that builds a Spark session (`zkledger rebuild|monitor`, a Spark job)."""


@pytest.fixture(scope="session")
def starts_kafka() -> None:
    """The test starts real Kafka brokers (kafkalab), with the ZooKeeper they need."""


@pytest.fixture(scope="session")
def starts_kraft() -> None:
    """The test (or a fixture it needs) starts Kafka 4.x KRaft nodes (no ZooKeeper)."""


@pytest.fixture(scope="session")
def starts_spark_cluster() -> None:
    """The test starts a Spark standalone master and workers."""


@pytest.fixture(scope="session")
def takes_minutes() -> None:
    """The test (or a fixture it needs the first time) takes minutes."""


@pytest.fixture(scope="session")
def runs_prometheus() -> None:
    """The test runs Debian's Prometheus server or promtool (`make prometheus` installs them)."""


# fixture -> the markers every test that needs it gets
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "spark": ("spark",),
    "starts_spark": ("spark",),
    "zk_server": ("zookeeper",),
    "starts_zookeeper": ("zookeeper",),
    "starts_kafka": ("kafka", "zookeeper"),  # ZooKeeper-mode brokers
    "starts_kraft": ("kafka",),  # KRaft-mode nodes
    "starts_spark_cluster": ("cluster", "spark"),
    "takes_minutes": ("slow",),
    "runs_prometheus": ("prometheus",),
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test from its fixtures (`fixturenames` holds those its fixtures need, too). `integration` is
    the older name of `zookeeper` and still written in test files: each implies the other."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        marks = {m for name in names & FIXTURE_MARKS.keys() for m in FIXTURE_MARKS[name]}
        if "zookeeper" in marks or item.get_closest_marker("integration") is not None:
            marks |= {"zookeeper", "integration"}
        for mark in sorted(marks):
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)
    items[:] = costliest_files_first(items)


# how long a test file tends to take, by the costliest of the fixtures its tests need
FIXTURE_COST: dict[str, int] = {
    "starts_spark_cluster": 6, "starts_kraft": 5, "starts_kafka": 5, "takes_minutes": 4, "runs_prometheus": 3,
    "starts_spark": 2, "spark": 2, "zk_server": 1, "starts_zookeeper": 1,
}


def costliest_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items with their files in the order of their cost, costliest first, each file's own order kept.
    pytest-xdist (`--dist loadfile`) hands out files by their number of tests, most first, and in this order among
    equals."""
    cost: dict[str, tuple[int, int]] = {}
    for item in items:
        top = max((FIXTURE_COST.get(n, 0) for n in getattr(item, "fixturenames", ())), default=0)
        fixed, count = cost.get(item.nodeid.split("::")[0], (0, 0))
        cost[item.nodeid.split("::")[0]] = (max(fixed, top), count + 1)
    return sorted(items, key=lambda item: tuple(-c for c in cost[item.nodeid.split("::")[0]]))


# folders whose files share a session fixture too costly to build once per worker: one xdist work unit each
SHARED_WORK_UNITS: dict[str, str] = {
    "tests/e2e/": "the played scenario runs (`runs`, tests/e2e/conftest.py): about a minute to build",
}


# files handed out before all others: each is a long test alone in its file, which xdist's order (fewest tests
# last) would start near the end, to run on after every other file has finished
FIRST_FILES: dict[str, str] = {
    "tests/jobs/test_spark_submit_monitor.py": "one test of four to five minutes on a standalone Spark cluster",
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, except that the files of a ``SHARED_WORK_UNITS`` folder go to one worker together, so
    their session fixture is built once in the run, not once in each worker that takes one of them; and the
    ``FIRST_FILES`` go out first."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureScheduling(LoadFileScheduling):
        first_moved = False

        def _split_scope(self, nodeid: str) -> str:
            path = str(super()._split_scope(nodeid))
            return next((folder for folder in SHARED_WORK_UNITS if path.startswith(folder)), path)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.first_moved:  # the queue is complete and in xdist's order when the first unit goes out
                for scope in reversed(list(FIRST_FILES)):
                    if scope in self.workqueue:
                        self.workqueue.move_to_end(scope, last=False)
                self.first_moved = True
            super()._assign_work_unit(node)

    return SharedFixtureScheduling(config, log)


DERIVED = tuple(t.name for t in DERIVED_TABLES)


def table_lines(lake: Any, table: str) -> list[str]:
    """A table as sorted canonical JSON lines (every column), for an order-free equality; [] when absent."""
    if not lake.exists(table):
        return []
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in lake.read_arrow(table).to_pylist())


def assert_same_tables(lake: Any, reference: Any, tables: Sequence[str] = DERIVED) -> None:
    """Each of ``tables`` holds the same rows in ``lake`` as in ``reference``; a failure names the table and
    shows a few rows only one side has."""
    for table in tables:
        got, want = table_lines(lake, table), table_lines(reference, table)
        if got != want:
            extra = sorted(set(got) - set(want))[:3]
            missing = sorted(set(want) - set(got))[:3]
            raise AssertionError(f"{table}: {len(got)} rows, the reference has {len(want)}\n"
                                 f"  only here: {extra}\n  only in the reference: {missing}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """On a failing test that used ZooKeeper, attach the tail of the server's log to the report."""
    outcome = yield
    report = outcome.get_result()
    uses_zk = {"zk_server", "zk_hosts"} & set(getattr(item, "fixturenames", ()))
    server = _ZK.get("server")
    if report.failed and uses_zk and server is not None:
        report.sections.append(("ZooKeeper log (tail)", server.log_tail(60)))
