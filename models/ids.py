"""Deterministic row identities (the same input always yields the same id)."""

from __future__ import annotations

import functools
import hashlib


def event_id(*parts: object) -> str:
    """sha1 of the parts joined by U+001F, first 24 hex chars; None becomes the empty string."""
    joined = "\x1f".join("" if p is None else str(p) for p in parts)
    return hashlib.sha1(joined.encode("utf-8")).hexdigest()[:24]


def step_id(source_event_id: str, partition: int, machine: str, n: int) -> str:
    """Id of the n-th state machine step (``machine`` 'pt' or 'rt') caused by a metadata event on a partition.

    Composed, not hashed: a rebuild emits several steps per event and the source id is already unique (the
    partition keeps apart the steps of a topic deletion fanned out over its partitions).
    """
    return f"{source_event_id}/{partition}/{machine}{n}"


def metadata_event_id(cluster: str, zxid: int, path: str | None, op: str, seq: int) -> str:
    """Id of the seq-th metadata event decoded from a znode change: "{zxid}-{znode hash}-{seq}".

    No collector in it (the same change seen by two collectors has one id). The hash covers (cluster, path,
    op) only, so a batch hashes each distinct znode once instead of every change; zxid and seq make it unique.
    """
    return "-".join(("" if zxid is None else str(zxid), _znode_id(cluster, path, op), str(seq)))


@functools.lru_cache(maxsize=1 << 16)
def _znode_id(cluster: str, path: str | None, op: str) -> str:
    return event_id(cluster, "meta", path, op)


def episode_end_id(start_id: str) -> str:
    """Id of the row that ends an episode, from its start row's id: one end per start, in every run."""
    return event_id(start_id, "end")
