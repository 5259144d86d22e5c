"""The pipeline's steps run in this process: every derived table from all bronze history, with no Spark.

The same composition as the Spark query (``engine.stateful``): ``pipelines.keyed_pipeline`` routes the bronze
rows to keys and steps each key from an empty state, and the query's sink (``engine.stateful_sink``) writes and
commits the outputs. Only the runner differs: one batch, the keys one after another in the driver, the state
dropped at the end. For small histories (unit tests, a quick look at a copied lake); a monitor continues from
the Spark query's checkpoint, which this runner does not write.
"""

from __future__ import annotations

import uuid

import pyarrow as pa

from engine.stateful import DEFAULT_BUCKETS
from engine.stateful_sink import StatefulSink, derived_counts, output_record, output_records, reset_derived
from lakehouse import Lake
from lakehouse.spark_schema import spark_arrow_schema
from models.states import DEFAULT_KAFKA_VERSION
from models.tables import CONTROLLER_DECISIONS, ZNODE_EVENTS
from pipelines.bucket_fold import ipc_bytes
from pipelines.cluster_stage import StreamPart
from pipelines.keyed_pipeline import by_key, empty_state, route_decision_rows, route_znode_rows, step_key

LOCAL_WRITER = "local-run"
"""The app-transaction id of this runner's commits (its one batch is batch 0 after each reset)."""


def run_local(lake: Lake, *, buckets: int = DEFAULT_BUCKETS, kafka_version: str = DEFAULT_KAFKA_VERSION,
              writer_id: str = LOCAL_WRITER) -> dict[str, int]:
    """Rebuild every derived table of ``lake`` in this process; returns each derived table's row count."""
    reset_derived(lake, writer_id)
    writer = f"{writer_id}-{uuid.uuid4().hex[:12]}"  # a writer per run: each run's batch is its batch 0
    routed = [*route_znode_rows(_bronze(lake, ZNODE_EVENTS.name), buckets),
              *route_decision_rows(_bronze(lake, CONTROLLER_DECISIONS.name), buckets)]
    keyed: dict[tuple[str, int], dict[StreamPart, pa.Table]] = {}
    for part, rows in routed:
        for cluster, bucket, body in by_key(rows):
            keyed.setdefault((cluster, bucket), {})[part] = body
    sink = StatefulSink(lake, writer)
    sink.ensure_tables()
    records = []
    for (cluster, bucket), parts in sorted(keyed.items()):
        out, _ = step_key(cluster, bucket, parts, empty_state(bucket), kafka_version)
        records += [output_record(lake.root, table, cluster, bucket, ipc_bytes(rows))
                    for table, rows in out.items() if rows.num_rows]
    sink.commit(output_records(records), 0)
    return derived_counts(lake)


def _bronze(lake: Lake, table: str) -> pa.Table:
    schema = spark_arrow_schema(table)
    rows = lake.read_arrow(table) if lake.exists(table) else schema.empty_table()
    return rows.select(schema.names).cast(schema)
