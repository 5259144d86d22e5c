"""Offline generator: N state rows plus a preamble, strictly increasing zxids, codec payloads, a clean history.

The history is checked without Spark: every row read back from the real Delta table is decoded with
models.znode_codec and folded with models.fold.project_metadata (no illegal step), and the znode invariants
the invariants of docs/invariants.md hold on every write (tests/simulator/sim_invariants.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lakehouse import Lake
from models.states import PartitionState, ReplicaState
from simulator import payloads
from simulator.offline import KAFKA_VERSION, fast_state_payloads, preamble_table, replicas_of, write_offline
from tests.simulator.sim_invariants import decode_rows, fold, invariant_breaks


def test_fast_payloads_match_encoder() -> None:
    rng = np.random.default_rng(3)
    leader, le, ce = rng.integers(1, 9, 50), rng.integers(0, 1000, 50), rng.integers(1, 40, 50)
    isrs = [[int(x) for x in rng.choice(9, 3, replace=False) + 1] for _ in range(50)]
    fast = fast_state_payloads(leader, le, ce, [",".join(map(str, i)) for i in isrs])
    slow = [payloads.encode_partition_state(int(a), int(b), int(c), i, "3.8") for a, b, c, i in zip(leader, le, ce, isrs, strict=True)]
    assert fast == slow


def test_offline_writes_n_rows_with_increasing_zxids(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="test")
    n = write_offline(lake, events=25_000, partitions=2_000, brokers=5, seed=4, batch=10_000)
    pre = preamble_table(2_000, 5, "test")
    assert pre.num_rows == 5 + 3 + 2  # brokers, the 2.1+ election (epoch create, controller, epoch set), topics
    assert n == 25_000 + pre.num_rows
    table = lake.read_arrow("znode_events").sort_by("zxid")
    zx = table.column("zxid").to_numpy()
    assert len(zx) == n and bool(np.all(np.diff(zx) > 0))
    assert table.column("path").to_pylist()[: pre.num_rows] == pre.column("path").to_pylist()
    states = table.slice(pre.num_rows)
    assert states.column("op").to_pylist()[:2000] == ["CREATE"] * 2000
    first = json.loads(states.column("data")[0].as_py())
    assert first["leader"] in first["isr"] and first["leader_epoch"] == 0
    # idempotent: the same writer/seed writes nothing twice
    write_offline(lake, events=25_000, partitions=2_000, brokers=5, seed=4, batch=10_000)
    assert lake.read_arrow("znode_events").num_rows == n


def test_cli_offline_and_list(tmp_path: Path) -> None:
    from zkledger.cli import main

    assert main(["--lake", str(tmp_path / "lake"), "--cluster", "c", "simulate", "--offline", "--events", "3000", "--partitions", "300"]) in (0, None)
    assert Lake(tmp_path / "lake", cluster="c").read_arrow("znode_events").num_rows == 3000 + 5 + 3 + 1
    assert main(["simulate", "--offline", "--events", "0", "--partitions", "1"]) == 1


def test_offline_history_is_clean_when_folded(tmp_path: Path) -> None:
    """Assignments before state writes, failovers before the epochs they announce: no violation, no break."""
    lake = Lake(tmp_path / "lake", cluster="test")
    events, partitions = 30_000, 2_500
    n = write_offline(lake, events=events, partitions=partitions, brokers=5, seed=6, batch=7_000, failover_every=10_000)
    table = lake.read_arrow("znode_events").sort_by("zxid")
    assert n == table.num_rows == events + (5 + 3 + 3) + 2 * 3  # preamble (3 topics) + 2 failovers
    paths = table.column("path").to_pylist()
    assert sum(p.endswith("/state") for p in paths) == events
    # each topic's assignment CREATE comes before its partitions' first state write
    first_state = {p.split("/partitions/")[0]: i for i, p in reversed(list(enumerate(paths))) if p.endswith("/state")}
    assert all(paths.index(topic) < i for topic, i in first_state.items())
    assignment = json.loads(table.column("data")[paths.index("/brokers/topics/t00001")].as_py())
    assert assignment["version"] == 3 and len(assignment["topic_id"]) == 22
    assert assignment["partitions"]["7"] == replicas_of(1007, 5)

    cols = [table.column(c).to_pylist() for c in ("zxid", "path", "op", "data", "version")]
    decoded = decode_rows(zip(*cols, strict=True), KAFKA_VERSION)
    proj = fold(decoded, KAFKA_VERSION)
    assert proj.violations == []
    assert invariant_breaks(decoded) == []
    firsts: dict[tuple[str, int], tuple[str, str]] = {}
    for t in proj.partition_transitions:
        firsts.setdefault((t.topic, t.partition), (t.from_state, t.to_state))
    assert len(firsts) == partitions
    assert set(firsts.values()) == {("NonExistentPartition", "NewPartition")}
    assert {(t.from_state, t.to_state) for t in proj.partition_transitions} == {
        ("NonExistentPartition", "NewPartition"), ("NewPartition", "OnlinePartition"), ("OnlinePartition", "OnlinePartition")}
    assert set(proj.partitions.values()) == {PartitionState.ONLINE}
    assert set(proj.replicas.values()) == {ReplicaState.ONLINE} and len(proj.replicas) == 3 * partitions
    epochs = [int(d) for p, d in zip(paths, cols[3], strict=True) if p == "/controller_epoch"]
    assert epochs == [0, 1, 2, 3]
