"""Differential: every way of running the pipeline ends with the tables one in-process rebuild writes.

A case is (scenario, way). A scenario is a bronze history: a small literal one (tests/history.py), or a
built-in simulator scenario played on a real ZooKeeper and collected (the session's `runs`). Its reference is
one rebuild in one increment, built once per scenario. A way copies the bronze into a fresh lake and runs it
otherwise: the rebuild in zxid chunks or through Spark jobs, the streaming monitor fed in chunks, in one
micro-batch or one file per trigger, after a rebuild, through Spark, crashed or SIGKILLed and restarted. The
one comparison (`tests/conftest.py` `assert_same_tables`) is over every derived table, every column. Each way
also asserts that it really ran that way (chunks committed, micro-batches counted, the process killed), and an
in-process monitor that it published each anomaly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from engine.monitor import START_MARKER, drain_monitor
from engine.rebuild import rebuild
from engine.stateful import start_stateful_query
from engine.writes import MONITOR_WRITER, REBUILD_WRITER, WRITER_KEY
from lakehouse import Lake
from lakehouse.lake import CRASH_ENV
from models.tables import ANOMALIES, CONTROLLER_DECISIONS, METADATA_EVENTS, PARTITION_STATE, ZNODE_EVENTS
from tests.conftest import assert_same_tables
from tests.e2e.conftest import (
    Chunk,
    bronze,
    decisions_ahead,
    early_decisions,
    feed,
    monitor_cmd,
    run_monitor,
    time_chunks,
    wait_for_batch,
)
from tests.history import split_brain_history, split_brain_log, zombie_offline_history

pytestmark = pytest.mark.spark

Z, D = ZNODE_EVENTS.name, CONTROLLER_DECISIONS.name


# ---------------------------------------------------------------- scenarios

# Literal histories: bronze rows, and anomaly kinds the history is built to show (so no case compares two
# empty tables).
LITERAL: dict[str, tuple[Callable[[], dict[str, list[dict[str, Any]]]], list[str]]] = {
    "zombie-offline": (lambda: {Z: zombie_offline_history().rows},
                       ["OFFLINE_PARTITION", "ZOMBIE_CONTROLLER_WRITE"]),
    "split-brain": (lambda: {Z: split_brain_history().rows, D: split_brain_log()},
                    ["NO_ACTIVE_CONTROLLER", "SPLIT_BRAIN", "ZOMBIE_CONTROLLER_WRITE"]),
}
# Played scenarios: (name, version) in `runs`, "-txnlog" for the lake of the lossless collectors only.
PLAYED = {"zombie-controller-2.0-txnlog": ("zombie-controller", "2.0"), "zombie-controller-2.0": ("zombie-controller", "2.0"),
          "unclean-election-3.8": ("unclean-election", "3.8"), "topic-deletion-3.8": ("topic-deletion", "3.8"),
          "reassignment-3.8": ("reassignment", "3.8"), "failover-storm-3.8": ("failover-storm", "3.8")}


@dataclass
class Scenario:
    name: str
    reference: Lake  # rebuilt once, in one increment, in process
    bronze: dict[str, pa.Table] = field(default_factory=dict)

    @property
    def anomaly_ids(self) -> list[str]:
        return sorted(r["anomaly_id"] for r in self.reference.read_arrow(ANOMALIES.name).to_pylist())

    def lake(self, root: Path) -> Lake:
        return Lake(root, cluster=self.reference.cluster)


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        Callable[[str], Scenario]]:
    """Scenario by name, its reference rebuilt on first use and shared by every way (ZooKeeper is played only
    when a played scenario is asked for)."""
    spark = request.getfixturevalue("spark")
    built: dict[str, Scenario] = {}

    def get(name: str) -> Scenario:
        if name not in built:
            if name in LITERAL:
                make, kinds = LITERAL[name]
                lake = Lake(tmp_path_factory.mktemp(name) / "reference", cluster="test")
                for table, rows in make().items():
                    lake.append(table, rows, writer_id="history", batch_seq=1)
                rebuild(spark, lake)
                got = {r["kind"] for r in lake.read_arrow(ANOMALIES.name).to_pylist()}
                assert set(kinds) <= got, name
            else:
                run = request.getfixturevalue("runs")[PLAYED[name]]
                lake = run.txn_lake if name.endswith("-txnlog") else run.lake
            built[name] = Scenario(name, lake, bronze(lake))
        return built[name]

    yield get


@dataclass
class Ctx:
    spark: Any
    scenario: Scenario
    tmp_path: Path
    published: list[dict[str, Any]] = field(default_factory=list)

    def lake(self, name: str = "lake") -> Lake:
        return self.scenario.lake(self.tmp_path / name)

    def copy(self) -> Lake:
        """A fresh lake holding the scenario's bronze, one commit per table."""
        dst = self.lake()
        feed(dst, list(self.scenario.bronze.items()), 1)
        return dst

    def drain(self, lake: Lake, **kwargs: Any) -> int:
        return drain_monitor(self.spark, lake, str(self.tmp_path / "checkpoint"), publish=self.published.extend,
                             **kwargs)

    def assert_published_once(self, before: Collection[str] = ()) -> None:
        """The monitor published each anomaly the rebuild has (less what a rebuild found ``before``) once."""
        want = sorted(i for i in self.scenario.anomaly_ids if i not in before)
        assert sorted(r["anomaly_id"] for r in self.published) == want


