"""What a Kafka controller.log / state-change.log record says (the ``kind`` of ``controller_decisions``).

Templates are those of kafka-zk-metadata.md §4 (Kafka 0.8 … 3.9); the parser lives in
``collectors.log_parser``. Pure: stdlib only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class DecisionKind(StrEnum):
    """Kind of one parsed log record. Each member names the log template family it comes from."""

    PARTITION_TRANSITION = "PARTITION_TRANSITION"  # PSM "Changed partition t-0 [state] from A to B ..."
    REPLICA_TRANSITION = (
        "REPLICA_TRANSITION"  # RSM "Changed state of replica 2 for partition t-0 from A to B"
    )
    PARTITION_TRANSITION_FAILED = "PARTITION_TRANSITION_FAILED"  # "failed to change state for partition ..."
    REPLICA_TRANSITION_FAILED = "REPLICA_TRANSITION_FAILED"  # "initiated state change of replica ... failed"
    INVALID_TRANSITION = (
        "INVALID_TRANSITION"  # "... should be in ... states before moving to X state" (skipped step)
    )
    ZOMBIE_ABORT = "ZOMBIE_ABORT"  # "... went through a soft failure and another controller was elected ..."
    LEADER_ELECTED = "LEADER_ELECTED"  # 1.0 "Elected leader 2 for Offline partition t-0"
    LEADER_ELECTION_STARTED = "LEADER_ELECTION_STARTED"  # ≤0.11 "started leader election for partition [t,0]"
    LEADER_ELECTION_FAILED = (
        "LEADER_ELECTION_FAILED"  # ≤0.11 "encountered error while electing leader for ..."
    )
    LEADER_STARTED = "LEADER_STARTED"  # broker: "Leader t-0 starts at leader epoch 1 ..."
    ISR_REMOVAL = (
        "ISR_REMOVAL"  # 2.6+ "Partition t-0 state changed to (Leader:..) after removing replica 2 ..."
    )
    CONTROLLER_ELECTED = (
        "CONTROLLER_ELECTED"  # "N successfully elected as the controller[. Epoch incremented ...]"
    )
    EPOCH_INCREMENTED = (
        "EPOCH_INCREMENTED"  # "Incremented epoch to E" (1.0), "Epoch incremented to E" (1.1–2.0)
    )
    CONTROLLER_READY = "CONTROLLER_READY"  # "Ready to serve as the new controller with epoch E"
    CONTROLLER_RESIGNED = "CONTROLLER_RESIGNED"  # "Resigned", "Forcing the controller to resign"
    CONTROLLER_MOVED = "CONTROLLER_MOVED"  # "Controller moved to another broker when processing X." (2.1+)
    FAILOVER_STEP = "FAILOVER_STEP"  # "Registering handlers", "Initializing controller context", ...
    BROKER_CHANGE = (
        "BROKER_CHANGE"  # "Newly added brokers: .., deleted brokers: .., [bounced brokers: ..,] all live ..."
    )
    BROKER_FAILURE = "BROKER_FAILURE"  # "Broker failure callback for 1"
    BROKER_STARTUP = "BROKER_STARTUP"  # "New broker startup callback for 3"
    BROKER_REGISTERING = (
        "BROKER_REGISTERING"  # KafkaZkClient "Creating /brokers/ids/18 (is it secure? false)"
    )
    BROKER_REGISTERED = (
        "BROKER_REGISTERED"  # "Registered broker N at path /brokers/ids/N ... czxid (broker epoch): X"
    )
    ELECTION_ERROR = "ELECTION_ERROR"  # "Error while electing or becoming controller on broker N"
    REQUEST_SENT = "REQUEST_SENT"  # controller: "Sending LeaderAndIsr/UpdateMetadata/StopReplica request ..."
    REQUEST_RECEIVED = (
        "REQUEST_RECEIVED"  # broker: "Handling/Received LeaderAndIsr request ... from controller N"
    )
    STALE_CONTROLLER_REQUEST = "STALE_CONTROLLER_REQUEST"  # broker WARN: request from an old controller epoch
    ZK_ERROR = "ZK_ERROR"  # ZooKeeper "KeeperErrorCode = NoNode for /controller_epoch" and the like
    ZK_SESSION_EXPIRED = "ZK_SESSION_EXPIRED"  # "ZK expired; shut down all controller components ..."
    OTHER = "OTHER"  # a well-formed line with no modelled template, or a cut line (never guessed fields)


TRANSITION_KINDS: Final = frozenset({DecisionKind.PARTITION_TRANSITION, DecisionKind.REPLICA_TRANSITION})
"""Kinds that assert a state machine step happened."""

FAILURE_KINDS: Final = frozenset(
    {
        DecisionKind.PARTITION_TRANSITION_FAILED,
        DecisionKind.REPLICA_TRANSITION_FAILED,
        DecisionKind.INVALID_TRANSITION,
        DecisionKind.ZOMBIE_ABORT,
        DecisionKind.LEADER_ELECTION_FAILED,
        DecisionKind.ELECTION_ERROR,
    }
)
"""Kinds that record a controller decision that did not take effect (``success`` is false)."""
