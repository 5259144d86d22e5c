"""Micro-batch cost: wall time of a micro-batch of 1, 100 and 10,000 events on a running monitor.

    python -m benchmarks.microbatch_cost [--partitions 10000] [--sizes 1,100,10000] [--repeats 5]

The monitor is ``engine.stateful.start_stateful_query`` with a processing-time trigger (``--trigger``, 1 s), the
shipped buckets and admission control, over a lake whose bronze ``znode_events`` already holds a cluster's
history: ``benchmarks.storm`` for --partitions partitions (RF 3), which the query absorbs in its first, large
micro-batch. Then, while it runs, the benchmark appends bronze commits of exactly N events each, every one a
legal continuation of that history: a partition-state SET that moves a partition's leader to the other member
of its ISR with the leader epoch bumped, round the partitions, so the fold, the transitions and the state
tables do real work. Each commit waits for the micro-batch that reads it. Two figures per micro-batch:

- trigger: the query's own ``durationMs.triggerExecution`` of the batch (``recentProgress``), which also checks
  that the batch read exactly N rows;
- end-to-end: from the bronze commit (delta-rs returned) to the batch being done (polled every --poll s): its
  files staged beside the checkpoint (the shipped monitor commits the tables other than the anomalies every
  ``monitor.table_commit_seconds``, ``--table-commit-seconds``), or with 0 its ``partition_state`` commit; it
  includes the wait for the next trigger (up to --trigger s).

It also counts the derived tables' Delta commits while measuring, the final commit of what is staged included,
per micro-batch.

Baseline, same run, same commits: the streaming floor (``benchmarks.streaming_floor``, run in this process and
session): Delta's streaming source over ``znode_events``, a filter, one Delta append per micro-batch in
``foreachBatch``, no state. It runs on a second lake holding the same history; each commit goes to the
stateful query's lake, then to the floor's, alternating, so drift of the machine hits both. Both queries stay
up for the whole run (the idle one polls its source once a second). Before measuring, --warmup-rounds of every
size run unmeasured. Reported: the median per size of each figure and the ratio stateful / floor.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import logging
import shlex
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import Timer, base_parser, build_session, machine, ratio, run_main, scratch

log = logging.getLogger(__name__)

NAME = "microbatch_cost"
REPO = Path(__file__).resolve().parent.parent
BROKERS = 6  # write_storm's default ring: the continuation must agree with it on each partition's replicas
WRITER = "bench-microbatch"
SOURCES = ("engine", "pipelines", "models", "lakehouse")  # what the query's driver and workers import


def continuation(cluster: str, partitions: int, first: int, n: int) -> pa.Table:
    """Bronze rows ``first`` .. ``first + n - 1`` after ``benchmarks.storm.write_storm``'s history.

    The storm leaves partition p led by b with ISR b,c (replicas a, b, c round a ring of BROKERS), leader epoch
    1, znode version 1, controller 2 with epoch 2. Row g writes partition ``g % partitions`` for the k-th time
    (k = g // partitions + 1): leader c when k is odd, b when even (always an ISR member: a clean election),
    leader epoch and version 1 + k; zxids follow the storm's last one. Deterministic, so both lakes get the same
    rows.
    """
    from simulator.offline import (
        T0_US,
        ZXID_BASE,
        hex_ids,
        id_messages,
        partition_paths,
        sha1_prefixes,
        state_payload_array,
    )

    g = np.arange(first, first + n, dtype=np.int64)
    part, k = g % partitions, g // partitions + 1
    a = part % BROKERS + 1
    b, c = a % BROKERS + 1, (a + 1) % BROKERS + 1
    isr = pc.binary_join_element_wise(pc.cast(pa.array(b), pa.string()), pc.cast(pa.array(c), pa.string()), ",")
    zxid = ZXID_BASE + 2 * partitions + 2 + g  # the storm's commits end at ZXID_BASE + 2 * partitions + 1
    paths = partition_paths(partitions).take(pa.array(part))
    ops = pa.array(["SET"] * n, pa.string())
    when = pa.array(T0_US + (zxid - ZXID_BASE) * 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.table({
        "zxid": zxid, "path": paths, "op": ops,
        "data": state_payload_array(np.where(k % 2 == 1, c, b), 1 + k, np.full(n, 2), isr),
        "version": pa.array(1 + k, pa.int32()), "czxid": ZXID_BASE + 2 + part, "mzxid": zxid, "txn_time": when,
        "source": pa.array(["txnlog"] * n, pa.string()), "observed_at": when,
        "event_id": hex_ids(sha1_prefixes(id_messages(cluster, zxid, paths, ops))),
    })


STAGED_KEY = "staged"


def _log_version(log_dir: Path) -> int:
    """The newest commit in a ``_delta_log`` (-1: none yet)."""
    if not log_dir.is_dir():
        return -1
    return max((int(p.stem) for p in log_dir.glob("*.json") if p.stem.isdigit()), default=-1)


@dataclass
class Monitored:
    """A running query, the lake it reads and the ``_delta_log``s of the tables it commits to."""

    name: str
    lake: Any
    query: Any
    logs: list[Path]
    done_markers: frozenset[str]  # a batch is done when one of these is visible: a table's commit, or "staged"
    staged: Path | None = None  # the folder of the sink's staged batches (table_commit_s > 0)
    done_batch: int = -1  # the last batch id accounted for
    seq: int = 0  # batch_seq of the next bronze commit

    def versions(self) -> dict[Path, int]:
        return {d: _log_version(d) for d in self.logs}

    def staged_entries(self) -> set[str]:
        return {p.name for p in self.staged.glob("*.json")} if self.staged is not None and self.staged.is_dir() else set()

    def commits(self, table: str | None = None) -> int:
        """Delta commits so far, of ``table`` or of every watched table."""
        return sum(_log_version(d) + 1 for d in self.logs if table is None or d.parent.name == table)


def _new_batches(m: Monitored) -> list[dict[str, Any]]:
    """Progress of the batches with input finished since ``m.done_batch`` (recentProgress read only when the
    last one moved: it parses up to 100 JSON documents)."""
    if not m.query.isActive:
        raise RuntimeError(f"the {m.name} query stopped: {m.query.exception()}")
    last = m.query.lastProgress
    if last is None or last["batchId"] <= m.done_batch:
        return []
    return [p for p in m.query.recentProgress if p["batchId"] > m.done_batch and p["numInputRows"] > 0]


def await_rows(m: Monitored, rows: int, versions: dict[Path, int], poll_s: float, timeout_s: float) -> dict[str, Any]:
    """Wait until ``m``'s query has finished micro-batches reading ``rows`` bronze rows (committed just
    before); the batches' progress and when each watched table's commit after ``versions`` (and a new staged
    batch) became visible."""
    start = time.perf_counter()
    staged_before = m.staged_entries()
    visible: dict[str, float] = {}
    batches: dict[int, dict[str, Any]] = {}
    tick = 0
    while sum(int(p["numInputRows"]) for p in batches.values()) < rows:
        now = time.perf_counter() - start
        for d, v in versions.items():
            if d.parent.name not in visible and (d / f"{v + 1:020d}.json").exists():
                visible[d.parent.name] = now
        if m.staged is not None and STAGED_KEY not in visible and m.staged_entries() - staged_before:
            visible[STAGED_KEY] = now
        if tick % 10 == 0:  # progress over py4j: less often than the file checks
            batches.update((p["batchId"], p) for p in _new_batches(m))
        if now > timeout_s:
            raise TimeoutError(f"{m.name}: {rows} rows not processed within {timeout_s:.0f} s")
        tick += 1
        time.sleep(poll_s)
    end = time.perf_counter() - start
    for d, v in versions.items():  # a commit landed between the last check and the progress
        if d.parent.name not in visible and (d / f"{v + 1:020d}.json").exists():
            visible[d.parent.name] = end
    m.done_batch = max(batches)
    got = [batches[b] for b in sorted(batches)]
    done = [s for k, s in visible.items() if k in m.done_markers]
    return {"batch_ids": sorted(batches), "input_rows": sum(int(p["numInputRows"]) for p in got),
            "trigger_s": round(sum(p["durationMs"]["triggerExecution"] for p in got) / 1000, 3),
            "end_to_end_s": round(min(done), 3) if done else None,
            "first_visible_s": round(min(visible.values()), 3) if visible else None,
            "visible_s": {t: round(s, 3) for t, s in sorted(visible.items(), key=lambda kv: kv[1])},
            "duration_ms": [p["durationMs"] for p in got]}


def commit_and_wait(m: Monitored, rows: pa.Table, args: argparse.Namespace) -> dict[str, Any]:
    """One bronze commit of ``rows`` into ``m``'s lake, then the micro-batch that reads it."""
    from models.tables import ZNODE_EVENTS

    versions = m.versions()
    t0 = time.perf_counter()
    m.lake.append(ZNODE_EVENTS.name, rows, writer_id=WRITER, batch_seq=m.seq)
    appended = time.perf_counter() - t0
    m.seq += 1
    step = await_rows(m, rows.num_rows, versions, args.poll, args.timeout)
    if step["input_rows"] != rows.num_rows or len(step["batch_ids"]) != 1:
        log.warning("%s: %d rows came in %d batches (%d rows)", m.name, rows.num_rows, len(step["batch_ids"]),
                    step["input_rows"])
    return {"events": rows.num_rows, "bronze_commit_s": round(appended, 3), **step}


