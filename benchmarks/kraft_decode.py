"""KRaft metadata log decode speed: `zkledger collect kraft` vs Kafka's own `kafka-dump-log` on the same files.

    python -m benchmarks.kraft_decode [--records 1000000] [--repeat 3] [--segment-bytes 104857600] [--quick]

Phases: compile `benchmarks/kraft/MetadataLogWriter.java` with `javac` against the pinned Kafka 4.1 jars
(`.jvm/kafka-4.1/`, `make jars`) into the scratch directory; write a metadata log of ``--records`` records with
Kafka's own classes (`MetadataRecordSerde`, `MemoryRecords`, `FileRecords`: topic creations, ISR shrinks and
expands, leader elections, broker fencing and re-registration, configs, deletions, NoOps, LeaderChange control
batches; segments of at most ``--segment-bytes``); then ``--repeat`` alternating rounds, each on the same files:

- `zkledger --lake L --cluster bench collect kraft --dir D` as users run it (a process of its own, a fresh lake
  each round): every batch read and CRC-checked, every record's type and version, one `kraft_records` row each,
  committed to Delta;
- the baseline, Kafka's `kafka-dump-log --cluster-metadata-decoder` (`kafka.tools.DumpLogSegments`, with
  `--deep-iteration --print-data-log` as `kafkalab.kraft.dump_metadata_log` runs it, and the JVM options
  `kafka-run-class.sh` gives it), every record decoded and printed, stdout to a file.

Each is timed (wall, and the CPU time of the process and its children); medians over the rounds count. Both must
see every record the writer wrote: the collector's summary and the lake's row count, dump-log's record lines.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import base_parser, machine, ratio, run_main, scratch

log = logging.getLogger(__name__)

NAME = "kraft_decode"
JAR_SET = "kafka-4.1"
WRITER = Path(__file__).resolve().parent / "kraft" / "MetadataLogWriter.java"
DUMP_LOG = "kafka.tools.DumpLogSegments"
# kafka-run-class.sh's defaults (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS): how `kafka-dump-log.sh` runs
DUMP_LOG_JVM = ("-Xmx256M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15",
                "-Djava.awt.headless=true")
# warnings only, on stderr: stdout is the tool's output
_TOOL_LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""
_SUMMARY = re.compile(r"collect kraft: (\d+) records written")


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def timed(cmd: list[str], stdout: Path, what: str) -> dict[str, float]:
    """Run ``cmd`` to completion (stdout to a file); its wall time and the CPU time of its process tree."""
    from kafkalab.cluster import die_with_parent

    cpu0, start = _children_cpu(), time.perf_counter()
    with stdout.open("wb") as out:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE, check=False,
                              preexec_fn=die_with_parent(signal.SIGKILL))
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{what} exited with {proc.returncode}: {proc.stderr.decode(errors='replace')[-800:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(_children_cpu() - cpu0, 3)}


def classpath() -> str:
    from services.jvm import installed_jars

    return ":".join(str(p) for p in installed_jars(JAR_SET))


def write_log(work: Path, records: int, segment_bytes: int, seed: int) -> dict[str, Any]:
    """Compile the writer and write the log; what it wrote (records, batches, segments, bytes)."""
    from kafkalab.cluster import die_with_parent
    from services.zookeeper import find_java

    javac = shutil.which("javac") or str(Path(find_java()).with_name("javac"))
    classes = work / "classes"
    cp = classpath()
    subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", cp, str(WRITER)], check=True,
                   preexec_fn=die_with_parent(signal.SIGKILL))
    out = subprocess.run([find_java(), "-Xmx512m", "-cp", f"{classes}:{cp}", WRITER.stem, str(work / "log"),
                          str(records), str(segment_bytes), str(seed)], check=True, capture_output=True, text=True,
                         preexec_fn=die_with_parent(signal.SIGKILL))
    written, batches, segments = (int(x) for x in out.stdout.split())
    files = sorted((work / "log" / "__cluster_metadata-0").glob("*.log"))
    return {"records": written, "batches": batches, "segments": len(files), "writer_segments": segments,
            "bytes": sum(f.stat().st_size for f in files), "files": files}


def zkledger_cmd() -> list[str]:
    """The installed `zkledger` script beside this interpreter (as users run it), else the module."""
    script = Path(sys.executable).with_name("zkledger")
    return [str(script)] if script.exists() else [sys.executable, "-m", "zkledger.cli"]


def run_collect(work: Path, log_dir: Path, i: int) -> tuple[dict[str, float], int, int]:
    """One `collect kraft` into a fresh lake: its times, the records its summary names and the rows stored."""
    from lakehouse import Lake

    lake = work / f"lake-{i}"
    shutil.rmtree(lake, ignore_errors=True)
    out = work / f"collect-{i}.txt"
    times = timed([*zkledger_cmd(), "--lake", str(lake), "--cluster", "bench", "collect", "kraft", "--dir",
                   str(log_dir)], out, "collect kraft")
    found = _SUMMARY.search(out.read_text())
    reported = int(found[1]) if found else -1
    rows = Lake(lake, cluster="bench").row_count("kraft_records")
    shutil.rmtree(lake, ignore_errors=True)
    return times, reported, rows


def run_dump_log(work: Path, files: list[Path], i: int) -> tuple[dict[str, float], int, int]:
    """One dump-log over every segment: its times, the record lines it printed and the records it could not
    decode."""
    from services.zookeeper import find_java

    conf = work / "tool-log4j2.properties"
    conf.write_text(_TOOL_LOG4J2)
    out = work / f"dump-{i}.txt"
    times = timed([find_java(), *DUMP_LOG_JVM, f"-Dlog4j2.configurationFile={conf}", "-cp", classpath(), DUMP_LOG,
                   "--cluster-metadata-decoder", "--deep-iteration", "--print-data-log", "--files",
                   ",".join(str(f) for f in files)], out, "kafka-dump-log")
    records = errors = 0
    with out.open("rb") as text:
        for line in text:
            if line.startswith(b"| offset: "):
                records += 1
                errors += b" payload: Error at " in line
    out.unlink()
    return times, records, errors


def record_mix(work: Path, log_dir: Path) -> dict[str, int]:
    """Records per type, read with the collector's reader (untimed)."""
    from collections import Counter

    from collectors.kraft_collect import decode_record
    from collectors.kraft_log import MetadataLogDir, read_batches

    mix: Counter[str] = Counter()
    for segment in MetadataLogDir(log_dir).segments():
        for batch in read_batches(segment.path, verify_crc=False):
            for rec in batch.records:
                mix[decode_record(batch.is_control, rec.key, rec.value)[0]] += 1
    return dict(mix.most_common())


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.quick:
        args.records, args.repeat = 100_000, 1
    rounds: list[dict[str, Any]] = []
    with scratch(args) as work:
        t0 = time.perf_counter()
        written = write_log(work, args.records, args.segment_bytes, args.seed)
        write_s = time.perf_counter() - t0
        files: list[Path] = written.pop("files")
        n = written["records"]
        log.info("wrote %d records in %d batches, %d segment(s), %d bytes in %.1f s", n, written["batches"],
                 written["segments"], written["bytes"], write_s)
        log_dir = work / "log"
        mix = record_mix(work, log_dir)
        for i in range(args.repeat):
            collect, reported, rows = run_collect(work, log_dir, i)
            dump, dumped, errors = run_dump_log(work, files, i)
            rounds.append({"collect": collect, "dump_log": dump, "collect_records": reported, "lake_rows": rows,
                           "dump_log_records": dumped, "dump_log_errors": errors})
            log.info("round %d/%d: collect %.1f s (%.1f CPU-s), dump-log %.1f s (%.1f CPU-s)", i + 1, args.repeat,
                     collect["wall_s"], collect["cpu_s"], dump["wall_s"], dump["cpu_s"])
    same = all(r["collect_records"] == r["lake_rows"] == r["dump_log_records"] == n and not r["dump_log_errors"]
               for r in rounds)
    med = {f"{who}_{k}": statistics.median(r[who][k] for r in rounds)
           for who in ("collect", "dump_log") for k in ("wall_s", "cpu_s")}
    collect_rate, dump_rate = n / med["collect_wall_s"], n / med["dump_log_wall_s"]
    cpu_rate, dump_cpu_rate = n / med["collect_cpu_s"], n / med["dump_log_cpu_s"]
    per_round = [ratio(r["dump_log"]["wall_s"], r["collect"]["wall_s"]) for r in rounds]
    from collectors.kraft_log import CRC32C_IMPLEMENTATION

    return {
        "benchmark": NAME, "machine": machine(),
        "params": {"records": args.records, "repeat": args.repeat, "segment_bytes": args.segment_bytes,
                   "seed": args.seed, "jar_set": JAR_SET, "dump_log_jvm": list(DUMP_LOG_JVM),
                   "crc32c": CRC32C_IMPLEMENTATION},
        "log": written | {"write_s": round(write_s, 3)}, "record_mix": mix, "rounds": rounds,
        "same_record_count": same, **{k: round(v, 3) for k, v in med.items()},
        "collect_records_per_s": round(collect_rate), "dump_log_records_per_s": round(dump_rate),
        "collect_vs_dump_log": ratio(collect_rate, dump_rate), "rounds_collect_vs_dump_log": per_round,
        "collect_records_per_cpu_s": round(cpu_rate), "dump_log_records_per_cpu_s": round(dump_cpu_rate),
        "collect_vs_dump_log_cpu": ratio(cpu_rate, dump_cpu_rate),
        "summary": [
            f"metadata log written by Kafka 4.1's classes: {n:,} records in {written['batches']:,} batches, "
            f"{written['segments']} segment(s), {written['bytes'] / 1e6:.1f} MB ({write_s:.1f} s)",
            f"zkledger collect kraft (CLI, into a fresh lake): {med['collect_wall_s']:.1f} s = {collect_rate:,.0f} "
            f"records/s ({med['collect_cpu_s']:.1f} CPU-s)",
            f"kafka-dump-log --cluster-metadata-decoder (baseline): {med['dump_log_wall_s']:.1f} s = "
            f"{dump_rate:,.0f} records/s ({med['dump_log_cpu_s']:.1f} CPU-s)",
            f"ratio collect/dump-log throughput: {ratio(collect_rate, dump_rate)}x wall"
            f"{f' (per round: {per_round})' if args.repeat > 1 else ''}, "
            f"{ratio(cpu_rate, dump_cpu_rate)}x per CPU-s"
            f"{f' (medians of {args.repeat} rounds)' if args.repeat > 1 else ''}",
            f"record counts: writer {n:,}, collect {[r['collect_records'] for r in rounds]}, lake "
            f"{[r['lake_rows'] for r in rounds]}, dump-log {[r['dump_log_records'] for r in rounds]} -> "
            f"{'the same' if same else 'DIFFERENT'}",
        ],
    }


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--records", type=int, default=1_000_000, help="records to write (default 1,000,000)")
    p.add_argument("--segment-bytes", type=int, default=100 * 1024 * 1024,
                   help="segment size at most (default 100 MiB)")
    p.add_argument("--seed", type=int, default=29, help="the writer's random seed")
    p.add_argument("--repeat", type=int, default=3, help="alternating rounds of collect and dump-log (default 3)")
    p.add_argument("--quick", action="store_true", help="100,000 records, 1 round")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
