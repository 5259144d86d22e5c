"""The suite's xdist scheduling (tests/conftest.py): xdist's order of files (most tests first), except that the
`FIRST_FILES` go out before the rest and the files of a `SHARED_WORK_UNITS` folder go to one worker together."""

from __future__ import annotations

import argparse
from typing import Any

from tests.conftest import FIRST_FILES, SHARED_WORK_UNITS, pytest_xdist_make_scheduler


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


def _files_sent(collection: list[str]) -> list[list[str]]:
    """Each of two workers' files, in the order the scheduler sent them."""
    scheduler = pytest_xdist_make_scheduler(_Config(), None)
    workers = [_Worker("gw0"), _Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    return [list(dict.fromkeys(collection[i].split("::")[0] for batch in w.sent for i in batch)) for w in workers]


def test_a_first_file_starts_first_though_it_has_the_fewest_tests() -> None:
    (first,) = FIRST_FILES
    collection = [*(f"tests/fast/test_some.py::test_{i}" for i in range(3)), f"{first}::test_long",
                  *(f"tests/fast/test_many.py::test_{i}" for i in range(6))]
    gw0, gw1 = _files_sent(collection)
    # then xdist's own order: most tests first
    assert (gw0, gw1) == ([first, "tests/fast/test_some.py"], ["tests/fast/test_many.py"])


def test_a_shared_folders_files_go_to_one_worker() -> None:
    (folder,) = SHARED_WORK_UNITS
    collection = [f"{folder}test_a.py::test_1", f"{folder}test_b.py::test_1",
                  *(f"tests/fast/test_many.py::test_{i}" for i in range(3))]
    sent = _files_sent(collection)
    assert sorted(sent) == [[f"{folder}test_a.py", f"{folder}test_b.py"], ["tests/fast/test_many.py"]]


def test_other_distributions_keep_xdists_scheduler() -> None:
    config = _Config()
    config.option.dist = "load"
    assert pytest_xdist_make_scheduler(config, None) is None
