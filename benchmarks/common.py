"""Shared benchmark plumbing: the machine description, timers, result JSON, a Spark session, a scratch lake.

Benchmarks are never part of the test suite; each module is runnable alone (`python -m benchmarks.<name>`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """nproc, memory, load and the versions the figures depend on."""
    import deltalake
    import pyarrow
    import pyspark

    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(), "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2), "python": platform.python_version(),
        "spark": pyspark.__version__, "deltalake": deltalake.__version__, "pyarrow": pyarrow.__version__,
        "platform": platform.platform(),
    }


class Timer:
    """Named wall-clock (and this process's CPU) phases: `with t.phase("x"): ...`."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall[name] = round(time.perf_counter() - w0, 3)
            self.cpu[name] = round(time.process_time() - c0, 3)
            log.info("%s: %.2f s", name, self.wall[name])


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b > 0 else None


def write_result(name: str, result: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    """benchmarks/results/<name>.json, plus a human summary on stdout."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"== {name} ==")
    m = result.get("machine", {})
    print(f"machine: nproc={m.get('nproc')} mem={m.get('memory_gib')}GiB load1m={m.get('load_avg_1m')} "
          f"python={m.get('python')} spark={m.get('spark')} deltalake={m.get('deltalake')}")
    for line in result.get("summary", []):
        print("  " + line)
    print(f"  -> {path}")
    return path


def base_parser(name: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=description)
    parser.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir, removed after)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--out", default=str(RESULTS_DIR), help="results directory (default benchmarks/results)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    return parser


@contextmanager
def scratch(args: argparse.Namespace) -> Iterator[Path]:
    """A work directory for lakes and checkpoints (temp unless --workdir)."""
    path = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="zkledger-bench-"))
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(path, ignore_errors=True)


def run_main(name: str, parser: argparse.ArgumentParser, run: Any, argv: list[str] | None) -> int:
    """Every benchmark's entry point: parse, log, run, write results/<name>.json."""
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    from pipelines.parallel import use_system_allocator

    use_system_allocator()  # what the zkledger commands run with
    write_result(name, run(args), Path(args.out))
    return 0


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")


def build_session(app: str, shuffle_partitions: int | None = None) -> Any:
    """The project's SparkSession (zkledger.spark.build_spark), local[*] on this machine."""
    from conf.settings import load_settings
    from zkledger.spark import build_spark

    overrides: dict[str, Any] = {"spark.master": f"local[{os.cpu_count() or 1}]"}
    if shuffle_partitions is not None:
        overrides["spark.shuffle_partitions"] = shuffle_partitions
    return build_spark(load_settings(overrides=overrides), app_name=app)


def add_history_args(parser: argparse.ArgumentParser) -> None:
    """``--events`` and ``--partitions`` of the history ``offline_history`` writes."""
    parser.add_argument("--events", type=int, default=10_000_000, help="bronze events (default 10,000,000)")
    parser.add_argument("--partitions", type=int, default=200_000, help="partitions (default 200,000)")


def offline_history(lake_dir: Path, events: int, partitions: int) -> Any:
    """A lake (cluster ``bench``) holding a synthetic history, written by the code `zkledger simulate --offline`
    runs."""
    from lakehouse import Lake
    from zkledger.cli import main as cli

    rc = cli(["--lake", str(lake_dir), "--cluster", "bench", "simulate", "--offline", "--events", str(events),
              "--partitions", str(partitions)])
    if rc not in (0, None):
        raise SystemExit(f"simulate --offline failed ({rc})")
    return Lake(lake_dir, cluster="bench")


def connector_floor(spark: Any, lake: Any, floor_dir: Path) -> tuple[float, float, int]:
    """The Spark path's I/O alone over ``lake``, a rebuilt one: (seconds reading its bronze history through
    Delta's streaming source, seconds writing every derived table again through Delta's connector, output rows).

    The derived tables are held in Spark's memory first (untimed) and written side by side, as the stateful
    query's sink writes them; no decode, fold or detector runs. No Spark pipeline that reads and writes these
    tables through the connector can beat it on the same machine.
    """
    from engine.stateful import ALL_FILES
    from engine.stateful_sink import DERIVED
    from lakehouse import Lake
    from lakehouse.spark_io import stream_table, write_batch
    from models.tables import ZNODE_EVENTS

    floor = Lake(floor_dir, cluster=lake.cluster)
    frames = {spec.name: spark.read.format("delta").load(lake.table_path(spec.name)).persist()
              for spec in DERIVED if lake.exists(spec.name)}
    rows = sum(frame.count() for frame in frames.values())  # held in memory: the writes alone are timed
    start = time.perf_counter()
    query = (stream_table(spark, lake, ZNODE_EVENTS.name, max_files_per_trigger=ALL_FILES).writeStream
             .format("noop").option("checkpointLocation", str(floor_dir / "_checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(frames)) as pool:
        list(pool.map(lambda item: write_batch(item[1], floor, item[0], "connector-floor", 0), frames.items()))
    write_s = time.perf_counter() - start
    for frame in frames.values():
        frame.unpersist()
    return read_s, write_s, rows


def stop_processes(procs: list[subprocess.Popen[Any]], timeout_s: float = 60) -> None:
    """SIGTERM every process, then wait for each (SIGKILL one that does not stop within ``timeout_s``)."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