def start_floor(spark: Any, lake: Any, trigger: float, others: set[str]) -> tuple[Any, threading.Thread]:
    """``benchmarks.streaming_floor`` as it is, in a thread of this process: its ``build_spark`` returns this
    session, so its query shows in ``spark.streams`` (stopping that query ends its ``main``)."""
    from benchmarks import streaming_floor

    failed: list[BaseException] = []

    def floor_main() -> None:
        try:
            streaming_floor.main(["--lake", lake.root, "--trigger", str(trigger)])
        except BaseException as e:  # reported by the caller, not lost in the thread
            failed.append(e)

    thread = threading.Thread(target=floor_main, name="streaming-floor", daemon=True)
    thread.start()
    until = time.monotonic() + 300
    while time.monotonic() < until:
        started = [q for q in spark.streams.active if str(q.id) not in others]
        if started:
            return started[0], thread
        if failed or not thread.is_alive():
            raise RuntimeError(f"the streaming floor did not start: {failed[0] if failed else 'main returned'}")
        time.sleep(0.2)
    raise TimeoutError("the streaming floor did not start within 300 s")


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def source_state() -> dict[str, Any]:
    """The commit, what ``git status`` shows modified in the code the query runs, and a hash of it: it may
    change under a run (the query's Python workers import it from disk when they start)."""
    digest = hashlib.sha1()
    for path in sorted(p for d in SOURCES for p in (REPO / d).rglob("*.py")):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return {"commit": _git("log", "-1", "--format=%h"),
            "engine_status": _git("status", "--porcelain", "--", "engine").splitlines(),
            "other_status": _git("status", "--porcelain", "--", *SOURCES[1:]).splitlines(),
            "sources_sha1": digest.hexdigest()[:12]}


