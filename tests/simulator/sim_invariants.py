"""Pure-Python checks of a written znode history: decode with models.znode_codec, fold, invariants (docs/invariants.md).

Shared by the simulator tests (module name kept unique: tests/ folders are not packages). The fold
(models.reference_fold.project_metadata) finds illegal state-machine steps; `invariant_breaks` adds the znode-history
invariants of docs/invariants.md that the fold does not look at.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from models import znode_codec as zc
from models.events import MetadataEvent, MetadataEventType, ZnodeChange, ZnodeOp
from models.reference_fold import MetadataProjection, project_metadata

T = MetadataEventType


def decode_rows(rows: Iterable[tuple[int, str, str, bytes | None, int | None]], kafka_version: str) -> list[MetadataEvent]:
    """(zxid, path, op, data, version) rows -> metadata events, in zxid order."""
    events: list[MetadataEvent] = []
    for zxid, path, op, data, version in sorted(rows, key=lambda r: r[0]):
        events += zc.decode(ZnodeChange(zxid=zxid, path=path, op=ZnodeOp(op), data=data, version=version), kafka_version)
    return events


def fold(events: Sequence[MetadataEvent], kafka_version: str) -> MetadataProjection:
    return project_metadata(events, kafka_version)


@dataclass
class _Partition:
    replicas: tuple[int, ...] = ()
    leader: int | None = None
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    zk_version: int | None = None


@dataclass
class _World:
    live: set[int] = field(default_factory=set)
    epoch: int | None = None
    parts: dict[tuple[str, int], _Partition] = field(default_factory=dict)
    breaks: list[str] = field(default_factory=list)


def invariant_breaks(events: Sequence[MetadataEvent]) -> list[str]:
    """Every invariant break (and every offline write) in a decoded history, one readable line each."""
    w = _World()
    for e in events:
        if e.type is T.BROKER_REGISTERED and e.broker is not None:
            w.live.add(e.broker)
        elif e.type is T.BROKER_DEREGISTERED and e.broker is not None:
            w.live.discard(e.broker)
        elif e.type is T.CONTROLLER_EPOCH_CHANGED and e.controller_epoch is not None:
            if w.epoch is not None and e.controller_epoch != w.epoch + 1:  # controller-epoch-rises
                w.breaks.append(f"zxid {e.zxid}: controller epoch {w.epoch} -> {e.controller_epoch}")
            w.epoch = e.controller_epoch
        elif e.type is T.PARTITION_ASSIGNED and e.topic is not None and e.partition is not None:
            w.parts.setdefault((e.topic, e.partition), _Partition()).replicas = e.replicas or ()
        elif e.type is T.PARTITION_STATE_WRITTEN:
            _check_state_write(w, e)
    return w.breaks


def _check_state_write(w: _World, e: MetadataEvent) -> None:
    assert e.topic is not None and e.partition is not None and e.leader is not None and e.leader_epoch is not None
    where = f"zxid {e.zxid} {e.topic}-{e.partition}"
    bad = w.breaks
    p = w.parts.get((e.topic, e.partition))
    if p is None or not p.replicas:  # state-under-topic
        bad.append(f"{where}: state written without an assignment")
        p = w.parts.setdefault((e.topic, e.partition), _Partition())
    isr = e.isr or ()
    if e.leader == -1:
        bad.append(f"{where}: offline (leader -1)")
    elif e.leader not in isr:  # consistent-leader-and-isr
        bad.append(f"{where}: leader {e.leader} not in isr {isr}")
    if e.leader >= 0 and e.leader not in w.live:  # consistent-leader-and-isr
        bad.append(f"{where}: leader {e.leader} not registered (live {sorted(w.live)})")
    if not isr or len(set(isr)) != len(isr) or not set(isr) <= set(p.replicas):  # consistent-leader-and-isr, clean-election
        bad.append(f"{where}: isr {isr} empty, duplicated or outside replicas {p.replicas}")
    if e.leader_epoch < p.leader_epoch:  # leader-epoch-rises
        bad.append(f"{where}: leader epoch {p.leader_epoch} -> {e.leader_epoch}")
    if p.leader is not None and e.leader != p.leader:
        if e.leader_epoch <= p.leader_epoch:  # leader-epoch-rises: a leader change bumps it
            bad.append(f"{where}: leader {p.leader} -> {e.leader} at the same epoch {e.leader_epoch}")
        if e.leader >= 0 and e.leader not in p.isr:  # clean-election: it picks from the previous ISR
            bad.append(f"{where}: unclean election of {e.leader} (previous isr {p.isr})")
    if e.controller_epoch is not None and w.epoch is not None and e.controller_epoch > w.epoch:  # current-controller-writes
        bad.append(f"{where}: controller epoch {e.controller_epoch} ahead of /controller_epoch {w.epoch}")
    if (w.epoch is not None and e.controller_epoch is not None and e.controller_epoch < w.epoch
            and p.leader_epoch >= 0 and e.leader_epoch > p.leader_epoch):  # current-controller-writes: zombie
        bad.append(f"{where}: leader epoch bumped at old controller epoch {e.controller_epoch} < {w.epoch}")
    if e.zk_version is not None and p.zk_version is not None and e.zk_version != p.zk_version + 1:  # leader-epoch-rises
        bad.append(f"{where}: zkVersion {p.zk_version} -> {e.zk_version}")
    p.leader, p.leader_epoch, p.isr, p.zk_version = e.leader, e.leader_epoch, isr, e.zk_version
