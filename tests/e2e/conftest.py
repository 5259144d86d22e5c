"""The played scenario lakes (session fixture `runs`) and the helpers the differential suite runs them with:
bronze cut into time chunks, fed into a fresh lake, and the monitor run as a real `zkledger monitor` process."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from engine.stateful import WRITER_FILE, stateful_checkpoint
from models.tables import CONTROLLER_DECISIONS, ZNODE_EVENTS
from pipelines.decode import decode_table, split_decoded
from tests.e2e.scenario_lakes import Run, play_all

# the bronze tables a run of the pipeline reads
BRONZE = (ZNODE_EVENTS.name, CONTROLLER_DECISIONS.name)
Chunk = list[tuple[str, pa.Table]]


@pytest.fixture(scope="session")
def runs(zk_server: Any, tmp_path_factory: pytest.TempPathFactory,
         takes_minutes: None) -> Iterator[dict[tuple[str, str], Run]]:
    """Every built-in scenario played, collected and rebuilt once per worker (`tests/e2e/scenario_lakes.py`)."""
    yield play_all(zk_server, tmp_path_factory.mktemp("e2e"))


def bronze(lake: Any) -> dict[str, pa.Table]:
    """A lake's bronze tables (empty ones left out)."""
    return {t: lake.read_arrow(t) for t in BRONZE if lake.exists(t) and lake.row_count(t)}


def _window(col: Any, lo: Any, hi: Any) -> Any:
    """lo <= col < hi (open ends when None); rows without a time go to the first window."""
    keep = pc.is_valid(col) if lo is None else pc.fill_null(pc.greater_equal(col, lo), False)
    if hi is not None:
        keep = pc.and_(keep, pc.fill_null(pc.less(col, hi), False))
    return pc.or_(keep, pc.is_null(col)) if lo is None else keep


def time_chunks(tables: dict[str, pa.Table], chunks: int, seed: int | None = None) -> list[Chunk]:
    """Bronze cut into ``chunks`` slices at the same instants for both tables (txn time, else when a watch saw
    it; a decision's log time), as collectors keeping up would deliver them. The cuts fall at even row counts
    of znode_events, or at random rows when ``seed`` is given."""
    z = tables[ZNODE_EVENTS.name]
    z = z.append_column("_t", pc.coalesce(z["txn_time"], z["observed_at"]))
    times = sorted(t for t in z["_t"].to_pylist() if t is not None)
    at = (sorted(random.Random(seed).sample(range(1, len(times)), chunks - 1)) if seed is not None
          else [len(times) * i // chunks for i in range(1, chunks)])
    cuts = [times[i] for i in at]
    stamped = {ZNODE_EVENTS.name: (z, "_t")}
    if CONTROLLER_DECISIONS.name in tables:
        stamped[CONTROLLER_DECISIONS.name] = (tables[CONTROLLER_DECISIONS.name], "ts")
    out: list[Chunk] = []
    lo = None
    for hi in [*cuts, None]:
        out.append([(name, t.filter(_window(t[col], lo, hi)).drop_columns(["_t"] if col == "_t" else []))
                    for name, (t, col) in stamped.items()])
        lo = hi
    for name, (t, _col) in stamped.items():  # nothing lost, nothing twice
        assert sum(part.num_rows for c in out for n, part in c if n == name) == t.num_rows, name
    return out


def decisions_ahead(chunks: list[Chunk]) -> list[Chunk]:
    """``chunks`` with each chunk's controller decisions delivered one chunk early (the log collector ahead of
    ZooKeeper's): a decision then arrives before the write it reports. The first chunk brings its own and the
    second's."""
    def rows(chunk: Chunk, name: str) -> list[pa.Table]:
        return [t for n, t in chunk if n == name]

    out: list[Chunk] = []
    for i, chunk in enumerate(chunks):
        logged = (rows(chunk, CONTROLLER_DECISIONS.name) if i == 0 else []) + \
            (rows(chunks[i + 1], CONTROLLER_DECISIONS.name) if i + 1 < len(chunks) else [])
        out.append([(ZNODE_EVENTS.name, t) for t in rows(chunk, ZNODE_EVENTS.name)]
                   + ([(CONTROLLER_DECISIONS.name, pa.concat_tables(logged))] if logged else []))
    for name in (ZNODE_EVENTS.name, CONTROLLER_DECISIONS.name):  # nothing lost, nothing twice
        assert sum(t.num_rows for c in out for n, t in c if n == name) == \
            sum(t.num_rows for c in chunks for n, t in c if n == name), name
    return out


def early_decisions(steps: list[Chunk]) -> int:
    """How many logged (leader, epoch) decisions arrive in a step before the first write of it."""
    first: dict[tuple[Any, ...], int] = {}
    for i, chunk in enumerate(steps):
        for name, rows in chunk:
            if name == ZNODE_EVENTS.name:
                for r in split_decoded(decode_table(rows))[0].filter(pc.is_valid(pc.field("leader_epoch"))).to_pylist():
                    first.setdefault((r["topic"], r["partition"], r["leader"], r["leader_epoch"]), i)
    return sum(1 for i, chunk in enumerate(steps) for name, rows in chunk if name == CONTROLLER_DECISIONS.name
               for r in rows.to_pylist() if r["leader_epoch"] is not None
               and first.get((r["topic"], r["partition"], r["leader"], r["leader_epoch"]), -1) > i)


def feed(lake: Any, chunk: Sequence[tuple[str, pa.Table]], seq: int) -> None:
    """Append a chunk's non-empty tables to ``lake``, one commit per table, as the collectors would."""
    for table, rows in chunk:
        if rows.num_rows:
            lake.append(table, rows, writer_id=f"copy-{table}", batch_seq=seq)


def monitor_cmd(lake: Any, conf: Path, *extra: str) -> list[str]:
    """`zkledger monitor` on ``lake`` as its own process (to be killed for real), with the settings ``conf``."""
    return [sys.executable, "-m", "zkledger.cli", "--conf", str(conf), "--lake", str(lake.root), "--cluster",
            lake.cluster, "monitor", *extra]


def run_monitor(lake: Any, conf: Path, *extra: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    """The monitor process run to its end, or killed by the lake's crash hook at ``crash`` (``CRASH_ENV``)."""
    from lakehouse.lake import CRASH_ENV

    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash is not None:
        env[CRASH_ENV] = crash
    return subprocess.run(monitor_cmd(lake, conf, *extra), capture_output=True, text=True, timeout=900, env=env)


def monitor_writer(lake: Any) -> str | None:
    """The app-transaction writer of the checkpoint `zkledger monitor` uses on ``lake`` (None: not started yet)."""
    path = Path(stateful_checkpoint(None, str(lake.root))) / WRITER_FILE
    return path.read_text().strip() if path.exists() else None
