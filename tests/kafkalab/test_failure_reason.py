"""Why a lab's Kafka node died: the root cause, not the first ERROR line Kafka logs at every start."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalab.cluster import failure_reason
from kafkalab.migration import KRAFT_3_9, MIGRATION_DONE_LOG, MigrationControllers, warnings_since
from services.errors import UserError
from services.jvm import JVM_HOME_ENV
from tests.kafkalab.lab_retry import LabRetried, twice_on_timeout

STDOUT = """\
[2026-11-26 21:37:49,494] ERROR [MetadataLog partition=__cluster_metadata-0, nodeId=2] Overriding internal.metadata.log.segment.bytes is only supported for testing. (kafka.raft.KafkaMetadataLog)
[2026-11-26 21:37:50,341] ERROR Unable to start acceptor for CONTROLLER (kafka.network.DataPlaneAcceptor)
org.apache.kafka.common.KafkaException: Socket server failed to bind to 127.0.0.1:54393: Address already in use.
Caused by: java.net.BindException: Address already in use
[2026-11-26 21:37:50,367] ERROR Encountered fatal fault: caught exception (org.apache.kafka.server.fault.ProcessTerminatingFaultHandler)
java.lang.RuntimeException: Received a fatal error while waiting for all of the SocketServer Acceptors to be started
Caused by: org.apache.kafka.common.KafkaException: Socket server failed to bind to 127.0.0.1:54393: Address already in use.
"""


def test_the_last_cause_names_what_killed_the_node(tmp_path: Path) -> None:
    (tmp_path / "stdout.log").write_text(STDOUT)
    reason = failure_reason(tmp_path, tmp_path / "logs")
    assert reason == ("Caused by: org.apache.kafka.common.KafkaException: Socket server failed to bind to "
                      "127.0.0.1:54393: Address already in use.")


def test_without_a_cause_the_first_error_and_without_logs_where_to_look(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    assert failure_reason(tmp_path, logs) == f"see {tmp_path}/stdout.log"
    (logs / "server.log").write_text("[t] INFO starting\n[t] ERROR Exiting Kafka due to fatal exception\n")
    assert failure_reason(tmp_path, logs) == "[t] ERROR Exiting Kafka due to fatal exception"


def test_a_failed_wait_names_each_brokers_last_warnings_since_it_began(tmp_path: Path) -> None:
    before = "[t] WARN from before the wait\n"
    one, two = tmp_path / "one.log", tmp_path / "two.log"
    one.write_text(before + "[t] INFO fine\n[t] WARN [ReplicaFetcher] error sending fetch\n[t] ERROR no controller\n")
    two.write_text(before)
    said = warnings_since({1: (one, len(before)), 2: (two, len(before)), 3: (tmp_path / "absent.log", 0)},
                          per_log=1)
    assert said == "1: [t] ERROR no controller; 2: none; 3: none"
    assert "WARN [ReplicaFetcher]" in warnings_since({1: (one, len(before))})


DRIVER_LOG = """\
[t] INFO [KRaftMigrationDriver id=3000] 3000 transitioning from UNINITIALIZED to INACTIVE state (org.apache.kafka.metadata.migration.KRaftMigrationDriver)
[t] INFO [QuorumController id=3000] Becoming the active controller (org.apache.kafka.controller.QuorumController)
[t] INFO [KRaftMigrationDriver id=3000] Still waiting for ZK brokers [2] to register with KRaft. (org.apache.kafka.metadata.migration.KRaftMigrationDriver)
[t] WARN [RaftManager id=3000] Connection to node 3001 could not be established (org.apache.kafka.clients.NetworkClient)
"""


def test_a_controllers_timed_out_wait_says_where_the_migration_driver_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = tmp_path / "jvm" / KRAFT_3_9.jar_set
    jars.mkdir(parents=True)
    (jars / ".installed").touch()
    (jars / "kafka.jar").touch()
    monkeypatch.setenv(JVM_HOME_ENV, str(tmp_path / "jvm"))
    quorum = MigrationControllers(tmp_path / "kafka", size=1)
    log = quorum.nodes[3000].log_dir / "server.log"
    log.parent.mkdir(parents=True)
    log.write_text(DRIVER_LOG)
    with pytest.raises(UserError) as failed:
        quorum.wait_logged(MIGRATION_DONE_LOG, "the migration", timeout_s=0.3)
    said = str(failed.value)
    assert said.startswith("timed out after 0s waiting for the migration; the migration driver's last lines: 3000: ")
    assert "UNINITIALIZED to INACTIVE" in said and "Still waiting for ZK brokers [2]" in said
    assert "Becoming the active controller" not in said
    assert said.endswith("warnings: 3000: [t] WARN [RaftManager id=3000] Connection to node 3001 could not be "
                         "established (org.apache.kafka.clients.NetworkClient)")


def test_a_lab_story_that_timed_out_runs_once_more_and_says_why() -> None:
    outcomes: list[Exception | str] = [UserError("timed out after 120s waiting for the controller"), "migrated"]

    def story() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    with pytest.warns(LabRetried, match="the lab: the first attempt timed out after 120s waiting for the controller"):
        assert twice_on_timeout(story, "the lab") == "migrated"
    assert outcomes == []


def test_a_lab_story_fails_at_once_on_anything_but_a_timeout_and_on_a_second_timeout() -> None:
    calls: list[str] = []

    def broken() -> None:
        calls.append("broken")
        raise UserError("node 3000 exited: Address already in use")

    with pytest.raises(UserError, match="exited"):
        twice_on_timeout(broken, "the lab")
    assert calls == ["broken"]

    def stalled() -> None:
        calls.append("stalled")
        raise UserError("timed out waiting for every ISR")

    with pytest.warns(LabRetried), pytest.raises(UserError, match="every ISR"):
        twice_on_timeout(stalled, "the lab")
    assert calls == ["broken", "stalled", "stalled"]
