"""The labs' rebuild in the test's process: the pipeline's steps (``engine.local_run``) as the Spark query
composes them for `zkledger rebuild`, which tests/e2e (the differential suite, test_kraft_history.py) holds equal
to this run. A lab's checks are about Kafka and zkledger's model, not Spark: this saves a Spark process each."""

from __future__ import annotations

from pathlib import Path

from engine.local_run import run_local
from lakehouse import Lake


def rebuild_in_driver(lake_root: Path, cluster: str) -> str:
    counts = run_local(Lake(lake_root, cluster=cluster))
    return f"rebuilt in the driver: {counts}"
