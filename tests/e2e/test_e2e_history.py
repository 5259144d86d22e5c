"""End to end: the znode history the collectors recorded is exactly the one the simulator wrote, per scenario.

Reads the session's `runs` (tests/e2e/scenario_lakes.py: every built-in scenario played on a real ZooKeeper with
the watch collector on, then the transaction log and Kafka logs collected into one lake per run).
The transaction log is lossless, so its CREATE/SET/MULTI_FAILED rows are compared with the simulator's writes as
equal multisets; DELETEs are a subset check (the simulator records an ephemeral's delete when it closes the
session, the log also has the teardown's session closes). The watch collector may miss changes between two
reads, but only ones it reports (missed_versions, a GAP on the path or above it), and it must end on the txnlog's tree.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.e2e.scenario_lakes import RUN_IDS, RUNS

pytestmark = pytest.mark.integration

Row = dict[str, Any]
_CHANGES = ("CREATE", "SET", "DELETE", "MULTI_FAILED")


def _rows(lake: Any) -> list[Row]:
    rows: list[Row] = lake.read_arrow("znode_events").to_pylist()
    return rows


def _txnlog(rows: list[Row]) -> list[Row]:
    """The log's changes inside the run's chroot after its creation (the chroot's own CREATE is ours, not Kafka's)."""
    txn = [r for r in rows if r["source"] == "txnlog"]
    births = [r["zxid"] for r in txn if r["path"] == "/" and r["op"] == "CREATE"]
    start = min(births) if births else -1
    return sorted((r for r in txn if r["zxid"] > start and r["op"] in _CHANGES), key=lambda r: r["zxid"])


def _watch(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r["source"] in ("watch", "resync") and r["path"] != "/"
            and r["op"] in ("CREATE", "SET", "DELETE")]


def _ancestors(path: str) -> list[str]:
    """"/a/b/c" -> ["/a/b", "/a", "/"]."""
    out = []
    while path != "/":
        path = path.rsplit("/", 1)[0] or "/"
        out.append(path)
    return out


def _replay_order(r: Row) -> tuple[int, int]:
    # a delete and a create at one zxid: the delete first (a watch DELETE is stamped at or after the real delete
    # and before any re-creation of its path, so no other allowance is needed)
    return r["zxid"], int(r["op"] != "DELETE")


def _final(rows: list[Row]) -> dict[str, tuple[int, bytes | None]]:
    """path -> (version, data) after replaying the rows in zxid order (a delete and a create at one zxid: delete first)."""
    view: dict[str, tuple[int, bytes | None]] = {}
    for r in sorted(rows, key=_replay_order):
        if r["op"] in ("CREATE", "SET"):
            view[r["path"]] = (r["version"], r["data"])
        elif r["op"] == "DELETE":
            view.pop(r["path"], None)
    view.pop("/", None)
    return view


@pytest.mark.parametrize(("name", "version"), RUNS, ids=RUN_IDS)
def test_txnlog_reproduces_exactly_what_the_simulator_wrote(runs: dict[tuple[str, str], Any], name: str,
                                                           version: str) -> None:
    run = runs[(name, version)]
    txn = _txnlog(_rows(run.lake))
    writes = run.result.znode_writes
    assert writes, f"{name} {version}: the simulator wrote nothing"

    def written(op: str) -> Counter[tuple[str, bytes | None]]:
        return Counter((w.path, w.data) for w in writes if w.op == op)

    def logged(op: str) -> Counter[tuple[str, bytes | None]]:
        return Counter((r["path"], r["data"]) for r in txn if r["op"] == op)

    assert logged("CREATE") == written("CREATE")
    assert logged("SET") == written("SET")
    # a failed multi is identified by the check that failed (its path); it has no payload of its own
    assert Counter(r["path"] for r in txn if r["op"] == "MULTI_FAILED") == Counter(
        w.path for w in writes if w.op == "MULTI_FAILED")
    # every delete the simulator made is in the log (which also has the teardown's session-close deletes)
    missing = Counter(w.path for w in writes if w.op == "DELETE") - Counter(r["path"] for r in txn
                                                                             if r["op"] == "DELETE")
    assert not missing, f"{name} {version}: deletes not in the txnlog: {dict(missing)}"


@pytest.mark.parametrize(("name", "version"), RUNS, ids=RUN_IDS)
def test_watch_history_equals_txnlog_except_reported_misses(runs: dict[tuple[str, str], Any], name: str,
                                                            version: str) -> None:
    run = runs[(name, version)]
    rows = _rows(run.lake)
    txn, watch = _txnlog(rows), _watch(rows)
    where = f"{name} {version}"
    assert watch, f"{where}: the watch collector recorded nothing"

    # every create/set the watches saw happened, at that zxid; a create seen before any set carries its payload
    txn_creates = {(r["zxid"], r["path"]): r for r in txn if r["op"] == "CREATE"}
    txn_sets = {(r["zxid"], r["path"]): r for r in txn if r["op"] == "SET"}
    for r in watch:
        if r["op"] == "CREATE":
            assert (r["zxid"], r["path"]) in txn_creates, (where, r)
            if r["version"] == 0:
                assert r["data"] == txn_creates[(r["zxid"], r["path"])]["data"], (where, r)
        elif r["op"] == "SET":
            # a watch reads data and stat atomically: the payload is the one written at mzxid
            assert r["data"] == txn_sets[(r["zxid"], r["path"])]["data"], (where, r)

    # a create it never saw (created and deleted between two reads) is reported as a GAP: on its parent, on itself
    # (listed, gone before it was read), or on an ancestor whose own subtree was missed that way
    gap_paths = {r["path"] for r in rows if r["op"] == "GAP"}
    seen = {(r["zxid"], r["path"]) for r in watch if r["op"] == "CREATE"}
    unseen = Counter(p for z, p in txn_creates if (z, p) not in seen)
    orphans = [p for p in unseen if not any(a in gap_paths for a in (p, *_ancestors(p)))]
    assert not orphans, (f"{where}: creates missed without a GAP above them: {orphans}",
                         sorted((r["zxid"], r["op"], r["path"], r["source"]) for r in rows
                                if r["op"] == "GAP" or any(r["path"].startswith(p.rsplit("/", 1)[0]) for p in orphans)))
    # ... and its delete is then the only delete the watches lack
    txn_deletes = Counter(r["path"] for r in txn if r["op"] == "DELETE")
    watch_deletes = Counter(r["path"] for r in watch if r["op"] == "DELETE")
    assert not watch_deletes - txn_deletes, where
    assert txn_deletes - watch_deletes <= unseen, where

    # every set since a znode's last seen creation is either seen or counted in a reported missed_versions
    final = _final(txn)
    for path in final:
        born = max((z for z, p in seen if p == path), default=None)
        if born is None:
            continue
        logged = sum(1 for r in txn if r["op"] == "SET" and r["path"] == path and r["zxid"] > born)
        counted = sum(1 + (r["missed_versions"] or 0) for r in watch
                      if r["op"] == "SET" and r["path"] == path and r["zxid"] > born)
        counted += sum(r["missed_versions"] or 0 for r in watch
                       if r["op"] == "CREATE" and r["path"] == path and r["zxid"] == born)
        assert counted == logged, f"{where}: {path} sets logged {logged}, seen or reported {counted}"

    # the watches end on the tree the transaction log describes, versions and payloads included
    assert _final(watch) == final, where
