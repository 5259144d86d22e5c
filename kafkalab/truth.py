"""Ground truth from Kafka itself: an Admin client samples every partition's leader, leader epoch, ISR and
replicas, and the controller id, with the wall-clock time of each answer.

The answers come from a broker's metadata cache (Metadata and DescribeCluster requests), which the controller
updates right after it writes ZooKeeper; a sample taken in that short window still shows the previous state,
so `settled_points` keeps only the points where the neighbouring samples agree.
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
class Sample:
    """One answer: taken between `sent` and `received` (UTC), keyed by (topic, partition)."""

    sent: datetime
    received: datetime
    controller_id: int | None
    partitions: dict[tuple[str, int], PartitionView]

    @property
    def at(self) -> datetime:
        return self.sent + (self.received - self.sent) / 2


def admin_client(bootstrap: list[str], request_timeout_ms: int = 3000) -> Any:
    from kafka.admin import KafkaAdminClient

    # a broker down is part of every fault scenario: the client's reconnect errors are expected, not news
    logging.getLogger("kafka").setLevel(logging.CRITICAL)

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=request_timeout_ms,
                            client_id="kafkalab-truth", reconnect_backoff_max_ms=500)


def describe(admin: Any) -> tuple[int | None, dict[tuple[str, int], PartitionView]]:
    """The controller id and every non-internal partition as the answering broker sees them: one Metadata
    request, so both come from the same broker at the same moment."""
    metadata = admin._manager.run(admin._get_cluster_metadata, None)  # the describe_* calls' own request
    controller = metadata.get("controller_id")
    parts: dict[tuple[str, int], PartitionView] = {}
    for topic in metadata["topics"]:
        if topic.get("is_internal") or str(topic["name"]).startswith("__"):
            continue
        for p in topic["partitions"]:
            parts[(str(topic["name"]), int(p["partition_index"]))] = PartitionView(
                int(p["leader_id"]), p.get("leader_epoch"), tuple(sorted(p["isr_nodes"])),
                tuple(p["replica_nodes"]))
    return (None if controller is None or controller < 0 else int(controller)), parts


@dataclass
class GroundTruthRecorder:
    """Samples the cluster every `interval_s` on a thread until `stop()`."""

    bootstrap: list[str]
    interval_s: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    failures: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
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
        sent = datetime.now(UTC)
        try:
            if self._admin is None:
                self._admin = admin_client(self.bootstrap)
            controller, parts = describe(self._admin)
        except Exception:  # a broker paused or gone: that answer is lost, the next one is asked afresh
            log.debug("ground-truth sample failed", exc_info=True)
            self.failures += 1
            self._close()
            return None
        sample = Sample(sent, datetime.now(UTC), controller, parts)
        with self._lock:
            self.samples.append(sample)
        return sample

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
        if before.controller_id == now.controller_id == after.controller_id:
            points.append(Point(now.at, None, now.controller_id))
        else:
            unsettled += 1
    return points, unsettled
