"""The query's routing task (``engine.stateful._Route``) takes its bronze rows a chunk at a time, so its memory
follows the chunk and not the size of the files it reads; what reaches each key is what one routing of all the
rows sends it; its Arrow buffers come from its own pool. No JVM: the task's function is called as Spark's
``mapInArrow`` calls it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from engine import stateful
from engine.key_steps import PART_COLUMN
from engine.stateful_sink import PACKED_COLUMN
from lakehouse.spark_schema import spark_arrow_schema
from models.tables import ZNODE_EVENTS
from pipelines.bucket_fold import ipc_table
from pipelines.cluster_stage import StreamPart
from pipelines.keyed_pipeline import route_znode_rows
from tests.history import zombie_offline_history

BUCKETS = 4


def _bronze() -> pa.Table:
    h = zombie_offline_history()
    h.add("/brokers/topics/t/partitions/0/state", "SET", b"{not json", zxid=h.rows[-1]["zxid"] + 1)  # quarantined
    schema = spark_arrow_schema(ZNODE_EVENTS.name)
    return pa.Table.from_pylist([{k: {**r, "cluster": "c"}.get(k) for k in schema.names} for r in h.rows], schema)


def _events_by_key(packed: list[pa.RecordBatch], part: StreamPart) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for batch in packed:
        for row in batch.to_pylist():
            if row[PART_COLUMN] == part:
                rows = ipc_table(row[PACKED_COLUMN])
                out.setdefault((row["cluster"], row["bucket"]), []).extend(
                    rows["event_id"].to_pylist() if "event_id" in rows.column_names else [str(rows.num_rows)])
    return {key: sorted(ids) for key, ids in out.items()}


def test_a_task_routes_its_rows_a_chunk_at_a_time_and_each_key_gets_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    bronze = _bronze()
    routed: list[int] = []

    def counted(rows: pa.Table, buckets: int) -> Any:
        routed.append(rows.num_rows)
        return route_znode_rows(rows, buckets)

    whole = list(stateful._Route(route_znode_rows, BUCKETS)(bronze.to_batches(max_chunksize=2)))
    monkeypatch.setattr(stateful, "ROUTE_CHUNK_ROWS", 4)
    chunked = list(stateful._Route(counted, BUCKETS)(bronze.to_batches(max_chunksize=2)))

    assert sum(routed) == bronze.num_rows and max(routed) == 4 and len(routed) == -(-bronze.num_rows // 4)
    for part in (StreamPart.EVENTS, StreamPart.QUARANTINE):
        assert _events_by_key(chunked, part) == _events_by_key(whole, part) != {}


@pytest.mark.parametrize("override", [None, "system"])
def test_a_task_routes_with_its_own_arrow_pool_and_leaves_the_worker_s_as_it_was(
        override: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if override is not None:
        monkeypatch.setenv(stateful.ROUTE_ARROW_POOL_ENV, override)
    before = pa.default_memory_pool().backend_name
    seen: list[str] = []

    def recorded(rows: pa.Table, buckets: int) -> Any:
        seen.append(pa.default_memory_pool().backend_name)
        return route_znode_rows(rows, buckets)

    packed = list(stateful._Route(recorded, BUCKETS)(_bronze().to_batches(max_chunksize=2)))

    assert packed and seen == [override or stateful.ROUTE_ARROW_POOL]
    assert pa.default_memory_pool().backend_name == before
