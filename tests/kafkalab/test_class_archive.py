"""A Kafka line's class-data archive: built from the line's own broker, mapped by the line's JVMs, skipped by others."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kafkalab.class_archive import main
from services.jvm import (
    JVM_HOME_ENV,
    QUIET_CLASS_SHARING,
    class_archive,
    class_data_options,
    class_sharing_options,
    installed_jars,
)
from services.zookeeper import find_java


def java_version(jar_set: str, *options: str) -> subprocess.CompletedProcess[str]:
    """`kafka.Kafka --version` of a jar set: the JVM starts, loads Kafka's classes and exits."""
    classpath = ":".join(str(p) for p in installed_jars(jar_set))
    return subprocess.run([find_java(), *options, "-cp", classpath, "kafka.Kafka", "--version"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_the_options_map_an_archive_only_once_it_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_HOME_ENV, str(tmp_path))
    archive = class_archive("kafka-3.9")
    assert archive == tmp_path / "kafka-3.9" / "classes.jsa"
    assert class_data_options("kafka-3.9") == []
    part = tmp_path / "new.jsa"
    assert class_data_options("kafka-3.9", write_to=part) == [f"-XX:ArchiveClassesAtExit={part}", QUIET_CLASS_SHARING]
    archive.parent.mkdir()
    archive.write_bytes(b"")
    assert class_data_options("kafka-3.9") == [f"-XX:SharedArchiveFile={archive}", QUIET_CLASS_SHARING]


def test_a_built_archive_is_mapped_by_its_lines_jvms_and_skipped_by_another_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        starts_kafka: None) -> None:
    jvm = tmp_path / "jvm"  # the installed jars seen through a folder of its own, so the build writes there
    for name in ("kafka-3.9", "kafka-2.8"):
        (jvm / name).mkdir(parents=True)
        for jar in installed_jars(name):
            (jvm / name / jar.name).symlink_to(jar)
        (jvm / name / ".installed").touch()
    monkeypatch.setenv(JVM_HOME_ENV, str(jvm))

    assert main(["3.9"]) == 0
    archive = class_archive("kafka-3.9")
    assert capsys.readouterr().out.startswith(f"class_archive: kafka 3.9: {archive} (")
    assert archive.stat().st_size > 10 * 2**20 and not archive.with_name("classes.jsa.part").exists()

    # -Xshare:on turns "could not map it" from a silent fallback into an error
    mapped = java_version("kafka-3.9", "-Xshare:on", *class_data_options("kafka-3.9"))
    assert (mapped.returncode, mapped.stdout.strip()) == (0, "3.9.1"), mapped.stderr[-500:]
    refused = java_version("kafka-2.8", "-Xshare:on", *class_sharing_options(archive))
    assert refused.returncode != 0 and "Unable to use shared archive" in refused.stdout + refused.stderr
    # as the lab starts a JVM: another line's archive is skipped without a word about it
    skipped = java_version("kafka-2.8", *class_sharing_options(archive))
    assert skipped.returncode == 0 and "2.8.2" in skipped.stdout
    assert "shared" not in (skipped.stdout + skipped.stderr).lower()


def test_an_unknown_line_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["9.9"]) == 1
    assert capsys.readouterr().err == "error: kafka 9.9: unknown Kafka line '9.9'; the lab runs 4.1, 3.9, 2.8, 2.1\n"
