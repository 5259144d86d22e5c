"""Pure parser for Kafka controller.log / state-change.log / server.log (Kafka 0.8 … 3.9).

No I/O: feed it lines, get ``ParsedRecord`` and ``RejectedLine`` objects back. Every record names the
``LogTemplate`` it was written from (docs/log-templates.md, the census of Kafka's own log statements,
0.8 … 3.9). ``classify_line`` names one line's template; ``census`` counts a whole text per template and
lists the unknown lines that mention a partition, leader, ISR or epoch. Rules:

* A record starts at a line with a recognised layout: ``[ts] LEVEL msg (logger)`` (log4j
  ``[%d] %p %m (%c)``) or ``ts LEVEL logger[:line] - msg``. Any other line continues the
  record before it (stack traces, exception causes, wrapped text) and never becomes a record.
* A ``[ts] LEVEL ...`` line without its closing ``(logger)`` was cut: it becomes kind OTHER with
  no template fields, so a partial line never yields a transition with guessed fields.
* A line that is neither a layout nor a continuation and names WARN/ERROR/FATAL is rejected
  (quarantine); unlayouted lower-level noise is skipped and counted.
* Timestamps carry no zone in Kafka's default layout; they are taken as UTC (brokers are
  expected to log in UTC; an explicit ``Z``/``+hh:mm`` suffix is honoured).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from models.decisions import NOT_TEMPLATES, LogTemplate
from models.decisions import DecisionKind as K
from models.events import int32_problem
from models.states import PartitionState, ReplicaState

MAX_MESSAGE_CHARS = 8000  # a runaway stack trace must not make one row megabytes long

_TS = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_LEVEL = r"TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL"
# [2019-08-12 10:00:00,123] INFO msg (logger)   -- log4j "[%d] %p %m (%c)%n"
_LAYOUT_BRACKET = re.compile(rf"^\[(?P<ts>{_TS})\] (?P<level>{_LEVEL})\s(?P<rest>.*)$")
# Kafka loggers are dotted categories, optionally with a source line (":66").
_LOGGER_TAIL = re.compile(r"^(?P<msg>.*?)\s\((?P<logger>[A-Za-z_][\w$-]*(?:\.[\w$-]+)+)(?::\d+)?\)\s*$")
# 2016-08-02 05:38:08 INFO  KafkaController:68 - msg
_LAYOUT_DASH = re.compile(
    rf"^(?P<ts>{_TS})\s+(?P<level>{_LEVEL})\s+(?:\[[^\]]*\]\s+)?"
    r"(?P<logger>[A-Za-z_][\w.$-]*)(?::\d+)?\s+-\s(?P<msg>.*)$"
)
_TS_PARTS = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[,.](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$"
)
_CONTINUATION = re.compile(
    r"^(?:\s|at\s|Caused by\b|\.\.\.|[\w$.]*(?:Exception|Error|Throwable)\b|[a-z][\w$]*(?:\.[\w$]+)+:)"
)
_BARE_LEVEL = re.compile(r"\b(WARN|WARNING|ERROR|FATAL)\b")


@dataclass(frozen=True)
class Header:
    """The layout part of a record's first line."""

    ts: datetime | None
    level: str
    logger: str | None
    msg: str
    complete: bool  # False when the line was cut before its closing "(logger)"


@dataclass
class ParsedRecord:
    """One log record: the columns of ``controller_decisions`` minus cluster/source_file/event_id."""

    line_no: int
    ts: datetime | None
    level: str | None
    logger: str | None
    kind: K
    message: str
    template: LogTemplate = LogTemplate.UNKNOWN
    controller_id: int | None = None
    controller_epoch: int | None = None
    broker_id: int | None = None
    topic: str | None = None
    partition: int | None = None
    replica: int | None = None
    from_state: str | None = None
    to_state: str | None = None
    leader: int | None = None
    leader_epoch: int | None = None
    isr: list[int] | None = None
    success: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # template details with no column (not stored)


@dataclass(frozen=True)
class RejectedLine:
    """A line that could not be used (goes to ``quarantine``)."""

    line_no: int
    raw: str
    reason: str


# ---------------------------------------------------------------- layout


def parse_timestamp(text: str) -> datetime | None:
    """'2019-08-12 10:00:00,123' -> aware UTC datetime (no zone means UTC); None if not a real date."""
    m = _TS_PARTS.match(text)
    if not m:
        return None
    year, month, day, hour, minute, sec, frac, zone = m.groups()
    micros = int((frac or "0")[:6].ljust(6, "0"))
    tz: timezone = UTC
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        dt = datetime(int(year), int(month), int(day), int(hour), int(minute), int(sec), micros, tzinfo=tz)
    except ValueError:
        return None
    return dt.astimezone(UTC)


def split_layout(line: str) -> Header | None:
    """Recognise a record's first line; None when the line has no known layout."""
    m = _LAYOUT_BRACKET.match(line)
    if m:
        tail = _LOGGER_TAIL.match(m["rest"])
        level = _norm_level(m["level"])
        if tail:
            return Header(parse_timestamp(m["ts"]), level, tail["logger"], tail["msg"], True)
        return Header(parse_timestamp(m["ts"]), level, None, m["rest"], False)
    m = _LAYOUT_DASH.match(line)
    if m:
        return Header(parse_timestamp(m["ts"]), _norm_level(m["level"]), m["logger"], m["msg"], True)
    return None


def _norm_level(level: str) -> str:
    return "WARN" if level == "WARNING" else level


# ---------------------------------------------------------------- message prefixes

_PREFIXES: tuple[re.Pattern[str], ...] = (
    re.compile(r"^\[Controller id=(?P<cid>\d+) epoch=(?P<ep>\d+)\]\s"),
    re.compile(r"^\[Controller id=(?P<cid>\d+)\]\s"),
    re.compile(r"^\[Broker id=(?P<bid>\d+)\]\s"),
    re.compile(r"^\[(?:ControllerEventThread|RequestSendThread|PartitionStateMachine|ReplicaStateMachine) "
               r"controllerId=(?P<cid>\d+)\]\s"),
    re.compile(r"^\[Topic Deletion Manager (?P<cid>\d+)\][,:]?\s"),
    re.compile(r"^\[MetadataCache brokerId=(?P<bid>\d+)\]\s"),
    re.compile(r"^\[Controller id=(?P<cid>\d+), targetBrokerId=\d+\]\s"),
    re.compile(r"^\[Partition (?P<tp>[\w.-]+-\d+) broker=(?P<bid>\d+)\]\s"),
    re.compile(r"^Partition (?P<tp>\[[\w.-]+,\d+\]) on broker (?P<bid>\d+):\s"),
    re.compile(r"^\[(?:OfflinePartition|ReassignedPartition|PreferredReplicaPartition|ControlledShutdown|NoOp)"
               r"LeaderSelector\]:\s"),
    re.compile(r"^\[Controller (?P<cid>\d+)\]:?\s"),
    re.compile(r"^\[[^\]]*?\bon [Cc]ontroller (?P<cid>\d+)\]:?\s"),
    re.compile(r"^\[Controller-(?P<cid>\d+)-to-broker-\d+-send-thread\],?\s"),
    re.compile(r"^\[(?:KafkaApi|ReplicaFetcherManager on broker|ReplicaManager broker=|KafkaServer id=)"
               r"-?(?P<bid>\d+)\]:?\s"),
)


def strip_prefix(msg: str, rec: ParsedRecord) -> str:
    """Remove the ``[Controller id=N epoch=E] ``-style prefix, filling ids into the record."""
    for pattern in _PREFIXES:
        m = pattern.match(msg)
        if m:
            groups = m.groupdict()
            if groups.get("cid") is not None:
                rec.controller_id = int(groups["cid"])
                rec.broker_id = rec.controller_id  # the controller is the broker that wrote the line
            if groups.get("ep") is not None:
                rec.controller_epoch = int(groups["ep"])
            if groups.get("bid") is not None:
                rec.broker_id = int(groups["bid"])
            if groups.get("tp") is not None:  # kafka.cluster.Partition names its partition in the prefix
                _set_tp(rec, groups["tp"])
            return msg[m.end():]
    return msg


# ---------------------------------------------------------------- entities

