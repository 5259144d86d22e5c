"""Differential: every way of running the pipeline ends with the tables its steps write when run in the driver.

The histories are held in one lake, each its own cluster: the literal ones (tests/history.py), the built-in
simulator scenarios played on a real ZooKeeper (the session's `runs`), and the same runs' lossless collectors
alone (under a cluster name of their own). The reference of a history is `engine.local_run.run_local` on it
alone (all history in one batch, in the driver, no Spark): the pipeline's steps and sink with nothing of the
query around them (no scheduler, state store, checkpoint or micro-batches), and cheap. One Spark query serves
them all (each query start and micro-batch costs seconds) and shows that clusters do not leak into each other.

A way copies the bronze into a fresh lake and runs the Spark query: `rebuild` in one micro-batch; over bronze in
several commits, a micro-batch each (split-brain's controller log a commit before its znode rows, the played
logs' decisions a chunk ahead of ZooKeeper's); `rebuild` on the first part then `drain_monitor` on its
checkpoint as the rest arrives (cut at random rows, split-brain's log last); `zkledger monitor --available-now`
processes SIGKILLed by the crash hook before their first commit and after a commit, then run to the end. The
one comparison (`tests/conftest.py` `assert_same_tables`) is over every derived table, every column, against
the union of the references. Each way also asserts that it ran that way (micro-batches counted, the process
killed where asked) and, for the monitors, that each anomaly was published once.
"""
from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from engine.local_run import run_local
from engine.monitor import drain_monitor
from engine.rebuild import rebuild
from engine.stateful_sink import COMMITTED, DERIVED
from lakehouse import Lake
from models.anomalies import describe_group, group_findings
from models.tables import (
    ANOMALIES,
    CONTROLLER_DECISIONS,
    PARTITION_STATE,
    PARTITION_TRANSITIONS,
    ZNODE_EVENTS,
)
from services.sanitize import terminal_safe
from tests.conftest import assert_same_tables
from tests.e2e.conftest import (
    Chunk,
    bronze,
    decisions_ahead,
    early_decisions,
    feed,
    monitor_writer,
    run_monitor,
    time_chunks,
)
from tests.e2e.scenario_lakes import RUNS, TXN_ONLY
from tests.history import recluster, split_brain_history, split_brain_log, zombie_offline_history

pytestmark = pytest.mark.spark

Z, D = ZNODE_EVENTS.name, CONTROLLER_DECISIONS.name
BUCKETS = 4  # small histories: fewer keys, fewer state stores per micro-batch
# `zkledger monitor` as a process: the same buckets, and Spark sized like the tests' session
MONITOR_SETTINGS = f"[pipeline]\nbuckets = {BUCKETS}\n\n[spark]\nmaster = \"local[2]\"\nshuffle_partitions = 2\n"


# ---------------------------------------------------------------- histories

@dataclass
class Member:
    """One history of a set: its cluster, its reference (run in the driver) and its bronze."""

    cluster: str
    reference: Lake
    bronze: dict[str, pa.Table]
    log_cuts: dict[str, int] = field(default_factory=dict)  # "first"/"last": znode row where its log goes apart

    def steps(self, chunks: int, seed: int | None, log: str | None, ahead: bool) -> list[Chunk]:
        if log in self.log_cuts:  # the controller log in a step of its own, before or after the znode rows
            z, d, cut = self.bronze[Z].sort_by("zxid"), self.bronze[D], self.log_cuts[log]
            znodes: list[Chunk] = [[(Z, z.slice(0, cut))], [(Z, z.slice(cut))]]
            return [[(D, d)], *znodes] if log == "first" else [*znodes, [(D, d)]]
        steps = time_chunks(self.bronze, chunks, seed)
        return decisions_ahead(steps) if ahead and D in self.bronze else steps


