"""`benchmarks.route_pool`: a run's pool reaches the route's workers as a user's settings file would put it."""

from __future__ import annotations

from pathlib import Path

from benchmarks.route_pool import parser, pool_conf
from conf.settings import load_settings
from engine.stateful import ROUTE_ARROW_POOL, ROUTE_ARROW_POOL_ENV


def test_a_pool_file_sets_the_route_s_environment_through_spark_extra(tmp_path: Path) -> None:
    conf = pool_conf(tmp_path / "pool.toml", "system")
    assert load_settings(conf).spark.extra == {f"spark.executorEnv.{ROUTE_ARROW_POOL_ENV}": "system"}


def test_the_shipped_pool_is_the_baseline_by_default() -> None:
    assert parser().parse_args([]).pools[0] == ROUTE_ARROW_POOL