_TP = r"(?P<tp>\[[\w.-]+,\d+\]|[\w.-]+-\d+)"
_REPLICA = r"(?P<rep>\[Topic=[\w.-]+,Partition=\d+,Replica=\d+\])"
_STATE = r"(?P<{}>[A-Za-z]+)"
_PARTITION_STATES = {str(s) for s in PartitionState}
_REPLICA_STATES = {str(s) for s in ReplicaState}
_SHORT_PARTITION = {"New": "NewPartition", "Online": "OnlinePartition", "Offline": "OfflinePartition",
                    "NonExistent": "NonExistentPartition"}


def parse_tp(text: str) -> tuple[str, int] | None:
    """'t-0' (1.0+) or '[t,0]' (≤0.11) -> ('t', 0)."""
    m = re.fullmatch(r"\[([\w.-]+),(\d+)\]", text) or re.fullmatch(r"([\w.-]+)-(\d+)", text)
    return (m.group(1), int(m.group(2))) if m else None


def parse_replica(text: str) -> tuple[str, int, int] | None:
    """'[Topic=t,Partition=0,Replica=2]' -> ('t', 0, 2)."""
    m = re.fullmatch(r"\[Topic=([\w.-]+),Partition=(\d+),Replica=(\d+)\]", text)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def _balanced(text: str, start: int) -> str | None:
    """Body of the parenthesised group opening at text[start] ('('), or None if it never closes."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def parse_leader_and_isr(text: str) -> dict[str, Any] | None:
    """Fields of the first LeaderAndIsr(...)/PartitionState(...)/(Leader:..,ISR:..) in text.

    Handles zkVersion / partitionEpoch / leaderRecoveryState and the 3.5+
    ``isrWithBrokerEpoch=List(BrokerState(brokerId=2, brokerEpoch=-1), ...)`` form. None when
    no complete (closed) state is present.
    """
    m = _JSON_STATE.search(text)
    if m:  # 0.8-1.0 LeaderAndIsr.toString: {"leader":2,"leader_epoch":1,"isr":[2,3]}
        return {"leader": int(m["leader"]), "leader_epoch": int(m["lep"]), "isr": _ints(m["isr"])}
    for opener in ("LeaderAndIsr(", "PartitionState(", "LeaderIsrAndControllerEpoch("):
        pos = text.find(opener)
        if pos >= 0:
            body = _balanced(text, pos + len(opener) - 1)
            return _kv_state(body) if body is not None else None
    pos = text.find("(Leader:")
    if pos >= 0:
        body = _balanced(text, pos)
        return _colon_state(body) if body is not None else None
    return None


_JSON_STATE = re.compile(r'\{"leader":(?P<leader>-?\d+),"leader_epoch":(?P<lep>-?\d+),"isr":\[(?P<isr>[\d,]*)\]\}')


def _kv_state(body: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, col in (("leader", "leader"), ("leaderEpoch", "leader_epoch"), ("controllerEpoch", "controller_epoch"),
                     ("zkVersion", "zk_version"), ("partitionEpoch", "zk_version")):
        m = re.search(rf"\b{key}=(-?\d+)", body)
        if m:
            out[col] = int(m.group(1))
    m = re.search(r"\bisrWithBrokerEpoch=List\(", body)
    if m:
        inner = _balanced(body, m.end() - 1) or ""
        out["isr"] = [int(x) for x in re.findall(r"brokerId=(-?\d+)", inner)]
    else:
        m = re.search(r"\bisr=(?:List\(([^)]*)\)|\[([^\]]*)\]|([\d,]*))", body)
        if m:
            out["isr"] = _ints(next(g for g in m.groups() if g is not None))
    m = re.search(r"\bleaderRecoveryState=(\w+)", body)
    if m:
        out["leader_recovery_state"] = m.group(1)
    return out


def _colon_state(body: str) -> dict[str, Any]:
    """(Leader:-1,ISR:2,3,LeaderRecoveryState:RECOVERED,LeaderEpoch:6,ZkVersion:7,ControllerEpoch:4)"""
    out: dict[str, Any] = {}
    keys = {"Leader": "leader", "LeaderEpoch": "leader_epoch", "ControllerEpoch": "controller_epoch",
            "ZkVersion": "zk_version", "PartitionEpoch": "zk_version"}
    for part in re.split(r",(?=[A-Za-z]+:)", body):
        name, _, value = part.partition(":")
        if name == "ISR":
            out["isr"] = _ints(value)
        elif name == "LeaderRecoveryState":
            out["leader_recovery_state"] = value
        elif name in keys and re.fullmatch(r"-?\d+", value):
            out[keys[name]] = int(value)
    return out


# ---------------------------------------------------------------- templates


def _full_partition(state: str) -> str | None:
    return state if state in _PARTITION_STATES else None


def _full_replica(state: str) -> str | None:
    return state if state in _REPLICA_STATES else None


def _set_tp(rec: ParsedRecord, tp: str) -> bool:
    parsed = parse_tp(tp)
    if parsed is None:
        return False
    rec.topic, rec.partition = parsed
    return True


def _set_controller(rec: ParsedRecord, cid: str | None, ep: str | None) -> None:
    # the prefix's values win; the body repeats them (pre-1.0 has only the body)
    if cid is not None and rec.controller_id is None:
        rec.controller_id = int(cid)
    if ep is not None and rec.controller_epoch is None:
        rec.controller_epoch = int(ep)


def _apply_state(rec: ParsedRecord, state: dict[str, Any]) -> None:
    rec.leader = state.get("leader", rec.leader)
    rec.leader_epoch = state.get("leader_epoch", rec.leader_epoch)
    rec.isr = state.get("isr", rec.isr)
    if rec.controller_epoch is None and "controller_epoch" in state:
        rec.controller_epoch = state["controller_epoch"]
    for key in ("zk_version", "leader_recovery_state"):
        if key in state:
            rec.extra[key] = state[key]


_CTRL = r"(?:Controller (?P<cid>\d+) epoch (?P<ep>\d+) )?"

_PARTITION_CHANGED = re.compile(
    rf"^{_CTRL}[Cc]hanged partition {_TP} (?P<word>state )?from {_STATE.format('frm')} to {_STATE.format('to')}"
    r"(?: with (?:assigned replicas (?P<assigned>[\d,]*)|leader (?P<leader>-?\d+)|state (?P<lai>LeaderAndIsr\(.*\))))?$"
)
_REPLICA_CHANGED = re.compile(
    rf"^{_CTRL}[Cc]hanged state of replica (?P<replica>\d+) for partition {_TP} "
    rf"from {_STATE.format('frm')} to {_STATE.format('to')}$"
)
_PARTITION_FAILED = re.compile(
    rf"^{_CTRL}(?:failed to change state for partition {_TP} from {_STATE.format('frm')} to {_STATE.format('to')}"
    rf"|[Ii]nitiated state change for partition {_TP.replace('tp', 'tp2')} from {_STATE.format('frm2')} to "
    rf"{_STATE.format('to2')} failed)$"
)
_REPLICA_FAILED = re.compile(
    rf"^{_CTRL}[Ii]nitiated state change of replica (?P<replica>\d+) for partition {_TP} "
    rf"from {_STATE.format('frm')} to {_STATE.format('to')} failed$"
)
_NEW_TO_ONLINE_ERROR = re.compile(
    rf"^(?:[\w.$]*StateChangeFailedException: )?{_CTRL}encountered error during state change of partition {_TP} "
    r"from (?P<frm>New|Online|Offline|NonExistent) to (?P<to>New|Online|Offline|NonExistent), "
    r"assigned replicas are \[(?P<assigned>[^\]]*)\], live brokers are \[(?P<live>.*)\]\. No assigned replica is alive\.$"
)
_INVALID = re.compile(
    r"^(?:[\w.$]*IllegalStateException: |(?:[\w.$]*AssertionError: )?assertion failed: )?"
    rf"(?:Partition {_TP}|Replica {_REPLICA}) should be in (?:one of |the )?(?P<valid>[\w,]+) states "
    rf"before moving to {_STATE.format('to')} state\. Instead it is in {_STATE.format('frm')} state\.?$"
)
_ZOMBIE_PARTITION = re.compile(
    rf"^(?:[\w.$]*Exception: )?Aborted leader election for partition {_TP} since the LeaderAndIsr path was already "
    r"written by another controller\. This probably means that the current controller (?P<cid>\d+) went through "
    r"a soft failure and another controller was elected with epoch (?P<newep>\d+)\.$"
)
_ZOMBIE_REPLICA = re.compile(
    r"^(?:[\w.$]*Exception: )?Leader and isr path written by another controller\. This probably means the current "
    r"controller with epoch (?P<ep>\d+) went through a soft failure and another controller was elected with epoch "
    r"(?P<newep>\d+)\. Aborting state change by this controller$"
)
_ISR_REMOVAL = re.compile(
    rf"^Partition {_TP} state changed to (?P<state>\(Leader:[^()]*\)) after removing replica (?P<replica>\d+) "
    rf"from the ISR as part of transition to {_STATE.format('to')}$"
)
_ELECTED_LEADER = re.compile(rf"^{_CTRL}[Ee]lected leader (?P<leader>-?\d+) for Offline partition {_TP}$")
_ELECTION_STARTED = re.compile(rf"^{_CTRL}started leader election for partition {_TP}$")
_ELECTION_FAILED = re.compile(
    rf"^{_CTRL}encountered error while electing leader for partition {_TP} due to: (?P<cause>.+)$"
)
_LEADER_STARTS = re.compile(
    rf"^(?:Leader )?{_TP}(?: with topic id \S+)? starts at (?:[Ll]eader )?[Ee]poch (?P<lep>\d+) from offset \d+"
    r"(?P<rest>\W.*)?$"
)
_ISR_IN_TEXT = re.compile(r"\bISR (?P<isr>\[[\d, ]*\]|\d+(?:,\d+)*)")
_CONTROLLER_ELECTED = re.compile(
    r"^(?P<cid>\d+) successfully elected as (?:the controller|leader)"
    r"(?:\. Epoch incremented to (?P<ep>\d+) and epoch zk version is now (?P<zkv>\d+))?$"
)
_EPOCH_INCREMENTED = re.compile(
    r"^(?:Controller (?P<cid>\d+) incremented epoch to|Incremented epoch to|Epoch incremented to) (?P<ep>\d+)$"
)
_READY = re.compile(r"^(?:Broker \d+ is r|R)eady to serve as the new controller with epoch (?P<ep>\d+)$")
_RESIGNED = re.compile(r"^(?:Resigned|Resigning|Forcing the controller to resign|Broker (?P<cid>\d+) resigned as the controller)$")
_MOVED = re.compile(r"^Controller moved to another broker(?: when processing (?P<event>.+))?\.?.*$")
_FAILOVER_STEPS = re.compile(
    r"^(?:Registering handlers|Deleting log dir event notifications|Deleting isr change notifications"
    r"|Initializing controller context|Initialized broker epochs cache: .*|Controller starting up"
    r"|Broker \d+ starting become controller state transition|Sending update metadata request"
    r"|Starting the controller scheduler|Fetching topic deletions in progress|Initializing topic deletion manager"
    r"|Currently active brokers in the cluster: .*|Currently shutting brokers in the cluster: .*"
    r"|Current list of topics in the cluster: .*|Partitions being reassigned: .*"
    r"|Partitions undergoing preferred replica election: .*|Partitions that completed preferred replica election: .*"
    r"|Resuming preferred replica election for partitions: .*|Starting preferred replica leader election for partitions.*"
    r"|Started replica state machine with initial state -> .*|Started partition state machine with initial state -> .*)$"
)
_BROKER_CHANGE = re.compile(
    r"^Newly added brokers: (?P<added>[\d,]*), deleted brokers: (?P<deleted>[\d,]*), "
    r"(?:bounced brokers: (?P<bounced>[\d,]*), )?all live brokers: (?P<live>[\d,]*)$"
)
_BROKER_FAILURE = re.compile(r"^Broker failure callback for (?P<ids>\d+(?:,\s?\d+)*)$")
_BROKER_STARTUP = re.compile(r"^New broker startup callback for (?P<ids>\d+(?:,\s?\d+)*)$")
_BROKER_CREATING = re.compile(r"^Creating /brokers/ids/(?P<id>\d+) \(is it secure\? (?:true|false)\)$")
_BROKER_REGISTERED = re.compile(
    r"^Registered broker (?P<id>\d+) at path /brokers/ids/(?P=id) with addresses: .*?"
    r"(?:, czxid \(broker epoch\): (?P<czxid>-?\d+))?$"
)
_ELECTION_ERROR = re.compile(
    r"^Error while electing or becoming controller on broker (?P<bid>\d+)(?:\. Trigger controller movement immediately)?$"
)
_STALE = re.compile(
    r"^(?:Broker \d+ )?[Ii]gnoring (?P<req>LeaderAndIsr|StopReplica|UpdateMetadata) request from controller (?P<cid>\d+) "
    r"with correlation id \d+ since its controller epoch (?P<ep>\d+) is old\. "
    r"Latest known controller epoch is (?P<latest>\d+)\.?$"
)
_STALE_OLD = re.compile(
    r"^(?:Received |Ignoring )?(?P<req>LeaderAndIsr|StopReplica|UpdateMetadata|update metadata|stop replica)"
    r" request(?: with correlation id \d+)? from an old controller (?P<cid>\d+) with epoch (?P<ep>\d+)\. "
    r"Latest known controller epoch is (?P<latest>\d+)\.?$"
)
_SENDING_PER_PARTITION = re.compile(
    r"^Sending (?P<role>become-leader|become-follower) LeaderAndIsr request (?P<state>.+) to broker (?P<to>\d+) "
    rf"for partition {_TP}$"
    r"|^Sending UpdateMetadata request (?P<ustate>.+) to brokers? (?P<brokers>Set\([\d, ]*\)|[\d,]+) "
    rf"for partition {_TP.replace('tp', 'utp')}$"
)
_SENDING_SUMMARY = re.compile(
    r"^Sending (?:LeaderAndIsr request to broker \d+ with \d+ become-leader and \d+ become-follower partitions"
    r"|UpdateMetadata request to brokers \w*Set\([\d, ]*\) for \d+ partitions"
    r"|StopReplica request (?:\(delete = (?:true|false)\) )?for \d+ replicas to broker \d+"
    r"|StopReplica request \(delete = (?:true|false)\) to broker \d+ for \d+ replicas)$"
)
_RECEIVED = re.compile(
    r"^(?:Handling (?P<req>LeaderAndIsr|StopReplica|UpdateMetadata) request correlationId \d+ from controller "
    r"(?P<cid>\d+)(?: epoch (?P<ep>\d+))? for \d+ partitions"
    r"|Received (?P<req2>LeaderAndIsr|StopReplica|UpdateMetadata) request (?P<state>.+) correlation id \d+ "
    rf"from controller (?P<cid2>\d+) epoch (?P<ep2>\d+) for partition {_TP})$"
)
_KEEPER_ERROR = re.compile(r"KeeperErrorCode = (?P<code>\w+)(?: for (?P<path>\S+))?")
_ZK_EXPIRED = re.compile(r"^(?:ZK expired; shut down all controller components and try to re-elect"
                         r"|Session expired.*|.*\bsession 0x[0-9a-f]+ has expired.*|ZooKeeper session expired.*)$",
                         re.IGNORECASE)


def classify(msg: str, rec: ParsedRecord) -> None:
    """Fill ``rec.kind``, ``rec.template`` and the template's fields from a prefix-free message (pure)."""
    for matcher in _MATCHERS:
        if matcher(msg, rec):
            if rec.template is LogTemplate.UNKNOWN:
                rec.template = _KIND_TEMPLATE[rec.kind]
            return
    rec.kind, rec.template = K.OTHER, LogTemplate.UNKNOWN


