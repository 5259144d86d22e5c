"""The watch collector as a read-only digest ACL user: it collects what it may read and can write nothing."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from collectors.zk_watch import ZkWatchCollector
from tests.collectors.conftest import rows, wait_for

pytestmark = pytest.mark.integration

ADMIN, ADMIN_PW = "kafka-admin", "admin-secret"
READER, READER_PW = "zkledger-ro", "ro-secret"


def test_read_only_digest_user_collects_and_cannot_write(zk_hosts: str, lake: Any) -> None:
    # the cluster's znodes are readable only by the admin (all) and the zkledger user (read): no world ACL
    acl = [make_digest_acl(ADMIN, ADMIN_PW, all=True), make_digest_acl(READER, READER_PW, read=True)]
    admin = KazooClient(hosts=zk_hosts, auth_data=[("digest", f"{ADMIN}:{ADMIN_PW}")])
    admin.start()
    reader = KazooClient(hosts=zk_hosts, auth_data=[("digest", f"{READER}:{READER_PW}")])
    reader.start()
    try:
        for path in ("/brokers", "/brokers/ids"):
            admin.create(path, b"", acl=acl)
        admin.create("/brokers/ids/1", b'{"version":4}', acl=acl)
        anonymous = KazooClient(hosts=zk_hosts)
        anonymous.start()
        try:
            with pytest.raises(NoAuthError):  # so what the collector reads below, it reads as that user
                anonymous.get("/brokers/ids/1")
        finally:
            anonymous.stop()

        collector = ZkWatchCollector(lake, zk_hosts, auth_data=[("digest", f"{READER}:{READER_PW}")],
                                     flush_seconds=0.2)
        collector.drain()
        admin.set("/brokers/ids/1", b'{"version":5}')
        wait_for(lambda: rows(lake, path="/brokers/ids/1", op="SET"), step=lambda: collector.step(0.2))
        collector.stop()

        created = rows(lake, path="/brokers/ids/1", op="CREATE")
        assert [r["data"] for r in created] == [b'{"version":4}']
        assert [r["data"] for r in rows(lake, path="/brokers/ids/1", op="SET")] == [b'{"version":5}']
        # the credentials the collector runs with cannot change anything
        with pytest.raises(NoAuthError):
            reader.set("/brokers/ids/1", b"tampered")
        with pytest.raises(NoAuthError):
            reader.create("/brokers/ids/2", b"x")
        assert admin.get("/brokers/ids/1")[0] == b'{"version":5}'
    finally:
        reader.stop()
        admin.stop()
