"""What a monitor does besides its micro-batches, whichever engine runs it: the quality suites on each batch's
new rows (``--quality``) and the lake's maintenance between batches (``--maintain-every``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from models.tables import (
    ANOMALIES,
    KRAFT_METADATA_EVENTS,
    PARTITION_TRANSITIONS,
    QUALITY_RESULTS,
    REPLICA_TRANSITIONS,
    TableSpec,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse import Lake

log = logging.getLogger(__name__)

QUALITY_EACH_BATCH_TABLES: tuple[TableSpec, ...] = (KRAFT_METADATA_EVENTS, PARTITION_TRANSITIONS, REPLICA_TRANSITIONS,
                                                   ANOMALIES)
"""The tables whose new rows a monitor checks batch by batch (the state tables and the ``metadata_events`` view,
with the transitions' cross-check against it, are checked whole by `check`)."""


def check_batch_rows(spark: SparkSession, lake: Lake, frames: Mapping[str, DataFrame], writer_id: str,
                     batch_id: int) -> None:
    """The quality suites over one micro-batch's new rows (``frames``: some of QUALITY_EACH_BATCH_TABLES), the
    results appended to quality_results once per (``writer_id``, ``batch_id``).

    A failing suite is logged and recorded; it does not stop the stream.
    """
    from services.quality import result_rows, run_quality_on_batch

    if not frames:
        return
    report = run_quality_on_batch(spark, frames)
    lake.append(QUALITY_RESULTS.name, result_rows(report), writer_id=writer_id, batch_seq=batch_id)
    for suite in report.suites:
        (log.info if suite.success else log.warning)("batch %d: %s", batch_id, suite.line())


class MaintenanceSchedule:
    """``zkledger maintain`` between micro-batches, at most once every ``every_s`` seconds (0: never).

    Between batches the monitor's own writes are idle; the collectors' appends go on, and a compaction that
    loses a race with one is left for the next turn. VACUUM keeps what the monitor's checkpoint still needs.
    """

    def __init__(self, lake: Lake, checkpoint_dir: str, every_s: float) -> None:
        self.lake, self.checkpoint_dir, self.every_s = lake, checkpoint_dir, every_s
        self.due = time.monotonic() + every_s

    def after_batch(self) -> None:
        if self.every_s <= 0 or time.monotonic() < self.due:
            return
        from lakehouse.maintenance import maintain_tables

        report = maintain_tables(self.lake, checkpoint_dirs=[self.checkpoint_dir])
        log.info("scheduled maintenance: %s", report.summary())
        self.due = time.monotonic() + self.every_s
