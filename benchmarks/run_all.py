"""`make bench`: every benchmark in turn (default sizes unless overridden), results in benchmarks/results/.

    python -m benchmarks.run_all [--only batch_rebuild,stateful_query] [--quick]

--quick runs each at a small documented scale (the one benchmarks/README.md reports when the full one does not
fit the time available). Each benchmark is a separate process so one's Spark session never skews the next.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    # name: (full-size args, --quick args)
    "batch_rebuild": ([], ["--events", "1000000", "--partitions", "50000"]),
    "stateful_query": ([], ["--partitions", "50000", "--baseline-partitions", "20000", "--repeat", "1"]),
    "detection_latency": ([], ["--duration", "20", "--partitions", "2000", "--zombies", "5", "--drain", "300"]),
    "microbatch_cost": ([], ["--partitions", "1000", "--repeats", "2"]),
    "fleet": ([], ["--clusters", "4", "--partitions", "5000"]),
    "driver_memory": ([], ["--events", "200000", "1000000", "--partitions", "20000", "--repeat", "1"]),
    "worker_allocator": (["--events", "3000000", "--partitions", "200000"],
                         ["--events", "200000", "--partitions", "20000", "--repeat", "1"]),
    "route_pool": (["--events", "3000000", "--partitions", "200000", "--repeat", "4"],
                   ["--events", "200000", "--partitions", "20000", "--repeat", "1"]),
    "worker_daemon": ([], ["--events", "200000", "--partitions", "20000", "--repeat", "1"]),
    "local_compiler": ([], ["--events", "200000", "--partitions", "20000", "--repeat", "1"]),
    "query_listener": ([], ["--seconds", "10", "--repeat", "1"]),
    "kraft_decode": ([], ["--quick"]),
    "kraft_follow": ([], ["--quick"]),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_all", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated subset")
    parser.add_argument("--quick", action="store_true", help="the scaled-down sizes from benchmarks/README.md")
    args = parser.parse_args(argv)
    failed = []
    for name in args.only.split(","):
        full, quick = BENCHMARKS[name]
        cmd = [sys.executable, "-m", f"benchmarks.{name}", *(quick if args.quick else full)]
        print("$ " + " ".join(cmd[1:]), flush=True)
        if subprocess.run(cmd, check=False).returncode != 0:
            failed.append(name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
