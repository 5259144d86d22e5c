"""A KRaft cluster whose controllers delete old metadata-log segments and snapshots while `zkledger collect kraft
--follow` reads one node's log still has its whole history in the lake (issue 29, item 6).

Three combined Kafka 4.1 nodes run with small metadata-log segments (64 KiB, rolled every 15 s), a snapshot every
2 s and a retention small enough that the raft log cleaner, which runs once a minute from a node's
start, deletes every segment below the newest snapshot. Meanwhile an Admin client makes a few thousand metadata
changes (topics created with mixed replication factors, several rounds of topic configs, partitions added,
topics deleted) and after each step records node 1's view (every partition's leader, leader epoch, ISR and
replicas, the quorum's leader, the live brokers) with the offset node 1's log has reached. Once Kafka has deleted
the segments the first steps were written to:

- the lake holds every offset from 0 to the end once, with no gap row and nothing quarantined;
- a rebuild, then `zkledger state --offset N` at each recorded offset whose segment is gone, and at the
  end, equals what Kafka reported there;
- a fresh collector on a copy of the node's directory, into a new lake, finds the deleted offsets covered by a
  snapshot (snapshot rows, a gap row naming it), and after its own rebuild answers the same final state.

The rebuilds run the pipeline's steps in the test's process (`engine.local_run`, as the Spark query composes
them; tests/e2e/test_kraft_history.py holds the two equal on a KRaft history). About two minutes on two cores,
most of it the wait for the cleaner's first run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from collectors.kraft_log import MetadataLogDir, read_batches
from engine.local_run import run_local
from kafkalab.kraft import KRaftCluster, metadata_log_options
from kafkalab.truth import describe
from lakehouse import Lake

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "kraft-retention"
NODE = 1  # the node whose metadata log is collected and whose broker's view is recorded
BROKERS = [1, 2, 3]
OPTIONS = {
    # a segment rolls every 15 s (or 64 KiB) and a snapshot comes every 2 s (or 16 KiB): the snapshot a cleaning
    # keeps ends inside the first segment it keeps, as it does on a production cluster
    **metadata_log_options(segment_bytes=64 * 1024, segment_ms=15_000, snapshot_bytes=16 * 1024,
                           snapshot_interval_ms=2_000, retention_bytes=1024, retention_ms=1_000),
    # a follower trailing on a loaded machine must not leave the ISR: every change here is one the test made
    "replica.lag.time.max.ms": "60000",
}
TOPICS_PER_WAVE = 30
PARTITIONS = 4
GROWN_TO = 7
CONFIG_ROUNDS = 6
CONFIG_KEYS = ("retention.ms", "retention.bytes", "segment.ms", "max.message.bytes", "flush.messages",
               "delete.retention.ms")

View = dict[tuple[str, int], tuple[int, int | None, tuple[int, ...], tuple[int, ...]]]


@dataclass
class Point:
    """Node 1's view right after a step, and the offset its metadata log had reached then."""

    step: str
    offset: int
    controller: int
    partitions: View


@dataclass
class Retention:
    lake: Lake
    copy_lake: Lake
    points: list[Point]
    first_segment: int  # the lowest base offset of node 1's segments when the collector stopped
    snapshots: list[int]  # end offsets of node 1's snapshots then
    collector_code: int
    collector_err: str
    copy_out: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def deleted_points(self) -> list[Point]:
        return [p for p in self.points if p.offset < self.first_segment]


