"""What every command receives: settings, the lake, the cluster name and a lazily built SparkSession."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from conf.settings import Settings
from services.errors import UserError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse import Lake

log = logging.getLogger(__name__)


class Context:
    """Per-invocation wiring. Nothing heavy happens until `lake` or `spark()` is first used."""

    def __init__(self, settings: Settings, lake: str | Path | None = None, cluster: str | None = None) -> None:
        self.settings = settings
        self.lake_root = str(lake if lake is not None else settings.lake.root)
        self.cluster = cluster if cluster is not None else settings.lake.cluster
        self._lake: Lake | None = None
        self._spark: SparkSession | None = None

    @property
    def lake(self) -> Lake:
        """`lakehouse.Lake(root, cluster)`, imported on first use so commands without a lake stay light."""
        if self._lake is None:
            self.check_lake_root()
            from lakehouse import Lake

            self._lake = Lake(self.lake_root, self.cluster)
        return self._lake

    def check_lake_root(self) -> None:
        """Raise a UserError when the lake root exists but is not a folder (it may not exist yet)."""
        if os.path.exists(self.lake_root) and not os.path.isdir(self.lake_root):
            raise UserError(f"--lake {self.lake_root}: not a directory (the lake is a folder of Delta tables)")

    def require_lake(self) -> None:
        """Raise a UserError when there is no lake folder to read (a mistyped --lake must not read as empty)."""
        self.check_lake_root()
        if not os.path.isdir(self.lake_root):
            raise UserError(f"no lake at {self.lake_root}: collect into it first (`zkledger collect ...`), "
                            "or give --lake")

    def require_table(self, table: str) -> None:
        """Raise a UserError when the lake has no `table` (no lake at all is said as such)."""
        self.require_lake()
        if not self.lake.exists(table):
            raise UserError(f"no {table} table under {self.lake_root}: run `zkledger rebuild` first")

    def spark(self, app_name: str | None = None) -> SparkSession:
        """The SparkSession, built on first call by `services.spark_session.build_spark`."""
        if self._spark is None:
            from services.spark_session import build_spark

            self._spark = build_spark(self.settings, app_name)
            log.info("Spark on master %s", self._spark.sparkContext.master)
        return self._spark

    @property
    def has_spark(self) -> bool:
        return self._spark is not None

    def close(self) -> None:
        """Stop the SparkSession if one was started (the CLI calls this when a command ends)."""
        if self._spark is not None:
            self._spark.stop()
            self._spark = None
