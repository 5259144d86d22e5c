"""The migration story played on real 3.9 brokers (`tests/kafkalab/test_migration_lab.py`, `zkledger kafka-lab
migration`): a clean dual-write (a topic created, one deleted, a partition moved), then an operator's script
writing a topic's config straight into ZooKeeper, then the KRaft controller killed and restarted (its re-sync
of ZooKeeper from the log undoes that write). `judge` asks `zkledger migration` at each point, once the
collectors have caught up; `judge_when` once its answer shows a given point (e.g. a rollback).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkalab.migration import DUAL_WRITE_LOG, MIGRATION_ZNODE, TOPICS_BEFORE, BrokerMode, MigrationLab

CREATED = "fresh"
DELETED = "doomed"
MOVED, MOVED_TO = "moving", [2, 3]
PLANTED_TOPIC = next(iter(TOPICS_BEFORE))
PLANTED_CONFIG: dict[str, Any] = {"version": 1, "config": {"retention.ms": "1234567"}}
"""What the out-of-band writer sets on ``/config/topics/<PLANTED_TOPIC>``: a config KRaft never saw."""


def dual_write_actions(lab: MigrationLab) -> None:
    """Routine changes made through Kafka during dual-write: each reaches ZooKeeper through the controller."""
    lab.create_topic(CREATED, partitions=2, replication=2)
    lab.delete_topic(DELETED)
    lab.reassign(MOVED, 0, MOVED_TO)


def brokers_to_kraft(lab: MigrationLab, during_dual_write: Callable[[MigrationLab], None] | None = None) -> None:
    """The procedure up to its last reversible point: the controller started in migration mode, the brokers
    rolled into migration mode until it dual-writes, ``during_dual_write`` (if any), the brokers rolled to
    KRaft."""
    lab.start_controllers()
    lab.roll_brokers(BrokerMode.MIGRATING)
    lab.wait_dual_write()
    if during_dual_write is not None:
        lab.during_dual_write(during_dual_write)
    lab.roll_brokers(BrokerMode.KRAFT)


def plant_config_write(lab: MigrationLab) -> int:
    """A plain ZooKeeper client (an old `--zookeeper` tool, a script) changes a topic's config behind KRaft's
    back; the write's zxid."""
    with lab.kazoo() as zk:
        stat = zk.set(f"/config/topics/{PLANTED_TOPIC}", json.dumps(PLANTED_CONFIG).encode())
    return int(stat.mzxid)


def migration_zxid(lab: MigrationLab) -> int:
    """The zxid of the last ``/migration`` write: every controller write ZooKeeper holds now is at or before it."""
    with lab.kazoo() as zk:
        stat = zk.exists(MIGRATION_ZNODE)
    return -1 if stat is None else int(stat.mzxid)


def fail_over_controller(lab: MigrationLab) -> tuple[int, int]:
    """kill -9 of the active KRaft controller: the quorum elects another, which syncs ZooKeeper from the log in
    full before it dual-writes again; the killed node is then started again and follows. With a one-node quorum
    the node itself, restarted, is the next leader. (killed, new leader)"""
    killed, _ = lab.quorum.wait_quorum_leader(timeout_s=lab.wait_s)
    marks = {nid: lab.quorum.server_log_size(nid) for nid in lab.controller_ids}
    lab.quorum.kill(killed)
    alone = len(lab.controller_ids) == 1
    if alone:
        lab.quorum.start_node(killed, wait=False)
    leader = lab.quorum.wait_logged(DUAL_WRITE_LOG, "the next quorum leader to dual-write again", since=marks,
                                    timeout_s=lab.wait_s)
    if not alone:
        lab.quorum.start_node(killed, wait=False)
    return killed, leader


def migration_json(lake_root: Path, cluster: str) -> dict[str, Any]:
    """`zkledger migration --format json` on the lake (the user's command, as a process)."""
    done = subprocess.run([sys.executable, "-m", "zkledger.cli", "--lake", str(lake_root), "--cluster", cluster,
                           "migration", "--format", "json"], capture_output=True, text=True, timeout=120,
                          check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"zkledger migration exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return dict(json.loads(done.stdout.splitlines()[0]))


def judge(lab: MigrationLab, *, settled_after_zxid: int = -1, timeout_s: float = 90.0) -> dict[str, Any]:
    """`migration_json` once the collectors have caught up: a settled aligned point at or past the offset
    ``/migration`` holds now, and past ``settled_after_zxid``."""
    target = (lab.zk_json(MIGRATION_ZNODE) or {}).get("kraft_metadata_offset", -1)
    deadline = time.monotonic() + timeout_s
    while True:
        out = migration_json(lab.lake_root, lab.cluster_name)
        last = out["last_settled"]
        if last is not None and last["offset"] >= target and last["zxid"] > settled_after_zxid:
            return out
        if time.monotonic() > deadline:
            raise TimeoutError(f"the lake never reached a settled point at offset {target} (last: {last})")
        time.sleep(1.0)


def judge_when(lab: MigrationLab, reached: Callable[[dict[str, Any]], bool], what: str,
               timeout_s: float = 90.0) -> dict[str, Any]:
    """`migration_json` once its answer satisfies `reached` (the collectors have read that far)."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = migration_json(lab.lake_root, lab.cluster_name)
        if reached(out):
            return out
        if time.monotonic() > deadline:
            raise TimeoutError(f"`zkledger migration` never showed {what} (phase {out['phase']})")
        time.sleep(1.0)
