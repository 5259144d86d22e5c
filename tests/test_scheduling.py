"""The suite's xdist scheduling (tests/conftest.py): files start in the order `costliest_files_first` gives,
whatever their test counts."""

from __future__ import annotations

import argparse
from typing import Any

from tests.conftest import pytest_xdist_make_scheduler


class _Config:
    """What xdist's file scheduler reads of pytest's config: the options, as `pytest -n 2 --dist loadfile` sets
    them (xdist's own default for `loadscopereorder` included)."""

    def __init__(self) -> None:
        self.option = argparse.Namespace(dist="loadfile", tx=["2*popen"], loadscopereorder=True)

    def getvalue(self, name: str) -> Any:
        return getattr(self.option, name)


class _Worker:
    """A stand-in for an xdist worker: it records the tests it is sent."""

    def __init__(self, name: str) -> None:
        self.gateway = argparse.Namespace(id=name)
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.append(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_the_costliest_file_starts_first_though_it_has_the_fewest_tests() -> None:
    collection = ["tests/slow/test_cluster.py::test_one",  # first: the order costliest_files_first gave
                  *(f"tests/fast/test_many.py::test_{i}" for i in range(6)),
                  *(f"tests/fast/test_some.py::test_{i}" for i in range(3))]
    scheduler = pytest_xdist_make_scheduler(_Config(), None)
    workers = [_Worker("gw0"), _Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    first = [collection[w.sent[0][0]].split("::")[0] for w in workers]
    assert first == ["tests/slow/test_cluster.py", "tests/fast/test_many.py"]


def test_other_distributions_keep_xdists_scheduler() -> None:
    config = _Config()
    config.option.dist = "load"
    assert pytest_xdist_make_scheduler(config, None) is None