_KIND_TEMPLATE: dict[K, LogTemplate] = {
    K.PARTITION_TRANSITION: LogTemplate.PARTITION_STATE_CHANGE,
    K.REPLICA_TRANSITION: LogTemplate.REPLICA_STATE_CHANGE,
    K.PARTITION_TRANSITION_FAILED: LogTemplate.PARTITION_CHANGE_FAILED,
    K.REPLICA_TRANSITION_FAILED: LogTemplate.REPLICA_CHANGE_FAILED,
    K.INVALID_TRANSITION: LogTemplate.INVALID_PREVIOUS_STATE,
    K.ZOMBIE_ABORT: LogTemplate.ZOMBIE_ABORT,
    K.ISR_REMOVAL: LogTemplate.ISR_REMOVAL,
    K.LEADER_ELECTED: LogTemplate.LEADER_ELECTED_OFFLINE,
    K.LEADER_ELECTION_STARTED: LogTemplate.LEADER_ELECTION_STARTED,
    K.LEADER_ELECTION_FAILED: LogTemplate.LEADER_ELECTION_ERROR,
    K.LEADER_STARTED: LogTemplate.LEADER_STARTS,
    K.CONTROLLER_ELECTED: LogTemplate.CONTROLLER_ELECTED,
    K.EPOCH_INCREMENTED: LogTemplate.EPOCH_INCREMENTED,
    K.CONTROLLER_READY: LogTemplate.CONTROLLER_READY,
    K.CONTROLLER_RESIGNED: LogTemplate.CONTROLLER_RESIGNED,
    K.CONTROLLER_MOVED: LogTemplate.CONTROLLER_MOVED,
    K.FAILOVER_STEP: LogTemplate.FAILOVER_STEP,
    K.ELECTION_ERROR: LogTemplate.CONTROLLER_ELECTION_ERROR,
    K.BROKER_CHANGE: LogTemplate.BROKER_CHANGE,
    K.BROKER_FAILURE: LogTemplate.BROKER_FAILURE,
    K.BROKER_STARTUP: LogTemplate.BROKER_STARTUP,
    K.BROKER_REGISTERING: LogTemplate.BROKER_REGISTERING,
    K.BROKER_REGISTERED: LogTemplate.BROKER_REGISTERED,
    K.REQUEST_SENT: LogTemplate.REQUEST_SENT,
    K.REQUEST_RECEIVED: LogTemplate.REQUEST_RECEIVED,
    K.STALE_CONTROLLER_REQUEST: LogTemplate.STALE_CONTROLLER_EPOCH,
    K.ZK_ERROR: LogTemplate.ZK_ERROR,
    K.ZK_SESSION_EXPIRED: LogTemplate.ZK_SESSION_EXPIRED,
}
"""The template of a record the hand-written matchers above recognised, where one kind has one template."""