def _median(steps: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in steps if s[key] is not None]
    return round(statistics.median(values), 3) if values else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.storm import write_storm
    from benchmarks.streaming_floor import FLOOR_TABLE
    from conf.settings import load_settings
    from engine.stateful import checkpoint_buckets, finish_stateful_query, start_stateful_query
    from engine.stateful_sink import DERIVED
    from lakehouse import Lake
    from lakehouse.files import STAGED_DIR
    from models.tables import ANOMALIES, PARTITION_STATE

    sizes = [int(s) for s in args.sizes.split(",")]
    settings = load_settings()
    buckets = args.buckets or settings.pipeline.buckets
    table_commit_s = (args.table_commit_seconds if args.table_commit_seconds is not None
                      else settings.monitor.table_commit_seconds)
    source_before = source_state()
    started_at = datetime.now(UTC)
    t = Timer()
    with scratch(args) as work:
        lakes = {name: Lake(work / name, cluster="bench") for name in ("stateful", "floor")}
        with t.phase("generate"):
            base = write_storm(lakes["stateful"], args.partitions, BROKERS)
            write_storm(lakes["floor"], args.partitions, BROKERS)  # the same history
        with t.phase("spark_start"):
            spark = build_session("bench-microbatch-cost")
        with t.phase("stateful_base"):  # the first, large micro-batch: the history
            query = start_stateful_query(spark, lakes["stateful"], work / "ckpt-stateful", buckets=buckets,
                                         processing_time=f"{args.trigger} seconds",
                                         max_files_per_trigger=settings.streaming.max_files_per_trigger,
                                         table_commit_s=table_commit_s)
            cluster_buckets = checkpoint_buckets(lakes["stateful"], work / "ckpt-stateful", buckets).of("bench")
            stateful = Monitored("stateful", lakes["stateful"], query,
                                 [Path(lakes["stateful"].table_path(s.name)) / "_delta_log" for s in DERIVED],
                                 frozenset({STAGED_KEY, PARTITION_STATE.name}),
                                 work / "ckpt-stateful" / STAGED_DIR if table_commit_s > 0 else None)
            stateful_base = await_rows(stateful, base, stateful.versions(), args.poll, args.timeout)
        with t.phase("floor_base"):
            floor_query, floor_thread = start_floor(spark, lakes["floor"], args.trigger, {str(query.id)})
            floor = Monitored("floor", lakes["floor"], floor_query, [work / "floor" / FLOOR_TABLE / "_delta_log"],
                              frozenset({FLOOR_TABLE}))
            floor_base = await_rows(floor, base, floor.versions(), args.poll, args.timeout)
        offset = 0
        measured: dict[str, list[dict[str, Any]]] = {"stateful": [], "floor": []}
        commits_before = anomalies_before = 0
        try:
            with t.phase("steps"):
                for round_no in range(args.warmup_rounds + args.repeats):
                    if round_no == args.warmup_rounds:
                        commits_before, anomalies_before = stateful.commits(), stateful.commits(ANOMALIES.name)
                    for n in sizes:  # sizes interleaved, each commit to both queries in turn: drift hits all
                        rows = continuation("bench", args.partitions, offset, n)
                        offset += n
                        for m in (stateful, floor):
                            step = commit_and_wait(m, rows, args) | {"round": round_no}
                            if round_no >= args.warmup_rounds:
                                measured[m.name].append(step)
                            log.info("%s round %d, %d events: trigger %.2f s, end-to-end %s s", m.name, round_no, n,
                                     step["trigger_s"], step["end_to_end_s"])
        finally:
            for q in (query, floor_query):
                q.stop()
            finish_stateful_query(query)  # what the stateful sink staged: its commits count too
            floor_thread.join(timeout=60)
        batches = sum(len(step["batch_ids"]) for step in measured["stateful"])
        anomaly_commits = stateful.commits(ANOMALIES.name) - anomalies_before
        other_commits = stateful.commits() - commits_before - anomaly_commits
        commits = {"micro_batches": batches, "anomalies": anomaly_commits, "other_tables": other_commits,
                   "other_tables_per_micro_batch": round(other_commits / max(batches, 1), 2)}
        anomalies = lakes["stateful"].row_count(ANOMALIES.name)
        spark.stop()
    source_after = source_state()
    wall = round(sum(t.wall.values()), 1)
    return report(args, sizes, base, measured, {"stateful": stateful_base, "floor": floor_base}, anomalies,
                  {"started_at": started_at.isoformat(timespec="seconds"), "wall_s": t.wall, "total_s": wall,
                   "buckets": buckets, "cluster_buckets": cluster_buckets, "source_before": source_before, "source_after": source_after,
                   "table_commit_s": table_commit_s, "commits": commits})


