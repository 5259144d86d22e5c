"""A class-data-sharing archive per Kafka line, so the lab's many short-lived Kafka JVMs start on less CPU.

A lab run starts Kafka JVMs again and again: brokers rolled through a migration, nodes killed and restarted, the
storage tool once per KRaft node. Each one loads and verifies the same classes. From a JDK dynamic archive of
the classes one node loaded, a 4.1 node of a three-node cluster started on 2 cores in 3.1 CPU-seconds instead of
5.0. The archive sits beside the line's jars (``.jvm/kafka-<line>/classes.jsa``) and every broker, controller
and tool of the line maps it when it is there (`services.jvm.class_data_options`); one built for other jars or
another JDK is skipped by the JVM, silently.

Building one runs the line's smallest cluster (a 4.1 quorum of three nodes, or one 3.9 broker on a ZooKeeper of
its own) until it serves, then stops it: the first node writes the archive as it exits. `make test` builds the
lines the suite starts most (ARCHIVED_LINES); the older lines' few brokers run without.

    python -m kafkalab.class_archive [LINE ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kafkalab.cluster import LINES, KafkaCluster
from kafkalab.kraft import KRAFT_LINES, KRaftCluster
from services.errors import UserError
from services.jvm import class_archive
from services.zookeeper import EmbeddedZooKeeper

ARCHIVED_LINES = ("4.1", "3.9")
"""The lines the suite and the demos start dozens of JVMs of (KRaft 4.1; the 3.9 brokers and controllers of the
migration labs)."""


def jar_set(line: str) -> str:
    if line in KRAFT_LINES:
        return KRAFT_LINES[line].jar_set
    if line in LINES:
        return LINES[line].jar_set
    raise UserError(f"unknown Kafka line {line!r}; the lab runs {', '.join([*KRAFT_LINES, *LINES])}")


def build(line: str) -> Path:
    """Run ``line``'s smallest cluster until it serves and stop it; its first node's classes become the line's
    archive (replaced only once the new one is complete)."""
    archive = class_archive(jar_set(line))
    part = archive.with_name(archive.name + ".part")
    part.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"kafka-{line}-classes-") as tmp:
        base = Path(tmp)
        if line in KRAFT_LINES:
            with KRaftCluster(base / "cluster", line=line, archive_classes_to=part) as cluster:
                cluster.stop_node(min(cluster.nodes))  # alone, while the other two keep the quorum
        else:
            with EmbeddedZooKeeper(base / "zookeeper") as zk:
                KafkaCluster(line, zk.hosts, "/kafka", base / "cluster", size=1, archive_classes_to=part).start().stop()
    if not part.is_file():
        raise UserError(f"the first {line} node exited without writing {part}")
    part.replace(archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalab.class_archive", description=__doc__.split("\n\n")[0])
    parser.add_argument("lines", nargs="*", default=list(ARCHIVED_LINES), metavar="LINE",
                        help=f"Kafka lines to build an archive for (default: {' '.join(ARCHIVED_LINES)})")
    args = parser.parse_args(argv)
    for line in args.lines:
        started = time.monotonic()
        try:
            archive = build(line)
        except UserError as e:
            print(f"error: kafka {line}: {e}", file=sys.stderr)
            return 1
        print(f"class_archive: kafka {line}: {archive} ({archive.stat().st_size / 2**20:.0f} MiB) "
              f"in {time.monotonic() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