def _m_partition_changed(msg: str, rec: ParsedRecord) -> bool:
    m = _PARTITION_CHANGED.match(msg)
    if not m:
        return False
    frm, to = _full_partition(m["frm"]), _full_partition(m["to"])
    # each target has its own tail: a missing tail means the line is incomplete
    tail_ok = {
        "NewPartition": m["assigned"] is not None,
        "OnlinePartition": m["leader"] is not None or m["lai"] is not None,
        "OfflinePartition": m["assigned"] is None and m["leader"] is None and m["lai"] is None,
        "NonExistentPartition": m["assigned"] is None and m["leader"] is None and m["lai"] is None,
    }
    state = parse_leader_and_isr(m["lai"]) if m["lai"] else None
    if frm is None or to is None or not tail_ok[to] or (m["lai"] is not None and state is None):
        return False
    if not _set_tp(rec, m["tp"]):
        return False
    rec.kind, rec.from_state, rec.to_state, rec.success = K.PARTITION_TRANSITION, frm, to, True
    _set_controller(rec, m["cid"], m["ep"])
    if m["leader"] is not None:
        rec.leader = int(m["leader"])
    if m["assigned"] is not None:
        rec.extra["assigned_replicas"] = _ints(m["assigned"])
    if state:
        _apply_state(rec, state)
    return True


def _m_replica_changed(msg: str, rec: ParsedRecord) -> bool:
    m = _REPLICA_CHANGED.match(msg)
    if not m or _full_replica(m["frm"]) is None or _full_replica(m["to"]) is None or not _set_tp(rec, m["tp"]):
        return False
    rec.kind, rec.replica, rec.success = K.REPLICA_TRANSITION, int(m["replica"]), True
    rec.from_state, rec.to_state = m["frm"], m["to"]
    _set_controller(rec, m["cid"], m["ep"])
    return True


def _m_partition_failed(msg: str, rec: ParsedRecord) -> bool:
    m = _PARTITION_FAILED.match(msg)
    if not m:
        return False
    tp, frm, to = (m["tp"], m["frm"], m["to"]) if m["tp"] else (m["tp2"], m["frm2"], m["to2"])
    if _full_partition(frm) is None or _full_partition(to) is None or not _set_tp(rec, tp):
        return False
    rec.kind, rec.from_state, rec.to_state, rec.success = K.PARTITION_TRANSITION_FAILED, frm, to, False
    _set_controller(rec, m["cid"], m["ep"])
    return True


def _m_replica_failed(msg: str, rec: ParsedRecord) -> bool:
    m = _REPLICA_FAILED.match(msg)
    if not m or _full_replica(m["frm"]) is None or _full_replica(m["to"]) is None or not _set_tp(rec, m["tp"]):
        return False
    rec.kind, rec.replica, rec.success = K.REPLICA_TRANSITION_FAILED, int(m["replica"]), False
    rec.from_state, rec.to_state = m["frm"], m["to"]
    _set_controller(rec, m["cid"], m["ep"])
    return True


def _m_new_to_online_error(msg: str, rec: ParsedRecord) -> bool:
    m = _NEW_TO_ONLINE_ERROR.match(msg)
    if not m or not _set_tp(rec, m["tp"]):
        return False
    rec.kind, rec.success = K.PARTITION_TRANSITION_FAILED, False
    rec.template = LogTemplate.NO_LIVE_ASSIGNED_REPLICA
    rec.from_state, rec.to_state = _SHORT_PARTITION[m["frm"]], _SHORT_PARTITION[m["to"]]
    rec.extra["assigned_replicas"] = _ints(m["assigned"])
    rec.extra["live_brokers"] = _ints(m["live"])
    rec.extra["cause"] = "no live replica"
    _set_controller(rec, m["cid"], m["ep"])
    return True


def _m_invalid(msg: str, rec: ParsedRecord) -> bool:
    m = _INVALID.match(msg)
    if not m:
        return False
    if m["tp"]:
        ok = _full_partition(m["frm"]) and _full_partition(m["to"]) and _set_tp(rec, m["tp"])
    else:
        parsed = parse_replica(m["rep"])
        ok = bool(parsed and _full_replica(m["frm"]) and _full_replica(m["to"]))
        if ok and parsed:
            rec.topic, rec.partition, rec.replica = parsed
    if not ok:
        return False
    rec.kind, rec.from_state, rec.to_state, rec.success = K.INVALID_TRANSITION, m["frm"], m["to"], False
    rec.extra["valid_previous"] = m["valid"].split(",")
    return True


def _m_zombie(msg: str, rec: ParsedRecord) -> bool:
    m = _ZOMBIE_PARTITION.match(msg)
    if m and _set_tp(rec, m["tp"]):
        _set_controller(rec, m["cid"], None)
    else:
        m = _ZOMBIE_REPLICA.match(msg)
        if not m:
            return False
        _set_controller(rec, None, m["ep"])
    rec.kind, rec.success = K.ZOMBIE_ABORT, False
    rec.extra["newer_controller_epoch"] = int(m["newep"])
    return True


def _m_isr_removal(msg: str, rec: ParsedRecord) -> bool:
    m = _ISR_REMOVAL.match(msg)
    state = parse_leader_and_isr(m["state"]) if m else None
    if not m or state is None or _full_replica(m["to"]) is None or not _set_tp(rec, m["tp"]):
        return False
    rec.kind, rec.replica, rec.to_state, rec.success = K.ISR_REMOVAL, int(m["replica"]), m["to"], True
    _apply_state(rec, state)
    return True


def _m_leader_events(msg: str, rec: ParsedRecord) -> bool:
    m = _ELECTED_LEADER.match(msg)
    if m and _set_tp(rec, m["tp"]):
        rec.kind, rec.leader, rec.success = K.LEADER_ELECTED, int(m["leader"]), True
        _set_controller(rec, m["cid"], m["ep"])
        rec.from_state, rec.to_state = str(PartitionState.OFFLINE), str(PartitionState.ONLINE)
        return True
    m = _ELECTION_STARTED.match(msg)
    if m and _set_tp(rec, m["tp"]):
        rec.kind = K.LEADER_ELECTION_STARTED
        _set_controller(rec, m["cid"], m["ep"])
        return True
    m = _ELECTION_FAILED.match(msg)
    if m and _set_tp(rec, m["tp"]):
        rec.kind, rec.success = K.LEADER_ELECTION_FAILED, False
        rec.extra["cause"] = m["cause"]
        _set_controller(rec, m["cid"], m["ep"])
        return True
    m = _LEADER_STARTS.match(msg)
    if m and _set_tp(rec, m["tp"]):
        rec.kind, rec.leader_epoch = K.LEADER_STARTED, int(m["lep"])
        rec.leader = rec.broker_id
        isr = _ISR_IN_TEXT.search(m["rest"] or "")
        if isr is not None:
            rec.isr = _ints(isr["isr"])
        return True
    return False


