"""Helpers for the collector tests: kazoo clients on a test chroot, reading znode_events back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[KazooClient]:
    """A kazoo client inside the test's chroot (the writer the collectors observe)."""
    client = KazooClient(hosts=zk_hosts, timeout=15)
    client.start(timeout=15)
    yield client
    if client.connected:
        client.stop()
    client.close()


def chroot_of(zk_hosts: str) -> str:
    return "/" + zk_hosts.split("/", 1)[1]


def rows(lake: Any, **where: Any) -> list[dict[str, Any]]:
    if not lake.exists("znode_events"):
        return []
    out = lake.read_arrow("znode_events").to_pylist()
    return [r for r in out if all(r[k] == v for k, v in where.items())]


def wait_for(cond: Callable[[], Any], limit: float = 30.0, step: Callable[[], Any] | None = None) -> Any:
    """Poll until cond() is truthy (raises AssertionError after ``limit``); not a timing assertion."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if step is not None:
            step()
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError("condition not met in time")
