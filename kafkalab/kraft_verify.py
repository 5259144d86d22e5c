"""The ground truth and the comparison of `kafkalab.truth` / `kafkalab.verify`, adapted to a KRaft cluster.

- A KRaft broker's Metadata answer names a random live broker as the controller (clients cannot reach the
  controllers), so the controller of each sample is the quorum's leader as DescribeQuorum reports it; the
  partitions are every broker's Metadata answer, agreed as for a ZooKeeper-mode cluster.
- A KRaft broker answers a leaderless partition with its leader epoch and ISR, as 2.8+ do (`KRAFT_VIEW`).
- The controllers' own record of their elections is each node's controller.log line "Becoming the active
  controller at epoch N" (`logged_elections`), where ZooKeeper-mode brokers log "successfully elected".
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafkalab.cluster import KafkaLine
from kafkalab.truth import GroundTruthRecorder, Sample, agreed

log = logging.getLogger(__name__)

KRAFT_VIEW = KafkaLine("4.1", "4.1.1", "kafka-4.1", fences_zk_writes=True, admin_elections=True,
                       admin_reassignments=True, admin_assignments=True, isr_via_notifications=False,
                       leaderless_detail=True, state_change_level="INFO")
"""How a KRaft broker answers Metadata, in the terms `verify.compare_state` takes: like a 2.8+ line's."""

# "[QuorumController id=2] Becoming the active controller at epoch 7, next write offset 1234."
_ACTIVE = re.compile(r"\[QuorumController id=(\d+)\] Becoming the active controller at epoch (\d+)")


@dataclass
class KRaftTruthRecorder(GroundTruthRecorder):
    """`GroundTruthRecorder` whose samples name the quorum's leader (DescribeQuorum) as the controller; a sample
    whose DescribeQuorum fails has no agreed controller (it is not a settled point for the controller)."""

    def sample_once(self) -> Sample | None:
        with self._asking:
            sent = datetime.now(UTC)
            answers = self._ask_each()
            leader = self._quorum_leader()
            received = datetime.now(UTC)
        filled = [a for a in answers if a.partitions] or answers
        if not filled:
            self.failures += 1
            return None
        sample = replace(agreed(sent, received, filled), controller_id=leader, controller_agreed=leader is not None)
        with self._lock:
            self.samples.append(sample)
        return sample

    def _quorum_leader(self) -> int | None:
        if self._admin is None:
            return None
        try:
            part = self._admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
        except Exception:  # the quorum is electing, or the asked broker is going: no answer this time
            log.debug("DescribeQuorum failed", exc_info=True)
            return None
        leader = int(part.get("leader_id", -1))
        return leader if leader >= 0 else None


def logged_elections(logs_root: Path) -> set[tuple[int, int]]:
    """(controller id, epoch) of every "Becoming the active controller" line in the nodes' controller.log."""
    found: set[tuple[int, int]] = set()
    for path in sorted(logs_root.glob("node-*/controller.log*")):
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                if m := _ACTIVE.search(line):
                    found.add((int(m.group(1)), int(m.group(2))))
    return found


def tenures(rows: list[dict[str, Any]]) -> set[tuple[int, int]]:
    """(controller id, epoch) of zkledger's controller tenures (a KRaft history's are `source` "zk" too: the
    same timeline replay made them)."""
    return {(int(r["controller_id"]), int(r["controller_epoch"])) for r in rows
            if r.get("controller_id") is not None and r.get("controller_epoch") is not None}
