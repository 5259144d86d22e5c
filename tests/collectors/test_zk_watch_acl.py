"""The watch collector meets a znode its user may not READ (Kafka with zookeeper.set.acl=true and a user
outside the ACL): one GAP naming it, the rest of the tree collected, retries backed off, no resync loop."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from collectors.zk_watch import ZkWatchCollector
from tests.collectors.conftest import rows, wait_for

pytestmark = pytest.mark.integration

ADMIN, ADMIN_PW = "kafka-admin", "admin-secret"
OTHER, OTHER_PW = "someone-else", "other-secret"


@pytest.mark.parametrize("batched", [True, False], ids=["multiRead", "per-znode"])
def test_an_unreadable_znode_is_one_gap_and_its_siblings_are_collected(zk_hosts: str, lake: Any,
                                                                       batched: bool) -> None:
    admin = KazooClient(hosts=zk_hosts, auth_data=[("digest", f"{ADMIN}:{ADMIN_PW}")])
    admin.start()
    try:
        admin.create("/brokers/topics/a", b"A", makepath=True)
        # only the admin may read this one (Kafka's ACL when the collector's user is not in it)
        admin.create("/brokers/topics/b", b"B", acl=[make_digest_acl(ADMIN, ADMIN_PW, all=True)])
        admin.create("/brokers/topics/c", b"C")
        admin.create("/brokers/topics/c/partitions/0/state", b"s0", makepath=True)
        admin.create("/controller", b"1")

        collector = ZkWatchCollector(lake, zk_hosts, auth_data=[("digest", f"{OTHER}:{OTHER_PW}")],
                                     flush_seconds=0.2)
        if not batched:
            collector.batched = False  # as on a server without multiRead
        collector.start()
        assert collector.batched is batched  # NoAuth inside a multiRead answer, or from a getData
        began, resyncs = time.monotonic(), collector.resyncs
        while time.monotonic() - began < 3.0:  # the live loop, as `collect zk` runs it
            collector.step(0.2)
        admin.set("/brokers/topics/c/partitions/0/state", b"s1")  # changes after it are still followed
        wait_for(lambda: rows(lake, path="/brokers/topics/c/partitions/0/state", op="SET"),
                 step=lambda: collector.step(0.2))
        summary = collector.summary()
        assert collector.resyncs == resyncs  # no resync loop: the ACL is no connection trouble
        collector.stop()

        gaps = rows(lake, op="GAP")
        assert [g["path"] for g in gaps] == ["/brokers/topics/b"]
        assert "not readable" in gaps[0]["detail"] and "NoAuthError" in gaps[0]["detail"]
        assert gaps[0]["zxid"] >= admin.exists("/brokers/topics/b").mzxid  # not before what it missed
        assert summary["gaps"] == 1
        created = {r["path"] for r in rows(lake, op="CREATE")}
        # the siblings after it, and what is under them, are collected
        assert {"/brokers/topics/a", "/brokers/topics/c", "/brokers/topics/c/partitions/0/state",
                "/controller"} <= created
        assert "/brokers/topics/b" not in created
        assert collector.unreadable["/brokers/topics/b"].due > time.monotonic() - 1  # a retry is scheduled
    finally:
        admin.stop()
        admin.close()


def test_an_unreadable_znode_is_retried_with_backoff_and_collected_once_readable(zk_hosts: str, lake: Any) -> None:
    admin = KazooClient(hosts=zk_hosts, auth_data=[("digest", f"{ADMIN}:{ADMIN_PW}")])
    admin.start()
    try:
        admin.create("/secret", b"x", acl=[make_digest_acl(ADMIN, ADMIN_PW, all=True)])
        collector = ZkWatchCollector(lake, zk_hosts, auth_data=[("digest", f"{OTHER}:{OTHER_PW}")],
                                     flush_seconds=0.2)
        collector.start()
        backoff = collector.unreadable["/secret"]
        backoff.due = 0.0  # as if the first delay had passed
        collector.step(0.1)
        assert backoff.failures == 2 and backoff.delay == 10.0  # doubled, and no second GAP
        assert len(rows(lake, op="GAP")) == 1
        admin.set_acls("/secret", [make_digest_acl(OTHER, OTHER_PW, read=True),
                                   make_digest_acl(ADMIN, ADMIN_PW, all=True)])
        backoff.due = 0.0
        collector.step(0.1)
        collector.stop()
        assert "/secret" not in collector.unreadable
        assert [r["data"] for r in rows(lake, path="/secret", op="CREATE")] == [b"x"]
    finally:
        admin.stop()
        admin.close()
