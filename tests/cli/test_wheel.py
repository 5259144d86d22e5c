"""The installable package: the wheel `make dist` builds, installed into a fresh virtual environment, gives a
working `zkledger` with the data its commands read at run time.

Offline and fast: the wheel is built with this venv's setuptools (no build isolation, as `make dist`) from a
copy of the sources, and installed with ``--no-deps --no-index`` into a venv created without pip. Its
dependencies are the pinned packages this project's venv already holds: after the install a ``.pth`` line puts
that venv's site-packages *behind* the new venv's own, so the new venv imports zkledger from the wheel and only
the dependencies from there (the editable install of zkledger there is a ``.pth`` of its own, which Python does
not process in a directory added this way). `pip check` then confirms the pins satisfy the wheel's metadata.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.spark_session import SPARK_LOG

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]


# a log4j2 line of our pattern ("08:23:03 WARN ResolveWriteToStream: ..."), the JVM's own warning, Spark's
# default profile banner, the transformWithStateInPandas worker's prints
SPARK_NOISE = re.compile(r"^\d\d:\d\d:\d\d (WARN|ERROR|INFO) |log4j|Using incubator modules|TransformWithStateInPandas",
                         re.MULTILINE)


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    work: Path  # a folder outside the source tree: the commands run here

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def run(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ZKLEDGER_JVM_DIR")}
        return subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=self.work,
                              stdin=subprocess.DEVNULL, env={**clean, **(env or {})})

    def zkledger(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.bin / "zkledger"), *args, env=env)


def _requirement(text: str) -> tuple[str, str]:
    from packaging.requirements import Requirement

    req = Requirement(text)
    return req.name, ",".join(sorted(str(s) for s in req.specifier))


def _copy_sources(dest: Path) -> None:
    """pyproject.toml, README.md and the packages it lists: the build sees what a clean checkout holds, and
    leaves no build/ folder in the working tree."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for top in sorted({p.split(".")[0] for p in PYPROJECT["tool"]["setuptools"]["packages"]}):
        shutil.copytree(ROOT / top, dest / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    _copy_sources(tmp / "src")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", "-w", str(tmp / "dist"), str(tmp / "src")],
                           capture_output=True, text=True, timeout=300)
    # setuptools older than 70.1 cannot build a wheel without the `wheel` package: `make dist` installs a newer one
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = sorted((tmp / "dist").glob("*.whl"))
    assert [w.name for w in wheels] == [f"zkledger-{VERSION}-py3-none-any.whl"]

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", str(wheels[0])], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # only now the dependencies: pip above saw no other zkledger beside the one it installed
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "zkledger-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (tmp / "work").mkdir()
    return Installed(wheels[0], venv, tmp / "work")


def test_wheel_holds_the_packages_their_data_and_the_pinned_dependencies(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read(f"zkledger-{VERSION}.dist-info/METADATA").decode()
        entry_points = whl.read(f"zkledger-{VERSION}.dist-info/entry_points.txt").decode()
    assert {"conf/base.toml", "simulator/scenarios/demo-story.json", "zkledger/commands/check.py",
            "services/quality.py", "services/jvm.py"} <= names
    requires = {_requirement(line.split(":", 1)[1]) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert requires == {_requirement(d) for d in PYPROJECT["project"]["dependencies"]}
    assert "zkledger = zkledger.cli:main" in entry_points
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(installed.bin / "python"), "check"],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def test_installed_zkledger_runs_from_the_wheel(installed: Installed) -> None:
    version = installed.zkledger("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"zkledger {VERSION}")
    top = installed.zkledger("--help")
    assert top.returncode == 0 and all(c in top.stdout for c in ("simulate", "rebuild", "check", "--version"))
    sim = installed.zkledger("simulate", "--help")
    assert sim.returncode == 0 and "--offline" in sim.stdout

    # the modules and the demo's story come from the wheel, not from the source tree
    probe = installed.run(str(installed.bin / "python"), "-c",
                          "import json, conf.settings, zkledger; from zkledger.demo import STORY; "
                          "from simulator.scenarios import load_scenario; name, spec = load_scenario(str(STORY)); "
                          "print(json.dumps([zkledger.__file__, str(conf.settings.BASE_TOML), name, "
                          "len(spec['steps'])]))")
    assert probe.returncode == 0, probe.stderr
    module, base_toml, story, steps = json.loads(probe.stdout)
    assert Path(module).is_relative_to(installed.venv) and Path(base_toml).is_relative_to(installed.venv)
    assert story == "demo-story" and steps > 0

    # a real command reading conf/base.toml and writing a lake, then the quality suites over it (no JVM)
    wrote = installed.zkledger("--lake", "lake", "simulate", "--offline", "--events", "60", "--partitions", "3")
    assert wrote.returncode == 0 and wrote.stdout.startswith("wrote "), wrote.stdout + wrote.stderr
    checked = installed.zkledger("--lake", "lake", "check", "--table", "znode_events")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "znode_events_suite: PASS" in checked.stdout and "check passed: 1 suites" in checked.stdout


def test_spark_command_without_jvm_artifacts_is_one_line_naming_where_it_looked(installed: Installed) -> None:
    installed.zkledger("--lake", "lake2", "simulate", "--offline", "--events", "30", "--partitions", "2")
    done = installed.zkledger("--lake", "lake2", "rebuild")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the JVM artifacts 'delta' are not installed in "), done.stderr
    assert str(installed.venv) in lines[0]  # the installed package's own folder: ZKLEDGER_JVM_DIR points elsewhere


@pytest.mark.usefixtures("starts_spark")
def test_spark_command_runs_with_zkledger_jvm_dir(installed: Installed) -> None:
    from services.jvm import jvm_dir

    installed.zkledger("--lake", "lake3", "simulate", "--offline", "--events", "100", "--partitions", "2")
    done = installed.zkledger("--lake", "lake3", "rebuild", env={"ZKLEDGER_JVM_DIR": str(jvm_dir())})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.startswith("rebuilt ")
    # the terminal shows zkledger's lines only; Spark's own logs went to the lake (and `-v` brings them back: tests/cli/test_quiet_logs.py)
    assert SPARK_NOISE.search(done.stderr) is None, done.stderr
    logged = (installed.work / "lake3" / SPARK_LOG).read_text()
    # the streaming query's warning (log4j2) and the stateful operator's Python worker (inherited stderr)
    assert re.search(r"^\d\d:\d\d:\d\d WARN ", logged, re.MULTILINE), logged[:2000]
    assert "TransformWithStateInPandas Python worker" in logged
    assert "doesn't contain a value" not in logged  # a key's first read of its state is no warning
