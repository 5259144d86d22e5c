"""What one key of the query runs in a micro-batch, inside ``engine.key_processor.PipelineProcessor``: its
rows unpacked, its carried state read from Spark's state store, the pipeline's step (``keyed_pipeline.step_key``),
the changed state written back, and its outputs (the files it wrote, or its rows packed) handed to the sink.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import types as T

from engine.stateful_sink import PACKED_COLUMN, WRITE_PROPERTY, WRITTEN, key_outputs, packed_records
from pipelines.bucket_fold import (
    BUCKET_COLUMN,
    CLUSTER_STAGE,
    TICK_STATE,
    BucketState,
    bucket_tick,
    ipc_bytes,
    ipc_table,
)
from pipelines.cluster_stage import ClusterState, StreamPart
from pipelines.keyed_pipeline import GLOBAL_SCHEMA, META_SEQ, step_key
from pipelines.kraft_stage import KRAFT_STAGE, KraftState
from pipelines.parallel import release_free_memory

PART_COLUMN = "part"
PACKED_IN = T.StructType([T.StructField("cluster", T.StringType()), T.StructField(BUCKET_COLUMN, T.IntegerType()),
                          T.StructField(PART_COLUMN, T.StringType()), T.StructField(PACKED_COLUMN, T.BinaryType())])
"""The operator's input: one task's rows of one ``StreamPart`` for one key, as one Arrow IPC stream."""
TICK_PARTS = frozenset({StreamPart.ZK_TIME, StreamPart.TXNLOG})
"""What every batch with ZooKeeper events sends every bucket of the cluster (``bucket_fold.bucket_tick``)."""
_EMPTY_BUCKET = BucketState.empty(META_SEQ)


def _outputs_wanted() -> bool:
    """False when the sink runs the operator only to commit its state stores (a batch already committed)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context is None or context.getLocalProperty(WRITE_PROPERTY) != "false"


class KeySteps:
    """A processor's steps over the state variables its ``init`` registered: ``bucket_parts`` (one ValueState
    per ``BucketState`` field), ``cluster_state`` (the ``ClusterState``) and ``kraft_image``."""

    def __init__(self, kafka_version: str, offline_blip: timedelta, lake_root: str | None,
                 bucket_parts: dict[str, Any], cluster_state: Any, kraft_image: Any) -> None:
        self.kafka_version, self.offline_blip, self.lake_root = kafka_version, offline_blip, lake_root
        self.bucket_parts, self.cluster_state, self.kraft_image = bucket_parts, cluster_state, kraft_image

    def run(self, cluster: str, bucket: int, rows: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        blobs: dict[StreamPart, list[pa.Table]] = {}
        for frame in rows:
            for part, blob in zip(frame[PART_COLUMN], frame[PACKED_COLUMN], strict=True):
                blobs.setdefault(StreamPart(part), []).append(ipc_table(blob))
        if not blobs:
            return
        parts = {part: pa.concat_tables(tables) for part, tables in blobs.items()}
        if bucket == KRAFT_STAGE:  # a KRaft cluster: its image, one bucket's state and its stage's, all here
            image = self.kraft_image.get()
            out, kraft = step_key(cluster, bucket, parts, KraftState(
                KraftState.image_of(image[0] if image else None), self._bucket_state(), self._cluster_state()),
                self.kafka_version, self.offline_blip)
            assert isinstance(kraft, KraftState)
            self.kraft_image.update((kraft.image_bytes(),))
            self.cluster_state.update(kraft.stage.to_bytes())
            for name, value in self.bucket_parts.items():
                value.update((ipc_bytes(getattr(kraft.bucket, name)),))
        elif bucket == CLUSTER_STAGE:
            out, after = step_key(cluster, bucket, parts, self._cluster_state(), self.kafka_version,
                                  self.offline_blip)
            assert isinstance(after, ClusterState)
            self.cluster_state.update(after.to_bytes())
        else:
            if parts.keys() <= TICK_PARTS:  # most buckets of most batches: read three small parts, not the state
                changed = bucket_tick({n: self._bucket_part(n) for n in TICK_STATE}, parts.get(StreamPart.ZK_TIME),
                                      parts.get(StreamPart.TXNLOG))
                if changed is not None:
                    for name, table in changed.items():
                        self.bucket_parts[name].update((ipc_bytes(table),))
                    return
            carried = self._bucket_state()
            out, after = step_key(cluster, bucket, parts, carried, self.kafka_version, self.offline_blip)
            for name, value in self.bucket_parts.items():
                if getattr(after, name) is not getattr(carried, name):  # the step returns untouched parts as they were
                    value.update((ipc_bytes(getattr(after, name)),))
        tables = [(name, rows) for name, rows in out.items() if rows.num_rows]
        if not tables:
            return
        if self.lake_root is None:
            records = packed_records((name, cluster, bucket, rows) for name, rows in tables)
        elif _outputs_wanted():
            records = key_outputs(self.lake_root, cluster, bucket, tables)
        else:
            return
        yield pd.DataFrame({f.name: pd.Series([r.get(f.name) for r in records], dtype=object) for f in WRITTEN.fields})

    # ``get`` alone (None when not set), not ``exists`` first: each call is a round trip to the state server
    def _cluster_state(self) -> ClusterState:
        stored = self.cluster_state.get()
        return ClusterState.from_bytes(tuple(stored)) if stored else ClusterState.empty(GLOBAL_SCHEMA)

    def _bucket_part(self, name: str) -> pa.Table:
        stored = self.bucket_parts[name].get()
        return ipc_table(stored[0]) if stored else getattr(_EMPTY_BUCKET, name)

    def _bucket_state(self) -> BucketState:
        return BucketState(**{name: self._bucket_part(name) for name in self.bucket_parts})

    @staticmethod
    def close() -> None:
        release_free_memory()
