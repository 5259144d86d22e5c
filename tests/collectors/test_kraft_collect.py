"""`zkledger collect kraft`: a KRaft metadata log directory (segments and snapshots written here byte for byte as
Kafka writes them) into kraft_records, once per record across reruns, follows, kills and deleted segments;
what cannot be read lands in quarantine and nothing after it is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from collectors.bronze import WriterBusyError
from collectors.kraft_collect import KraftCollector
from lakehouse import Lake
from pipelines.kraft_stage import current_records
from tests import kraft_bytes as kb
from tests.collectors.conftest import wait_for
from tests.collectors.kraft_fixtures import MetadataLog, no_op_record, topic_record
from zkledger.cli import main

ROOT = Path(__file__).resolve().parents[2]
TABLE = "kraft_records"


def records(lake: Lake, **where: Any) -> list[dict[str, Any]]:
    if not lake.exists(TABLE):
        return []
    return [r for r in lake.read_arrow(TABLE).to_pylist() if all(r[k] == v for k, v in where.items())]


def quarantined(lake: Lake) -> list[dict[str, Any]]:
    return lake.read_arrow("quarantine").to_pylist() if lake.exists("quarantine") else []


def segment_types(lake: Lake) -> dict[int, str]:
    """offset -> record type of every segment row; fails on an offset stored twice."""
    rows = records(lake, source="segment")
    offsets = [r["offset"] for r in rows]
    assert len(offsets) == len(set(offsets)), Counter(o for o in offsets if offsets.count(o) > 1)
    return {r["offset"]: r["record_type"] or "" for r in rows}


def story(tmp_path: Path) -> MetadataLog:
    """Three segments: a leader change and topics, with batches of one to three records."""
    log = MetadataLog.create(tmp_path / "metadata")
    log.leader_change(1)
    log.topics("a", "b", "c")
    log.topics("d")
    log.roll()
    log.leader_change(2, epoch=2)
    log.topics("e", "f", epoch=2)
    log.roll()
    log.topics("g", epoch=2)
    return log


# ------------------------------------------------------------------------------------------------ one pass
def test_every_record_of_every_segment_lands_once_and_a_rerun_writes_nothing(lake: Lake, tmp_path: Path) -> None:
    log = story(tmp_path)
    summary = KraftCollector(lake, log.path).run()
    assert summary["records"] == len(log.expected) == 9 and summary["gaps"] == 0
    assert summary["next_offset"] == log.next_offset
    assert segment_types(lake) == log.expected
    rows = {r["offset"]: r for r in records(lake)}
    assert rows[0]["is_control"] and rows[0]["record_type"] == "LEADER_CHANGE" and rows[0]["leader_epoch"] == 1
    assert rows[2]["batch_base_offset"] == 1 and rows[2]["batch_last_offset"] == 3  # topics a, b, c: one batch
    assert rows[2]["value"] == topic_record("b") and rows[2]["record_version"] == 0
    assert rows[5]["leader_epoch"] == 2 and rows[5]["file_name"] == "00000000000000000005.log"
    assert rows[2]["batch_timestamp"].timestamp() == pytest.approx(1_700_000_000.001)
    assert {r["source"] for r in rows.values()} == {"segment"} and all(r["snapshot_id"] is None for r in rows.values())
    version = lake.version(TABLE)
    again = KraftCollector(lake, log.path.parent).run()  # the parent log dir names the same log
    assert again["records"] == 0 and lake.version(TABLE) == version


def test_deleted_segments_covered_by_a_snapshot_are_read_from_it_and_reported(lake: Lake, tmp_path: Path) -> None:
    log = story(tmp_path)
    snapshot, count = log.snapshot(["a", "b", "c", "d", "e", "f", "g"], epoch=2)
    log.roll()
    log.topics("h", epoch=2)
    assert log.delete_segments_below(9) == [0, 5, 8]  # Kafka deletes what the snapshot holds
    summary = KraftCollector(lake, log.path).run()
    assert summary["gaps"] == 1 and summary["snapshot_records"] == count == 9
    assert segment_types(lake) == {9: "TOPIC_RECORD"}
    snap = records(lake, source="snapshot")
    assert sorted(r["offset"] for r in snap) == list(range(count))
    assert {r["snapshot_id"] for r in snap} == {"9-2"} and {r["file_name"] for r in snap} == {snapshot.name}
    by_offset = {r["offset"]: r["record_type"] for r in snap}
    assert by_offset[0] == "SNAPSHOT_HEADER" and by_offset[count - 1] == "SNAPSHOT_FOOTER"
    [gap] = records(lake, source="gap")
    assert (gap["offset"], gap["batch_last_offset"], gap["snapshot_id"]) == (0, 8, "9-2")
    assert "covered by snapshot 9-2" in gap["detail"]
    version = lake.version(TABLE)
    assert KraftCollector(lake, log.path).run()["records"] == 0 and lake.version(TABLE) == version


def test_deleted_segments_no_snapshot_covers_are_a_gap(lake: Lake, tmp_path: Path) -> None:
    log = story(tmp_path)
    KraftCollector(lake, log.path).run()
    log.topics("x", "y", epoch=2)
    log.roll()
    log.topics("z", epoch=2)
    log.delete_segments_below(log.next_offset - 1)  # offsets 9..10 go before they were read, no snapshot
    summary = KraftCollector(lake, log.path).run()
    assert summary["gaps"] == 1 and summary["records"] == 1 and summary["snapshot_records"] == 0
    [gap] = records(lake, source="gap")
    assert (gap["offset"], gap["batch_last_offset"], gap["snapshot_id"]) == (9, 10, None)
    assert "no snapshot covers them" in gap["detail"]
    assert sorted(segment_types(lake)) == [*range(9), 11]
    assert KraftCollector(lake, log.path).run()["gaps"] == 0  # reported once


# ------------------------------------------------------------------------------------------------ bad input
def test_a_corrupt_batch_is_quarantined_with_its_position_and_nothing_after_it_is_lost(
    lake: Lake, tmp_path: Path
) -> None:
    log = MetadataLog.create(tmp_path / "metadata")
    log.topics("a")
    position = log.active.stat().st_size
    bad = bytearray(log.topics("b", "c"))
    bad[-3] ^= 0xFF  # a payload byte: the CRC no longer matches
    log.active.write_bytes(log.active.read_bytes()[:position] + bytes(bad))
    log.topics("d")
    log.roll()
    log.topics("e")
    summary = KraftCollector(lake, log.path).run()
    assert summary["quarantined"] == 1 and summary["gaps"] == 1
    [q] = quarantined(lake)
    assert q["source"] == "kraft" and "CRC mismatch" in q["reason"] and f"bytes {position}.." in q["reason"]
    assert q["ref"].endswith(f"00000000000000000000.log:{position}") and bytes.fromhex(q["raw"]) == bytes(bad)
    assert segment_types(lake) == {0: "TOPIC_RECORD", 3: "TOPIC_RECORD", 4: "TOPIC_RECORD"}
    [gap] = records(lake, source="gap")
    assert (gap["offset"], gap["batch_last_offset"]) == (1, 2) and "CRC mismatch" in gap["detail"]
    again = KraftCollector(lake, log.path).run()
    assert again["quarantined"] == 0 and again["gaps"] == 0 and len(quarantined(lake)) == 1


def test_an_undecodable_record_is_quarantined_and_kept_raw(lake: Lake, tmp_path: Path) -> None:
    log = MetadataLog.create(tmp_path / "metadata")
    unknown_type = kb.metadata_value(99, 0, kb.tagged())
    truncated = topic_record("t")[:-5]
    log.raw_batch([no_op_record(), unknown_type, truncated, topic_record("u")], ["NO_OP_RECORD", None, None,
                                                                                 "TOPIC_RECORD"])
    summary = KraftCollector(lake, log.path).run()
    assert summary["records"] == 4 and summary["quarantined"] == 2
    rows = {r["offset"]: r for r in records(lake)}
    assert [rows[o]["record_type"] for o in range(4)] == ["NO_OP_RECORD", None, None, "TOPIC_RECORD"]
    assert rows[1]["value"] == unknown_type and rows[2]["value"] == truncated and rows[1]["record_version"] is None
    assert "unknown record type 99" in rows[1]["detail"]
    reasons = sorted(q["reason"] for q in quarantined(lake))
    assert reasons[0].startswith("offset 1: unknown record type 99") and reasons[1].startswith("offset 2: ")
    assert {bytes.fromhex(q["raw"]) for q in quarantined(lake)} == {unknown_type, truncated}
    assert KraftCollector(lake, log.path).run()["quarantined"] == 0 and len(quarantined(lake)) == 2


# ------------------------------------------------------------------------------------------------ following
def test_follow_takes_appended_batches_and_a_torn_tail_only_once_it_is_whole(lake: Lake, tmp_path: Path) -> None:
    log = MetadataLog.create(tmp_path / "metadata")
    log.topics("a")
    collector = KraftCollector(lake, log.path, follow=True, flush_seconds=0.0)
    try:
        collector.poll_once()
        assert segment_types(lake) == {0: "TOPIC_RECORD"}
        whole = kb.batch(1, [kb.record(0, topic_record("b")), kb.record(1, topic_record("c"))])
        log.append_bytes(whole[:40])  # Kafka is half-way through writing it
        collector.poll_once()
        collector.poll_once()
        assert segment_types(lake) == {0: "TOPIC_RECORD"} and not quarantined(lake)
        log.append_bytes(whole[40:])
        collector.poll_once()
        assert segment_types(lake) == {0: "TOPIC_RECORD", 1: "TOPIC_RECORD", 2: "TOPIC_RECORD"}
        log.next_offset = 3
        log.roll()  # a new segment, then a leader change in it
        log.leader_change(2, epoch=2)
        collector.poll_once()
        assert segment_types(lake)[3] == "LEADER_CHANGE"
        with pytest.raises(WriterBusyError, match=f"pid {os.getpid()}"):  # one writer per log directory
            KraftCollector(lake, log.path).poll_once()
    finally:
        collector.close()
    assert collector.summary()["records"] == 4 and collector.summary()["gaps"] == 0


def offsets_and_epochs(lake: Lake) -> list[tuple[int, int]]:
    return sorted((r["offset"], r["leader_epoch"]) for r in records(lake, source="segment"))


def the_log(lake: Lake) -> list[tuple[int, int]]:
    """(offset, leader epoch) of the log as it stands, read from the lake as the pipeline reads it."""
    rows = current_records(lake.read_arrow(TABLE)).to_pylist()
    return sorted((r["offset"], r["leader_epoch"]) for r in rows if r["source"] == "segment")


def test_a_tail_raft_rewrote_after_it_was_collected_is_stored_beside_the_truncated_records(
        lake: Lake, tmp_path: Path) -> None:
    """The node followed led epoch 1 and appended two batches it never committed; the collector took them. Raft
    then truncated them and the node took epoch 2's leader's log at those offsets: those records are stored too,
    once, and at each offset the newest epoch's is the log's; nothing is quarantined."""
    log = MetadataLog.create(tmp_path / "metadata")
    log.leader_change(1)  # offset 0, committed
    committed = log.active.stat().st_size
    log.topics("a", "b")  # offsets 1-2 at epoch 1, never committed
    log.topics("c")  # offset 3
    collector = KraftCollector(lake, log.path, follow=True, flush_seconds=0.0)
    try:
        collector.poll_once()
        assert segment_types(lake) == {0: "LEADER_CHANGE", 1: "TOPIC_RECORD", 2: "TOPIC_RECORD", 3: "TOPIC_RECORD"}
        os.truncate(log.active, committed)  # the follower truncates to where the logs agree ...
        log.next_offset = 1
        log.leader_change(2, epoch=2)  # ... and appends the new leader's batches: offset 1
        log.topics("d", "e", epoch=2)  # offsets 2-3, both collected before at epoch 1
        log.topics("f", epoch=2)  # offset 4, new
        collector.poll_once()
        collector.poll_once()
    finally:
        collector.close()
    assert offsets_and_epochs(lake) == [(0, 1), (1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2), (4, 2)]
    assert the_log(lake) == [(0, 1), (1, 2), (2, 2), (3, 2), (4, 2)]
    assert {r["offset"]: r["record_type"] for r in records(lake, leader_epoch=2)}[1] == "LEADER_CHANGE"
    assert quarantined(lake) == []
    assert collector.summary()["rewritten"] == 2 and collector.summary()["records"] == 8
    again = KraftCollector(lake, log.path).run()  # a restart finds the rewrite stored
    assert (again["rewritten"], again["records"]) == (0, 0)
    assert len(offsets_and_epochs(lake)) == 8


def test_a_tail_rewritten_while_no_collector_ran_is_stored_by_the_next_run(
        lake: Lake, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = MetadataLog.create(tmp_path / "metadata")
    log.leader_change(1)
    committed = log.active.stat().st_size
    log.topics("a", "b")  # offsets 1-2 at epoch 1, never committed
    KraftCollector(lake, log.path).run()
    os.truncate(log.active, committed)
    log.next_offset = 1
    log.leader_change(2, epoch=2)  # offset 1
    log.topics("c", "d", epoch=2)  # offsets 2-3
    assert main(["--lake", lake.root, "--cluster", lake.cluster, "collect", "kraft", "--dir", str(log.path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (  # offsets 1 and 2 again, offset 3 new
        "collect kraft: 3 records written (0 from snapshots), 0 gaps, 0 quarantined, next offset 4, 2 batches Raft "
        "rewrote after they were collected (stored beside the truncated records; the newest leader epoch is the log's)")
    assert the_log(lake) == [(0, 1), (1, 2), (2, 2), (3, 2)]
    assert quarantined(lake) == []
    assert KraftCollector(lake, log.path).run()["rewritten"] == 0  # stored once


# ------------------------------------------------------------------------------------------------ the CLI
def test_cli_help_and_one_line_errors(lake: Lake, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["collect", "kraft", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: zkledger collect kraft") and "--dir METADATA_LOG_DIR" in out and "--follow" in out
    empty = tmp_path / "empty"
    (empty / "__cluster_metadata-0").mkdir(parents=True)
    for where, message in [(tmp_path / "nowhere", "no such directory"),
                           (tmp_path, "not a KRaft metadata log"),
                           (empty, "no log segments")]:
        assert main(["--lake", lake.root, "collect", "kraft", "--dir", str(where)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: --dir") and message in err, err
    log = story(tmp_path)
    assert main(["--lake", lake.root, "--cluster", "test", "collect", "kraft", "--dir", str(log.path)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "collect kraft: 9 records written (0 from snapshots), 0 gaps, 0 quarantined, next offset 9"
    assert segment_types(lake) == log.expected


# ------------------------------------------------------------------------------------------------ processes
def _conf(tmp_path: Path, batch_size: int) -> str:
    path = tmp_path / f"batch{batch_size}.toml"
    path.write_text(f"[collect]\nbatch_size = {batch_size}\nflush_seconds = 0.05\npoll_seconds = 0.05\n")
    return str(path)


def _start(lake: Lake, log: MetadataLog, conf: str, stderr: Path, *extra: str,
           crash: str | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ZKLEDGER_LAKE_CRASH", None)
    if crash is not None:
        env["ZKLEDGER_LAKE_CRASH"] = crash
    cmd = [sys.executable, "-m", "zkledger.cli", "--conf", conf, "--lake", lake.root, "--cluster", lake.cluster,
           "collect", "kraft", "--dir", str(log.path), *extra]
    with open(stderr, "ab") as err:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)


def test_a_crash_at_the_commits_of_a_rewritten_tail_loses_and_duplicates_nothing(lake: Lake, tmp_path: Path) -> None:
    """The rewritten records are committed (batch sequence 4: after offset 3) before the log's new ones (6): a
    process killed before or after that commit leaves a restart to store each record once."""
    log = MetadataLog.create(tmp_path / "metadata")
    log.leader_change(1)
    committed = log.active.stat().st_size
    log.topics("a", "b")  # offsets 1-2, never committed
    log.topics("c")  # offset 3
    KraftCollector(lake, log.path).run()
    os.truncate(log.active, committed)
    log.next_offset = 1
    log.leader_change(2, epoch=2)  # offset 1
    log.topics("d", "e", epoch=2)  # offsets 2-3
    log.topics("f", "g", epoch=2)  # offsets 4-5, new
    stderr, conf = tmp_path / "collector.log", _conf(tmp_path, 100)
    for crash in ("before_commit:4", "after_commit:4"):
        assert _start(lake, log, conf, stderr, crash=crash).wait(60) == -signal.SIGKILL
        landed = [o for o, e in offsets_and_epochs(lake) if e == 2]
        assert landed == ([] if crash.startswith("before") else [1, 2, 3]), crash
    assert _start(lake, log, conf, stderr).wait(60) == 0
    assert offsets_and_epochs(lake) == [(0, 1), (1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2), (4, 2), (5, 2)]
    assert the_log(lake) == [(0, 1), (1, 2), (2, 2), (3, 2), (4, 2), (5, 2)]


def test_kill_9_at_random_points_and_crashes_at_commit_lose_and_duplicate_nothing(
    lake: Lake, tmp_path: Path
) -> None:
    log = MetadataLog.create(tmp_path / "metadata")
    for i in range(30):  # a backlog: several commits of 3 rows per run
        if i % 2:
            log.topics(f"t{i}", f"u{i}")
        else:
            log.leader_change(i % 3)
    writer_id = f"kraft:{log.path.resolve()}"

    def last() -> int | None:
        return lake.last_batch_seq(TABLE, writer_id) if lake.exists(TABLE) else None

    stderr = tmp_path / "collector.log"
    small = _conf(tmp_path, 3)

    # forced crashes at exact points: before the commit of the batch ending at offset 9 (nothing of it lands),
    # and right after the commit of the one ending at offset 18 (it is in; the process dies before the rest)
    crashed = _start(lake, log, small, stderr, crash="before_commit:9")
    assert crashed.wait(60) == -signal.SIGKILL
    stored = last()
    assert stored is not None and stored < 9
    crashed = _start(lake, log, small, stderr, crash="after_commit:18")
    assert crashed.wait(60) == -signal.SIGKILL
    assert last() == 18

    # kill -9 at seeded random moments while the log keeps growing, rolling segments now and then
    stop = threading.Event()

    def kafka() -> None:
        i = 0
        while not stop.wait(0.01):
            if i % 4:
                log.topics(f"k{i}", f"l{i}", f"m{i}")
            else:
                log.leader_change(i % 3, epoch=2)
            if i % 25 == 24:
                log.roll()
            i += 1

    grower = threading.Thread(target=kafka, daemon=True)
    grower.start()
    rnd = random.Random(20261126)
    try:
        for delay in (rnd.uniform(0.0, 1.5) for _ in range(4)):
            before = last()
            proc = _start(lake, log, small, stderr, "--follow")
            wait_for(lambda: last() != before or proc.poll() is not None, limit=120)  # noqa: B023
            stop.wait(delay)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(30) == -signal.SIGKILL
    finally:
        stop.set()
        grower.join(30)

    # a clean follow catches up, then stops on SIGTERM
    final = _start(lake, log, _conf(tmp_path, 50), stderr, "--follow")
    try:
        wait_for(lambda: last() == log.next_offset, limit=120)
    finally:
        final.send_signal(signal.SIGTERM)
        assert final.wait(60) == 0, stderr.read_text()[-2000:]
    assert segment_types(lake) == log.expected  # every offset once, with its type
    assert not records(lake, source="gap") and not quarantined(lake)
    assert len(log.segments) > 1


def test_a_second_collector_on_the_same_log_is_refused_with_one_line(lake: Lake, tmp_path: Path) -> None:
    log = story(tmp_path)
    stderr = tmp_path / "collector.log"
    first = _start(lake, log, _conf(tmp_path, 100), stderr, "--follow")
    try:
        wait_for(lambda: len(records(lake)) == len(log.expected) or first.poll() is not None, limit=120)
        second = subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", lake.root, "--cluster", "test",
                                 "collect", "kraft", "--dir", str(log.path)], capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=120)
        assert second.returncode == 1, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "already writing" in lines[0] and f"pid {first.pid}" in lines[0], second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0, stderr.read_text()[-2000:]
    assert segment_types(lake) == log.expected
