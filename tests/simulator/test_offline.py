"""Offline generator: N rows, strictly increasing zxids, payloads equal to the codec's bytes, real Delta table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lakehouse import Lake
from simulator import payloads
from simulator.offline import fast_state_payloads, preamble_table, write_offline


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
    assert pre.num_rows == 5 + 2 + 2  # brokers, controller + epoch, one assignment per 1,000 partitions
    assert n == 25_000 + pre.num_rows
    table = lake.read_arrow("znode_events").sort_by("zxid")
    zx = table.column("zxid").to_numpy()
    assert len(zx) == n and bool(np.all(np.diff(zx) > 0))
    assert table.column("path").to_pylist()[: pre.num_rows] == pre.column("path").to_pylist()
    states = table.slice(pre.num_rows)
    assert states.column("op").to_pylist()[:2000] == ["CREATE"] * 2000
    first = json.loads(states.column("data")[0].as_py())
    assert first["leader"] in first["isr"]
    # idempotent: the same writer/seed writes nothing twice
    write_offline(lake, events=25_000, partitions=2_000, brokers=5, seed=4, batch=10_000)
    assert lake.read_arrow("znode_events").num_rows == n


def test_cli_offline_and_list(tmp_path: Path) -> None:
    from zkledger.cli import main

    assert main(["--lake", str(tmp_path / "lake"), "--cluster", "c", "simulate", "--offline", "--events", "3000", "--partitions", "300"]) in (0, None)
    assert Lake(tmp_path / "lake", cluster="c").read_arrow("znode_events").num_rows == 3000 + 5 + 2 + 1
    assert main(["simulate", "--offline", "--events", "0", "--partitions", "1"]) == 1
