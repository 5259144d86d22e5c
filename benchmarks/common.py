"""Shared benchmark plumbing: the machine description, timers, result JSON, a Spark session, a scratch lake.

Benchmarks are never part of the test suite; each module is runnable alone (`python -m benchmarks.<name>`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
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
    """benchmarks/results/<name>.json, plus a human summary on stdout.

    Every results file says how its figures were made: ``command`` (this process's command line, unless the
    benchmark recorded its own), ``machine`` (cores, memory, load average, versions) and ``date`` (UTC, ISO)
    when it was written, unless the benchmark recorded when it started; the README's table shows all three.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    # the module this process runs (`python -m benchmarks.run_all` runs several), not the results file's name
    module = Path(sys.argv[0]).stem if sys.argv and sys.argv[0].endswith(".py") else name
    result = {"command": shlex.join(["python", "-m", f"benchmarks.{module}", *sys.argv[1:]]),
              "date": datetime.now(UTC).isoformat(timespec="seconds"), **result}
    result.setdefault("machine", machine())
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
    """The project's SparkSession (services.spark_session.build_spark), local[*] on this machine."""
    from conf.settings import load_settings
    from services.spark_session import build_spark

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


def io_floor(spark: Any, lake: Any, floor_dir: Path, buckets: int) -> dict[str, Any]:
    """The one engine's I/O alone over ``lake``, a lake it has just filled: its reads and its writes with
    nothing computed in between (no decode, routing, fold or detector).

    Reads: every bronze table through Delta's streaming source in one query (availableNow, uncapped, as the
    rebuild reads), each row hashed and dropped (``read_s``), and once more through a ``mapInArrow`` that drops
    the rows in the Python workers (``read_to_python_s``: the hop the engine's decode pays; not in the floor).
    Writes: every derived table's rows, keyed as the query keys them (a row's partition to its bucket, other
    rows to the cluster's stage) and packed one row per key and table, held in Spark's memory first (untimed),
    then written as the query writes them into a fresh lake (``write_s``): each key's files where the operator
    writes them (``engine.stateful_sink.key_outputs``, in a ``mapInArrow``), then the query's own sink
    (``engine.stateful_sink.StatefulSink``: the smaller appended rows gathered per task, the driver's commits
    through delta-rs). No pipeline that reads and writes these tables this way beats ``read_s + write_s`` here.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.stateful import ALL_FILES
    from engine.stateful_sink import (
        DERIVED,
        WRITTEN,
        WRITTEN_ARROW,
        StatefulSink,
        output_records,
        packed_records,
    )
    from lakehouse import Lake
    from lakehouse.spark_io import stream_table
    from models.tables import CONTROLLER_DECISIONS, ZNODE_EVENTS
    from pipelines.bucket_fold import BUCKET_COLUMN, CLUSTER_STAGE, bucket_of
    from pipelines.keyed_pipeline import by_key

    shutil.rmtree(floor_dir, ignore_errors=True)  # a kept --workdir: its commits would be skipped
    floor_dir.mkdir(parents=True)
    packed_path = floor_dir / "packed.parquet"
    output_rows = files = 0
    with pq.ParquetWriter(packed_path, WRITTEN_ARROW) as out:
        for spec in DERIVED:
            if not lake.exists(spec.name):
                continue
            rows = lake.read_arrow(spec.name)
            output_rows += rows.num_rows
            keyed = np.full(rows.num_rows, CLUSTER_STAGE, np.int32)
            if rows.num_rows and {"topic", "partition"} <= set(rows.column_names):
                topic = rows["topic"].combine_chunks()
                valid = topic.is_valid().to_numpy(zero_copy_only=False)
                keyed[valid] = bucket_of(topic, rows["partition"].combine_chunks(), buckets)[valid]
            for cluster, bucket, body in by_key(rows.append_column(BUCKET_COLUMN, pa.array(keyed))):
                out.write_table(output_records(packed_records([(spec.name, cluster, bucket, body)])))
                files += 1
            del rows
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))  # the operator's output comes in as many
    records = spark.read.parquet(str(packed_path)).repartition(parts).persist()
    records.count()
    bronze = [t.name for t in (ZNODE_EVENTS, CONTROLLER_DECISIONS) if lake.exists(t.name)]

    def drop(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:  # defined here: pickled by value
        for _ in batches:
            pass
        return iter(())

    def read(to_python: bool) -> float:
        """One query over both sources, as the engine's: each row's every column hashed in the JVM (so each is
        read and decoded) or, ``to_python``, shipped to the Python workers and dropped there."""
        from functools import reduce

        from pyspark.sql import functions as F

        frames = []
        for table in bronze:
            frame = stream_table(spark, lake, table, max_files_per_trigger=ALL_FILES)
            frames.append(frame.mapInArrow(drop, "h long") if to_python else
                          frame.select(F.xxhash64(*frame.columns).alias("h")))
        start = time.perf_counter()
        query = (reduce(lambda a, b: a.unionByName(b), frames).writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(floor_dir / f"_ck-read-{to_python}")).start())
        query.awaitTermination()
        return time.perf_counter() - start

    read_s = read(False)
    read_to_python_s = read(True)
    floor = Lake(floor_dir / "lake", cluster=lake.cluster)
    start = time.perf_counter()
    StatefulSink(floor, "io-floor")(records.mapInArrow(_KeyWrites(floor.root), WRITTEN), 0)
    write_s = time.perf_counter() - start
    records.unpersist()
    return {"read_s": round(read_s, 3), "read_to_python_s": round(read_to_python_s, 3), "write_s": round(write_s, 3),
            "s": round(read_s + write_s, 3), "output_rows": output_rows, "output_files": files,
            "bronze_tables": bronze}


class _KeyWrites:
    """``mapInArrow`` over packed ``WRITTEN`` records: each written where the operator writes it, if it would."""

    def __init__(self, lake_root: str) -> None:
        self.lake_root = lake_root

    def __call__(self, batches: Iterable[Any]) -> Iterable[Any]:
        from engine.stateful_sink import key_outputs, output_records
        from pipelines.bucket_fold import ipc_table

        for batch in batches:
            for r in batch.to_pylist():
                written = key_outputs(self.lake_root, r["cluster"], r["bucket"], [(r["table"], ipc_table(r["packed"]))])
                yield from output_records(written).to_batches()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def engine_batch_log(query_rows: int | None = None) -> Iterator[list[str]]:
    """The engine's per-micro-batch lines logged while inside: the sink's ("query and files", "commits"), and,
    with ``query_rows``, the query's progress line (Spark's phases) of the one batch that read that many rows.

    The progress line comes from a listener, after awaitTermination returns and possibly after an earlier
    query's: so it is waited for (up to 60 s) and picked by its row count; without ``query_rows`` progress lines
    are left out (take them from the query's ``recentProgress``: ``progress_line``)."""
    logger = logging.getLogger("engine")
    handler, level = _Lines(), logger.level
    handler.addFilter(lambda r: BATCH_LINE in r.getMessage())
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)

    def ours(line: str) -> bool:
        m = PROGRESS_LINE.match(line)
        return m is None or int(m[1]) == query_rows

    lines: list[str] = []
    try:
        yield lines
        deadline = time.monotonic() + 60
        while query_rows is not None and time.monotonic() < deadline and not any(
                PROGRESS_LINE.match(ln) and ours(ln) for ln in handler.lines):
            time.sleep(0.1)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        lines += [ln for ln in handler.lines if ours(ln)]


