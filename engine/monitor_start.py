"""Where a monitor starts: from nothing, from its own checkpoint, or where the last `rebuild` ended.

Each derived-table commit names its writer, and a rebuild's names the bronze versions it read
(``engine.writes``). So:

- a new monitor on a rebuilt lake streams only the bronze versions after the rebuild's, from its state;
- a monitor whose checkpoint predates a later rebuild must not continue (it would re-add what the rebuild
  already holds): it stops with a message saying how to continue from the rebuild;
- derived tables written by a monitor whose checkpoint is gone cannot be continued: rebuild first.

A new checkpoint gets a sidecar file with its batch-number base (the monitor's Delta app transactions keep
increasing across checkpoints) and the bronze versions it started after.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from engine.increment import DERIVED_TABLES
from engine.writes import BRONZE_VERSIONS_KEY, MONITOR_WRITER, REBUILD_WRITER, WRITER_KEY
from models.tables import PARTITION_STATE
from zkledger.errors import UserError

if TYPE_CHECKING:
    from lakehouse import Lake

log = logging.getLogger(__name__)

SIDECAR = "zkledger-monitor.json"
STATE_TABLE = PARTITION_STATE.name  # written last by both writers: its newest commit says who wrote last


@dataclass(frozen=True)
class MonitorStart:
    """How a monitor's micro-batches map onto the lake."""

    batch_base: int = 0  # micro-batch id + base = the monitor's app-transaction version (batch_seq)
    after_versions: dict[str, int] | None = None  # bronze versions already in the derived tables (a rebuild's)
    state_version: int | None = None  # partition_state's Delta version when the checkpoint was created


def plan_monitor_start(lake: Lake, checkpoint_dir: str) -> MonitorStart:
    """The start of a monitor with this checkpoint on this lake (writes the sidecar of a new checkpoint)."""
    last = _last_state_commit(lake)
    if _checkpoint_started(checkpoint_dir):
        start = _read_sidecar(checkpoint_dir)
        if last is not None and last.get(WRITER_KEY) == REBUILD_WRITER and (
                start.state_version is None or int(last["version"]) > start.state_version):
            raise UserError(
                f"the derived tables were rebuilt after this monitor's checkpoint {checkpoint_dir}; continuing "
                f"it would add again what the rebuild holds. To continue from the rebuild, move that folder "
                f"away and start the monitor again")
        return start
    start = _new_start(lake, last)
    os.makedirs(checkpoint_dir, exist_ok=True)
    with open(os.path.join(checkpoint_dir, SIDECAR), "w", encoding="utf-8") as f:
        json.dump(asdict(start), f, sort_keys=True)
    log.info("new monitor checkpoint %s: %s", checkpoint_dir, start)
    return start


def _new_start(lake: Lake, last: dict[str, Any] | None) -> MonitorStart:
    base = max((s for t in DERIVED_TABLES if (s := _seq(lake, t)) is not None), default=-1) + 1
    version = lake.version(STATE_TABLE)
    writer = None if last is None else last.get(WRITER_KEY)
    if writer == REBUILD_WRITER and BRONZE_VERSIONS_KEY in (last or {}):
        versions = {str(k): int(v) for k, v in json.loads(str(last[BRONZE_VERSIONS_KEY])).items()}  # type: ignore[index]
        log.info("continuing from the rebuild at %s version %s (bronze %s)", STATE_TABLE, version, versions)
        return MonitorStart(base, versions, version)
    if writer is not None or any(_written(lake, t) for t in DERIVED_TABLES):  # e.g. a rebuild killed midway
        raise UserError(
            "the derived tables already hold a pipeline's output that this new monitor checkpoint cannot "
            "continue (its checkpoint is gone, or an older rebuild did not record what it read): run "
            "`zkledger rebuild`, then start the monitor again (it continues where the rebuild ended)")
    return MonitorStart(base, None, version)


def _written(lake: Lake, table: str) -> bool:
    """``table`` holds a commit of the monitor or of a rebuild."""
    return lake.exists(table) and (_seq(lake, table) is not None
                                   or lake.last_batch_seq(table, REBUILD_WRITER) is not None)


def _seq(lake: Lake, table: str) -> int | None:
    return lake.last_batch_seq(table, MONITOR_WRITER) if lake.exists(table) else None


def _last_state_commit(lake: Lake) -> dict[str, Any] | None:
    """The newest data commit of the state table (None: no table or only its creation)."""
    if not lake.exists(STATE_TABLE):
        return None
    newest = lake.history(STATE_TABLE, limit=1)
    if not newest or str(newest[0].get("operation", "")).upper().startswith("CREATE"):
        return None
    return newest[0]


def _checkpoint_started(checkpoint_dir: str) -> bool:
    """Spark has planned at least one micro-batch with this checkpoint."""
    offsets = os.path.join(checkpoint_dir, "offsets")
    return os.path.isdir(offsets) and any(not n.startswith(".") for n in os.listdir(offsets))


def _read_sidecar(checkpoint_dir: str) -> MonitorStart:
    try:
        with open(os.path.join(checkpoint_dir, SIDECAR), encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:  # a checkpoint from before sidecars: batch ids were the app versions
        return MonitorStart()
    return MonitorStart(int(raw.get("batch_base", 0)), raw.get("after_versions"), raw.get("state_version"))