def _m_controller(msg: str, rec: ParsedRecord) -> bool:
    m = _CONTROLLER_ELECTED.match(msg)
    if m:
        rec.kind, rec.controller_id, rec.success = K.CONTROLLER_ELECTED, int(m["cid"]), True
        if m["ep"] is not None:
            rec.controller_epoch = int(m["ep"])
            rec.extra["epoch_zk_version"] = int(m["zkv"])
        return True
    m = _EPOCH_INCREMENTED.match(msg)
    if m:
        rec.kind, rec.controller_epoch = K.EPOCH_INCREMENTED, int(m["ep"])
        if m["cid"] is not None:
            rec.controller_id = int(m["cid"])
        return True
    m = _READY.match(msg)
    if m:
        rec.kind, rec.controller_epoch = K.CONTROLLER_READY, int(m["ep"])
        return True
    m = _RESIGNED.match(msg)
    if m:
        rec.kind = K.CONTROLLER_RESIGNED
        _set_controller(rec, m["cid"], None)
        return True
    m = _MOVED.match(msg)
    if m:
        rec.kind = K.CONTROLLER_MOVED
        if m["event"]:
            rec.extra["event"] = m["event"]
        return True
    if _FAILOVER_STEPS.match(msg):
        rec.kind = K.FAILOVER_STEP
        return True
    m = _ELECTION_ERROR.match(msg)
    if m:
        rec.kind, rec.success = K.ELECTION_ERROR, False
        rec.extra["broker"] = int(m["bid"])
        return True
    return False


def _m_brokers(msg: str, rec: ParsedRecord) -> bool:
    m = _BROKER_CHANGE.match(msg)
    if m:
        rec.kind = K.BROKER_CHANGE
        for key in ("added", "deleted", "bounced", "live"):
            if m[key] is not None:
                rec.extra[key] = _ints(m[key])
        return True
    for pattern, kind in ((_BROKER_FAILURE, K.BROKER_FAILURE), (_BROKER_STARTUP, K.BROKER_STARTUP)):
        m = pattern.match(msg)
        if m:
            rec.kind = kind
            rec.extra["brokers"] = _ints(m["ids"])
            return True
    m = _BROKER_CREATING.match(msg)
    if m:
        rec.kind, rec.broker_id = K.BROKER_REGISTERING, int(m["id"])
        return True
    m = _BROKER_REGISTERED.match(msg)
    if m:
        rec.kind, rec.broker_id, rec.success = K.BROKER_REGISTERED, int(m["id"]), True
        if m["czxid"] is not None:
            rec.extra["broker_epoch"] = int(m["czxid"])
        return True
    return False


def _m_requests(msg: str, rec: ParsedRecord) -> bool:
    m = _STALE.match(msg) or _STALE_OLD.match(msg)
    if m:
        # the stale request's sender and epoch; the receiving broker is broker_id
        rec.kind, rec.success = K.STALE_CONTROLLER_REQUEST, False
        rec.controller_id, rec.controller_epoch = int(m["cid"]), int(m["ep"])
        rec.extra["request"] = m["req"].replace(" ", "").replace("updatemetadata", "UpdateMetadata")
        rec.extra["latest_controller_epoch"] = int(m["latest"])
        return True
    m = _SENDING_PER_PARTITION.match(msg)
    if m:
        tp, state_text = (m["tp"], m["state"]) if m["tp"] else (m["utp"], m["ustate"])
        state = parse_leader_and_isr(state_text)
        if _set_tp(rec, tp):
            rec.kind = K.REQUEST_SENT
            if state:
                _apply_state(rec, state)
            return True
    if _SENDING_SUMMARY.match(msg):
        rec.kind, rec.template = K.REQUEST_SENT, LogTemplate.REQUEST_SENT_SUMMARY
        return True
    m = _RECEIVED.match(msg)
    if m:
        rec.kind = K.REQUEST_RECEIVED
        cid, ep = (m["cid"], m["ep"]) if m["cid"] else (m["cid2"], m["ep2"])
        rec.controller_id = int(cid)
        if ep is not None:
            rec.controller_epoch = int(ep)
        if m["tp"]:
            _set_tp(rec, m["tp"])
            state = parse_leader_and_isr(m["state"])
            if state:
                _apply_state(rec, state)
        return True
    return False


def _m_zookeeper(msg: str, rec: ParsedRecord) -> bool:
    if _ZK_EXPIRED.match(msg):
        rec.kind = K.ZK_SESSION_EXPIRED
        return True
    m = _KEEPER_ERROR.search(msg)
    if m:
        rec.kind = K.ZK_ERROR
        rec.extra["zk_error"] = m["code"]
        if m["path"]:
            rec.extra["path"] = m["path"]
        return True
    return False


# ---------------------------------------------------------------- the catalogue
# The rest of the census: templates whose fields come from their named groups alone (tp, cid, ep, bid, leader,
# lep, isr, prev_isr, replica, zkv, latest, state). ``scan`` entries are families of many wordings: their
# partition and controller come from a search of the whole line.

_TP2 = _TP.replace("tp", "tp2")
_BRK = r"(?:Broker (?P<bid>\d+) )?"  # ≤0.11 broker-side lines name the broker in the text


@dataclass(frozen=True)
class _Entry:
    template: LogTemplate
    kind: K
    pattern: re.Pattern[str]
    success: bool | None = None
    scan: bool = False


def _e(template: LogTemplate, kind: K, pattern: str, success: bool | None = None, scan: bool = False) -> _Entry:
    return _Entry(template, kind, re.compile(pattern), success, scan)


