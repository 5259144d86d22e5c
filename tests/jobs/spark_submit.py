"""The spark-submit command line of the submitted-job tests: as the README shows a cluster user."""

from __future__ import annotations

import tomllib
import zipfile
from pathlib import Path

from tests.standalone_cluster import SPARK_HOME

ROOT = Path(__file__).resolve().parents[2]
# the packages `make dist` zips: the project's own list in pyproject.toml
PACKAGES = tuple(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])


def project_archive(dest: Path) -> Path:
    """The project archive for --py-files (what `make dist` builds)."""
    out = dest / "zkledger.zip"
    with zipfile.ZipFile(out, "w") as zf:
        for pkg in PACKAGES:
            for f in (ROOT / pkg).rglob("*"):
                if f.is_file() and "__pycache__" not in f.parts:
                    zf.write(f, f.relative_to(ROOT))
    return out


def submit_command(master: str, tmp_path: Path, cores: int = 1) -> list[str]:
    """spark-submit as the README shows a cluster user: the project archive, Delta's pinned jars and its confs."""
    from services.jvm import DELTA, installed_jars
    from services.spark_session import DELTA_CATALOG, DELTA_EXTENSION

    return [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, "--total-executor-cores", str(cores),
            "--executor-memory", "512m", "--py-files", str(project_archive(tmp_path)),
            "--jars", ",".join(str(j) for j in installed_jars(DELTA)),
            "--conf", f"spark.sql.extensions={DELTA_EXTENSION}",
            "--conf", f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}"]
