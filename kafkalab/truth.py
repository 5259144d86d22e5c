"""Ground truth from Kafka itself: every 0.5 s an Admin client asks each broker for its view of every partition
(leader, leader epoch, ISR, replicas) and of the controller, with the wall-clock time of the answers.

Each answer comes from that broker's metadata cache (a Metadata request), which the controller updates with
UpdateMetadata after it writes ZooKeeper. The caches converge but do not move together: one broker can trail the
others by seconds on a loaded machine. So a sample keeps, per partition, only what every answering broker agrees
on; a partition they disagree on is in flux at that moment, as is a sample taken while the controller's update is
still on its way, and `settled_points` keeps only the points whose neighbouring samples agree too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(frozen=True)
class PartitionView:
    leader: int
    leader_epoch: int | None
    isr: tuple[int, ...]  # sorted: the order of the ISR list carries no meaning
    replicas: tuple[int, ...]  # in assignment order: the first is the preferred leader


@dataclass(frozen=True)
class Answer:
    """One broker's view: the controller id and every non-internal partition, from one Metadata request."""

    broker: int
    controller_id: int | None
    partitions: dict[tuple[str, int], PartitionView]


@dataclass(frozen=True)
class Sample:
    """What the brokers that answered between `sent` and `received` (UTC) agreed on, keyed by (topic, partition).

    `disputed` holds the partitions they reported differently (or some did not report); `controller_agreed` is
    false when they named different controllers."""

    sent: datetime
    received: datetime
    controller_id: int | None
    partitions: dict[tuple[str, int], PartitionView]
    brokers: tuple[int, ...] = ()
    disputed: frozenset[tuple[str, int]] = frozenset()
    controller_agreed: bool = True

    @property
    def at(self) -> datetime:
        return self.sent + (self.received - self.sent) / 2

    @property
    def reported(self) -> set[tuple[str, int]]:
        """Every partition some broker reported, agreed or not."""
        return set(self.partitions) | set(self.disputed)


def agreed(sent: datetime, received: datetime, answers: list[Answer]) -> Sample:
    """The sample the answers make: per partition the view every answer holds; the rest disputed."""
    keys = set().union(*(a.partitions for a in answers)) if answers else set()
    partitions: dict[tuple[str, int], PartitionView] = {}
    disputed: set[tuple[str, int]] = set()
    for key in keys:
        views = {a.partitions.get(key) for a in answers}
        view = views.pop() if len(views) == 1 else None
        if view is not None:
            partitions[key] = view
        else:
            disputed.add(key)
    controllers = {a.controller_id for a in answers}
    one = len(controllers) == 1
    return Sample(sent, received, controllers.pop() if one else None, partitions,
                  tuple(sorted(a.broker for a in answers)), frozenset(disputed), one)


def admin_client(bootstrap: list[str], request_timeout_ms: int = 3000) -> Any:
    from kafka.admin import KafkaAdminClient

    # a broker down is part of every fault scenario: the client's reconnect errors are expected, not news
    logging.getLogger("kafka").setLevel(logging.CRITICAL)

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=request_timeout_ms,
                            client_id="kafkalab-truth", reconnect_backoff_max_ms=500)


def describe(admin: Any, broker: int) -> Answer:
    """One Metadata request to `broker`: the controller id and every partition as its cache holds them, so
    both come from the same broker at the same moment."""
    from kafka.protocol.metadata import MetadataRequest

    async def ask() -> Any:
        return await admin._manager.send(MetadataRequest(topics=None, allow_auto_topic_creation=False),
                                         node_id=broker, request_timeout_ms=1500)

    metadata = admin._manager.run(ask).to_dict()
    controller = metadata.get("controller_id")
    parts: dict[tuple[str, int], PartitionView] = {}
    for topic in metadata["topics"]:
        if topic.get("is_internal") or str(topic["name"]).startswith("__"):
            continue
        for p in topic["partitions"]:
            parts[(str(topic["name"]), int(p["partition_index"]))] = PartitionView(
                int(p["leader_id"]), p.get("leader_epoch"), tuple(sorted(p["isr_nodes"])),
                tuple(p["replica_nodes"]))
    return Answer(broker, None if controller is None or controller < 0 else int(controller), parts)


@dataclass
class GroundTruthRecorder:
    """Samples the cluster every `interval_s` on a thread until `stop()`: each of `broker_ids` is asked in turn;
    one that is down, paused or unknown to the client yet is left out of that sample."""

    bootstrap: list[str]
    broker_ids: list[int]
    interval_s: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    failures: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._asking = threading.Lock()  # the recorder's thread and a scenario's wait share one client
        self._admin: Any = None

    def start(self) -> GroundTruthRecorder:
        self._thread = threading.Thread(target=self._run, name="kafkalab-truth", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._close()

    def latest(self) -> Sample | None:
        with self._lock:
            return self.samples[-1] if self.samples else None

    def wait_sample_after(self, t: datetime, timeout_s: float = 30.0) -> Sample | None:
        """The first sample sent after `t` (None on timeout)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.latest()
            if s is not None and s.sent > t:
                return s
            time.sleep(0.1)
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def sample_once(self) -> Sample | None:
        with self._asking:
            sent = datetime.now(UTC)
            answers = self._ask_each()
            received = datetime.now(UTC)
        # a broker just started answers with an empty cache until the controller's first UpdateMetadata
        filled = [a for a in answers if a.partitions] or answers
        if not filled:
            self.failures += 1
            return None
        sample = agreed(sent, received, filled)
        with self._lock:
            self.samples.append(sample)
        return sample

    def _ask_each(self) -> list[Answer]:
        try:
            if self._admin is None:
                self._admin = admin_client(self.bootstrap)
            known = {b.node_id for b in self._admin._manager.cluster.brokers()}
            if not set(self.broker_ids) <= known:  # a broker back from a stop: learn its address
                self._admin._manager.run(self._admin._manager.cluster.refresh_metadata)
                known = {b.node_id for b in self._admin._manager.cluster.brokers()}
        except Exception:  # every broker down or paused: this sample is lost, the next one asks afresh
            log.debug("ground-truth client failed", exc_info=True)
            self._close()
            return []
        answers = []
        for broker in self.broker_ids:
            if broker not in known:
                continue
            try:
                answers.append(describe(self._admin, broker))
            except Exception:  # this broker is paused or gone: its answer is lost, the others still count
                log.debug("broker %d did not answer", broker, exc_info=True)
        return answers

    def _close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()


@dataclass(frozen=True)
class Point:
    """A recorded point where Kafka's answer for one partition (or the controller) was settled."""

    at: datetime
    key: tuple[str, int] | None  # None: the controller id
    view: PartitionView | int | None


def settled_points(samples: list[Sample]) -> tuple[list[Point], int]:
    """Every (sample, partition) and (sample, controller) whose neighbours report the same; and how many points
    were left out as in flux (a change between the neighbouring samples)."""
    points: list[Point] = []
    unsettled = 0
    for i in range(1, len(samples) - 1):
        before, now, after = samples[i - 1], samples[i], samples[i + 1]
        for key, view in now.partitions.items():
            if before.partitions.get(key) == view == after.partitions.get(key):
                points.append(Point(now.at, key, view))
            else:
                unsettled += 1
        agreed_all = before.controller_agreed and now.controller_agreed and after.controller_agreed
        if agreed_all and before.controller_id == now.controller_id == after.controller_id:
            points.append(Point(now.at, None, now.controller_id))
        else:
            unsettled += 1
    return points, unsettled
