"""Deterministic row identities (the same input always yields the same id)."""

from __future__ import annotations

import hashlib


def event_id(*parts: object) -> str:
    """sha1 of the parts joined by U+001F, first 24 hex chars; None becomes the empty string."""
    joined = "\x1f".join("" if p is None else str(p) for p in parts)
    return hashlib.sha1(joined.encode("utf-8")).hexdigest()[:24]
