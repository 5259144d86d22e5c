"""Fixtures for the lake tests: a real Spark session (shared) and a Lake on tmp_path.

tests/conftest.py may provide `spark`/`lake` too; these local ones build the same session through
zkledger.spark.build_spark (getOrCreate), so there is still one JVM per test run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakehouse import Lake


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from conf.settings import load_settings
    from zkledger.spark import build_spark

    session = build_spark(load_settings(overrides={"spark.master": "local[2]"}), app_name="zkledger-lake-tests")
    yield session


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(tmp_path / "lake", cluster="test")
