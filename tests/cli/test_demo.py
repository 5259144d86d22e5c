"""`zkledger demo` (what `make demo` runs), started as a user starts it: an embedded ZooKeeper, the simulated
cluster's story, the three collectors, the Spark rebuild, the quality suites and the report, in one command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {"FAILED_STATE_CHANGE", "ILLEGAL_PARTITION_TRANSITION", "LEADER_NOT_LIVE", "SPLIT_BRAIN",
            "STALE_CONTROLLER_REQUEST", "ZOMBIE_CONTROLLER_WRITE"}  # simulator/scenarios/demo-story.json's


def zkledger(lake: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", str(lake), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_demo_finds_every_kind_its_story_injects_and_leaves_a_lake_to_explore(
        tmp_path: Path, starts_spark: None, starts_zookeeper: None) -> None:
    lake = tmp_path / "lake"
    done = zkledger(lake, "demo")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.fullmatch(r"demo: \d+ anomalies \(\d+ kinds, all of 6 expected kinds\) in \d+s; report \S+; explore "
                        r"with `zkledger --lake \S+ anomalies` and `state --at`", done.stdout.splitlines()[-1])
    assert "-> all expected kinds found" in done.stdout and "quality checks: passed" in done.stdout
    assert [line for line in done.stderr.splitlines() if re.match(r"\[\d/7\] .*: done in", line)][-1].startswith("[7/7]")
    report = (lake / "zkledger-report.html").read_text(encoding="utf-8")
    assert "ZOMBIE_CONTROLLER_WRITE" in report and "orders" in report

    listed = zkledger(lake, "anomalies", "--format", "json")  # what the summary says to run next
    assert listed.returncode == 0
    assert {json.loads(line)["kind"] for line in listed.stdout.splitlines() if line.startswith("{")} >= EXPECTED

    again = zkledger(lake, "demo")  # the lake holds a run: refused in one line, nothing touched
    assert again.returncode == 1
    assert again.stderr.strip().count("\n") == 0 and "already holds a demo run" in again.stderr
