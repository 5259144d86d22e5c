"""What a lab's quarantine may hold besides nothing: the batches Raft wrote over offsets the KRaft collector had
already stored. A node's uncommitted tail is truncated when a newer leader's log differs (docs/kraft.md, "A node's
uncommitted tail"); elections on a loaded machine can cause it, and the collector reports it as it should."""

from __future__ import annotations

from typing import Any

from collectors.kraft_collect import QUARANTINE_SOURCE, REWRITTEN_TAIL


def unexplained(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The quarantine rows that are not a reported Raft rewrite of a collected tail."""
    return [r for r in rows if not (r["source"] == QUARANTINE_SOURCE and REWRITTEN_TAIL in r["reason"])]
