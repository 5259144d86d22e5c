"""Bad paths and damaged lakes give one `error:` line and exit 1, never a traceback or a silent success;
text read from the lake never reaches the terminal with its control bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests import sample_data as sd
from zkledger.cli import main


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize("argv", [["anomalies"], ["state", "--zxid", "1"], ["report", "--out", "r.html"],
                                  ["collect", "logs", "--path", "."], ["zk", "status"]])
def test_lake_that_is_a_file(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lake = tmp_path / "lake.txt"
    lake.write_text("not a lake")
    assert main(["--lake", str(lake), *argv]) == 1
    assert _one_error_line(capsys) == f"error: --lake {lake}: not a directory (the lake is a folder of Delta tables)"
    assert lake.read_text() == "not a lake"


def test_report_out_a_directory_leaves_nothing_behind(lake: Any, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    sd.write_story(lake)
    out = tmp_path / "reports"
    out.mkdir()
    assert main(["--lake", lake.root, "--cluster", lake.cluster, "report", "--out", str(out)]) == 1
    assert "is a directory" in _one_error_line(capsys)
    assert os.listdir(out) == [] and not list(tmp_path.glob("*.tmp*"))


def test_report_write_failure_removes_its_temporary_file(lake: Any, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # the target name is taken by a folder that is not empty: the rename fails after the page was written
    sd.write_story(lake)
    out = tmp_path / "report.html"
    out.mkdir()
    (out / "keep").write_text("x")
    from services.report import write_report

    with pytest.raises(OSError):
        write_report(lake, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake", "report.html"]


def test_report_on_a_lake_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    out = tmp_path / "r.html"
    assert main(["--lake", str(missing), "report", "--out", str(out)]) == 1
    assert _one_error_line(capsys).startswith(f"error: no lake at {missing}")
    assert not out.exists() and not missing.exists()


def test_report_on_a_lake_without_derived_tables(lake: Any, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    sd.write_story(lake, {"znode_events": sd.znode_events()})  # collected, never rebuilt
    assert main(["--lake", lake.root, "--cluster", lake.cluster, "report", "--out", str(tmp_path / "r.html")]) == 1
    line = _one_error_line(capsys)
    assert "no anomalies table" in line and "zkledger rebuild" in line


def _three_commits(lake: Any) -> str:
    for i, row in enumerate(sd.anomalies()):
        lake.append("anomalies", [row], writer_id="t", batch_seq=i)
    return os.path.join(lake.root, "anomalies", "_delta_log")


@pytest.mark.parametrize("command", [["anomalies"], ["report", "--out", "REPORT"]])
# commits 1 and 2 hold rows; commit 0 only the protocol and metadata, which delta-rs then takes from the newest
# version checksum file (the table stays readable, and whole)
@pytest.mark.parametrize("deleted", [1, 2])
def test_missing_delta_log_commit_is_one_line(command: list[str], deleted: int, lake: Any, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = _three_commits(lake)
    os.remove(os.path.join(log_dir, f"{deleted:020d}.json"))
    argv = [str(tmp_path / "r.html") if a == "REPORT" else a for a in command]
    assert main(["--lake", lake.root, "--cluster", lake.cluster, *argv]) == 1
    line = _one_error_line(capsys)
    assert line.startswith(f"error: cannot read table anomalies in the lake at {lake.root}: "), line
    assert len(line) < 400
    assert not (tmp_path / "r.html").exists()


def test_missing_data_file_names_the_table(lake: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _three_commits(lake)
    parquet = sorted(Path(lake.root, "anomalies").glob("*.parquet"))[0]
    parquet.unlink()
    assert main(["--lake", lake.root, "--cluster", lake.cluster, "anomalies"]) == 1
    line = _one_error_line(capsys)
    assert line.startswith("error: cannot read table anomalies in the lake at") and parquet.name in line
    assert "\x1b" not in line


def test_anomalies_table_output_escapes_control_bytes(lake: Any, capsys: pytest.CaptureFixture[str]) -> None:
    row = {**sd.anomalies()[1], "topic": "orders\x1b[31m",
           "details": json.dumps({"message": "\x1b]0;owned\x07\x1b[2J\rrewritten"})}
    lake.append("anomalies", [row], writer_id="t", batch_seq=0)
    assert main(["--lake", lake.root, "--cluster", lake.cluster, "anomalies"]) == 0
    out = capsys.readouterr().out
    assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in out), repr(out)
    assert "orders\\x1b[31m" in out and "\\x1b]0;owned\\x07\\x1b[2J\\rrewritten" in out
    # JSON output escapes them by itself
    assert main(["--lake", lake.root, "--cluster", lake.cluster, "anomalies", "--format", "json"]) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_check_on_a_lake_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert main(["--lake", str(missing), "check"]) == 1  # before any Spark session is built
    assert _one_error_line(capsys).startswith(f"error: no lake at {missing}")
    assert not missing.exists()