T = LogTemplate
_CATALOGUE: tuple[_Entry, ...] = (
    # KAFKA-2729: the leader's cached partition-state version lost a race with a controller write
    _e(T.STALE_ZK_VERSION, K.STALE_ZK_VERSION,
       r"^Cached zkVersion \[?(?P<zkv>-?\d+)\]? not equal to that in zookeeper, skip updating ISR$", success=False),
    # ISR path on the leader (kafka.cluster.Partition, server.log)
    _e(T.ISR_SHRINK, K.ISR_CHANGE,
       rf"^Shrinking ISR (?:for partition {_TP} )?from (?P<prev_isr>[\d,]*) to (?P<isr>[\d,]*)(?:\.\s.*|\.)?$"),
    _e(T.ISR_EXPAND, K.ISR_CHANGE,
       rf"^Expanding ISR (?:for partition {_TP} )?from (?P<prev_isr>[\d,]*) to (?P<isr>[\d,]*)$"),
    _e(T.ISR_UPDATED, K.ISR_CHANGE,
       r"^ISR updated (?:from AlterIsr )?to \[?(?P<isr>[\d,]*)\]?\s+(?:\(under-min-isr\)\s+)?and (?:zkVersion|version) "
       r"updated to \[?(?P<zkv>-?\d+)\]?$"),
    _e(T.ISR_UPDATED, K.OTHER,
       r"^(?:ISR update in-flight, not (?:adding new in-sync replica|removing out-of-sync replicas) .*"
       r"|(?:Controller failed|Failed) to update ISR to .* due to unexpected .*|Failed to enqueue ISR change state .*)$"),
    # leader elections named with their outcome (0.8-1.0 controller.log) and preferred elections (all versions)
    _e(T.SELECTED_LEADER_AND_ISR, K.LEADER_ELECTED,
       rf"^Selected new leader and ISR (?P<state>\{{.*\}}|LeaderAndIsr\(.*\)) for offline partition {_TP}$", success=True),
    _e(T.NEW_LEADER_AND_ISR, K.ISR_REMOVAL,
       rf"^New leader and ISR for partition {_TP} is (?P<state>\{{.*\}}|LeaderAndIsr\(.*\))$", success=True),
    _e(T.UNCLEAN_LEADER_CHOSEN, K.UNCLEAN_LEADER_CHOSEN,
       rf"^No broker in ISR is alive for {_TP}\. Elect leader (?P<leader>-?\d+) from live brokers (?P<live>[\d,]*)\. "
       r"There's potential data loss\.$", success=True),
    _e(T.PREFERRED_LEADER_ELECTED, K.LEADER_ELECTED,
       rf"^Partition {_TP} completed preferred replica leader election\. New leader is (?P<leader>-?\d+)$", success=True),
    _e(T.PREFERRED_LEADER_NOT_ELECTED, K.OTHER,
       rf"^Partition {_TP} failed to complete preferred replica leader election(?: to (?P<preferred>\d+))?\.\s+"
       r"Leader is (?:still )?(?P<leader>-?\d+)$"),
    _e(T.LEADER_EPOCH_BUMPED, K.LEADER_EPOCH_BUMPED,
       rf"^Updated leader epoch for partition {_TP} to (?P<lep>\d+)(?:, zkVersion=(?P<zkv>-?\d+))?$", success=True),
    _e(T.RETAINING_LAST_ISR, K.OTHER,
       rf"^Retaining last ISR (?P<replica>\d+) of partition {_TP} since unclean leader election is disabled$"),
    _e(T.LEADER_ELECTION_STEP, K.OTHER,
       r"^(?:Current leader -?\d+ for partition \S+ is not the preferred replica\.\s+Trig+e?r+ing preferred replica "
       r"leader election|I should never have been asked to perform leader election, returning the current "
       r"LeaderAndIsr and replica assignment\.|Starting (?:preferred replica leader election|replica leader election "
       r"\(\w+\)) for partitions.*|Error completing (?:preferred replica leader election|replica leader election "
       r"\(\w+\)) for partitions? .*|Skipping (?:preferred replica (?:leader )?election|replica leader election "
       r"\(\w+\)) for partitions? .*|These partitions are already undergoing preferred replica election: .*"
       r"|Processing automatic preferred replica leader election|[Cc]hecking need to trigger (?:auto leader "
       r"balancing|partition rebalance)|[Ll]eader imbalance ratio for broker \d+ is .*|Topics not in preferred "
       r"replica.*|Unclean leader election has been enabled (?:by default|for topic \S+)|Retrying leader election "
       r"with strategy .* for partitions .*|starting the partition rebalance scheduler|Waiting for any successful "
       r"result for election type \(\w+\) by \w+ for partitions: .*)$", scan=True),
    # controller-side ISR changes on behalf of the brokers (AlterIsr/AlterPartition, ≤1.0 removal)
    _e(T.ISR_UPDATE_BY_CONTROLLER, K.OTHER,
       r"^(?:Cannot remove replica (?P<replica>\d+) from ISR of .*|Failed to update ISR (?:to \S+ )?for partition \S+"
       r"(?:, bad ZK version\.)?|(?:Ignoring|Rejecting) (?:AlterIsr|AlterPartition)\b.*"
       r"|Error when processing (?:AlterIsr|AlterPartition)\b.*)$", scan=True),
    # the controller writing a leader's AlterIsr (2.7+) / AlterPartition (3.2+) request to ZooKeeper (DEBUG)
    _e(T.ISR_UPDATE_BY_CONTROLLER, K.OTHER, r"^Updating ISRs for partitions: \w*Set\(.*\)\.?$"),
    _e(T.ISR_UPDATE_BY_CONTROLLER, K.OTHER,
       rf"^ISR for partition {_TP} updated to (?:(?P<state>LeaderAndIsr\(.*\))|\[(?P<isr>[\d,]*)\] and zkVersion "
       r"updated to \[(?P<zkv>-?\d+)\])\.?$"),
    # reassignment, topics, deletion
    _e(T.REASSIGNMENT_REQUEST, K.OTHER,
       rf"^{_CTRL}[Ss]ent LeaderAndIsr request (?P<state>.+?) with +new (?:assigned replica +list|replica assignment) "
       rf".+? to leader (?P<leader>-?\d+) +for partition being reassigned {_TP}$"),
    _e(T.REASSIGNMENT_REQUEST, K.OTHER,
       rf"^{_CTRL}[Ff]ailed to send LeaderAndIsr request with new (?:assigned replica +list|replica assignment) +.+? "
       rf"to leader for partition being reassigned {_TP}$", success=False),
    _e(T.REASSIGNMENT_STEP, K.OTHER,
       r"^(?:Leader -?\d+ for partition \S+ being reassigned, is (?:not in|already in) the new list of replicas .*"
       r"|\d+/\d+ replicas have caught up with the leader for +partition .*|(?:Handling|Error handling) reassignment of "
       r"partition .*|(?:New|Waiting for new) replicas .* for partition \S+ being +reassigned .*|Updated assigned "
       r"replicas for partition .*|Remov(?:ed|ing) partitions? .* from the list of reassigned partitions in zookeeper"
       r"|Skipping reassignment of .*|(?:Error|Failed) completing reassignment of partition .*|Successfully updated "
       r"assignment of partition .*|Target replicas .* have all caught up with the leader for +reassigning partition .*"
       r"|Partition \S+ to be reassigned is already assigned to replicas .*|Ignoring request to reassign partition .*"
       r"|Partitions (?:being|already) reassigned: .*|Resuming reassignment of partitions: .*|No more partitions need "
       r"to be reassigned\. Deleting zk path .*|Updated partition reassignment path with .*|Error while handling "
       r"partition reassignment|Failed reassignment through zk with the following errors: .*|Updating assignment of "
       r"partition \S+ from ReplicaAssignment\(.*\) to ReplicaAssignment\(.*\)|Updating leader epoch for partition \S+)$",
       scan=True),
    _e(T.TOPIC_CHANGE, K.OTHER,
       r"^(?:New topics: \[.*\], deleted topics: \[.*\], new partition replica assignment +\[.*\]|New (?:topic|partition) "
       r"creation callback for .*|New partitions to be added .*|Add Partition triggered .*|Partition modification "
       r"triggered .*|Skipping adding partitions .* since it is currently being deleted|Ignoring partition change "
       r"during topic deletion as no new partitions are added|Restoring the partition replica assignment for topic .*"
       r"|Invalid topic and partition JSON.*|Error while handling (?:new topic|add partitions for data path.*))$"),
    _e(T.TOPIC_DELETION_STEP, K.OTHER,
       r"^(?:List of topics (?:to be deleted|ineligible for deletion): .*|Starting topic deletion for topics .*"
       r"|Ignoring request to delete non-existing topics .*|Removing .* since delete topic is disabled|Initializing "
       r"manager with initial deletions: .*|Halted deletion of topics .*|Handling deletion for topics .*|Deletion of "
       r"topic \S+ (?:successfully completed|\(re\)started)|Some replicas .* for topics scheduled for deletion .*"
       r"|Delete topics listener fired for topics .* to be deleted|Delete topic callback invoked on StopReplica "
       r"response received from broker \d+: .*|Deletion successfully completed for replicas .*|Dead Replicas \(.*\) "
       r"found for topic \S+|Retrying deletion of topics .* since replicas .* were not successfully deleted"
       # ≤2.1 wordings
       r"|Deletion for replicas [\d,]+ for partition \S+ of topic \S+ in progress|(?:Partition|Topic) deletion callback for \S+"
       r"|Deletion started for replicas .*|Not retrying deletion of topic \S+ at this time since it is marked "
       r"ineligible for deletion|Delete topic callback invoked for StopReplicaResponse.*)$"),
    _e(T.MARK_REPLICAS_OFFLINE, K.OTHER, r"^Mark replicas (?P<replicas>.*) on broker (?P<broker>\d+) as offline$"),
    _e(T.STATE_MACHINE_STEP, K.OTHER,
       r"^(?:Invoking state change to \w+ for (?:partitions|replicas) ?.*|Initializing (?:partition|replica) state"
       r"|Triggering (?:online|offline) (?:partition|replica) state changes|Stopped (?:partition|replica) state "
       r"machine|Broker change listener fired for path .*|No state transitions triggered since no partitions are "
       r"assigned to brokers .*|All leaders = .*|Adding replica \(\d+\) that is not part of the assignment .*)$"),
    _e(T.STATE_CHANGE_ERROR, K.OTHER,
       r"^Error while moving some (?:partitions|replicas) to (?:the )?\w+ state$", success=False),
    # the controller's own life and its channels to the brokers
    _e(T.CONTROLLER_LIFECYCLE, K.OTHER,
       r"^(?:Controller startup complete|Controller has been shut down, aborting startup/failover|Starting the "
       r"controller scheduler|starting the token expiry check scheduler|Shutting down broker \d+|Removed .* from "
       r"list of shutting down brokers\.|Broker info update callback for \d+|Handling log directory failure for "
       r"brokers .*|Updated broker epochs cache: .*|Updated broker metadata: .*|Initialized controller epoch to \d+ "
       r"and zk version \d+|Incrementing controller epoch in ZooKeeper|Reading controller epoch from ZooKeeper"
       r"|Error while incrementing controller epoch|(?:Creating|Updating) FeatureZNode .*|FeatureZNode .*|A "
       r"controller has been elected but just resigned.*|Controller has already moved when trying to trigger "
       r"controller movement|(?:Uncaught error|Error) processing event .*|Ignoring registration of .*|Ignoring "
       r"AllocateProducerIds .*|Processing of feature updates: .*|Received a ShutdownEventThread event.*|Failed to "
       r"parse the controller info as json.*|Starting|Stopped|Shutting down|Shutdown completed|Shut down(?: "
       r"completely)?|Broker \d+ has been elected as the controller, so stopping the election process\.|Broker \d+ "
       r"was elected as controller instead of broker \d+|(?:Register|Unregister) BrokerModifications handler for .*"
       r"|All shutting down brokers: .*|Live brokers: .*|Read current producerId block .*|Acquired new producerId "
       r"block .*|There is no producerId block yet .*)\s*$"),
    _e(T.CHANNEL_STEP, K.OTHER,
       r"^(?:Controller \d+ (?:connected to .* for sending state change requests|trying to connect to broker \d+"
       r"|(?:epoch \d+ )?fails to send (?:a )?request.*)|Controller \d+'s connection to broker .* was unsuccessful"
       r"|shutdownInitiated latch count reached zero\. Shutdown called\.|Node -?\d+ "
       r"disconnected\.|Not sending request .*|Leader not yet assigned for partition \S+\. Skip sending "
       r"UpdateMetadataRequest\.|Haven't been able to send .*|Error while removing broker by the controller)$"),
    # controller -> broker requests, ≤0.11 wordings and per-replica StopReplica
    _e(T.REQUEST_SENT, K.REQUEST_SENT,
       rf"^{_CTRL}sending (?:become-leader|become-follower) LeaderAndIsr request (?P<state>.+?)(?: with correlationId "
       rf"\d+)? to broker \d+ +for partition {_TP}$"),
    _e(T.REQUEST_SENT, K.REQUEST_SENT,
       rf"^{_CTRL}sending UpdateMetadata request (?P<state>.+?)(?: with +correlationId \d+)? +to brokers? .+? "
       rf"for partition {_TP}$"),
    _e(T.REQUEST_SENT, K.REQUEST_SENT, rf"^Sending StopReplica request .+ to +broker \d+ for partition {_TP}$"),
    # ≤2.1: the StopReplica batch for one broker, every replica in one line
    _e(T.REQUEST_SENT_SUMMARY, K.OTHER,
       r"^(?:The stop replica request \(delete = (?:true|false)\) sent to broker \d+ is ?(?:\[Topic=[\w.-]+,"
       r"Partition=\d+,Replica=\d+\],?)*|Sending MetadataRequest to Brokers: .* for TopicPartitions: .*)$"),
    _e(T.RESPONSE_RECEIVED, K.OTHER,
       r"^(?:Controller \d+ epoch \d+ )?(?:[Rr]eceived response +.* for (?:a )?request .*sent to broker .*"
       r"|Received error (?:\S+ )?in (?:LeaderAndIsr|UpdateMetadata) +response .* from broker \d+)$"),
    # controller requests as the broker sees them (≤0.11 "Broker N ..." wordings, 2.4+ summaries)
    _e(T.STALE_CONTROLLER_EPOCH, K.STALE_CONTROLLER_REQUEST,
       rf"^{_BRK}[Rr]eceived (?P<req>stop replica|LeaderAndIsr) request(?: correlation id \d+)? (?:from|with) an old "
       r"controller epoch (?P<ep>\d+)\.\s+Latest known controller epoch is (?P<latest>\d+)\s*$", success=False),
    _e(T.REQUEST_RECEIVED, K.REQUEST_RECEIVED,
       rf"^{_BRK}[Rr]eceived (?:LeaderAndIsr|StopReplica|UpdateMetadata) request (?P<state>.+?) +correlation id \d+ "
       rf"from controller (?P<cid>\d+) +epoch (?P<ep>\d+)(?: for partition {_TP})?$"),
    _e(T.BROKER_IGNORED_REQUEST, K.OTHER,
       rf"^{_BRK}[Ii]gnoring (?:LeaderAndIsr|StopReplica|stop replica) (?:request )?.*$", scan=True),
    _e(T.LEADER_STARTS, K.LEADER_STARTED, rf"^{_BRK}completed become-leader transition for partition {_TP}$"),
    _e(T.FOLLOWER_STARTS, K.OTHER,
       rf"^Follower {_TP} starts at leader epoch (?P<lep>\d+) from +offset \d+.*?(?:Current leader is (?P<leader>-?\d+)"
       r"\..*)?$"),
    _e(T.BROKER_TRANSITION_STEP, K.OTHER,
       rf"^{_BRK}(?:[Hh]andl(?:ing|ed) LeaderAndIsr request correlation ?[Ii]d|[Cc]ompleted LeaderAndIsr request "
       r"correlationId|[Cc]ompleted the become-follower transition|[Rr]eceived LeaderAndIsr request correlationId"
       r"|[Ss]topped fetchers as part of|[Ss]tarted fetchers? (?:to new leader )?as part of|[Tt]runcated logs and "
       r"checkpointed recovery boundaries|[Ss]kipped the (?:adding-fetcher step|become-leader|become-follower|update "
       r"topic ID step)|[Hh]andling stop replica|[Ff]inished handling stop replica|Finished LeaderAndIsr request in"
       r"|Transitioning \d+ partition\(s\) to +local|Creating new partition|Expected partition .* to exist|Deleting "
       r"\d+ partition\(s\)|Updating log for|Updating PartitionFetchState|Unable to (?:start fetching|bring up new "
       r"local leader|delete (?:stray )?replica)|aborted the become-follower|discarded the become-(?:leader|follower) "
       r"request|ignored the become-follower state change|A ZooKeeper client exception has occurred|The topic "
       r"partition \S+ was marked as RECOVERING|Topic I[Dd] in memory|Error while processing LeaderAndIsr request"
       r"|While handling full LeaderAndIsr request|[Rr]eceived LeaderAndIsrRequest with correlation id|Handling "
       r"StopReplica request correlationId)\b.*$", scan=True),
    _e(T.METADATA_CACHE_UPDATE, K.OTHER,
       rf"^{_BRK}(?:[Cc]ached leader info .* in response to +UpdateMetadata request .*|[Dd]eleted partition .* from "
       r"metadata cache in response to +UpdateMetadata request .*|Add \d+ partitions and deleted \d+ partitions from "
       r"metadata cache +in response to UpdateMetadata request .*|Received UpdateMetadataRequest with Type=FULL.*)$",
       scan=True),
)

