"""A command's terminal shows zkledger's lines only: Spark's own logs (log4j2, the JVM's stderr, the Python
workers' prints) go to ``<lake>/_logs/spark.log``; ``-v`` brings them back to the terminal (the session is then
built as tests and notebooks build it, with Spark's logs on stderr). The quiet Spark run itself is the installed
wheel's rebuild (tests/cli/test_wheel.py), which looks at both its stderr and the lake's log file."""

from __future__ import annotations

from pathlib import Path

from services.spark_session import SPARK_LOG


def test_verbose_brings_spark_s_logs_back_to_the_terminal(tmp_path: Path) -> None:
    # the same switch as the quiet run, without a Spark process: -v leaves the session's logs alone
    from conf.settings import load_settings
    from services.spark_session import spark_log_file, spark_logs_to_file
    from zkledger.cli import _configure_logging

    settings = load_settings(None, lake=str(tmp_path / "lake"))
    try:
        _configure_logging(0)
        assert spark_log_file(settings) == tmp_path / "lake" / SPARK_LOG
        _configure_logging(1)
        assert spark_log_file(settings) is None
    finally:
        spark_logs_to_file(False)
