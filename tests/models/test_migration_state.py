"""`models.migration_state`: which store answers for a migrating cluster at a time, and what it holds (the
synthetic histories of tests/models/test_migration.py; on real brokers: tests/kafkalab/test_migration_lab.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from models.migration import MigrationHistory, MigrationPhase, Store, phase_timeline
from models.migration_state import ANSWERING, is_migration, migration_state_at
from tests.models.test_migration import Cluster, finalize, migrated, zookeeper_cluster

P = MigrationPhase


def starts(history: MigrationHistory) -> dict[MigrationPhase, datetime]:
    return {c.phase: c.at for c in phase_timeline(history) if c.at is not None}


def test_a_zookeeper_cluster_is_no_migration() -> None:
    c = Cluster()
    zookeeper_cluster(c)
    assert not is_migration(c.history())


def test_zookeeper_answers_before_both_during_and_kraft_once_finalized() -> None:
    c = migrated()
    finalize(c)
    history = c.history()
    at = starts(history)
    before = migration_state_at(history, at[P.PRE_MIGRATION] - timedelta(milliseconds=1))
    assert (before.phase, set(before.views)) == (P.ZOOKEEPER, {Store.ZOOKEEPER})
    assert before.views[Store.ZOOKEEPER].partitions
    during = migration_state_at(history, at[P.KRAFT_BROKERS])
    assert (during.phase, set(during.views)) == (P.KRAFT_BROKERS, {Store.ZOOKEEPER, Store.KRAFT})
    assert during.views[Store.ZOOKEEPER].partitions == during.views[Store.KRAFT].partitions
    after = migration_state_at(history, at[P.FINALIZED])
    assert (after.phase, set(after.views)) == (P.FINALIZED, {Store.KRAFT})
    assert after.views[Store.KRAFT].position == history.last_offset


def test_every_phase_has_its_answering_stores() -> None:
    assert set(ANSWERING) == set(MigrationPhase)
    assert all(stores for stores in ANSWERING.values())
