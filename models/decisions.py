"""What a Kafka controller.log / state-change.log record says (the ``kind`` of ``controller_decisions``).

Templates are the census of docs/log-templates.md (Kafka 0.8 … 3.9, read from Kafka's sources); the parser
lives in ``collectors.log_parser``. Pure: stdlib only.
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
    STALE_ZK_VERSION = "STALE_ZK_VERSION"  # broker ≤2.7: "Cached zkVersion 5 not equal to that in zookeeper, skip updating ISR"
    ISR_CHANGE = "ISR_CHANGE"  # broker leader: "Shrinking ISR from 1,2 to 1", "Expanding ISR ...", "ISR updated to ..."
    LEADER_EPOCH_BUMPED = "LEADER_EPOCH_BUMPED"  # controller: "Updated leader epoch for partition t-0 to 5[, zkVersion=7]"
    UNCLEAN_LEADER_CHOSEN = "UNCLEAN_LEADER_CHOSEN"  # ≤1.0 "No broker in ISR is alive for [t,0]. Elect leader 3 from live brokers 3. ..."
    OTHER = "OTHER"  # a line the pipelines do not act on (its ``LogTemplate`` says which), or a cut line


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

CONTROLLER_VOICE_KINDS: Final = frozenset(
    {
        DecisionKind.PARTITION_TRANSITION,
        DecisionKind.REPLICA_TRANSITION,
        DecisionKind.PARTITION_TRANSITION_FAILED,
        DecisionKind.REPLICA_TRANSITION_FAILED,
        DecisionKind.INVALID_TRANSITION,
        DecisionKind.ZOMBIE_ABORT,
        DecisionKind.LEADER_ELECTED,
        DecisionKind.LEADER_ELECTION_STARTED,
        DecisionKind.LEADER_ELECTION_FAILED,
        DecisionKind.UNCLEAN_LEADER_CHOSEN,
        DecisionKind.ISR_REMOVAL,
        DecisionKind.LEADER_EPOCH_BUMPED,
        DecisionKind.CONTROLLER_ELECTED,
        DecisionKind.EPOCH_INCREMENTED,
        DecisionKind.CONTROLLER_READY,
        DecisionKind.CONTROLLER_RESIGNED,
        DecisionKind.CONTROLLER_MOVED,
        DecisionKind.FAILOVER_STEP,
        DecisionKind.BROKER_CHANGE,
        DecisionKind.BROKER_FAILURE,
        DecisionKind.BROKER_STARTUP,
        DecisionKind.REQUEST_SENT,
    }
)
"""Kinds only the controller logs, in its own voice: such a line shows its (id, epoch) acting at the line's time.
A broker's line naming a controller's request (a receipt, a metadata cache update) shows when the request
arrived, which can be after the sender's term ended: it says nothing about who acts then."""

ACTING_CONTROLLER_KINDS: Final = CONTROLLER_VOICE_KINDS | {DecisionKind.STALE_CONTROLLER_REQUEST}
"""Kinds whose line shows its controller (id, epoch) acting at the line's time: the controller's own voice, and a
broker refusing that controller's request as stale. A broker refuses only after a newer controller has reached it,
so the refused request was still in flight in the newer term: the old controller acted then (a zombie)."""