def report(args: argparse.Namespace, sizes: list[int], base: int, measured: dict[str, list[dict[str, Any]]],
           bases: dict[str, dict[str, Any]], anomalies: int, info: dict[str, Any]) -> dict[str, Any]:
    """Medians per size and query, the ratios, the summary table and the result JSON."""
    medians: dict[str, dict[str, Any]] = {}
    for n in sizes:
        per = {name: {"trigger_s": _median([s for s in steps if s["events"] == n], "trigger_s"),
                      "end_to_end_s": _median([s for s in steps if s["events"] == n], "end_to_end_s")}
               for name, steps in measured.items()}
        per["ratio"] = {k: ratio(per["stateful"][k] or 0, per["floor"][k] or 0) for k in ("trigger_s", "end_to_end_s")}
        medians[str(n)] = per
    before, after = info["source_before"], info["source_after"]
    changed = before["sources_sha1"] != after["sources_sha1"]
    def cell(x: float | None, unit: str) -> str:
        return f"{x:.2f}{unit}" if x is not None else "-"

    header = "events | stateful: trigger, end-to-end | floor: trigger, end-to-end | ratio: trigger, end-to-end"
    table = [f"{int(n):,} | {cell(m['stateful']['trigger_s'], ' s')}, {cell(m['stateful']['end_to_end_s'], ' s')} | "
             f"{cell(m['floor']['trigger_s'], ' s')}, {cell(m['floor']['end_to_end_s'], ' s')} | "
             f"{cell(m['ratio']['trigger_s'], 'x')}, {cell(m['ratio']['end_to_end_s'], 'x')}" for n, m in medians.items()]
    summary = [
        f"base: benchmarks.storm, {args.partitions:,} partitions (RF 3), {base:,} bronze events; absorbed in "
        f"{bases['stateful']['trigger_s']} s (stateful) and {bases['floor']['trigger_s']} s (floor)",
        f"monitor: engine.stateful.start_stateful_query, {info['cluster_buckets']} buckets (the checkpoint's layout, "
        f"at most {info['buckets']}), trigger {args.trigger} s, "
        f"tables other than the anomalies committed every {info['table_commit_s']} s; "
        f"floor: benchmarks.streaming_floor; {args.repeats} commits per size after {args.warmup_rounds} warm-up "
        f"round(s); medians (trigger: the batch's durationMs.triggerExecution; end-to-end: bronze commit -> "
        f"the batch done: its files staged, or partition_state's commit visible)",
        header, *table,
        f"Delta commits while measuring {info['commits']['micro_batches']} micro-batches: "
        f"{info['commits']['anomalies']} of the anomalies (in their micro-batch), "
        f"{info['commits']['other_tables']} of the other derived tables (every {info['table_commit_s']} s and at "
        f"the end: {info['commits']['other_tables_per_micro_batch']} per micro-batch)",
        f"anomalies written by the stateful query: {anomalies}; git {before['commit']}"
        + (f" (at the end {after['commit']})" if after["commit"] != before["commit"] else "")
        + f"; engine/ modified: {before['engine_status'] or 'no'} at start, {after['engine_status'] or 'no'} at end; "
        f"also modified in {', '.join(SOURCES[1:])}: {len(before['other_status'])} files at start, "
        f"{len(after['other_status'])} at end"
        + ("; their code CHANGED during the run" if changed else ""),
        f"run took {info['total_s']:.0f} s",
    ]
    return {
        "benchmark": NAME, "command": f"python -m benchmarks.{NAME} {shlex.join(sys.argv[1:])}".strip(),
        "date": info["started_at"], "machine": machine(),
        "versions": {"delta_spark": importlib.metadata.version("delta-spark")},
        "git": {"before": before, "after": after, "sources_changed_during_run": changed},
        "params": {"partitions": args.partitions, "brokers": BROKERS, "sizes": sizes, "repeats": args.repeats,
                   "warmup_rounds": args.warmup_rounds, "trigger_s": args.trigger, "buckets": info["buckets"],
                   "poll_s": args.poll},
        "base_events": base, "base_batch": bases, "medians": medians, "steps": measured,
        "anomalies": anomalies, "wall_s": info["wall_s"], "total_s": info["total_s"], "summary": summary,
        "table_commit_s": info["table_commit_s"], "commits": info["commits"],
    }


def parser() -> argparse.ArgumentParser:
    p = base_parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--partitions", type=int, default=10_000,
                   help="partitions of the base history (default 10,000: a 10,000-event commit moves every leader once)")
    p.add_argument("--sizes", default="1,100,10000", help="events per bronze commit, comma-separated (default 1,100,10000)")
    p.add_argument("--repeats", type=int, default=5, help="measured commits per size (default 5)")
    p.add_argument("--warmup-rounds", type=int, default=1, help="unmeasured rounds of every size first (default 1)")
    p.add_argument("--trigger", type=float, default=1.0, help="processing-time trigger of both queries, s (default 1)")
    p.add_argument("--buckets", type=int, default=None, help="stateful key buckets (default: settings pipeline.buckets)")
    p.add_argument("--table-commit-seconds", type=float, default=None,
                   help="commit the tables other than the anomalies this often, s (default: settings "
                        "monitor.table_commit_seconds; 0 = in every micro-batch)")
    p.add_argument("--poll", type=float, default=0.02, help="_delta_log poll interval, s (default 0.02)")
    p.add_argument("--timeout", type=float, default=900.0, help="max seconds for one micro-batch (default 900)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main(NAME, parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