# ---------------------------------------------------------------- ways

def rebuild_in_zxid_chunks(ctx: Ctx, then_through_spark: bool = False) -> Lake:
    """A long history is rebuilt chunk by chunk (bounded driver memory): the chunking must not show."""
    dst = ctx.copy()
    rows = dst.row_count(Z)
    counts = rebuild(ctx.spark, dst, chunk_rows=max(1, rows // 6))
    assert counts[METADATA_EVENTS.name] == dst.row_count(METADATA_EVENTS.name)
    by_rebuild = [c for c in dst.history(METADATA_EVENTS.name) if REBUILD_WRITER in str(c.get(WRITER_KEY))]
    assert len(by_rebuild) >= 5  # it really ran in chunks
    state = [c for c in dst.history(PARTITION_STATE.name) if REBUILD_WRITER in str(c.get(WRITER_KEY))]
    assert len(state) == 2  # the state: emptied by the first chunk, written by the last
    if then_through_spark:  # chunks through Spark too, over the chunked rebuild's tables
        assert_same_tables(dst, ctx.scenario.reference)
        rebuild(ctx.spark, dst, local_max_rows=0, chunk_rows=max(1, rows // 2))
    return dst


def rebuild_through_spark(ctx: Ctx) -> Lake:
    """Spark jobs over key buckets (`local_max_rows=0`) instead of the in-process kernels."""
    dst = ctx.copy()
    rebuild(ctx.spark, dst, local_max_rows=0)
    return dst


def monitor_in_chunks(ctx: Ctx, chunks: int, seed: int | None = None, **kwargs: Any) -> Lake:
    """Bronze arrives in time chunks; each drain stops when caught up, the next restarts from the checkpoint."""
    dst = ctx.lake()
    for seq, chunk in enumerate(time_chunks(ctx.scenario.bronze, chunks, seed), start=1):
        feed(dst, chunk, seq)
        assert ctx.drain(dst, **kwargs) >= 1
    assert dst.last_batch_seq(PARTITION_STATE.name, MONITOR_WRITER) is not None
    ctx.assert_published_once()
    return dst


def monitor_decisions_ahead(ctx: Ctx, chunks: int) -> Lake:
    """Each time chunk's log decisions a chunk before its znode rows: decisions arrive before the writes they
    report (checked: some do), and wait until ZooKeeper's history settles rather than being found divergent."""
    dst = ctx.lake()
    steps = decisions_ahead(time_chunks(ctx.scenario.bronze, chunks))
    assert early_decisions(steps)
    for seq, chunk in enumerate(steps, start=1):
        feed(dst, chunk, seq)
        ctx.drain(dst)
    ctx.assert_published_once()
    return dst


def monitor_log_apart(ctx: Ctx, log_first: bool, cut: int) -> Lake:
    """The controller log in a micro-batch of its own, before or after the znode rows (cut at row ``cut``): each
    finding's evidence complete in one batch, and a later batch where it is found again."""
    dst = ctx.lake()
    z, d = ctx.scenario.bronze[Z].sort_by("zxid"), ctx.scenario.bronze[D]
    znodes: list[Chunk] = [[(Z, z.slice(0, cut))], [(Z, z.slice(cut))]]
    steps = [[(D, d)], *znodes] if log_first else [*znodes, [(D, d)]]
    for seq, chunk in enumerate(steps, start=1):
        feed(dst, chunk, seq)
        assert ctx.drain(dst) == 1
    ctx.assert_published_once()
    return dst


def monitor_over_commits(ctx: Ctx, commits: int, max_files_per_trigger: int | None) -> Lake:
    """The znode rows in ``commits`` commits, then one drain: one micro-batch for all, or one per file."""
    dst = ctx.lake()
    z = ctx.scenario.bronze[Z]
    size = -(-z.num_rows // commits)
    for i in range(commits):
        feed(dst, [(Z, z.slice(i * size, size))], i)
    kwargs = {} if max_files_per_trigger is None else {"max_files_per_trigger": max_files_per_trigger}
    assert ctx.drain(dst, **kwargs) == (1 if max_files_per_trigger is None else -(-commits // max_files_per_trigger))
    ctx.assert_published_once()
    return dst


def monitor_after_a_rebuild(ctx: Ctx) -> Lake:
    """A rebuild of the first third, the second third arrives, the monitor starts; then the rest."""
    dst = ctx.lake()
    first, second, third = time_chunks(ctx.scenario.bronze, 3)
    feed(dst, first, 1)
    rebuild(ctx.spark, dst)
    before = {r["anomaly_id"] for r in dst.read_arrow(ANOMALIES.name).to_pylist()}
    feed(dst, second, 2)
    ctx.drain(dst)
    feed(dst, third, 3)
    ctx.drain(dst)
    ctx.assert_published_once(before)  # exactly what the rebuild had not found
    return dst


def monitor_from_an_empty_start_after_a_rebuild(ctx: Ctx) -> Lake:
    """A rebuild of the first half, the monitor starts with nothing new, then the rest arrives."""
    dst = ctx.lake()
    first, rest = time_chunks(ctx.scenario.bronze, 2)
    feed(dst, first, 1)
    rebuild(ctx.spark, dst)
    rebuilt = dst.version(Z)
    assert rebuilt is not None
    # Delta's source cannot start after the newest version, so an empty commit opens one
    assert ctx.drain(dst) == 0
    assert dst.version(Z) == rebuilt + 1
    assert dst.last_batch_seq(Z, START_MARKER) == rebuilt + 1
    feed(dst, rest, 2)
    assert ctx.drain(dst) == 1
    return dst


def monitor_crashed_before_its_first_commit(ctx: Ctx) -> Lake:
    """`monitor --available-now` killed in micro-batch 0 before its first Delta commit (Spark's offset log has
    batch 0, nothing else does), the rest arrives while it is down, then run again: the replayed batch and
    what arrived while down are both processed."""
    dst = ctx.lake()
    first, rest = time_chunks(ctx.scenario.bronze, 2)
    feed(dst, first, 1)
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    crashed = run_monitor(dst, "--available-now", env={**env, CRASH_ENV: "before_commit:0"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert dst.last_batch_seq(METADATA_EVENTS.name, MONITOR_WRITER) is None
    feed(dst, rest, 2)
    done = run_monitor(dst, "--available-now", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "caught up" in done.stdout
    return dst


def monitor_killed_mid_stream(ctx: Ctx) -> Lake:
    """A running `monitor --trigger 1` SIGKILLed between micro-batches, then `--available-now` to the end."""
    dst = ctx.lake()
    chunks = time_chunks(ctx.scenario.bronze, 4)
    feed(dst, chunks[0], 1)
    proc = subprocess.Popen(monitor_cmd(dst, "--trigger", "1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:
        wait_for_batch(dst, proc, 0)
        feed(dst, chunks[1], 2)
        feed(dst, chunks[2], 3)
        wait_for_batch(dst, proc, 1)  # it is now somewhere in chunk 2 or 3
    finally:
        proc.send_signal(signal.SIGKILL)
        code = proc.wait(30)
    assert code == -signal.SIGKILL  # killed while running, not exited by itself
    feed(dst, chunks[3], 4)
    done = run_monitor(dst, "--available-now")
    assert done.returncode == 0, done.stderr[-2000:]
    return dst


def stateful_query(ctx: Ctx, chunks: int = 1, ahead: bool = False) -> Lake:
    """The Spark stateful query (``engine.stateful``) from a fresh checkpoint with ``availableNow``: the bronze
    in one micro-batch, or fed in time chunks with the query restarted on its checkpoint after each (with
    ``ahead``, each chunk's decisions a chunk early)."""
    dst = ctx.lake()
    steps = time_chunks(ctx.scenario.bronze, chunks) if chunks > 1 else [list(ctx.scenario.bronze.items())]
    if ahead:
        steps = decisions_ahead(steps)
        assert early_decisions(steps)
    for seq, chunk in enumerate(steps, start=1):
        feed(dst, chunk, seq)
        query = start_stateful_query(ctx.spark, dst, ctx.tmp_path / "stateful-checkpoint", buckets=4,
                                     available_now=True)
        query.awaitTermination()
        assert [p for p in query.recentProgress if int(p["numInputRows"])]  # it ran a batch on this chunk
    return dst


@dataclass(frozen=True)
class Way:
    name: str
    run: Callable[..., Lake]
    options: dict[str, Any] = field(default_factory=dict)


CHUNKS = Way("rebuild-in-zxid-chunks", rebuild_in_zxid_chunks)
CHUNKS_THEN_SPARK = Way("rebuild-in-zxid-chunks-then-through-spark", rebuild_in_zxid_chunks,
                        {"then_through_spark": True})
SPARK = Way("rebuild-through-spark", rebuild_through_spark)
STATEFUL = Way("stateful-query", stateful_query)
STATEFUL_CHUNKS = Way("stateful-query-in-3-chunks", stateful_query, {"chunks": 3})
STATEFUL_AHEAD = Way("stateful-query-decisions-a-chunk-ahead", stateful_query, {"chunks": 3, "ahead": True})
# the histories with the most kinds of rows take the rebuild's other paths
REBUILT = ["zombie-controller-2.0", "topic-deletion-3.8", "reassignment-3.8", "failover-storm-3.8"]

CASES: list[tuple[str, Way]] = [
    ("zombie-offline", Way("monitor-in-3-chunks-at-random-rows", monitor_in_chunks, {"chunks": 3, "seed": 7})),
    ("zombie-offline", Way("monitor-one-batch-over-4-commits", monitor_over_commits,
                           {"commits": 4, "max_files_per_trigger": None})),
    ("zombie-offline", Way("monitor-one-file-per-trigger", monitor_over_commits,
                           {"commits": 4, "max_files_per_trigger": 1})),
    ("zombie-offline", Way("monitor-after-a-rebuild", monitor_after_a_rebuild)),
    ("zombie-offline", Way("monitor-from-an-empty-start-after-a-rebuild", monitor_from_an_empty_start_after_a_rebuild)),
    ("zombie-offline", Way("monitor-crashed-before-its-first-commit", monitor_crashed_before_its_first_commit)),
    # NO_ACTIVE_CONTROLLER found again at zxid 15; the zombie pair found again at zxid 13
    ("split-brain", Way("monitor-log-first", monitor_log_apart, {"log_first": True, "cut": 14})),
    ("split-brain", Way("monitor-log-last", monitor_log_apart, {"log_first": False, "cut": 12})),
    ("zombie-controller-2.0-txnlog", Way("monitor-in-2-chunks", monitor_in_chunks, {"chunks": 2})),
    # the log collector ahead of ZooKeeper's: a decision before its write is not found divergent
    ("unclean-election-3.8", Way("monitor-decisions-a-chunk-ahead", monitor_decisions_ahead, {"chunks": 3})),
    ("unclean-election-3.8", STATEFUL_AHEAD),
    ("unclean-election-3.8", Way("monitor-killed-mid-stream", monitor_killed_mid_stream)),
    ("unclean-election-3.8", Way("monitor-through-spark-in-3-chunks", monitor_in_chunks,
                                 {"chunks": 3, "local_max_rows": 0})),
    ("unclean-election-3.8", SPARK),
    ("unclean-election-3.8", CHUNKS_THEN_SPARK),
    *[(name, way) for name in REBUILT for way in (SPARK, CHUNKS)],
    # the stateful query: both literal histories, both collectors with logs, a storm, a deletion; in chunks too
    *[(name, STATEFUL) for name in ("zombie-offline", "split-brain", "zombie-controller-2.0", "failover-storm-3.8",
                                    "topic-deletion-3.8")],
    *[(name, STATEFUL_CHUNKS) for name in ("split-brain", "zombie-controller-2.0", "reassignment-3.8")],
]


@pytest.mark.parametrize(("scenario", "way"), [
    # a played scenario asks for `runs` at run time: its marks are not derived from the test's fixtures
    pytest.param(s, w, id=f"{s}/{w.name}",
                 marks=[pytest.mark.integration, pytest.mark.slow] if s in PLAYED else [])
    for s, w in CASES])
def test_a_way_of_running_ends_with_the_rebuilds_tables(scenarios: Callable[[str], Scenario], spark: Any,
                                                         tmp_path: Path, scenario: str, way: Way) -> None:
    ctx = Ctx(spark, scenarios(scenario), tmp_path)
    lake = way.run(ctx, **way.options)
    assert_same_tables(lake, ctx.scenario.reference)