def _zkledger(lake: Lake, *args: str) -> list[str]:
    return [sys.executable, "-m", "zkledger.cli", "--lake", lake.root, "--cluster", lake.cluster, *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


@dataclass
class Job:
    """A zkledger process whose output goes to files (a pipe nobody reads would stall a chatty Spark process)."""

    proc: subprocess.Popen[bytes]
    out: IO[bytes]
    err: IO[bytes]

    def output(self) -> tuple[str, str]:
        texts = []
        for f in (self.out, self.err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
            f.close()
        return texts[0], texts[1]


def _start(lake: Lake, *args: str) -> Job:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    proc = subprocess.Popen(_zkledger(lake, *args), stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=ROOT,
                            env=_env(), start_new_session=True)
    return Job(proc, out, err)


def _stop(job: Job, timeout: float) -> tuple[int, str, str]:
    """Wait for the process (SIGKILL to its group after `timeout`): exit code, stdout, stderr."""
    try:
        code = job.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.proc.pid, signal.SIGKILL)
        code = job.proc.wait(10)
    return (code, *job.output())


def _finish(job: Job, timeout: float = 600) -> str:
    code, out, err = _stop(job, timeout)
    assert code == 0, f"{job.proc.args!r}: {(err or out)[-2000:]}"
    return out


def _run(lake: Lake, *args: str, timeout: float = 600) -> str:
    return _finish(_start(lake, *args), timeout)


def log_end(log_dir: Path) -> int:
    """The last offset of the newest whole batch in a node's metadata log."""
    for segment in reversed(MetadataLogDir(log_dir).segments()):
        last = [b.last_offset for b in read_batches(segment.path)]
        if last:
            return max(last)
    raise AssertionError(f"no batch in {log_dir}")


def node_view(admin: Any, expected: dict[str, int]) -> View:
    """Node 1's metadata cache once it holds exactly the `expected` topics (name: partition count), each
    partition with a leader: the step's own changes are applied (Kafka committed them before it answered)."""
    deadline = time.monotonic() + 60
    while True:
        parts = describe(admin, NODE).partitions
        counts = Counter(t for t, _ in parts)
        if dict(counts) == expected and all(v.leader >= 0 for v in parts.values()):
            return {k: (v.leader, v.leader_epoch, v.isr, v.replicas) for k, v in parts.items()}
        if time.monotonic() > deadline:
            raise AssertionError(f"node {NODE} never showed the topics expected: {dict(counts)} != {expected}")
        time.sleep(0.1)


def _configs(admin: Any, topics: list[str], round_no: int) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    # every value differs from the last round's: Kafka writes a ConfigRecord only for a change
    resources = [ConfigResource(ConfigResourceType.TOPIC, t, configs={
        key: str(base + 1000 * round_no + i) for key, base in zip(CONFIG_KEYS, (
            3_600_000, 1 << 30, 86_400_000, 1_000_000, 1_000_000, 86_400_000), strict=True)})
        for i, t in enumerate(topics)]
    result = admin.alter_configs(resources, raise_on_unknown=False)
    answers = {name: res for by_name in result.values() for name, res in by_name.items()}
    assert answers == dict.fromkeys(topics, "OK"), [(n, r) for n, r in answers.items() if r != "OK"][:5]


def make_changes(cluster: KRaftCluster, record: Any) -> None:
    """A few thousand metadata records: after each step `record(step, expected topics)`."""
    a = [f"a{i:02d}" for i in range(TOPICS_PER_WAVE)]
    b = [f"b{i:02d}" for i in range(TOPICS_PER_WAVE)]
    expected: dict[str, int] = {}
    admin = cluster.admin(request_timeout_ms=30_000)
    try:
        admin.create_topics({t: {"num_partitions": PARTITIONS, "replication_factor": 1 + i % 3}
                             for i, t in enumerate(a)}, timeout_ms=30_000)
        expected.update(dict.fromkeys(a, PARTITIONS))
        record("create a", expected, admin)
        _configs(admin, a, 0)
        record("configs a", expected, admin)
        # replicas in an order of the test's choosing: the preferred leader is not always the placer's pick
        admin.create_topics({t: {"assignments": {p: [BROKERS[(i + p) % 3], BROKERS[(i + p + 1 + i % 2) % 3]]
                                                 for p in range(PARTITIONS)}} for i, t in enumerate(b)},
                            timeout_ms=30_000)
        expected.update(dict.fromkeys(b, PARTITIONS))
        record("create b", expected, admin)
        admin.create_partitions(dict.fromkeys(a, GROWN_TO), timeout_ms=30_000)
        expected.update(dict.fromkeys(a, GROWN_TO))
        record("grow a", expected, admin)
        for n in range(1, CONFIG_ROUNDS + 1):
            _configs(admin, a + b, n)
            record(f"configs round {n}", expected, admin)
        gone = b[::2]
        admin.delete_topics(gone, timeout_ms=30_000)
        for t in gone:
            del expected[t]
        record("delete half of b", expected, admin)
    finally:
        admin.close()


def wait_deleted(cluster: KRaftCluster, log_dir: Path, offset: int, timeout_s: float) -> None:
    """Until Kafka has deleted the segment holding `offset` and a snapshot covers it (the raft log cleaner runs
    a minute after a node starts, then every minute)."""
    def gone() -> bool:
        cluster._check_alive()
        d = MetadataLogDir(log_dir)
        segments, snapshots = d.segments(), d.snapshots()
        return bool(segments) and segments[0].base_offset > offset and any(
            s.end_offset >= segments[0].base_offset for s in snapshots)

    cluster.wait_for(gone, f"node {NODE} to delete the segment holding offset {offset}", timeout_s)


def quorum_settled(cluster: KRaftCluster) -> bool:
    """Every controller's quorum-state names the same leader and epoch."""
    states = [cluster.quorum_state(n) for n in cluster.controller_ids]
    if any(s is None or int(s.get("leaderId", -1)) < 0 for s in states):
        return False
    return len({(int(s["leaderId"]), int(s["leaderEpoch"])) for s in states if s is not None}) == 1


def lake_end(lake: Lake) -> int:
    if not lake.exists("kraft_records"):
        return -1
    offsets = lake.scan("kraft_records", columns=["offset"]).column("offset").to_pylist()
    return max(offsets, default=-1)


@pytest.fixture(scope="module")
def retention(tmp_path_factory: pytest.TempPathFactory, starts_kraft: None,
              takes_minutes: None) -> Iterator[Retention]:
    tmp = tmp_path_factory.mktemp("kraft-retention")
    lake = Lake(tmp / "lake", cluster=CLUSTER)
    copy_lake = Lake(tmp / "copy-lake", cluster=CLUSTER)
    points: list[Point] = []
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    cluster = KRaftCluster(tmp / "cluster", overrides=OPTIONS)
    try:
        cluster.launch()
        # Kafka's raft client cleans the log a minute after it starts, then every minute: the collector starts
        # once the quorum has settled on a leader, not once the brokers are up too, or a loaded machine's slow
        # start-up lets the first cleaning delete the bootstrap segment before the collector has read it. Not
        # before the quorum settles: a leader voted out before its epoch's first record was committed leaves
        # a tail that the next leader's log replaces at the same offsets.
        log_dir = cluster.metadata_log_dir(NODE)
        cluster.wait_for(lambda: quorum_settled(cluster), "the controllers to agree on a leader",
                         cluster.start_timeout_s)
        collector = _start(lake, "collect", "kraft", "--dir", str(log_dir), "--follow")
        timings["collector started"] = time.monotonic() - t0
        try:
            cluster.wait_started()
            timings["cluster up"] = time.monotonic() - t0

            def record(step: str, expected: dict[str, int], admin: Any) -> None:
                view = node_view(admin, expected)
                leader = cluster.quorum_leader()
                assert leader is not None
                points.append(Point(step, log_end(log_dir), leader[0], view))

            make_changes(cluster, record)
            timings["changes made"] = time.monotonic() - t0
            wait_deleted(cluster, log_dir, points[1].offset, timeout_s=180)
            timings["segments deleted"] = time.monotonic() - t0
            admin = cluster.admin(request_timeout_ms=30_000)
            try:
                record("final", dict(Counter(t for t, _ in points[-1].partitions)), admin)
            finally:
                admin.close()
            last = points[-1].offset
            deadline = time.monotonic() + 60
            while lake_end(lake) < last and collector.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.3)
        finally:
            if collector.proc.poll() is None:
                collector.proc.send_signal(signal.SIGTERM)
            collector_code, _out, err = _stop(collector, 60)
        d = MetadataLogDir(log_dir)
        first_segment = d.segments()[0].base_offset
        snapshots = [s.end_offset for s in d.snapshots()]
        copy = tmp / "copy" / log_dir.name
        shutil.copytree(log_dir, copy, ignore=shutil.ignore_patterns("*.deleted", "*.part", "*.index",
                                                                     "*.timeindex", "*.snapshot"))
        copy_collect = _start(copy_lake, "collect", "kraft", "--dir", str(copy))
    finally:
        cluster.stop()
    timings["cluster stopped"] = time.monotonic() - t0
    # the pipeline's steps in this process (engine.local_run), as the Spark query composes them for `rebuild`
    # (tests/e2e/test_kraft_history.py holds the two equal on a KRaft history with snapshots)
    run_local(lake)
    timings["rebuilt"] = time.monotonic() - t0
    copy_out = _finish(copy_collect)
    run_local(copy_lake)
    timings["copy rebuilt"] = time.monotonic() - t0
    print(f"kraft retention: {len(points)} points, last offset {points[-1].offset}, first kept segment "
          f"{first_segment}, snapshots {snapshots}; timings {timings}", file=sys.stderr)
    yield Retention(lake, copy_lake, points, first_segment, snapshots, collector_code, err, copy_out,
                    timings)


