"""The standalone Spark cluster of the submitted-job tests: one per test module, so the two modules start theirs
side by side."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.standalone_cluster import StandaloneCluster


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory, starts_spark_cluster: None,
                       takes_minutes: None) -> Iterator[StandaloneCluster]:
    """A real standalone master and two workers (1 core, 1g each) from the pinned PySpark; stopped at the end."""
    with StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers_n=2, cores=1, memory="1g") as cluster:
        yield cluster


@pytest.fixture
def standalone(standalone_cluster: StandaloneCluster) -> str:
    return standalone_cluster.url
