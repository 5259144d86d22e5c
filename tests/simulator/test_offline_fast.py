"""The vectorised offline generator keeps the documented id meaning and is the same with or without the pool."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from models.ids import event_id
from simulator.offline import generate, hex_ids, sha1_prefixes


def test_ids_are_models_event_id_of_cluster_source_zxid_path_op() -> None:
    (table,) = list(generate(3_000, 500, brokers=4, seed=9, cluster="c1", batch=5_000, workers=0))
    rows = table.select(["zxid", "path", "op", "event_id"]).to_pylist()
    assert all(r["event_id"] == event_id("c1", "txnlog", r["zxid"], r["path"], r["op"]) for r in rows)
    assert len(set(table.column("event_id").to_pylist())) == 3_000


def test_pool_and_in_process_generation_are_identical() -> None:
    solo = pa.concat_tables(generate(12_000, 1_500, seed=2, batch=5_000, workers=0))
    pooled = pa.concat_tables(generate(12_000, 1_500, seed=2, batch=5_000, workers=2))
    assert solo.equals(pooled)
    assert solo.num_rows == 12_000 and bool(np.all(np.diff(solo.column("zxid").to_numpy()) > 0))


def test_hex_ids_match_hexdigest_prefix() -> None:
    msgs = pa.array([b"a", b"b\x1fc", b""], pa.binary())
    got = hex_ids(sha1_prefixes(msgs)).to_pylist()
    assert got == [event_id("a"), event_id("b", "c"), event_id("")]
