"""The lake's contract (``Lake``, delta-rs: every writer of the lake goes through it): every table's schema
round-trips, batches are idempotent by writer id and batch sequence, time travel by version and by time,
overwrites replace keyed state, a missing table fails clearly; table creation, input conversion, concurrent
writers, crashes, checkpoints.

Delta's Spark connector reading what ``Lake`` wrote, and the other way round, is test_interop.py's; the
connector's reads and streams through ``lakehouse.spark_io``, test_spark_io.py's.
"""

from __future__ import annotations

import os
import re
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
from lakehouse.lake import CRASH_ENV, WriteMode
from models.tables import ALL_TABLES
from tests.lakehouse.delta_engines import sample_rows
from tests.lakehouse.lake_append_loop import WRITER, batch_rows

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HERE = Path(__file__).parent
EVENTS = "znode_events"
STATE_TABLES = ("partition_state", "replica_state")


def zrows(n: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"zxid": start + i, "path": f"/n/{start + i}", "op": "CREATE", "source": "watch", "observed_at": T0,
         "event_id": f"e{start + i}"}
        for i in range(n)
    ]


def zevents(n: int, start: int = 0) -> pa.Table:
    """``n`` znode_events rows with every column filled (zxid and event ids count up from ``start``)."""
    return sample_rows(EVENTS, n, start=start, tag="z")


def write(lake: Lake, table: str, data: pa.Table, writer_id: str, batch_seq: int, mode: WriteMode = "append",
          metadata: dict[str, str] | None = None) -> bool:
    """``Lake.append`` or ``Lake.overwrite`` with the rows as dicts, as the collectors hand them over (Arrow input
    has its own tests below)."""
    put = lake.append if mode == "append" else lake.overwrite
    return put(table, data.to_pylist(), writer_id=writer_id, batch_seq=batch_seq, metadata=metadata)


def _rows(data: pa.Table) -> list[str]:
    """Rows as comparable text, order-free."""
    return sorted(repr(sorted(r.items())) for r in data.to_pylist())


def _plain(t: pa.DataType) -> pa.DataType:
    """A type without its list item's name (delta-rs and Spark call it ``element``, pyarrow ``item``)."""
    return pa.list_(_plain(t.value_type)) if pa.types.is_list(t) else t


def _columns(schema: pa.Schema) -> list[tuple[str, pa.DataType, bool]]:
    return [(f.name, _plain(f.type), f.nullable) for f in schema]


def _stored(lake: Lake, table: str) -> list[tuple[str, bool]]:
    """The table's schema in its Delta log: names and nullability."""
    return [(f.name, f.nullable) for f in pa.schema(DeltaTable(lake.table_path(table)).schema().to_arrow())]


def _spec(table: str) -> list[tuple[str, bool]]:
    return [(c.name, c.nullable) for c in ALL_TABLES[table].columns]


@pytest.mark.parametrize("table", sorted(ALL_TABLES))
def test_every_table_round_trips_its_schema(lake: Lake, table: str) -> None:
    data = sample_rows(table, 3)  # every column filled, lists and binaries included
    assert write(lake, table, data, writer_id="w", batch_seq=0) is True
    got = lake.read_arrow(table)
    assert _columns(got.schema) == _columns(arrow_schema(table))  # names, types and nullability of the spec
    assert _rows(got) == _rows(data)
    assert _stored(lake, table) == _spec(table)  # the writer kept the table's schema as created
    assert lake.history(table, limit=1)[0]["engineInfo"].startswith("delta-rs:")


def test_write_fills_cluster_and_missing_columns(lake: Lake) -> None:
    required = [c.name for c in ALL_TABLES[EVENTS].columns if not c.nullable and c.name != "cluster"]
    partial = zevents(3).select(required)  # no cluster, no nullable column
    assert write(lake, EVENTS, partial, writer_id="w", batch_seq=0) is True
    got = lake.read_arrow(EVENTS)
    assert got.num_rows == 3 and set(got.column("cluster").to_pylist()) == {"test"}
    nullable = [c.name for c in ALL_TABLES[EVENTS].columns if c.nullable]
    assert {name: got.column(name).null_count for name in nullable} == dict.fromkeys(nullable, 3)
    assert _rows(got.select(required)) == _rows(partial)
    explicit = zevents(1, start=10).select(["cluster", *required])
    explicit = explicit.set_column(0, "cluster", pa.array(["other"]))
    assert write(lake, EVENTS, explicit, writer_id="w", batch_seq=1) is True
    clusters = dict(zip(*lake.read_arrow(EVENTS).select(["zxid", "cluster"]).to_pydict().values(),
                        strict=True))
    assert clusters == {0: "test", 1: "test", 2: "test", 10: "other"}


