"""The pipeline's steps run in this process: every derived table from all bronze history, with no Spark.

The same composition as the Spark query (``engine.stateful``): ``pipelines.keyed_pipeline`` routes the bronze
rows to keys and steps each key from an empty state, and the query's sink (``engine.stateful_sink``) writes and
commits the outputs. Only the runner differs: one batch, the keys one after another in the driver, the state
dropped at the end. For small histories (unit tests, a quick look at a copied lake); a monitor continues from
the Spark query's checkpoint, which this runner does not write.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from itertools import pairwise

import numpy as np
import pyarrow as pa

from engine.stateful import DEFAULT_BUCKETS, cluster_partitions
from engine.stateful_sink import (
    StatefulSink,
    derived_counts,
    output_files,
    output_records,
    packed_records,
    reset_derived,
)
from lakehouse import Lake
from lakehouse.spark_schema import spark_arrow_schema
from models.states import DEFAULT_KAFKA_VERSION
from models.tables import CONTROLLER_DECISIONS, KRAFT_RECORDS, ZNODE_EVENTS
from pipelines.bucket_fold import BucketLayout, Buckets
from pipelines.cluster_stage import StreamPart
from pipelines.detectors import DEFAULT_OFFLINE_BLIP
from pipelines.keyed_pipeline import (
    KeyState,
    by_key,
    empty_state,
    route_decision_rows,
    route_kraft_records,
    route_znode_rows,
    step_key,
)

LOCAL_WRITER = "local-run"
"""The app-transaction id of this runner's commits (its one batch is batch 0 after each reset)."""


class LocalRunner:
    """The steps run key after key in this process, each key's state held here between batches (what Spark's
    operator does per key, with its state store)."""

    def __init__(self, buckets: Buckets = DEFAULT_BUCKETS, kafka_version: str = DEFAULT_KAFKA_VERSION,
                 offline_blip: timedelta = DEFAULT_OFFLINE_BLIP) -> None:
        self.buckets, self.kafka_version, self.offline_blip = buckets, kafka_version, offline_blip
        self.states: dict[tuple[str, int], KeyState] = {}

    def step(self, bronze: pa.Table, decisions: pa.Table, kraft: pa.Table | None = None,
             zookeeper_clusters: frozenset[str] = frozenset()) -> list[tuple[str, int, str, pa.Table]]:
        """One batch of bronze rows (``spark_arrow_schema`` shaped): each key's (cluster, bucket, table, rows).
        ``zookeeper_clusters`` as ``engine.stateful.stateful_stream`` takes it."""
        keyed: dict[tuple[str, int], dict[StreamPart, pa.Table]] = {}
        routed = [*route_znode_rows(bronze, self.buckets), *route_decision_rows(decisions, self.buckets)]
        if kraft is not None and kraft.num_rows:
            routed += route_kraft_records(kraft, self.buckets, zookeeper_clusters)
        for part, rows in routed:
            for cluster, bucket, body in by_key(rows):
                keyed.setdefault((cluster, bucket), {})[part] = body
        out = []
        for (cluster, bucket), parts in sorted(keyed.items()):
            state = self.states.get((cluster, bucket)) or empty_state(bucket)
            tables, self.states[(cluster, bucket)] = step_key(cluster, bucket, parts, state, self.kafka_version,
                                                              self.offline_blip)
            out += [(cluster, bucket, table, rows) for table, rows in tables.items() if rows.num_rows]
        return out


def run_local(lake: Lake, *, buckets: int = DEFAULT_BUCKETS, kafka_version: str = DEFAULT_KAFKA_VERSION,
              writer_id: str = LOCAL_WRITER, batch_rows: int | None = None,
              offline_blip: timedelta = DEFAULT_OFFLINE_BLIP) -> dict[str, int]:
    """Rebuild every derived table of ``lake`` in this process; returns each derived table's row count.

    ``batch_rows``: run the history in batches of about that many bronze rows in zxid order (a zxid is never
    split; the decisions go with the last batch), each continuing from the keys' states, as micro-batches do."""
    reset_derived(lake, writer_id)
    writer = f"{writer_id}-{uuid.uuid4().hex[:12]}"  # a writer per run: its batches count from 0
    sink = StatefulSink(lake, writer)
    sink.ensure_tables()
    runner = LocalRunner(BucketLayout.sized(buckets, cluster_partitions(lake)), kafka_version, offline_blip)
    for i, batch in enumerate(history_batches(lake, batch_rows)):
        outputs = runner.step(*batch)
        sink.commit(output_records(output_files(lake.root, packed_records(
            (table, cluster, bucket, rows) for cluster, bucket, table, rows in outputs))), i)
    return derived_counts(lake)


def history_batches(lake: Lake, batch_rows: int | None = None
                    ) -> Iterator[tuple[pa.Table, pa.Table, pa.Table | None, frozenset[str]]]:
    """The lake's bronze history as ``LocalRunner.step``'s arguments, batch after batch: about ``batch_rows``
    znode rows each in zxid order (None: one batch; a zxid is never split), the decisions with the last batch,
    a KRaft history's records with the first."""
    bronze = bronze_rows(lake, ZNODE_EVENTS.name).sort_by("zxid")
    decisions = bronze_rows(lake, CONTROLLER_DECISIONS.name)
    kraft = bronze_rows(lake, KRAFT_RECORDS.name)
    zookeeper_clusters = lake.clusters(ZNODE_EVENTS.name)
    cuts = _zxid_cuts(bronze["zxid"].to_numpy(zero_copy_only=False), batch_rows or max(bronze.num_rows, 1))
    for i, (a, b) in enumerate(pairwise(cuts)):
        last = i == len(cuts) - 2
        yield (bronze.slice(a, b - a), decisions if last else decisions.slice(0, 0), kraft if i == 0 else None,
               zookeeper_clusters)


def _zxid_cuts(zxids: np.ndarray, batch_rows: int) -> list[int]:
    """Batch bounds of about ``batch_rows`` rows over sorted ``zxids``, never inside a zxid's rows."""
    cuts = [0]
    while cuts[-1] < len(zxids):
        at = min(cuts[-1] + batch_rows, len(zxids))
        at = int(np.searchsorted(zxids, zxids[at - 1], side="right"))  # the whole last zxid
        cuts.append(at)
    return cuts if len(cuts) > 1 else [0, 0]


def bronze_rows(lake: Lake, table: str) -> pa.Table:
    """A bronze table's rows as the Spark query reads them (``spark_arrow_schema``)."""
    schema = spark_arrow_schema(table)
    rows = lake.read_arrow(table) if lake.exists(table) else schema.empty_table()
    return rows.select(schema.names).cast(schema)
