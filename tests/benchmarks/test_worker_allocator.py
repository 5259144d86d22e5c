"""`benchmarks.worker_allocator`: a run's threshold reaches the session's conf as a user's file would put it, and
(`benchmarks.alternating_rebuilds`) the query's time is read from the engine's own lines."""

from __future__ import annotations

from pathlib import Path

from benchmarks.alternating_rebuilds import query_seconds
from benchmarks.worker_allocator import MMAP_THRESHOLD_CONF, threshold_conf
from conf.settings import load_settings


def test_a_threshold_file_sets_the_workers_environment_through_spark_extra(tmp_path: Path) -> None:
    conf = threshold_conf(tmp_path / "mmap.toml", 4_194_304)
    assert load_settings(conf).spark.extra[MMAP_THRESHOLD_CONF] == "4194304"
    assert MMAP_THRESHOLD_CONF == "spark.executorEnv.MALLOC_MMAP_THRESHOLD_"


def test_the_query_time_is_the_sum_of_its_micro_batches() -> None:
    log = "\n".join([
        "2026-11-29 08:00:00,000 engine.stateful stateful query batch 0 done: 1000058 rows in 9.4 s (addBatch 6.5 s)",
        "2026-11-29 08:00:01,000 engine.stateful_sink stateful query batch 0: 9.1 s (query and files 9.0 s, commits 0.1 s)",
        "2026-11-29 08:00:09,000 engine.stateful stateful query batch 1 done: 12 rows in 1.25 s (addBatch 1.0 s)",
        "an unrelated line that says stateful query batch nothing",
    ])
    assert query_seconds(log) == 10.65
    assert query_seconds("") == 0