def test_write_refuses_rows_that_break_the_schema(lake: Lake) -> None:
    unknown = zevents(1).append_column("pth", pa.array(["/x"]))
    with pytest.raises(ValueError, match="unknown column"):
        write(lake, EVENTS, unknown, writer_id="w", batch_seq=0)
    assert not lake.exists(EVENTS), "a refused write left a table behind"
    relaxed = pa.schema([f.with_nullable(True) for f in arrow_schema(EVENTS)])
    null_path = zevents(2).cast(relaxed)
    null_path = null_path.set_column(null_path.schema.get_field_index("path"), "path", pa.array(["/a", None]))
    # refused naming the column: Lake's ValueError (delta-rs), Delta's NOT NULL constraint (connector)
    with pytest.raises(Exception, match=r"column:? '?path\b"):
        write(lake, EVENTS, null_path, writer_id="w", batch_seq=0)
    with pytest.raises(ValueError, match="unknown table"):
        write(lake, "no_such_table", zevents(1), writer_id="w", batch_seq=0)
    # nothing was committed: no row, and the batch is still to be written
    assert lake.row_count(EVENTS) == 0 and lake.last_batch_seq(EVENTS, "w") is None
    assert write(lake, EVENTS, zevents(2), writer_id="w", batch_seq=0) is True


def test_replayed_batch_is_not_written_twice(lake: Lake) -> None:
    assert lake.last_batch_seq(EVENTS, "w") is None
    meta = {"zkledger.writer": "w", "zkledger.bronze": "3"}
    assert write(lake, EVENTS, zevents(5), writer_id="w", batch_seq=0, metadata=meta) is True
    v = lake.version(EVENTS)
    assert {k: lake.history(EVENTS, limit=1)[0].get(k) for k in meta} == meta  # the metadata is in the commit
    # crash before the caller recorded its progress: it replays the same batch
    assert write(lake, EVENTS, zevents(5), writer_id="w", batch_seq=0) is False
    assert lake.version(EVENTS) == v
    assert write(lake, EVENTS, zevents(5, 5), writer_id="w", batch_seq=1) is True
    assert write(lake, EVENTS, zevents(5, 50), writer_id="w", batch_seq=0) is False  # older too
    assert lake.last_batch_seq(EVENTS, "w") == 1
    assert lake.last_batch_seq(EVENTS, "other") is None
    # another writer's seq space is its own
    assert write(lake, EVENTS, zevents(1, 100), writer_id="other", batch_seq=0) is True
    assert lake.last_batch_seq(EVENTS, "other") == 0
    got = lake.read_arrow(EVENTS)
    assert sorted(got.column("zxid").to_pylist()) == [*range(10), 100]


def test_empty_batch_still_records_progress(lake: Lake) -> None:
    assert write(lake, "quarantine", sample_rows("quarantine", 0), writer_id="w", batch_seq=3)
    assert lake.last_batch_seq("quarantine", "w") == 3
    assert lake.read_arrow("quarantine").num_rows == 0
    assert write(lake, "quarantine", sample_rows("quarantine", 1), writer_id="w", batch_seq=3) \
        is False


@pytest.mark.parametrize("table", STATE_TABLES)
def test_overwrite_replaces_a_state_table_idempotently(lake: Lake, table: str) -> None:
    key = list(ALL_TABLES[table].key)
    state = sample_rows(table, 3, tag="s")
    assert write(lake, table, state, writer_id="rebuild", batch_seq=0, mode="overwrite") is True
    first = lake.version(table)
    newer = sample_rows(table, 1, start=7, tag="n")
    assert write(lake, table, newer, writer_id="rebuild", batch_seq=1, mode="overwrite") is True
    assert write(lake, table, state, writer_id="rebuild", batch_seq=1, mode="overwrite") is False
    got = lake.read_arrow(table)
    assert _rows(got) == _rows(newer)  # replaced, not merged: only the newer state's key is left
    assert got.select(key).to_pylist() == newer.select(key).to_pylist()
    assert _rows(lake.read_arrow(table, version=first)) == _rows(state)  # the old state stays readable
    assert _stored(lake, table) == _spec(table)  # an overwrite keeps the spec's schema
    assert lake.last_batch_seq(table, "rebuild") == 1


