"""PySpark's worker daemon, started so that a task pays only for its own work (``spark.python.daemon.module``).

Spark forks each Python worker from one daemon process and reuses it task after task. Two costs of PySpark's own
daemon do not follow the work:

- Spark puts its archives (``pyspark.zip``, py4j's source zip) first on the workers' import path, so the packages
  load from them although the same ones are installed. Every task calls ``importlib.invalidate_caches()``, and on
  Python 3.11 each zip importer cached for a package loaded from an archive (about 15) reads the archive's whole
  directory again: about 50 ms of CPU per task.
- After every task a reused worker runs a full ``gc.collect()`` over every object its imports made
  (pyarrow, pandas, the pipeline).

Here the archives leave the path when they are the installed pyspark's own (the same distribution, installed
unpacked), the modules a worker runs are imported before the daemon forks, and ``gc.freeze()`` puts their
objects out of the collector's reach. Then PySpark's daemon runs as it would. Its workers share those modules
(forked), and none of them imports or compiles them again.
"""

from __future__ import annotations

import gc
import importlib
import importlib.machinery
import os
import sys

WORKER_MODULES = ("pyarrow", "pandas", "pyspark.sql", "pipelines.keyed_pipeline", "lakehouse.files")
"""What the query's tasks run (the engine's functions are thin over these): imported once, in the daemon."""


def unshadowed_path(path: list[str]) -> list[str]:
    """``path`` without the archives under the installed pyspark's ``python/lib`` whose package is installed
    elsewhere on ``path``."""
    def elsewhere(name: str, archive: str) -> bool:
        spec = importlib.machinery.PathFinder.find_spec(name, [p for p in path if p != archive])
        return spec is not None and spec.origin is not None and ".zip" not in spec.origin

    pyspark = importlib.machinery.PathFinder.find_spec("pyspark", [p for p in path if ".zip" not in p])
    if pyspark is None or pyspark.origin is None:
        return list(path)
    archives = os.path.join(os.path.dirname(pyspark.origin), "python", "lib") + os.sep
    kept = []
    for entry in path:
        name = os.path.basename(entry).split("-")[0].removesuffix(".zip")  # pyspark.zip, py4j-0.10.9.9-src.zip
        if entry.startswith(archives) and entry.endswith(".zip") and elsewhere(name, entry):
            continue
        kept.append(entry)
    return kept


def main() -> None:
    kept = unshadowed_path(sys.path)
    for entry in set(sys.path) - set(kept):  # the path finder may have cached an importer for it already
        for cached in [c for c in sys.path_importer_cache if c == entry or c.startswith(entry + os.sep)]:
            del sys.path_importer_cache[cached]
    sys.path[:] = kept
    for module in WORKER_MODULES:
        importlib.import_module(module)
    # PySpark's daemon reads its worker module from sys.argv[1], as under ``python -m pyspark.daemon``
    from pyspark import daemon

    gc.freeze()
    daemon.manager()  # type: ignore[no-untyped-call]  # PySpark's, untyped


if __name__ == "__main__":
    main()
