"""A migrating cluster's metadata at a point in time: which store answers then, and what it holds.

Before the KRaft controller has loaded ZooKeeper's metadata the cluster's truth is ZooKeeper; once the migration
is finalized it is the log; in between both stores hold it (the log leads, ZooKeeper follows it), so both are
shown. The views are the ones ``models.migration`` compares (``ZkReplay``, ``KraftReplay``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from models.migration import (
    KraftReplay,
    MigrationHistory,
    MigrationPhase,
    Store,
    StoreView,
    ZkReplay,
    phase_at,
    phase_timeline,
)

P = MigrationPhase
ANSWERING: dict[MigrationPhase, tuple[Store, ...]] = {
    P.ZOOKEEPER: (Store.ZOOKEEPER,),  # before the migration, or rolled back to ZooKeeper
    P.PRE_MIGRATION: (Store.ZOOKEEPER,),  # the quorum runs, its log holds no metadata yet
    P.LOADING: (Store.ZOOKEEPER, Store.KRAFT),
    P.DUAL_WRITE: (Store.ZOOKEEPER, Store.KRAFT),
    P.KRAFT_BROKERS: (Store.ZOOKEEPER, Store.KRAFT),
    P.FINALIZED: (Store.KRAFT,),  # ZooKeeper is no longer written
}
"""The stores that hold the cluster's metadata in each phase, the leading one last."""


@dataclass(frozen=True)
class MigrationState:
    """The cluster at ``at``: its migration phase and the view of each store that answers then."""

    at: datetime
    phase: MigrationPhase
    views: dict[Store, StoreView]


def is_migration(history: MigrationHistory) -> bool:
    """Whether the history holds a migration at all (a phase beyond ZooKeeper mode)."""
    return bool(phase_timeline(history))


def migration_state_at(history: MigrationHistory, at: datetime) -> MigrationState:
    """Each answering store's view as of ``at``: ZooKeeper after every change it stamped no later than ``at``,
    the log after every record of a batch appended no later than ``at``."""
    phase = phase_at(phase_timeline(history), at)
    views: dict[Store, StoreView] = {}
    for store in ANSWERING[phase]:
        if store is Store.ZOOKEEPER:
            zk = ZkReplay(history.zk)
            zk.advance_to_time(at)
            views[store] = zk.view()
        else:
            kraft = KraftReplay(history.kraft)
            reached = [e.offset for e in history.kraft if e.at is None or e.at <= at]
            kraft.advance(max(reached, default=-1))
            views[store] = kraft.view()
    return MigrationState(at, phase, views)