def test_time_travel_by_version_and_timestamp(lake: Lake) -> None:
    first, second = zevents(2), zevents(3, 2)
    write(lake, EVENTS, first, writer_id="w", batch_seq=0)  # version 1 (ensure makes 0)
    time.sleep(0.05)  # distinct commit timestamps (ms resolution)
    write(lake, EVENTS, second, writer_id="w", batch_seq=1)  # version 2
    assert lake.read_arrow(EVENTS, version=0).num_rows == 0
    assert _rows(lake.read_arrow(EVENTS, version=1)) == _rows(first)
    assert _rows(lake.read_arrow(EVENTS, version=2)) == _rows(pa.concat_tables([first, second]))
    stamps = {h["version"]: h["timestamp"] for h in lake.history(EVENTS)}
    at_v1 = datetime.fromtimestamp(stamps[1] / 1000, tz=UTC)
    assert _rows(lake.read_arrow(EVENTS, as_of=at_v1)) == _rows(first)
    assert _rows(lake.read_arrow(EVENTS, as_of=at_v1 + timedelta(milliseconds=1))) == _rows(first)
    assert lake.read_arrow(EVENTS, as_of=datetime.now(UTC) + timedelta(days=1)).num_rows == 5
    before = datetime.fromtimestamp(stamps[0] / 1000, tz=UTC) - timedelta(seconds=1)
    with pytest.raises(ValueError, match="no version at or before"):
        lake.read_arrow(EVENTS, as_of=before)
    with pytest.raises(ValueError, match="version or as_of"):
        lake.read_arrow(EVENTS, version=1, as_of=at_v1)


def test_reading_a_missing_table_fails_clearly(lake: Lake) -> None:
    message = f"^table '{EVENTS}' does not exist under {re.escape(lake.root)}$"  # one line: the table, the lake
    with pytest.raises(FileNotFoundError, match=message):
        lake.read_arrow(EVENTS, version=0)
    with pytest.raises(FileNotFoundError, match=message):
        lake.read_arrow(EVENTS, as_of=datetime.now(UTC))
    with pytest.raises(FileNotFoundError, match=message):
        lake.read_arrow(EVENTS)
    assert not lake.exists(EVENTS)  # reading created nothing


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


def test_a_long_lived_lake_loads_its_table_afresh_from_a_checkpoint(tmp_path: Path) -> None:
    """A collector's Lake commits for hours: its cached table handle is replaced every few checkpoints rather
    than brought forward commit by commit for ever, and what it sees stays the same."""
    lake = Lake(tmp_path / "lake", cluster="test", checkpoint_interval=3)
    loaded_at = set()
    for seq in range(20):
        lake.append("znode_events", batch_rows(seq, 2), writer_id=WRITER, batch_seq=seq)
        with lake._current("znode_events") as dt:
            loaded_at.add(lake._loaded_at["znode_events"])
            assert dt.version() - lake._loaded_at["znode_events"] < 6
    assert len(loaded_at) > 2
    assert lake.last_batch_seq("znode_events", WRITER) == 19
    assert lake.row_count("znode_events") == 40


def test_null_in_non_nullable_column_names_table_and_column(lake: Lake) -> None:
    bad = zrows(2)
    bad[1]["path"] = None
    with pytest.raises(ValueError, match=r"znode_events.*'path'"):
        lake.append("znode_events", bad, writer_id="w", batch_seq=0)
    with pytest.raises(ValueError, match="unknown column"):
        lake.append("znode_events", [{**zrows(1)[0], "pth": "/x"}], writer_id="w", batch_seq=0)
    with pytest.raises(ValueError, match="unknown table"):
        lake.ensure("no_such_table")


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
