"""The domain model's error tree.

Raised only where a caller asks for strictness (decoding a payload, strict folds, batch
validation). In the streaming fold an illegal step is a *row* (a ``models.fold.FoldStep`` with
``legal`` False), never an exception, as Kafka 1.1+ logs and skips invalid transitions.
"""

from __future__ import annotations


class MetadataModelError(Exception):
    """Base of every error the pure domain model raises."""


class MalformedZnodeError(MetadataModelError):
    """A znode payload that Kafka could not have written (bad JSON, wrong type, missing key, leader -2...).

    Collectors catch it and send the raw bytes to the ``quarantine`` table with ``reason``.
    """

    def __init__(self, path: str, zxid: int | None, reason: str) -> None:
        super().__init__(f"{path} @zxid {zxid}: {reason}")
        self.path = path
        self.zxid = zxid
        self.reason = reason

    def __reduce__(self) -> tuple[type[MalformedZnodeError], tuple[str, int | None, str]]:
        # keep it picklable with its fields (Spark ships exceptions between processes)
        return (MalformedZnodeError, (self.path, self.zxid, self.reason))


class IllegalTransitionError(MetadataModelError):
    """A state-machine step whose previous state is not a valid previous state of its target (strict mode)."""

    def __init__(self, kind: str, from_state: str, to_state: str, cause: str | None = None) -> None:
        super().__init__(f"illegal {kind} transition {from_state} -> {to_state} (cause: {cause})")
        self.kind = kind
        self.from_state = from_state
        self.to_state = to_state
        self.cause = cause

    def __reduce__(self) -> tuple[type[IllegalTransitionError], tuple[str, str, str, str | None]]:
        return (IllegalTransitionError, (self.kind, self.from_state, self.to_state, self.cause))


class OutOfOrderEventError(MetadataModelError):
    """Events handed to a fold out of zxid order (the fold needs them sorted by zxid)."""

    def __init__(self, previous_zxid: int, zxid: int) -> None:
        super().__init__(f"event zxid {zxid} after zxid {previous_zxid}: events must be sorted by zxid")
        self.previous_zxid = previous_zxid
        self.zxid = zxid

    def __reduce__(self) -> tuple[type[OutOfOrderEventError], tuple[int, int]]:
        return (OutOfOrderEventError, (self.previous_zxid, self.zxid))
