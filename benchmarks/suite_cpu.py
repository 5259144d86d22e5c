"""Where a command's CPU goes, by kind of process: for the test suite, which on two cores is CPU-bound.

    python -m benchmarks.suite_cpu [--interval 2] [-- COMMAND ...]     # default command: make test

Runs COMMAND (its output passes through) and samples ``/proc`` every --interval seconds: each process started
after COMMAND is counted once, with its user+system CPU as last seen, under the kind its command line and its
parent's kind give (`ProcessKind`). A JVM that ``spark-class`` starts is ``exec``'d by a shell, so a process's
command line is read again when its name changes.

Baseline, same run: the machine's busy CPU over the same interval (``/proc/stat``: user, nice, system, irq and
softirq). Each kind is reported as CPU-seconds and as its share of that total. What the samples miss (processes
that lived less than one interval, a process's CPU after its last sample, kernel threads, anything that ran beside
COMMAND) is the "not attributed" line. Not part of ``make bench``: a run of ``make test`` takes half an hour on the
slower host build.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from benchmarks.common import base_parser, setup_logging, write_result

NAME = "suite_cpu"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ProcessKind(StrEnum):
    """What a process is, for the profile: the JVMs and Python processes a test run starts."""

    TEST_PROCESS = "pytest and its workers"
    SPARK_DRIVER_OF_TESTS = "Spark drivers of the test processes"
    ZKLEDGER_COMMAND = "zkledger commands and jobs (Python)"
    SPARK_DRIVER_OF_COMMANDS = "Spark drivers of zkledger commands and jobs"
    PYSPARK_WORKER = "PySpark Python workers"
    SPARK_CLUSTER = "Spark standalone masters, workers and executors"
    KAFKA = "Kafka brokers and controllers"
    ZOOKEEPER = "ZooKeeper servers"
    OTHER_JVM = "other JVMs"
    OTHER = "other processes"


@dataclass
class Seen:
    """One process as last sampled."""

    ppid: int
    name: str  # the kernel's comm
    command: str
    cpu_s: float


def kind_of(command: str, parent: ProcessKind | None) -> ProcessKind:
    """A process's kind from its command line and its parent's kind (None: parent not seen)."""
    argv0 = command.split(" ", 1)[0]
    if "org.apache.spark.deploy.SparkSubmit" in command:
        # a PySpark session's driver runs `pyspark-shell`; `spark-submit jobs/x.py` names its application
        in_tests = parent is ProcessKind.TEST_PROCESS and "pyspark-shell" in command
        return ProcessKind.SPARK_DRIVER_OF_TESTS if in_tests else ProcessKind.SPARK_DRIVER_OF_COMMANDS
    if any(main in command for main in ("deploy.master.Master", "deploy.worker.Worker",
                                         "executor.CoarseGrainedExecutorBackend")):
        return ProcessKind.SPARK_CLUSTER
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        return ProcessKind.PYSPARK_WORKER
    if argv0.endswith("java"):
        if " kafka.Kafka " in f"{command} ":
            return ProcessKind.KAFKA
        if "org.apache.zookeeper" in command:
            return ProcessKind.ZOOKEEPER
        return ProcessKind.OTHER_JVM
    # before the tests' own kind: a command's arguments often name pytest's temporary directories
    script = command.split(" ", 2)[1] if " " in command else ""  # a console script runs as `python <script>`
    if any(a == "zkledger" or a.endswith("/zkledger") for a in (argv0, script)) or " -m zkledger" in command \
            or "/jobs/" in script:
        return ProcessKind.ZKLEDGER_COMMAND
    if "pytest" in command.split() or any(a.endswith("/pytest") for a in (argv0, script)) \
            or "exec(eval(sys.stdin.readline()))" in command:  # pytest-xdist's workers
        return ProcessKind.TEST_PROCESS
    return ProcessKind.OTHER


def machine_busy_s() -> float:
    """The machine's busy CPU-seconds since boot, all cores: user, nice, system, irq, softirq."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def boot_ticks_now() -> float:
    """Now, in clock ticks since boot: the unit of a process's start time in /proc/PID/stat."""
    return float(Path("/proc/uptime").read_text().split()[0]) * CLOCK_TICKS


