"""The query's stateful processor: what Spark calls for each key (a bucket, a cluster's stage, a KRaft cluster)
in each micro-batch.

At every query start Spark runs this processor's ``init`` alone in a new Python process on the driver, to learn
its state variables, and that process imports this module. So it loads only pyspark's types; the steps
(``engine.key_steps``: pyarrow, pandas, the fold) load with a key's first rows, on the executors, whose Python
workers keep them from one task to the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

if TYPE_CHECKING:
    import pandas as pd

    from engine.key_steps import KeySteps

STATE_BLOB = T.StructType([T.StructField("ipc", T.BinaryType())])
"""One part of a bucket's state (one ``BucketState`` field) as one ValueState: a batch rewrites only the parts
it changed (a batch that only moves the cluster's clock writes two small values, not the bucket's keys)."""


class PipelineProcessor(StatefulProcessor):
    """One key per micro-batch: a bucket (its carried ``BucketState``, one ValueState per part) or a cluster's
    stage (``ClusterState``, one ValueState with a field per part), as Arrow IPC bytes. ``bucket_parts`` and
    ``cluster_parts`` name those parts (the states' fields, which the driver reads)."""

    def __init__(self, kafka_version: str, offline_blip: timedelta, lake_root: str | None,
                 bucket_parts: tuple[str, ...], cluster_parts: tuple[str, ...]) -> None:
        self.kafka_version, self.offline_blip, self.lake_root = kafka_version, offline_blip, lake_root
        self.bucket_part_names, self.cluster_part_names = bucket_parts, cluster_parts
        self.steps: KeySteps | None = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_parts = {name: handle.getValueState(f"bucket_{name}", STATE_BLOB)
                             for name in self.bucket_part_names}
        self.cluster_state = handle.getValueState(
            "cluster", T.StructType([T.StructField(n, T.BinaryType()) for n in self.cluster_part_names]))
        self.kraft_image = handle.getValueState("kraft_image", STATE_BLOB)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        if self.steps is None:
            from engine.key_steps import KeySteps  # here, not at import: see the module's docstring

            self.steps = KeySteps(self.kafka_version, self.offline_blip, self.lake_root, self.bucket_parts,
                                  self.cluster_state, self.kraft_image)
        yield from self.steps.run(str(key[0]), int(key[1]), rows)

    def close(self) -> None:
        if self.steps is not None:
            self.steps.close()
