"""The Python workers' daemon: which of Spark's archives leave the workers' import path (no JVM needed)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from services.worker_daemon import unshadowed_path


def _package(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")


def _archive(path: Path, package: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{package}/__init__.py", "")
    return str(path)


def test_the_installed_pyspark_s_own_archives_leave_the_path(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    _package(site, "pyspark")
    _package(site, "py4j")
    lib = site / "pyspark" / "python" / "lib"
    pyspark_zip = _archive(lib / "pyspark.zip", "pyspark")
    py4j_zip = _archive(lib / "py4j-0.10.9.9-src.zip", "py4j")
    assert unshadowed_path([pyspark_zip, py4j_zip, str(tmp_path / "app"), str(site)]) == [
        str(tmp_path / "app"), str(site)]


def test_an_archive_whose_package_is_installed_nowhere_else_stays(tmp_path: Path) -> None:
    """A Spark distribution's executors may have pyspark only in its archive; py4j here is not installed."""
    site = tmp_path / "site-packages"
    _package(site, "pyspark")
    lib = site / "pyspark" / "python" / "lib"
    pyspark_zip = _archive(lib / "pyspark.zip", "pyspark")
    py4j_zip = _archive(lib / "py4j-0.10.9.9-src.zip", "py4j")
    assert unshadowed_path([pyspark_zip, py4j_zip, str(site)]) == [py4j_zip, str(site)]
    distribution = _archive(tmp_path / "spark-4.1" / "python" / "lib" / "pyspark.zip", "pyspark")
    assert unshadowed_path([distribution, str(tmp_path / "elsewhere")]) == [distribution, str(tmp_path / "elsewhere")]


def test_archives_of_another_spark_or_of_the_application_stay(tmp_path: Path) -> None:
    """Only the installed pyspark's own archives are the same distribution; an application's --py-files stay."""
    site = tmp_path / "site-packages"
    _package(site, "pyspark")
    other_spark = _archive(tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip", "pyspark")
    application = _archive(tmp_path / "dist" / "zkledger.zip", "engine")
    assert unshadowed_path([other_spark, application, str(site)]) == [other_spark, application, str(site)]