def state(lake: Lake, offset: int) -> dict[str, Any]:
    return dict(json.loads(_run(lake, "state", "--offset", str(offset), "--format", "json").splitlines()[0]))


def as_view(st: dict[str, Any]) -> View:
    return {(p["topic"], p["partition"]): (p["leader"], p["leader_epoch"], tuple(sorted(p["isr"] or [])),
                                           tuple(p["replicas"] or []))
            for p in st["partitions"] if not str(p["topic"]).startswith("__")}


def assert_state_is(st: dict[str, Any], point: Point) -> None:
    assert (st["controller_id"], st["live_brokers"]) == (point.controller, BROKERS), point.step
    ours = as_view(st)
    diff = {k: (ours.get(k), point.partitions.get(k)) for k in set(ours) | set(point.partitions)
            if ours.get(k) != point.partitions.get(k)}
    assert not diff, f"{point.step} (offset {point.offset}): {len(diff)} partitions differ, e.g. {sorted(diff.items())[:5]}"
    assert {p["state"] for p in st["partitions"]} == {"OnlinePartition"}, point.step


def test_kafka_deleted_the_early_segments_while_the_collector_followed(retention: Retention) -> None:
    assert retention.collector_code == 0, retention.collector_err[-2000:]
    assert len(retention.deleted_points) >= 2, (retention.first_segment, [p.offset for p in retention.points])
    assert retention.snapshots and retention.snapshots[0] >= retention.first_segment
    assert sum(len(p.partitions) for p in retention.points[-1:]) > 100


