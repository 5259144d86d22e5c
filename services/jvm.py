"""Where the pinned JVM artifact sets live once `make jars` (jvm/install.sh) has installed them.

Each set is declared in ``jvm/<name>/pom.xml`` with its jars' checksums in ``jvm/<name>/sha256sums`` and installed
into ``.jvm/<name>/`` at the project root: Delta Lake's Spark connector (``delta``) and the Kafka brokers the
real-cluster lab runs. Nothing here touches the network.
"""

from __future__ import annotations

import os
from pathlib import Path

from services.errors import UserError

DELTA = "delta"
"""The set holding Delta Lake's Spark connector (delta-spark_4.1_2.13 and what Spark does not ship)."""

JVM_HOME_ENV = "ZKLEDGER_JVM_DIR"
"""Overrides where installed sets are looked for (default: ``<project root>/.jvm``)."""

PROJECT_ROOT = Path(__file__).resolve().parents[1]

QUIET_CLASS_SHARING = "-Xlog:cds*=off"
"""A JVM that cannot map an archive (another class path or JDK) runs without it and says so on stdout, which
the lab's logs and the tests read; this keeps it silent."""


def jvm_dir() -> Path:
    return Path(os.environ.get(JVM_HOME_ENV) or PROJECT_ROOT / ".jvm")


def installed_jars(name: str) -> list[Path]:
    """The jars of an installed set, sorted; a one-line error naming the install command when it is missing."""
    folder = jvm_dir() / name
    jars = sorted(folder.glob("*.jar")) if (folder / ".installed").is_file() else []
    if not jars:
        raise UserError(f"the JVM artifacts '{name}' are not installed in {folder}: run `make jars` in a checkout "
                        f"(Maven Central reachable once), or point {JVM_HOME_ENV} at a folder holding them")
    return jars


def class_sharing_options(archive: Path) -> list[str]:
    """JVM options that map the classes of a JDK dynamic class-data-sharing archive, when it was built: a
    short-lived JVM then starts without loading and verifying them again."""
    return [f"-XX:SharedArchiveFile={archive}", QUIET_CLASS_SHARING] if archive.is_file() else []


def archive_at_exit_options(archive: Path) -> list[str]:
    """JVM options that write the classes the JVM loaded into ``archive`` as it exits (not when SIGKILLed)."""
    return [f"-XX:ArchiveClassesAtExit={archive}", QUIET_CLASS_SHARING]


def class_archive(name: str) -> Path:
    """Where the class-data archive of an installed set goes (`kafkalab.class_archive` builds the Kafka sets')."""
    return jvm_dir() / name / "classes.jsa"


def class_data_options(name: str, write_to: Path | None = None) -> list[str]:
    """The options of a JVM on set ``name``'s class path: map the set's archive, or, with ``write_to``, build one."""
    return archive_at_exit_options(write_to) if write_to else class_sharing_options(class_archive(name))