def read_process(pid: str) -> tuple[str, int, int, float] | None:
    """(name, parent pid, start time in ticks since boot, user+system CPU-seconds), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    rest = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on
    return name, int(rest[1]), int(rest[19]), (int(rest[11]) + int(rest[12])) / CLOCK_TICKS


def command_line(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class Sampler:
    """Every process started after it was made, as last seen, keyed by (pid, start time)."""

    def __init__(self) -> None:
        self.since_ticks = boot_ticks_now()
        self.seen: dict[tuple[str, int], Seen] = {}
        self.own_pid = os.getpid()

    def sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == self.own_pid:
                continue
            read = read_process(pid)
            if read is None or read[2] < self.since_ticks:
                continue
            name, ppid, started, cpu_s = read
            known = self.seen.get((pid, started))
            if known is None or known.name != name:
                self.seen[(pid, started)] = Seen(ppid, name, command_line(pid) or name, cpu_s)
            else:
                known.cpu_s = cpu_s

    def by_kind(self) -> dict[ProcessKind, tuple[int, float]]:
        """Each kind's (processes, CPU-seconds)."""
        # a reused pid: the parent is the newest process with that pid
        latest = {key[0]: key for key in sorted(self.seen, key=lambda k: k[1])}
        kinds: dict[tuple[str, int], ProcessKind] = {}

        def kind(key: tuple[str, int], depth: int = 0) -> ProcessKind:
            if key not in kinds:
                seen = self.seen[key]
                parent_key = latest.get(str(seen.ppid))
                parent = kind(parent_key, depth + 1) if parent_key and depth < 20 else None
                kinds[key] = kind_of(seen.command, parent)
            return kinds[key]

        totals: dict[ProcessKind, tuple[int, float]] = {}
        for key, seen in self.seen.items():
            count, cpu = totals.get(kind(key), (0, 0.0))
            totals[kinds[key]] = (count + 1, cpu + seen.cpu_s)
        return totals


def profile(command: list[str], interval_s: float) -> dict[str, Any]:
    """Run `command` to its end under a `Sampler`; the figures of the run."""
    sampler = Sampler()
    busy0, wall0 = machine_busy_s(), time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        sampler.sample()
        time.sleep(interval_s)
    sampler.sample()
    wall, busy = time.monotonic() - wall0, machine_busy_s() - busy0
    kinds = sorted(sampler.by_kind().items(), key=lambda kv: -kv[1][1])
    attributed = sum(cpu for _, (_, cpu) in kinds)
    share = {kind: round(cpu / busy, 3) if busy else 0.0 for kind, (_, cpu) in kinds}
    summary = [f"{' '.join(command)}: exit {proc.returncode}, {wall:,.0f} s, the machine busy {busy:,.0f} "
               f"CPU-s ({busy / wall / (os.cpu_count() or 1):.0%} of {os.cpu_count()} cores)"]
    summary += [f"{cpu:8,.0f} CPU-s {share[kind]:6.1%}  {count:5d} processes  {kind}" for kind, (count, cpu) in kinds]
    summary.append(f"{busy - attributed:8,.0f} CPU-s {(busy - attributed) / busy if busy else 0:6.1%}  not "
                   "attributed (short-lived processes, kernel threads, anything beside the command)")
    return {
        "params": {"command": command, "interval_s": interval_s},
        "exit_code": proc.returncode, "wall_s": round(wall, 1), "machine_busy_cpu_s": round(busy, 1),
        "attributed_cpu_s": round(attributed, 1),
        "kinds": {kind.name: {"what": str(kind), "processes": count, "cpu_s": round(cpu, 1), "share": share[kind]}
                  for kind, (count, cpu) in kinds},
        "summary": summary,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = base_parser(NAME, __doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between samples of /proc (2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to profile, after -- (make test)")
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    command = [c for c in args.command if c != "--"] or ["make", "test"]
    return profile(command, args.interval)


def main(argv: list[str] | None = None) -> int:
    """The profiled command's exit code: a failed run still writes its profile, and is not reported as success."""
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    result = run(args)
    write_result(NAME, result, Path(args.out))
    return int(result["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
