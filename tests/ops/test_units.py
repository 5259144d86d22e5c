"""The systemd units in ops/systemd: `systemd-analyze verify` (when the machine has it) on copies whose
ExecStart names this checkout's `zkledger` (verify requires the executable to exist), and an INI reading of what
every unit must say."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "ops" / "systemd"
INSTALLED = "/opt/zkledger/venv/bin/zkledger"  # where the units expect zkledger (docs/operating.md)
EXPECTED = {
    "zkledger-collect-zk.service": ["collect", "zk"],
    "zkledger-collect-txnlog.service": ["collect", "txnlog", "--dir", "/var/lib/zookeeper", "--follow"],
    "zkledger-collect-logs.service": ["collect", "logs", "--path", "/var/log/kafka", "--follow"],
    "zkledger-collect-kraft.service": ["collect", "kraft", "--dir", "/var/lib/kafka/metadata/__cluster_metadata-0",
                                       "--follow"],
    "zkledger-monitor.service": ["monitor"],
}


def read(unit: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",), comment_prefixes=("#",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(unit.read_text())
    return parser


def test_the_four_units_are_there() -> None:
    assert sorted(p.name for p in UNITS.glob("*.service")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_unit_runs_its_command_as_the_zkledger_user_with_metrics_restarts_and_hardening(name: str) -> None:
    unit = read(UNITS / name)
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == INSTALLED and argv[1:3] == ["--conf", "/etc/zkledger/zkledger.toml"]
    command = argv[3:]
    assert command[:len(EXPECTED[name])] == EXPECTED[name]
    port = int(command[command.index("--metrics-port") + 1])
    assert 1024 < port < 65536
    assert service["User"] == "zkledger" and service["Group"] == "zkledger"
    assert service["Restart"] == "on-failure"
    assert service["EnvironmentFile"].startswith("-/etc/zkledger/")
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                       "PrivateTmp": "yes", "CapabilityBoundingSet": ""}.items():
        assert service[key] == value, key
    assert service["ReadWritePaths"] == "/var/lib/zkledger"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert "network-online.target" in unit["Unit"]["After"]


def test_each_unit_has_its_own_metrics_port() -> None:
    ports = [shlex.split(read(UNITS / n)["Service"]["ExecStart"]) for n in EXPECTED]
    assert len({argv[argv.index("--metrics-port") + 1] for argv in ports}) == len(EXPECTED)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    zkledger = Path(sys.executable).with_name("zkledger")
    assert zkledger.exists(), "the venv's zkledger entry point (make venv)"
    for unit in UNITS.glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, str(zkledger)))
    units = sorted(str(p) for p in tmp_path.glob("*.service"))
    result = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=120)
    # verify exits 0 on unknown keys and bad values too: it only warns, so any output is a failure
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr
    broken = tmp_path / "broken.service"
    broken.write_text((tmp_path / "zkledger-monitor.service").read_text().replace("Restart=on-failure",
                                                                                 "Restart=sometimes"))
    result = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, timeout=120)
    assert "Restart" in result.stderr or "restart" in result.stderr
