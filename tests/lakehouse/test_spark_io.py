"""Spark over the lake through Delta's connector: read_table over what delta-rs wrote, Delta's streaming source
with its admission control, the idempotent foreachBatch sink across restarts and crashes, and the session's check
for Delta's jars. What every engine's reads and writes guarantee (idempotent batches, time travel, overwrites, ...)
is the lakehouse contract in test_lake.py, run once per engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lakehouse import Lake, arrow_schema
from lakehouse.lake import CRASH_ENV
from lakehouse.spark_io import read_table, stream_table
from lakehouse.spark_schema import spark_schema
from models.tables import ALL_TABLES
from services.errors import UserError
from services.spark_session import DELTA_EXTENSION, _require_delta
from tests.lakehouse.lake_append_loop import batch_rows

pytestmark = pytest.mark.spark
HERE = Path(__file__).parent


def _ids(lake: Lake, table: str = "znode_events") -> list[str]:
    return sorted(lake.read_arrow(table).column("event_id").to_pylist())


def _fill(lake: Lake, seqs: range, writer: str = "src") -> None:
    for s in seqs:
        lake.append("znode_events", batch_rows(s), writer_id=writer, batch_seq=s)


def test_spark_schema_matches_arrow_schema() -> None:
    for name in ALL_TABLES:
        st, at = spark_schema(name), arrow_schema(name)
        assert st.fieldNames() == at.names
        assert [f.nullable for f in st.fields] == [f.nullable for f in at]
    assert spark_schema("controller_decisions")["isr"].dataType.simpleString() == "array<int>"
    assert spark_schema("znode_events")["observed_at"].dataType.simpleString() == "timestamp"


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    """Spark returns naive datetimes in the session time zone (UTC, set by build_spark)."""
    return {k: v.replace(tzinfo=UTC) if isinstance(v, datetime) else v for k, v in row.items()}


def test_read_table_equals_read_arrow(spark: Any, lake: Lake) -> None:
    # a missing table: its current snapshot is empty (a job may start before the first commit), a past one fails
    missing = read_table(spark, lake, "controller_decisions")
    assert missing.count() == 0 and missing.columns == list(ALL_TABLES["controller_decisions"].column_names)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_table(spark, lake, "controller_decisions", version=0)
    assert not lake.exists("controller_decisions")
    lake.ensure("controller_decisions")
    empty = read_table(spark, lake, "controller_decisions")
    assert empty.count() == 0 and empty.columns == list(ALL_TABLES["controller_decisions"].column_names)
    rows = [
        {"source_file": "c.log", "line_no": i, "kind": "ELECTION", "event_id": f"d{i}", "isr": [1, i],
         "ts": datetime(2026, 1, 1, tzinfo=UTC), "partition": i}
        for i in range(4)
    ]
    lake.append("controller_decisions", rows[:2], writer_id="w", batch_seq=0)
    lake.append("controller_decisions", rows[2:], writer_id="w", batch_seq=1)
    for version in (1, 2, None):
        df = read_table(spark, lake, "controller_decisions", version=version)
        expected = lake.read_arrow("controller_decisions", version=version).to_pylist()
        got = [_utc(r.asDict()) for r in df.collect()]
        key = lambda r: r["event_id"]  # noqa: E731
        assert sorted(got, key=key) == sorted(expected, key=key)
    assert read_table(spark, lake, "controller_decisions", version=1).count() == 2
    stamp = {h["version"]: h["timestamp"] for h in lake.history("controller_decisions")}[1]
    as_of = datetime.fromtimestamp(stamp / 1000, tz=UTC)
    assert read_table(spark, lake, "controller_decisions", as_of=as_of).count() == 2


def _run_available_now(spark: Any, src: Lake, sink: Lake, ckpt: Path, seen: list[int]) -> None:
    def sink_batch(df: Any, batch_id: int) -> None:
        seen.append(batch_id)
        sink.append("znode_events", df.toArrow(), writer_id="copy", batch_seq=batch_id)

    q = (stream_table(spark, src, "znode_events").writeStream.foreachBatch(sink_batch)
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination()


def test_stream_stopped_and_restarted_with_new_versions(spark: Any, tmp_path: Path) -> None:
    src, sink = Lake(tmp_path / "src", "c"), Lake(tmp_path / "sink", "c")
    _fill(src, range(3))
    seen: list[int] = []
    _run_available_now(spark, src, sink, tmp_path / "ck", seen)
    assert _ids(sink) == _ids(src)
    _fill(src, range(3, 5))
    _run_available_now(spark, src, sink, tmp_path / "ck", seen)
    _run_available_now(spark, src, sink, tmp_path / "ck", seen)  # nothing new: no batch
    assert seen == [0, 1]
    assert _ids(sink) == _ids(src) and len(_ids(sink)) == 5 * 4
    # a replayed micro-batch id is a no-op in the sink
    assert sink.append("znode_events", read_table(spark, src, "znode_events").toArrow(), writer_id="copy",
                       batch_seq=1) is False
    assert len(_ids(sink)) == 20


def _run_until_idle(spark: Any, src: Lake, sink: Lake, ckpt: Path, seen: list[int], **options: Any) -> None:
    def sink_batch(df: Any, batch_id: int) -> None:
        seen.append(batch_id)
        sink.append("znode_events", df.toArrow(), writer_id="copy", batch_seq=batch_id)

    q = (stream_table(spark, src, "znode_events", **options).writeStream
         .foreachBatch(sink_batch).option("checkpointLocation", str(ckpt)).start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()


def test_stream_caps_files_per_trigger(spark: Any, tmp_path: Path) -> None:
    src, sink = Lake(tmp_path / "src", "c"), Lake(tmp_path / "sink", "c")
    _fill(src, range(4))  # versions 1..4, one data file each
    seen: list[int] = []
    _run_until_idle(spark, src, sink, tmp_path / "ck", seen, max_files_per_trigger=2)
    assert seen == [0, 1]  # four files, at most two per micro-batch
    assert _ids(sink) == _ids(src)


def test_stream_starts_after_a_version(spark: Any, tmp_path: Path) -> None:
    src, sink = Lake(tmp_path / "src", "c"), Lake(tmp_path / "sink", "c")
    _fill(src, range(4))  # versions 1..4
    _run_until_idle(spark, src, sink, tmp_path / "ck", [], after_version=2)
    later = {r["event_id"] for s in (2, 3) for r in batch_rows(s)}  # batches 2 and 3 are versions 3 and 4
    assert set(_ids(sink)) == later


def test_stream_refuses_a_version_that_rewrites_data(spark: Any, tmp_path: Path) -> None:
    src, sink = Lake(tmp_path / "src", "c"), Lake(tmp_path / "sink", "c")
    _fill(src, range(1))
    seen: list[int] = []
    _run_until_idle(spark, src, sink, tmp_path / "ck", seen)
    src.overwrite("znode_events", batch_rows(9), writer_id="rewrite", batch_seq=0)
    with pytest.raises(Exception, match=r"(?i)update|change|delete"):
        _run_until_idle(spark, src, sink, tmp_path / "ck", seen)
    assert seen == [0]


def _job(src: Path, sink: Path, ckpt: Path, crash: str | None) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    env.pop(CRASH_ENV, None)
    if crash:
        env[CRASH_ENV] = crash
    args = [sys.executable, str(HERE / "lake_stream_job.py"), str(src), str(sink), str(ckpt)]
    return subprocess.run(args, env=env, timeout=300, check=False, capture_output=True).returncode


@pytest.mark.skipif(not os.environ.get("ZKLEDGER_ALL_COMMIT_POINTS"),
                    reason="the longer kill matrix (ZKLEDGER_ALL_COMMIT_POINTS=1); the engine's own commit-point "
                           "kills run by default")
@pytest.mark.usefixtures("starts_spark")  # lake_stream_job.py builds its own session
def test_stream_killed_mid_commit_restarts_exactly_once(tmp_path: Path) -> None:
    src_root, sink_root, ckpt = tmp_path / "src", tmp_path / "sink", tmp_path / "ck"
    src, sink = Lake(src_root, "s"), Lake(sink_root, "s")
    _fill(src, range(3))  # versions 1..3: micro-batch 0
    # run 1: killed in micro-batch 0 after the batch was collected, before the Delta commit
    assert _job(src_root, sink_root, ckpt, "before_commit:0") == -signal.SIGKILL
    assert not sink.exists("znode_events") or _ids(sink) == []
    # run 2: Spark replays micro-batch 0; killed right after its Delta commit, before Spark's commit log
    assert _job(src_root, sink_root, ckpt, "after_commit:0") == -signal.SIGKILL
    assert sink.last_batch_seq("znode_events", "stream:test") == 0
    assert len(_ids(sink)) == 3 * 4
    _fill(src, range(3, 5))  # versions 4..5 arrive while the query is down
    # run 3: Spark replays micro-batch 0 again (not in its commit log): the app transaction makes it a no-op;
    # then versions 4..5 are batch 1 of the same availableNow run, so the sink ends equal to the source.
    assert _job(src_root, sink_root, ckpt, None) == 0
    got = _ids(sink)
    assert len(got) == len(set(got))  # no duplicates
    assert got == _ids(src)  # nothing missing
    assert sink.last_batch_seq("znode_events", "stream:test") == 1


def test_a_spark_without_deltas_jars_fails_with_one_line(spark: Any) -> None:
    """``_require_delta`` on the session's own JVM, looking through the system class loader: it holds Spark's jars
    but not Delta's (``spark.jars`` adds those in a child loader), i.e. a Spark started without the connector on
    its classpath. No second JVM is needed."""
    _require_delta(spark)  # the session as built has the connector
    jvm = spark.sparkContext._jvm
    thread = jvm.java.lang.Thread.currentThread()  # this Python thread's JVM thread (PySpark pins them)
    own = thread.getContextClassLoader()
    bare = jvm.java.lang.ClassLoader.getSystemClassLoader()
    thread.setContextClassLoader(bare)
    try:
        jvm.java.lang.Class.forName("org.apache.spark.sql.SparkSession", False, bare)  # Spark's classes it has
        with pytest.raises(UserError) as failure:
            _require_delta(spark)
    finally:
        thread.setContextClassLoader(own)
    message = str(failure.value)
    assert message.startswith("Delta Lake's connector is not on this Spark's classpath; ") and "\n" not in message
    assert "--jars" in message and DELTA_EXTENSION in message  # the fix is in the message
    _require_delta(spark)  # the session's own class loader is back
