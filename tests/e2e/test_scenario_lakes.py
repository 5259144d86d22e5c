"""`played_once`: pytest-xdist workers asking for the played lakes at the same time play them once and read the
same lakes back (the session fixture `runs` under `make test`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from lakehouse import Lake
from simulator.scenarios import ScenarioResult
from tests.e2e.scenario_lakes import Run, Runs, played_once


def test_concurrent_callers_play_once_and_read_the_same_lakes(tmp_path: Path) -> None:
    plays: list[Path] = []

    def play(root: Path) -> Runs:
        plays.append(root)
        time.sleep(0.5)  # the other caller arrives while this one plays
        result = ScenarioResult("s", "3.8", 11, [{"kind": "K"}], [], {}, [root / "controller.log"])
        return {("s", "3.8"): Run("s", "3.8", result, Lake(root / "lake", cluster="s-3.8"), [{"kind": "K"}],
                                  {"play": 1.0}, Lake(root / "txn", cluster="s-3.8"))}

    got: list[Runs] = []
    callers = [threading.Thread(target=lambda: got.append(played_once(tmp_path / "shared", play)))
               for _ in range(2)]
    for c in callers:
        c.start()
        time.sleep(0.1)
    for c in callers:
        c.join(30)

    assert len(plays) == 1 and len(got) == 2
    first, second = (g[("s", "3.8")] for g in got)
    assert second.lake is not first.lake  # read back, not shared in memory
    for run in (first, second):
        assert (run.lake.root, run.lake.cluster) == (str(tmp_path / "shared" / "lake"), "s-3.8")
        assert run.txn_lake is not None and run.txn_lake.root == str(tmp_path / "shared" / "txn")
        assert (run.result, run.anomalies, run.seconds) == (first.result, [{"kind": "K"}], {"play": 1.0})