@dataclass
class Set:
    name: str
    members: list[Member]

    def bronze(self) -> Chunk:
        return _union([list(m.bronze.items()) for m in self.members])

    def steps(self, chunks: int = 3, seed: int | None = None, log: str | None = None,
              ahead: bool = False) -> list[Chunk]:
        """Each member cut into steps (see ``Member.steps``), step i of the set = every member's step i."""
        per = [m.steps(chunks, seed, log, ahead) for m in self.members]
        if ahead:  # some decision really arrives before the write it reports
            assert sum(early_decisions(s) for s in per), self.name
        return [_union([s[i] for s in per if i < len(s)]) for i in range(max(map(len, per)))]

    @property
    def reference(self) -> References:
        return References([m.reference for m in self.members])

    def anomalies(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.reference.read_arrow(ANOMALIES.name).to_pylist()
        return rows


def _union(chunks: list[Chunk]) -> Chunk:
    """Several chunks as one: each bronze table's rows together (one commit per table when fed)."""
    out: Chunk = []
    for table in (Z, D):
        parts = [rows for chunk in chunks for name, rows in chunk if name == table and rows.num_rows]
        if parts:
            out.append((table, pa.concat_tables(parts, promote_options="default")))
    return out


@dataclass
class References:
    """The members' reference lakes read as one (all `assert_same_tables` reads)."""

    lakes: list[Lake]

    def exists(self, table: str) -> bool:
        return any(lake.exists(table) for lake in self.lakes)

    def read_arrow(self, table: str) -> pa.Table:
        return pa.concat_tables([lake.read_arrow(table) for lake in self.lakes if lake.exists(table)],
                                promote_options="default")


# Literal histories: bronze rows, the anomaly kinds each is built to show (so no case compares empty tables),
# and where split-brain's log goes apart from its znode rows: NO_ACTIVE_CONTROLLER found again at zxid 15
# (log first, cut after zxid 14), the zombie pair found again at zxid 13 (log last, cut after zxid 12).
LITERAL: dict[str, tuple[Callable[[], dict[str, list[dict[str, Any]]]], set[str], dict[str, int]]] = {
    "zombie-offline": (lambda: {Z: zombie_offline_history().rows},
                       {"OFFLINE_PARTITION", "ZOMBIE_CONTROLLER_WRITE"}, {}),
    "split-brain": (lambda: {Z: split_brain_history().rows, D: split_brain_log()},
                    {"NO_ACTIVE_CONTROLLER", "SPLIT_BRAIN", "ZOMBIE_CONTROLLER_WRITE"}, {"first": 14, "last": 12}),
}
LOSSLESS = "-lossless"  # the cluster name's suffix of a run's lossless-collector copy (the played run has the name)


def _reference(tmp_path_factory: pytest.TempPathFactory, cluster: str, rows: dict[str, list[dict[str, Any]]],
               cuts: dict[str, int]) -> Member:
    """A history as bronze of ``cluster`` in a lake of its own, and its reference run in the driver."""
    lake = Lake(tmp_path_factory.mktemp(cluster) / "reference", cluster=cluster)
    for table, table_rows in rows.items():
        lake.append(table, recluster(table_rows, cluster), writer_id="history", batch_seq=1)
    run_local(lake)
    return Member(cluster, lake, bronze(lake), cuts)


@pytest.fixture(scope="module")
def histories(runs: Any, tmp_path_factory: pytest.TempPathFactory) -> Set:
    """Every history the ways run over, and their references."""
    members = []
    for cluster, (make, kinds, cuts) in LITERAL.items():
        member = _reference(tmp_path_factory, cluster, make(), cuts)
        assert kinds <= {r["kind"] for r in member.reference.read_arrow(ANOMALIES.name).to_pylist()}, cluster
        members.append(member)
    members += [Member(lake.cluster, lake, bronze(lake)) for lake in (runs[r].lake for r in RUNS)]
    for lake in (runs[r].txn_lake for r in TXN_ONLY):
        members.append(_reference(tmp_path_factory, lake.cluster + LOSSLESS,
                                  {t: rows.to_pylist() for t, rows in bronze(lake).items()}, {}))
    assert len({m.cluster for m in members}) == len(members)  # one cluster per history
    return Set("all", members)


@dataclass
class Ctx:
    spark: Any
    set: Set
    tmp_path: Path

    def lake(self) -> Lake:
        return Lake(self.tmp_path / "lake", cluster=self.set.members[0].cluster)


def _last_batch(lake: Lake, table: str = PARTITION_STATE.name) -> int | None:
    """The last micro-batch the lake's query committed to ``table`` (``partition_state``: the batch done)."""
    writer = monitor_writer(lake)
    return lake.last_batch_seq(table, writer) if writer is not None else None


def _commits(steps: list[Chunk]) -> int:
    """Micro-batches a query taking one file per table and trigger makes of ``steps`` fed one commit each."""
    return max(sum(1 for chunk in steps for name, rows in chunk if name == table and rows.num_rows)
               for table in (Z, D))


# ---------------------------------------------------------------- ways

def spark_rebuild(ctx: Ctx) -> Lake:
    """`rebuild`: the Spark query from a fresh checkpoint, every bronze commit in one micro-batch."""
    dst = ctx.lake()
    feed(dst, ctx.set.bronze(), 1)
    rebuild(ctx.spark, dst, buckets=BUCKETS)
    assert _last_batch(dst) == 0  # one micro-batch
    return dst


def query_in_chunks(ctx: Ctx, **cut: Any) -> Lake:
    """The bronze in several commits (``cut``: ``Set.steps``), then the query taking one file per table and
    trigger: a micro-batch per commit, each continuing the state the last one left in Spark's state store."""
    dst = ctx.lake()
    steps = ctx.set.steps(**cut)
    for seq, step in enumerate(steps, start=1):
        feed(dst, step, seq)
    rebuild(ctx.spark, dst, buckets=BUCKETS, max_files_per_trigger=1)
    assert _last_batch(dst) == _commits(steps) - 1 > 0
    return dst


def monitor_after_a_rebuild(ctx: Ctx, **cut: Any) -> Lake:
    """`rebuild` on the first step; each later step arrives and the monitor drains it, an availableNow query
    restarted on the rebuild's checkpoint: one micro-batch each, publishing what the rebuild had not found."""
    dst = ctx.lake()
    first, *rest = ctx.set.steps(**cut)
    feed(dst, first, 1)
    rebuild(ctx.spark, dst, buckets=BUCKETS)
    before = {r["anomaly_id"] for r in dst.read_arrow(ANOMALIES.name).to_pylist()}
    published: list[dict[str, Any]] = []
    for seq, step in enumerate(rest, start=2):
        feed(dst, step, seq)
        assert drain_monitor(ctx.spark, dst, buckets=BUCKETS, publish=published.extend) == 1
    assert _last_batch(dst) == len(rest)
    # each anomaly the rebuild had not found, once
    assert sorted(r["anomaly_id"] for r in published) == sorted(
        r["anomaly_id"] for r in ctx.set.anomalies() if r["anomaly_id"] not in before)
    return dst


def monitor_killed_and_restarted(ctx: Ctx) -> Lake:
    """`zkledger monitor --available-now` as a process, three runs on its checkpoint with a step arriving
    before each: killed in micro-batch 0 before any commit (Spark's offset log has the batch, no table
    does); killed in micro-batch 1 after its `partition_transitions` commit, before the batch's last one (the replayed
    batch 0 done first); then to the end, the unfinished batch 1 replayed. Every anomaly printed once."""
    conf = ctx.tmp_path / "settings.toml"
    conf.write_text(MONITOR_SETTINGS)
    dst = ctx.lake()
    steps = ctx.set.steps()
    assert len(steps) == 3
    feed(dst, steps[0], 1)
    first = run_monitor(dst, conf, "--available-now", crash="before_commit:0")
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    writer = monitor_writer(dst)
    assert writer is not None
    assert [spec.name for spec in DERIVED if dst.last_batch_seq(spec.name, writer) is not None] == []
    feed(dst, steps[1], 2)
    second = run_monitor(dst, conf, "--available-now", crash=f"{COMMITTED}{PARTITION_TRANSITIONS.name}:1")
    assert second.returncode == -signal.SIGKILL, second.stderr[-3000:]
    assert (_last_batch(dst, PARTITION_TRANSITIONS.name), _last_batch(dst)) == (1, 0)
    feed(dst, steps[2], 3)
    last = run_monitor(dst, conf, "--available-now")
    assert last.returncode == 0, last.stderr[-3000:]
    assert "caught up" in last.stdout
    assert _last_batch(dst) == 2
    printed = [line for run in (first, second, last) for line in run.stdout.splitlines() if line.startswith("[")]
    assert Counter(printed) == _published_lines(dst)
    assert sorted(r["anomaly_id"] for r in dst.read_arrow(ANOMALIES.name).to_pylist()) == sorted(
        r["anomaly_id"] for r in ctx.set.anomalies())
    return dst


def _published_lines(lake: Lake) -> Counter[str]:
    """What the monitor prints: each committed batch's new anomalies (one append of the table per batch), like
    findings grouped on one line each."""
    lines: Counter[str] = Counter()
    seen: set[str] = set()
    for version in range((lake.version(ANOMALIES.name) or 0) + 1):
        rows = lake.read_arrow(ANOMALIES.name, version=version).to_pylist()
        lines.update(terminal_safe(describe_group(g)) for g in group_findings(r for r in rows if r["anomaly_id"] not in seen))
        seen |= {r["anomaly_id"] for r in rows}
    return lines


@dataclass(frozen=True)
class Way:
    name: str
    run: Callable[..., Lake]
    options: dict[str, Any] = field(default_factory=dict)


WAYS: list[Way] = [
    Way("rebuild-one-micro-batch", spark_rebuild),
    Way("query-over-3-commits-log-first-decisions-ahead", query_in_chunks, {"log": "first", "ahead": True}),
    Way("monitor-after-a-rebuild-at-random-rows-log-last", monitor_after_a_rebuild, {"seed": 7, "log": "last"}),
]
if os.environ.get("ZKLEDGER_ALL_COMMIT_POINTS"):  # the longer kill matrix; tests/engine/test_commit_points.py and
    # the killed spark-submit driver kill a monitor process in the default suite
    WAYS.append(Way("monitor-process-killed-and-restarted", monitor_killed_and_restarted))


@pytest.mark.parametrize("way", WAYS, ids=[w.name for w in WAYS])
def test_a_way_of_running_ends_with_the_references_tables(histories: Set, spark: Any, tmp_path: Path,
                                                          way: Way) -> None:
    ctx = Ctx(spark, histories, tmp_path)
    lake = way.run(ctx, **way.options)
    assert_same_tables(lake, ctx.set.reference)