def progress_line(progress: dict[str, Any]) -> str:
    """A query progress (``recentProgress`` item) as the engine's listener logs it."""
    ms = progress.get("durationMs", {})
    phases = ", ".join(f"{k} {v / 1000:.1f} s" for k, v in sorted(ms.items(), key=lambda kv: -kv[1])
                       if k != "triggerExecution" and v >= 100)
    return (f"{BATCH_LINE} {progress['batchId']} done: {progress.get('numInputRows', 0)} rows in "
            f"{ms.get('triggerExecution', 0) / 1000:.1f} s ({phases})")


BATCH_LINE = "stateful query batch"


def batch_lines(text: str) -> list[str]:
    """The engine's per-micro-batch lines in a command's ``-v`` output, without the logging prefix."""
    return [ln[ln.index(BATCH_LINE):] for ln in text.splitlines() if BATCH_LINE in ln]


PROGRESS_LINE = re.compile(r"stateful query batch \d+ done: (\d+) rows in ([\d.]+) s")
"""The engine's line at the end of each micro-batch (``engine.stateful.ProgressLog``): its rows and its
``triggerExecution`` seconds."""
_SINK = re.compile(r"stateful query batch \d+: ([\d.]+) s \((.*)\)")


def batch_medians(lines: list[str]) -> dict[str, Any]:
    """Medians over the micro-batches with input: the trigger's wall time (Spark's ``triggerExecution``), and the
    sink's time with each of its phases ("query and files", "commits")."""
    triggers = [float(m[2]) for ln in lines if (m := PROGRESS_LINE.match(ln)) and int(m[1]) > 0]
    sinks: dict[str, list[float]] = {}
    for ln in lines:
        if m := _SINK.match(ln):
            sinks.setdefault("sink_s", []).append(float(m[1]))
            for phase in m[2].split(", "):  # "query and files 1.2 s"
                what, seconds, _ = phase.rsplit(" ", 2)
                sinks.setdefault(what.replace(" ", "_") + "_s", []).append(float(seconds))
    out: dict[str, Any] = {"batches_with_input": len(triggers)}
    if triggers:
        out["trigger_s"] = round(statistics.median(triggers), 2)
    out |= {k: round(statistics.median(v), 2) for k, v in sinks.items()}
    return out


def stop_processes(procs: list[subprocess.Popen[Any]], timeout_s: float = 60) -> None:
    """SIGTERM every process, then wait for each (SIGKILL one that does not stop within ``timeout_s``)."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