_SCAN_TP = re.compile(rf"\bpartition\s+{_TP}")
_SCAN_CONTROLLER = re.compile(r"\bcontroller\s+(?P<cid>\d+)\s+(?:with correlation id \d+\s+)?epoch\s+(?P<ep>\d+)")
_INT_GROUPS = {"leader": "leader", "lep": "leader_epoch", "replica": "replica"}


def _m_catalogue(msg: str, rec: ParsedRecord) -> bool:
    for entry in _CATALOGUE:
        m = entry.pattern.match(msg)
        if m is None:
            continue
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        if "tp" in groups and not _set_tp(rec, groups["tp"]):
            continue
        rec.kind, rec.template, rec.success = entry.kind, entry.template, entry.success
        if entry.scan:
            _scan_fields(msg, rec)
        _set_controller(rec, groups.get("cid"), groups.get("ep"))
        if "bid" in groups and rec.broker_id is None:
            rec.broker_id = int(groups["bid"])
        for name, col in _INT_GROUPS.items():
            if name in groups:
                setattr(rec, col, int(groups[name]))
        if "isr" in groups:
            rec.isr = _ints(groups["isr"])
        if "state" in groups:
            state = parse_leader_and_isr(groups["state"])
            if state:
                _apply_state(rec, state)
        for name in ("prev_isr", "live"):
            if name in groups:
                rec.extra[name] = _ints(groups[name])
        for name in ("zkv", "latest", "preferred", "broker"):
            if name in groups:
                rec.extra["zk_version" if name == "zkv" else name] = int(groups[name])
        if rec.kind is K.STALE_CONTROLLER_REQUEST:
            rec.extra["request"] = groups["req"].title().replace(" ", "") if " " in groups["req"] else groups["req"]
            rec.extra["latest_controller_epoch"] = rec.extra.pop("latest")
        return True
    return False


def _scan_fields(msg: str, rec: ParsedRecord) -> None:
    """The partition and the sending controller of a family template, wherever the wording puts them."""
    m = _SCAN_TP.search(msg)
    if m is not None and rec.topic is None:
        _set_tp(rec, m["tp"])
    m = _SCAN_CONTROLLER.search(msg)
    if m is not None:
        _set_controller(rec, m["cid"], m["ep"])


