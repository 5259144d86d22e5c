"""The log collector's file handling: one live writer per file (two real processes), paths that are not
log files, and a runaway first line (cut at read, quarantined with the reason)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from collectors.bronze import WriterBusyError, WriterLease
from collectors.kafka_logs import MAX_LINE_BYTES, collect_logs
from collectors.log_parser import MAX_MESSAGE_CHARS
from tests.collectors.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
_CLI = "import sys; from zkledger.cli import main; sys.exit(main(sys.argv[1:]))"
_LINE = ("[2019-08-12 10:00:{s:02d},{ms:03d}] TRACE [Controller id=1 epoch=3] Changed state of replica 2 for "
         "partition orders-{p} from OnlineReplica to OnlineReplica (state.change.logger)\n")


def _log_file(path: Path, lines: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for i in range(lines):
            f.write(_LINE.format(s=i // 1000 % 60, ms=i % 1000, p=i))
    return path


def _cli(lake_root: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", _CLI, "--lake", str(lake_root), "--cluster", "test", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _rows(lake: Any, table: str) -> list[dict[str, Any]]:
    return lake.read_arrow(table).to_pylist() if lake.exists(table) else []


def test_a_second_process_on_the_same_log_is_refused_and_nothing_is_doubled(lake: Any, tmp_path: Path) -> None:
    log = _log_file(tmp_path / "broker-1" / "state-change.log", 800)
    first = _cli(Path(lake.root), "collect", "logs", "--path", str(log.parent), "--follow")
    try:
        # the last record stays open while following (a continuation line may come)
        wait_for(lambda: len(_rows(lake, "controller_decisions")) >= 799, limit=60)
        second = _cli(Path(lake.root), "collect", "logs", "--path", str(log.parent))
        _out, err = second.communicate(timeout=60)
        assert second.returncode == 1
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "already writing" in lines[0] and "Traceback" not in err, err
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 0
    rows = _rows(lake, "controller_decisions")
    assert len(rows) == 800 and len({r["event_id"] for r in rows}) == 800


def test_two_processes_started_together_write_each_line_once(lake: Any, tmp_path: Path) -> None:
    log = _log_file(tmp_path / "broker-1" / "state-change.log", 800)
    procs = [_cli(Path(lake.root), "collect", "logs", "--path", str(log)) for _ in range(2)]
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]
    # one collects; the other either is refused or starts after it and finds everything committed
    assert any(rc == 0 for rc, _err in results)
    assert all(rc == 0 or "already writing" in err for rc, err in results), results
    rows = _rows(lake, "controller_decisions")
    assert len(rows) == 800 and len({r["event_id"] for r in rows}) == 800


def test_a_crashed_holder_releases_the_lease(lake: Any, tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from collectors.bronze import WriterLease; "
         "lease = WriterLease(sys.argv[1], 'logs:x').acquire(); print('held', flush=True); time.sleep(60)", lake.root],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(WriterBusyError, match=f"pid {holder.pid}"):
            WriterLease(lake.root, "logs:x").acquire()
        WriterLease(lake.root, "logs:y").acquire().release()  # other writer ids are free
    finally:
        holder.kill()
        holder.wait(30)
    with WriterLease(lake.root, "logs:x") as lease:  # SIGKILL released it
        assert lease.held


@pytest.mark.parametrize("path", ["/dev/null", "fifo"])
def test_a_path_that_is_no_file_or_folder_is_a_one_line_error(
    path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from zkledger.cli import main

    if path == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    assert main(["--lake", str(tmp_path / "lake"), "collect", "logs", "--path", path]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a regular file or a folder" in err[0]


def test_a_runaway_first_line_is_cut_at_read_and_quarantined(lake: Any, tmp_path: Path) -> None:
    log = tmp_path / "broker-1" / "state-change.log"
    log.parent.mkdir(parents=True)
    head = _LINE.format(s=0, ms=0, p=0).rstrip("\n")
    size = 10 * 1024 * 1024
    with log.open("w", encoding="utf-8") as f:
        f.write(head + " " + "x" * (size - len(head) - 1) + "\n")  # a 10 MB first line
        for i in range(1, 4):
            f.write(_LINE.format(s=0, ms=i, p=i))
    summary = collect_logs(lake, log)
    rows = sorted(_rows(lake, "controller_decisions"), key=lambda r: r["line_no"])
    assert [r["line_no"] for r in rows] == [1, 2, 3, 4] and summary["records"] == 4
    assert len(rows[0]["message"]) <= MAX_MESSAGE_CHARS  # not stored whole
    assert [r["partition"] for r in rows[1:]] == [1, 2, 3]  # the lines after it intact
    quarantine = _rows(lake, "quarantine")
    assert len(quarantine) == 1 and summary["quarantined"] == 1
    q = quarantine[0]
    assert q["ref"].endswith("state-change.log:1") and f"line of {size} bytes" in q["reason"]
    assert len(q["raw"]) <= MAX_LINE_BYTES
    again = collect_logs(lake, log)  # resumes after it: nothing twice
    assert again["records"] == 0 and len(_rows(lake, "quarantine")) == 1


def test_a_runaway_line_still_being_written_is_waited_for(lake: Any, tmp_path: Path) -> None:
    import threading

    log = tmp_path / "broker-1" / "state-change.log"
    log.parent.mkdir(parents=True)
    head = _LINE.format(s=0, ms=0, p=0).rstrip("\n")
    log.write_text(head + " " + "y" * (3 * MAX_LINE_BYTES), encoding="utf-8")  # no newline yet
    stop = threading.Event()
    done: dict[str, Any] = {}
    t = threading.Thread(target=lambda: done.update(collect_logs(lake, log, follow=True, stop_event=stop,
                                                                  poll_interval=0.1)))
    t.start()
    try:
        time.sleep(0.5)
        assert not _rows(lake, "controller_decisions")  # the line is not finished
        with log.open("a", encoding="utf-8") as f:
            f.write("y" * 100 + "\n" + _LINE.format(s=0, ms=1, p=1))
        wait_for(lambda: _rows(lake, "controller_decisions"))  # line 1; line 2 stays open until the stop
    finally:
        stop.set()
        t.join(30)
    assert [r["line_no"] for r in sorted(_rows(lake, "controller_decisions"), key=lambda r: r["line_no"])] == [1, 2]
    assert len(_rows(lake, "quarantine")) == 1
