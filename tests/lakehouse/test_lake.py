"""The Lake over real Delta tables on disk (delta-rs): schemas, idempotent appends, crashes, time travel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse import Lake, arrow_schema
from lakehouse.lake import CRASH_ENV
from models.tables import ALL_TABLES
from tests.lakehouse.lake_append_loop import WRITER, batch_rows

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HERE = Path(__file__).parent


def zrows(n: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"zxid": start + i, "path": f"/n/{start + i}", "op": "CREATE", "source": "watch", "observed_at": T0,
         "event_id": f"e{start + i}"}
        for i in range(n)
    ]


@pytest.mark.parametrize("table", sorted(ALL_TABLES))
def test_ensure_creates_every_table_with_the_spec_schema(lake: Lake, table: str) -> None:
    assert not lake.exists(table) and lake.version(table) is None
    lake.ensure(table)
    lake.ensure(table)  # second call is a no-op
    assert lake.version(table) == 0
    stored = DeltaTable(lake.table_path(table)).schema().to_arrow()
    spec = ALL_TABLES[table]
    assert [f.name for f in stored] == list(spec.column_names)
    assert {f.name: f.nullable for f in stored} == {c.name: c.nullable for c in spec.columns}
    got = lake.read_arrow(table)
    assert got.num_rows == 0 and got.schema == arrow_schema(table)


def test_schema_types_follow_the_vocabulary() -> None:
    s = arrow_schema("controller_decisions")
    assert s.field("line_no").type == pa.int64()
    assert s.field("partition").type == pa.int32()
    assert s.field("ts").type == pa.timestamp("us", tz="UTC")
    assert s.field("isr").type == pa.list_(pa.int32())
    assert arrow_schema("anomalies").field("evidence").type == pa.list_(pa.string())
    assert arrow_schema("znode_events").field("data").type == pa.binary()
    assert not s.field("event_id").nullable and s.field("topic").nullable


def test_append_fills_cluster_and_missing_columns(lake: Lake) -> None:
    assert lake.append("znode_events", zrows(3), writer_id="w", batch_seq=0) is True
    got = lake.read_arrow("znode_events")
    assert got.num_rows == 3
    assert set(got.column("cluster").to_pylist()) == {"test"}
    assert got.column("data").null_count == 3
    assert sorted(got.column("zxid").to_pylist()) == [0, 1, 2]
    assert got.column("observed_at").to_pylist()[0] == T0
    explicit = [{**zrows(1, 10)[0], "cluster": "other"}]
    lake.append("znode_events", explicit, writer_id="w", batch_seq=1)
    clusters = dict(zip(*lake.read_arrow("znode_events").select(["zxid", "cluster"]).to_pydict().values(),
                        strict=True))
    assert clusters[10] == "other" and clusters[0] == "test"


def test_append_arrow_table_is_reordered_and_cast(lake: Lake) -> None:
    naive = datetime(2026, 3, 1, 12, 0)
    t = pa.table({
        "event_id": ["a", "b"],
        "kind": ["ELECTION", "ELECTION"],
        "line_no": pa.array([7, 8], pa.int32()),
        "source_file": ["controller.log"] * 2,
        "partition": pa.array([1, 2], pa.int64()),
        "isr": [[1, 2], [3]],
        "ts": pa.array([naive, naive], pa.timestamp("ns")),
    })
    lake.append("controller_decisions", t, writer_id="logs", batch_seq=0)
    got = lake.read_arrow("controller_decisions").sort_by("event_id")
    assert got.schema == arrow_schema("controller_decisions")
    assert got.column("partition").to_pylist() == [1, 2]
    assert got.column("isr").to_pylist() == [[1, 2], [3]]
    assert got.column("ts").to_pylist()[0] == T0  # naive taken as UTC
    assert got.column("cluster").to_pylist() == ["test", "test"]


def test_null_in_non_nullable_column_names_table_and_column(lake: Lake) -> None:
    bad = zrows(2)
    bad[1]["path"] = None
    with pytest.raises(ValueError, match=r"znode_events.*'path'"):
        lake.append("znode_events", bad, writer_id="w", batch_seq=0)
    with pytest.raises(ValueError, match="unknown column"):
        lake.append("znode_events", [{**zrows(1)[0], "pth": "/x"}], writer_id="w", batch_seq=0)
    with pytest.raises(ValueError, match="unknown table"):
        lake.ensure("no_such_table")
    assert lake.read_arrow("znode_events").num_rows == 0 if lake.exists("znode_events") else True


def test_replayed_batch_is_not_written_twice(lake: Lake) -> None:
    assert lake.last_batch_seq("znode_events", "w") is None
    assert lake.append("znode_events", zrows(5), writer_id="w", batch_seq=0)
    v = lake.version("znode_events")
    # crash before the caller recorded its progress: it replays the same batch
    assert lake.append("znode_events", zrows(5), writer_id="w", batch_seq=0) is False
    assert lake.version("znode_events") == v
    assert lake.append("znode_events", zrows(5, 5), writer_id="w", batch_seq=1)
    assert lake.append("znode_events", zrows(5), writer_id="w", batch_seq=0) is False  # older too
    assert lake.last_batch_seq("znode_events", "w") == 1
    assert lake.last_batch_seq("znode_events", "other") is None
    # another writer's seq space is its own
    assert lake.append("znode_events", zrows(1, 100), writer_id="other", batch_seq=0)
    got = lake.read_arrow("znode_events")
    assert sorted(got.column("zxid").to_pylist()) == [*range(10), 100]


def test_empty_batch_still_records_progress(lake: Lake) -> None:
    assert lake.append("quarantine", [], writer_id="w", batch_seq=3)
    assert lake.last_batch_seq("quarantine", "w") == 3
    assert lake.read_arrow("quarantine").num_rows == 0


def test_overwrite_replaces_contents_idempotently(lake: Lake) -> None:
    state = [{"topic": "t", "partition": p, "state": "OnlinePartition", "as_of_zxid": 5} for p in range(3)]
    assert lake.overwrite("partition_state", state, writer_id="rebuild", batch_seq=0)
    assert lake.overwrite("partition_state", state[:1], writer_id="rebuild", batch_seq=1)
    assert lake.overwrite("partition_state", state, writer_id="rebuild", batch_seq=1) is False
    got = lake.read_arrow("partition_state")
    assert got.column("partition").to_pylist() == [0]


def test_concurrent_writers_with_different_ids(lake: Lake) -> None:
    lake.ensure("znode_events")
    errors: list[BaseException] = []

    def run(w: int) -> None:
        try:
            for seq in range(6):
                lake.append("znode_events", zrows(2, w * 1000 + seq * 10), writer_id=f"w{w}", batch_seq=seq)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = lake.read_arrow("znode_events").column("zxid").to_pylist()
    expected = [w * 1000 + s * 10 + i for w in range(3) for s in range(6) for i in range(2)]
    assert sorted(got) == sorted(expected)
    assert all(lake.last_batch_seq("znode_events", f"w{w}") == 5 for w in range(3))


def _loop(root: Path, n: int, crash: str | None) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    env.pop(CRASH_ENV, None)
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run([sys.executable, str(HERE / "lake_append_loop.py"), str(root), str(n)], env=env,
                          timeout=120, check=False).returncode


def test_sigkilled_append_loop_restarts_exactly(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    # killed after the data files of batch 3 are written but before its commit
    assert _loop(root, 10, "before_commit:3") == -signal.SIGKILL
    lake = Lake(root, cluster="crash")
    assert lake.last_batch_seq("znode_events", WRITER) == 2
    # killed right after batch 6 committed, before the loop could go on
    assert _loop(root, 10, "after_commit:6") == -signal.SIGKILL
    assert lake.last_batch_seq("znode_events", WRITER) == 6
    assert _loop(root, 10, None) == 0
    got = lake.read_arrow("znode_events")
    expected = sorted(r["event_id"] for s in range(10) for r in batch_rows(s))
    assert sorted(got.column("event_id").to_pylist()) == expected  # nothing missing, no duplicates


def test_time_travel_by_version_and_timestamp(lake: Lake) -> None:
    lake.append("znode_events", zrows(2), writer_id="w", batch_seq=0)
    time.sleep(0.05)  # distinct commit timestamps (ms resolution)
    lake.append("znode_events", zrows(3, 2), writer_id="w", batch_seq=1)
    assert lake.read_arrow("znode_events", version=1).num_rows == 2
    assert lake.read_arrow("znode_events", version=2).num_rows == 5
    assert lake.read_arrow("znode_events", version=0).num_rows == 0
    stamps = {h["version"]: h["timestamp"] for h in lake.history("znode_events")}
    at_v1 = datetime.fromtimestamp(stamps[1] / 1000, tz=UTC)
    assert lake.read_arrow("znode_events", as_of=at_v1).num_rows == 2
    assert lake.read_arrow("znode_events", as_of=at_v1 + timedelta(milliseconds=1)).num_rows == 2
    assert lake.read_arrow("znode_events", as_of=datetime.now(UTC) + timedelta(days=1)).num_rows == 5
    with pytest.raises(ValueError, match="version or as_of"):
        lake.read_arrow("znode_events", version=1, as_of=at_v1)


def test_checkpoints_every_n_versions_and_maintenance(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", cluster="c", checkpoint_interval=3)
    for seq in range(7):
        lake.append("znode_events", zrows(1, seq), writer_id="w", batch_seq=seq)
    log_dir = Path(lake.table_path("znode_events")) / "_delta_log"
    assert any(p.name.endswith(".checkpoint.parquet") for p in log_dir.iterdir())
    assert lake.last_batch_seq("znode_events", "w") == 6
    lake.optimize("znode_events")
    got = lake.read_arrow("znode_events")
    assert sorted(got.column("zxid").to_pylist()) == list(range(7))
    assert len(DeltaTable(lake.table_path("znode_events")).file_uris()) == 1