def test_the_lake_holds_every_offset_once_though_the_segments_are_gone(retention: Retention) -> None:
    rows = retention.lake.scan("kraft_records", columns=["offset", "source", "snapshot_id"]).to_pylist()
    assert {r["source"] for r in rows} == {"segment"}, Counter(r["source"] for r in rows)
    offsets = Counter(r["offset"] for r in rows)
    last = max(offsets)
    assert max(offsets.values()) == 1, [o for o, n in offsets.items() if n > 1][:10]
    assert sorted(offsets) == list(range(last + 1)), "a hole in the collected offsets"
    assert last >= retention.points[-1].offset
    types = Counter(r["record_type"] for r in retention.lake.scan("kraft_records", columns=["record_type"]).to_pylist())
    assert sum(types.values()) - types["NO_OP_RECORD"] > 2500, f"fewer changes than a few thousand: {types}"
    assert not (retention.lake.exists("quarantine") and retention.lake.row_count("quarantine"))


def test_state_at_deleted_offsets_equals_what_kafka_reported(retention: Retention) -> None:
    for point in retention.deleted_points:
        assert_state_is(state(retention.lake, point.offset), point)


def test_the_final_state_equals_kafkas(retention: Retention) -> None:
    final = retention.points[-1]
    assert final.offset >= retention.first_segment
    assert_state_is(state(retention.lake, final.offset), final)


def test_a_fresh_collector_on_a_copy_reads_the_snapshot_and_ends_in_the_same_state(retention: Retention) -> None:
    rows = retention.copy_lake.scan("kraft_records", columns=["offset", "batch_last_offset", "source",
                                                              "snapshot_id"]).to_pylist()
    gaps = [r for r in rows if r["source"] == "gap"]
    assert len(gaps) == 1, (gaps, retention.copy_out[-500:])
    gap = gaps[0]
    assert (gap["offset"], gap["batch_last_offset"]) == (0, retention.first_segment - 1)
    snap_rows = [r for r in rows if r["source"] == "snapshot"]
    assert snap_rows and {r["snapshot_id"] for r in snap_rows} == {gap["snapshot_id"]}
    end = int(str(gap["snapshot_id"]).split("-")[0])
    assert end in retention.snapshots
    # the snapshot reaches the first kept segment; mostly it ends inside it (the records from the segment's base to
    # the snapshot's end are in both), at times exactly where it starts
    assert end >= retention.first_segment
    segment = sorted(r["offset"] for r in rows if r["source"] == "segment")
    assert segment == list(range(retention.first_segment, segment[-1] + 1))
    assert not (retention.copy_lake.exists("quarantine") and retention.copy_lake.row_count("quarantine"))
    last = retention.points[-1].offset
    ours, theirs = state(retention.copy_lake, last), state(retention.lake, last)
    assert ours["partitions"], f"the copy's lake has no partition at offset {last} (snapshot {gap['snapshot_id']})"
    assert as_view(ours) == as_view(theirs)
    assert (ours["live_brokers"], [p["state"] for p in ours["partitions"]]) == (
        theirs["live_brokers"], [p["state"] for p in theirs["partitions"]])
    # the quorum's leader is named by LeaderChange control records only, never in a snapshot: a history that
    # starts from one knows it once a LeaderChange it still holds names it
    types = Counter(r["record_type"] for r in retention.copy_lake.scan("kraft_records",
                                                                       columns=["record_type"]).to_pylist())
    assert ours["controller_id"] == (theirs["controller_id"] if types["LEADER_CHANGE"] else None)