_MATCHERS = (
    _m_partition_changed,
    _m_replica_changed,
    _m_partition_failed,
    _m_replica_failed,
    _m_new_to_online_error,
    _m_invalid,
    _m_zombie,
    _m_isr_removal,
    _m_leader_events,
    _m_controller,
    _m_brokers,
    _m_requests,
    _m_zookeeper,
    _m_catalogue,
)


def parse_message(header: Header, line_no: int) -> ParsedRecord:
    """Build the record of one first line (pure)."""
    rec = ParsedRecord(line_no, header.ts, header.level, header.logger, K.OTHER, header.msg)
    body = strip_prefix(header.msg, rec)
    if not header.complete:
        return rec  # cut line: keep it as OTHER, extract nothing from the template part
    classify(body, rec)  # pre-1.0 "Controller N epoch E ..." is part of the templates themselves
    return rec


# ---------------------------------------------------------------- continuation causes


def refine_with_cause(rec: ParsedRecord, line: str) -> None:
    """A failure's cause arrives on the next line (the exception): sharpen the record's kind."""
    if rec.kind not in (K.PARTITION_TRANSITION_FAILED, K.REPLICA_TRANSITION_FAILED) or "cause" in rec.extra:
        return
    text = line.strip()
    if text.startswith("Caused by: "):
        text = text[len("Caused by: "):]
    probe = ParsedRecord(rec.line_no, None, None, None, K.OTHER, text)
    if _m_invalid(text, probe):
        rec.kind = K.INVALID_TRANSITION
        rec.extra["cause"] = "invalid transition"
        rec.extra["valid_previous"] = probe.extra["valid_previous"]
    elif _m_zombie(text, probe):
        rec.kind = K.ZOMBIE_ABORT
        rec.extra["cause"] = "soft failure"
        rec.extra["newer_controller_epoch"] = probe.extra["newer_controller_epoch"]
    elif "No assigned replica is alive" in text:
        rec.extra["cause"] = "no live replica"
        m = re.search(r"assigned replicas are \[([^\]]*)\]", text)
        if m:
            rec.extra["assigned_replicas"] = _ints(m.group(1))
    elif "Failed to elect leader for partition" in text:
        rec.extra["cause"] = "election failed"
        m = re.search(r"under strategy (\S+)$", text)
        if m:
            rec.extra["strategy"] = m.group(1)
    elif "LeaderAndIsr information doesn't exist" in text:
        rec.extra["cause"] = "no leader and isr"
    elif "KeeperErrorCode = NodeExists" in text:
        rec.extra["cause"] = "node exists"
    elif text and not text.startswith("at "):
        rec.extra["cause"] = text[:200]


# ---------------------------------------------------------------- the stateful line feeder


class LogParser:
    """Feeds lines in order; a record is emitted once the next record (or ``flush``) ends it."""

    def __init__(self) -> None:
        self._pending: ParsedRecord | None = None
        self._pending_line = ""  # the open record's first line, for its quarantine row
        self.stats: Counter[str] = Counter()

    @property
    def pending_line_no(self) -> int | None:
        """First line of the record still open (continuations may follow), if any."""
        return self._pending.line_no if self._pending else None

    def feed(self, line_no: int, line: str) -> list[ParsedRecord | RejectedLine]:
        line = line.rstrip("\r\n")
        out: list[ParsedRecord | RejectedLine] = []
        header = split_layout(line)
        if header is not None:
            out.extend(self.flush())
            self._pending = parse_message(header, line_no)
            self._pending_line = line
            self.stats["records"] += 1
            if not header.complete:
                self.stats["cut"] += 1
            return out
        if not line.strip():
            self.stats["blank"] += 1
        elif line.startswith("#"):
            self.stats["comment"] += 1  # excerpt annotations; Kafka never starts a line with '#'
        elif _CONTINUATION.match(line) or (self._pending is not None and not _BARE_LEVEL.search(line[:60])):
            self._continue(line)
        elif _BARE_LEVEL.search(line[:60]):
            out.extend(self.flush())
            level = _BARE_LEVEL.search(line[:60])
            reason = f"no recognisable layout ({level.group(1) if level else 'WARN'} line)"
            out.append(RejectedLine(line_no, line, reason))
            self.stats["quarantined"] += 1
        else:
            self.stats["noise"] += 1
        return out

    def _continue(self, line: str) -> None:
        rec = self._pending
        if rec is None:
            self.stats["orphan_continuation"] += 1
            return
        self.stats["continuation"] += 1
        refine_with_cause(rec, line)
        if len(rec.message) < MAX_MESSAGE_CHARS:
            rec.message = (rec.message + "\n" + line)[:MAX_MESSAGE_CHARS]

    def flush(self) -> list[ParsedRecord | RejectedLine]:
        """Close the open record (end of input, or before a new one)."""
        if self._pending is None:
            return []
        rec, self._pending = self._pending, None
        problem = int32_problem({name: getattr(rec, name) for name in _INT32_FIELDS})
        if problem is not None:  # not something Kafka logs, and it would not fit the table's int columns
            self.stats["quarantined"] += 1
            return [RejectedLine(rec.line_no, self._pending_line, problem)]
        return [rec]


_INT32_FIELDS = ("controller_id", "controller_epoch", "broker_id", "partition", "replica", "leader", "leader_epoch",
                 "isr")


def parse_lines(lines: Iterable[str], first_line_no: int = 1) -> tuple[list[ParsedRecord], list[RejectedLine], Counter[str]]:
    """Parse a whole text (convenience for tests and one-shot use)."""
    parser = LogParser()
    records: list[ParsedRecord] = []
    rejected: list[RejectedLine] = []
    items: list[ParsedRecord | RejectedLine] = []
    for i, line in enumerate(lines, start=first_line_no):
        items.extend(parser.feed(i, line))
    items.extend(parser.flush())
    for item in items:
        (records if isinstance(item, ParsedRecord) else rejected).append(item)  # type: ignore[arg-type]
    return records, rejected, parser.stats


# ---------------------------------------------------------------- the template census

_MENTIONS_METADATA = re.compile(r"(?i)\b(?:partitions?|leader|isr|epoch)\b|\bleader[A-Z]|[Ee]poch\b")


def mentions_metadata(text: str) -> bool:
    """Whether a message speaks of a partition, a leader, an ISR or an epoch (an unknown one must not)."""
    return _MENTIONS_METADATA.search(text) is not None


def classify_line(line: str) -> LogTemplate:
    """The template one log line was written from.

    ``CONTINUATION`` for a line without a log layout (it belongs to the record before it), ``CUT`` for a
    first line cut before its ``(logger)``, ``UNKNOWN`` for a well-formed record no template matches.
    """
    header = split_layout(line.rstrip("\r\n"))
    if header is None:
        return LogTemplate.CONTINUATION
    if not header.complete:
        return LogTemplate.CUT
    return parse_message(header, 0).template


@dataclass
class TemplateCensus:
    """Records of one text counted per template, with the unknown ones kept for reading."""

    counts: Counter[LogTemplate] = field(default_factory=Counter)
    unknown: list[tuple[int, str]] = field(default_factory=list)  # (line number, first line) of UNKNOWN records

    @property
    def records(self) -> int:
        return sum(n for t, n in self.counts.items() if t is not LogTemplate.CONTINUATION)

    @property
    def unknown_metadata(self) -> list[tuple[int, str]]:
        """The unknown records that mention a partition, leader, ISR or epoch: the census's gaps."""
        return [(n, line) for n, line in self.unknown if mentions_metadata(line)]

    def known_share(self) -> float:
        """Share of records (cut lines included) that matched a template; 1.0 for an empty text."""
        known = sum(n for t, n in self.counts.items() if t not in NOT_TEMPLATES)
        return known / self.records if self.records else 1.0

    def update(self, other: TemplateCensus) -> None:
        self.counts.update(other.counts)
        self.unknown.extend(other.unknown)


def census(lines: Iterable[str], first_line_no: int = 1) -> TemplateCensus:
    """Count every record of a log text per template (continuation lines are counted as CONTINUATION)."""
    out = TemplateCensus()
    for no, line in enumerate(lines, start=first_line_no):
        if not line.strip():
            continue
        template = classify_line(line)
        out.counts[template] += 1
        if template is LogTemplate.UNKNOWN:
            out.unknown.append((no, line.rstrip("\r\n")))
    return out
