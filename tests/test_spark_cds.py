"""The tests' Spark drivers map the class-data archive `make test` builds, and run as before without one."""

from __future__ import annotations

from pathlib import Path

from services.jvm import QUIET_CLASS_SHARING
from tests.spark_cds import JIT, driver_opts


def test_without_an_archive_the_drivers_run_with_the_quick_jit_only(tmp_path: Path) -> None:
    assert driver_opts(tmp_path / "driver.jsa") == JIT


def test_with_an_archive_the_drivers_map_it_and_say_nothing_when_it_does_not_fit(tmp_path: Path) -> None:
    archive = tmp_path / "driver.jsa"
    archive.write_bytes(b"")
    assert driver_opts(archive).split() == [JIT, f"-XX:SharedArchiveFile={archive}", QUIET_CLASS_SHARING]
