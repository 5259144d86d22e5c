"""Why a lab's Kafka node died: the root cause, not the first ERROR line Kafka logs at every start."""

from __future__ import annotations

from pathlib import Path

from kafkalab.cluster import failure_reason
from kafkalab.migration import warnings_since

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
