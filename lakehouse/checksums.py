"""Version checksum files (``_delta_log/<version>.crc``) for the commits delta-rs writes.

Delta's connector builds a snapshot's protocol and metadata from the version's checksum file when there is one,
and otherwise runs a Spark job over the log to find those two rows. A streaming query on a table delta-rs writes
to (bronze, the sink's tables) builds a new snapshot in every micro-batch's ``latestOffset``, so without checksum
files every micro-batch pays that job. Delta's connector writes checksums for its own commits; these are ours.

A checksum holds the table's size and file count, its protocol and its metadata, each taken verbatim from the log.
Version ``v``'s checksum is version ``v - 1``'s plus commit ``v``'s actions, or the state a checkpoint at ``v``
records, or (``v`` = 0) commit 0 alone. Where the chain is broken (a commit written by a process that stopped
before its checksum, a remove without a size) no checksum is written, and readers fall back to the log until the
next checkpoint starts a new chain: a missing checksum costs time, a wrong one would break readers. The content is
a function of the log alone, so two writers writing the same version's checksum write the same bytes.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
MAX_WALK_BACK = 100
"""How many versions back a writer looks for a checksum or checkpoint to start from (one stat per version)."""
IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
"""With in-commit timestamps a checksum must carry the commit's timestamp too: such tables get none from us."""


@dataclass
class TableChecksum:
    """What a version's checksum file says: Delta's ``VersionChecksum`` fields that we can know exactly."""

    table_size_bytes: int = 0
    num_files: int = 0
    metadata: dict[str, Any] | None = None
    protocol: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps({"tableSizeBytes": self.table_size_bytes, "numFiles": self.num_files, "numMetadata": 1,
                           "numProtocol": 1, "metadata": self.metadata, "protocol": self.protocol},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TableChecksum:
        d = json.loads(text)
        return cls(int(d["tableSizeBytes"]), int(d["numFiles"]), d["metadata"], d["protocol"])

    def apply(self, actions: list[dict[str, Any]]) -> bool:
        """Apply one commit's actions; False when the result cannot be known exactly (a remove without a size)."""
        for action in actions:
            if "add" in action:
                self.table_size_bytes += int(action["add"]["size"])
                self.num_files += 1
            elif "remove" in action:
                size = action["remove"].get("size")
                if size is None:
                    return False
                self.table_size_bytes -= int(size)
                self.num_files -= 1
            elif "metaData" in action:
                self.metadata = action["metaData"]
            elif "protocol" in action:
                self.protocol = action["protocol"]
        return self.num_files >= 0 and self.table_size_bytes >= 0

    @property
    def complete(self) -> bool:
        if self.metadata is None or self.protocol is None:
            return False
        return str((self.metadata.get("configuration") or {}).get(IN_COMMIT_TIMESTAMPS, "false")).lower() != "true"


def checksum_path(table_path: str | os.PathLike[str], version: int) -> Path:
    return Path(table_path) / LOG_DIR / f"{version:020d}.crc"


def commit_path(table_path: str | os.PathLike[str], version: int) -> Path:
    return Path(table_path) / LOG_DIR / f"{version:020d}.json"


def _read_commit(table_path: str | os.PathLike[str], version: int) -> list[dict[str, Any]] | None:
    try:
        text = commit_path(table_path, version).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _read_checksum(table_path: str | os.PathLike[str], version: int) -> TableChecksum | None:
    try:
        return TableChecksum.from_json(checksum_path(table_path, version).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as e:  # not ours, or damaged: start elsewhere
        log.warning("checksum of version %d unreadable (%s); not extended from it", version, e)
        return None


def _checkpoint_version(table_path: str | os.PathLike[str]) -> int | None:
    try:
        info = json.loads((Path(table_path) / LOG_DIR / LAST_CHECKPOINT).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    if info.get("parts"):
        return None  # multi-part checkpoints: not written by delta-rs, not read here
    return int(info["version"])


def _from_checkpoint(table_path: str | os.PathLike[str], version: int) -> TableChecksum | None:
    path = Path(table_path) / LOG_DIR / f"{version:020d}.checkpoint.parquet"
    try:
        table = pq.read_table(path, columns=["add", "metaData", "protocol"])
    except (FileNotFoundError, OSError, KeyError, ValueError) as e:
        log.warning("checkpoint of version %d unreadable for a checksum (%s)", version, e)
        return None
    state = TableChecksum()
    for add in table.column("add").to_pylist():
        if add is not None:
            state.table_size_bytes += int(add["size"])
            state.num_files += 1
    for meta in table.column("metaData").to_pylist():
        if meta is not None:
            state.metadata = _metadata_json(meta)
    for protocol in table.column("protocol").to_pylist():
        if protocol is not None:
            state.protocol = {k: v for k, v in protocol.items() if v is not None}
    return state


def _metadata_json(meta: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's metaData struct as the log's JSON action (maps come back from Parquet as key-value pairs)."""
    out = {k: v for k, v in meta.items() if v is not None}
    fmt = dict(out.get("format") or {})
    fmt["options"] = dict(fmt.get("options") or [])
    out["format"] = fmt
    out["configuration"] = dict(out.get("configuration") or [])
    out["partitionColumns"] = list(out.get("partitionColumns") or [])
    return out


def _base(table_path: str | os.PathLike[str], version: int) -> tuple[int, TableChecksum, bool] | None:
    """The newest version at or below ``version`` whose state is known: (version, state, whether that version's
    checksum file is still to be written)."""
    checkpoint = _checkpoint_version(table_path)
    for v in range(version, max(version - MAX_WALK_BACK, -2), -1):
        if v == -1:
            return -1, TableChecksum(), False
        state = _read_checksum(table_path, v)
        if state is not None:
            return v, state, False
        if v == checkpoint:
            state = _from_checkpoint(table_path, v)
            if state is not None:
                return v, state, True
    return None


def write_checksums(table_path: str | os.PathLike[str], version: int) -> int:
    """Write the checksum files of the versions up to ``version`` that follow a known state; returns how many
    were written (0 when ``version`` has one already or its chain is broken). Never raises: the commit it follows
    is done, and a checksum only saves readers time."""
    try:
        return _write_checksums(table_path, version)
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("%s: no checksum for version %d (%s)", table_path, version, e)
        return 0


def _write_checksums(table_path: str | os.PathLike[str], version: int) -> int:
    if checksum_path(table_path, version).exists():
        return 0
    base = _base(table_path, version)
    if base is None:
        return 0
    start, state, write_start = base
    written = 0
    if write_start and state.complete:
        _write_atomically(checksum_path(table_path, start), state.to_json())
        written += 1
    for v in range(start + 1, version + 1):
        actions = _read_commit(table_path, v)
        if actions is None or not state.apply(actions) or not state.complete:
            return written
        _write_atomically(checksum_path(table_path, v), state.to_json())
        written += 1
    return written


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["TableChecksum", "checksum_path", "commit_path", "write_checksums"]