class LogTemplate(StrEnum):
    """The message template one log record was written from (docs/log-templates.md is the census).

    Finer than ``DecisionKind``: one kind can come from several templates (Kafka reworded lines between
    releases; the version spellings of one statement share a template). ``UNKNOWN`` is a well-formed record
    no template matches; ``CUT`` a first line cut before its ``(logger)``; ``CONTINUATION`` a line without a
    log layout (stack frames, exception text) that belongs to the record before it.
    """

    # state-change.log, controller side: the two state machines
    PARTITION_STATE_CHANGE = "PARTITION_STATE_CHANGE"
    REPLICA_STATE_CHANGE = "REPLICA_STATE_CHANGE"
    PARTITION_CHANGE_FAILED = "PARTITION_CHANGE_FAILED"
    REPLICA_CHANGE_FAILED = "REPLICA_CHANGE_FAILED"
    NO_LIVE_ASSIGNED_REPLICA = "NO_LIVE_ASSIGNED_REPLICA"
    INVALID_PREVIOUS_STATE = "INVALID_PREVIOUS_STATE"
    ZOMBIE_ABORT = "ZOMBIE_ABORT"
    ISR_REMOVAL = "ISR_REMOVAL"
    LEADER_ELECTED_OFFLINE = "LEADER_ELECTED_OFFLINE"
    LEADER_ELECTION_STARTED = "LEADER_ELECTION_STARTED"
    LEADER_ELECTION_ERROR = "LEADER_ELECTION_ERROR"
    REASSIGNMENT_REQUEST = "REASSIGNMENT_REQUEST"
    MARK_REPLICAS_OFFLINE = "MARK_REPLICAS_OFFLINE"
    # controller.log: elections of a partition leader (old and new wordings)
    SELECTED_LEADER_AND_ISR = "SELECTED_LEADER_AND_ISR"
    NEW_LEADER_AND_ISR = "NEW_LEADER_AND_ISR"
    UNCLEAN_LEADER_CHOSEN = "UNCLEAN_LEADER_CHOSEN"
    PREFERRED_LEADER_ELECTED = "PREFERRED_LEADER_ELECTED"
    PREFERRED_LEADER_NOT_ELECTED = "PREFERRED_LEADER_NOT_ELECTED"
    LEADER_ELECTION_STEP = "LEADER_ELECTION_STEP"
    LEADER_EPOCH_BUMPED = "LEADER_EPOCH_BUMPED"
    RETAINING_LAST_ISR = "RETAINING_LAST_ISR"
    ISR_UPDATE_BY_CONTROLLER = "ISR_UPDATE_BY_CONTROLLER"
    REASSIGNMENT_STEP = "REASSIGNMENT_STEP"
    TOPIC_CHANGE = "TOPIC_CHANGE"
    TOPIC_DELETION_STEP = "TOPIC_DELETION_STEP"
    STATE_MACHINE_STEP = "STATE_MACHINE_STEP"
    STATE_CHANGE_ERROR = "STATE_CHANGE_ERROR"
    # controller.log: the controller's own life
    CONTROLLER_ELECTED = "CONTROLLER_ELECTED"
    EPOCH_INCREMENTED = "EPOCH_INCREMENTED"
    CONTROLLER_READY = "CONTROLLER_READY"
    CONTROLLER_RESIGNED = "CONTROLLER_RESIGNED"
    CONTROLLER_MOVED = "CONTROLLER_MOVED"
    FAILOVER_STEP = "FAILOVER_STEP"
    CONTROLLER_ELECTION_ERROR = "CONTROLLER_ELECTION_ERROR"
    CONTROLLER_LIFECYCLE = "CONTROLLER_LIFECYCLE"
    BROKER_CHANGE = "BROKER_CHANGE"
    BROKER_FAILURE = "BROKER_FAILURE"
    BROKER_STARTUP = "BROKER_STARTUP"
    BROKER_REGISTERING = "BROKER_REGISTERING"
    BROKER_REGISTERED = "BROKER_REGISTERED"
    CHANNEL_STEP = "CHANNEL_STEP"
    # requests between the controller and the brokers
    REQUEST_SENT = "REQUEST_SENT"
    REQUEST_SENT_SUMMARY = "REQUEST_SENT_SUMMARY"
    REQUEST_RECEIVED = "REQUEST_RECEIVED"
    RESPONSE_RECEIVED = "RESPONSE_RECEIVED"
    STALE_CONTROLLER_EPOCH = "STALE_CONTROLLER_EPOCH"
    # state-change.log, broker side
    LEADER_STARTS = "LEADER_STARTS"
    FOLLOWER_STARTS = "FOLLOWER_STARTS"
    BROKER_TRANSITION_STEP = "BROKER_TRANSITION_STEP"
    BROKER_IGNORED_REQUEST = "BROKER_IGNORED_REQUEST"
    METADATA_CACHE_UPDATE = "METADATA_CACHE_UPDATE"
    # server.log, kafka.cluster.Partition: the leader's ISR path
    ISR_SHRINK = "ISR_SHRINK"
    ISR_EXPAND = "ISR_EXPAND"
    ISR_UPDATED = "ISR_UPDATED"
    STALE_ZK_VERSION = "STALE_ZK_VERSION"
    # ZooKeeper
    ZK_SESSION_EXPIRED = "ZK_SESSION_EXPIRED"
    ZK_ERROR = "ZK_ERROR"
    # not a template
    UNKNOWN = "UNKNOWN"
    CUT = "CUT"
    CONTINUATION = "CONTINUATION"


NOT_TEMPLATES: Final = frozenset({LogTemplate.UNKNOWN, LogTemplate.CUT, LogTemplate.CONTINUATION})
"""The ``LogTemplate`` values that say a line matched no template."""
