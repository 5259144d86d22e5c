"""The failover storm is clean, as its declaration says: no partition ever offline, no failed election, no break.

5 brokers x 2,000 partitions (RF 3, replica sets are 5 consecutive rings) through the simulator against the real
embedded ZooKeeper. Seed 2 makes the three crashed controllers 3, 2, 1: one fifth of the partitions lose every
replica once in turn, which left ISR = [dead broker] and leader -1 before restarted brokers rejoined the ISR.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from simulator.scenarios import run_scenario
from tests.simulator.sim_invariants import decode_rows, fold, invariant_breaks

pytestmark = pytest.mark.integration

BROKERS, PARTITIONS, SEED = 5, 2_000, 2


def _zk_states(hosts: str, keys: list[str]) -> dict[str, dict[str, object]]:
    c = KazooClient(hosts=hosts, timeout=15)
    c.start(timeout=15)
    try:
        pending = {k: c.get_async(f"/brokers/topics/storm/partitions/{k.rsplit('-', 1)[1]}/state") for k in keys}
        return {k: json.loads(h.get()[0]) for k, h in pending.items()}
    finally:
        c.stop()
        c.close()


@pytest.mark.parametrize("version", ["2.0", "2.4", "3.8"])
def test_failover_storm_leaves_no_partition_offline(zk_hosts: str, tmp_path: Path, version: str) -> None:
    result = run_scenario("failover-storm", zk_hosts, version, tmp_path / "logs", seed=SEED,
                          brokers=BROKERS, partitions=PARTITIONS)
    assert result.expected_anomalies == []
    writes = result.znode_writes

    # precondition: the crashed controllers cover whole replica sets, so the test can fail
    controllers = [json.loads(w.data)["brokerid"] for w in writes if w.path == "/controller" and w.op == "CREATE" and w.data]
    crashed = set(controllers[:3])
    final = result.state_at["after-storm"]
    assert len(final.partitions) == PARTITIONS and final.controller_epoch == 4
    exposed = [k for k, p in final.partitions.items() if set(p["replicas"]) <= crashed]
    assert len(exposed) == PARTITIONS // BROKERS

    # the end state, read back from ZooKeeper: a live leader in its ISR, every ISR member live, ISRs full again
    live = set(final.live_brokers)
    assert live == set(range(1, BROKERS + 1))
    zk = _zk_states(zk_hosts, sorted(final.partitions))
    for key, p in final.partitions.items():
        state = zk[key]
        assert (state["leader"], state["isr"]) == (p["leader"], p["isr"])
        assert state["leader"] in live and state["leader"] in state["isr"], key
        assert set(state["isr"]) <= live and sorted(state["isr"]) == sorted(p["replicas"]), key

    # the whole history: no offline write, every invariant holds, the fold finds no illegal step
    rows = [(i + 1, w.path, w.op, w.data, w.version) for i, w in enumerate(writes) if w.op != "MULTI_FAILED"]
    events = decode_rows(rows, version)
    assert invariant_breaks(events) == []
    assert fold(events, version).violations == []
    logs = "".join(f.read_text() for f in result.log_files)
    assert " ERROR " not in logs and "failed to change state" not in logs

    # the restarted brokers rejoined by the version's ISR writer: leaders + notifications < 2.7, AlterIsr after
    notes = [w for w in writes if w.path.startswith("/isr_change_notification/isr_change_") and w.op == "CREATE"]
    assert bool(notes) == (version < "2.7")
