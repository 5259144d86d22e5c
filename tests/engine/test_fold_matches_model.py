"""The pipelines' state machines equal the reference fold (models.reference_fold.project_metadata) on random histories.

Random ZooKeeper histories (brokers coming and going, controller failovers, topics created, written, reassigned,
deletion requested and deleted) go through the pipeline's one composition (``pipelines.keyed_pipeline``, its
keys stepped in this process by ``engine.local_run.LocalRunner``), in one batch or several (each key's carried
state). The reference folds the same decoded events row at a time. Both must agree on every step (including the
failover re-seeds) and on the final states. (The Spark query runs the same steps: tests/engine/test_stateful_query.py.)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.local_run import LocalRunner
from lakehouse.spark_schema import spark_arrow_schema
from models.events import MetadataEvent, MetadataEventType
from models.reference_fold import MetadataProjection, project_metadata
from models.tables import CONTROLLER_DECISIONS, ZNODE_EVENTS
from pipelines.bucket_fold import BucketState
from pipelines.decode import metadata_events_of
from simulator import payloads as zc
from tests.history import History

BROKERS = st.integers(1, 4)


@st.composite
def histories(draw: Any) -> tuple[list[dict[str, Any]], str, list[int]]:
    """(znode_events rows, Kafka version, cut points into increments)."""
    h = History()
    live: set[int] = set()
    topics: dict[str, dict[int, list[int]]] = {}
    epochs: dict[tuple[str, int], int] = {}
    controller_epoch = 0
    kinds = ["broker"] * 3 + ["elect"] * 2 + ["topic"] * 2 + ["state"] * 6 + ["request", "delete", "reassign"]
    for _ in range(draw(st.integers(3, 40))):
        kind = draw(st.sampled_from(kinds))
        if kind == "broker":
            b = draw(BROKERS)
            h.broker(b, "DELETE" if b in live else "CREATE")
            live ^= {b}
        elif kind == "elect":
            controller_epoch += 1
            h.add("/controller", "DELETE")
            h.controller(draw(BROKERS), controller_epoch)
        elif kind == "topic":
            t = draw(st.sampled_from(["t0", "t1"]))
            if t not in topics:
                topics[t] = {p: draw(st.lists(BROKERS, min_size=1, max_size=3, unique=True))
                             for p in range(draw(st.integers(1, 2)))}
                h.topic(t, topics[t])
        elif not topics:
            continue
        elif kind == "state":
            t = draw(st.sampled_from(sorted(topics)))
            p = draw(st.sampled_from(sorted(topics[t])))
            replicas = topics[t][p]
            first = (t, p) not in epochs
            epochs[(t, p)] = 0 if first else epochs[(t, p)] + draw(st.integers(0, 1))
            leader = draw(st.sampled_from([*replicas, -1]))
            isr = draw(st.lists(st.sampled_from(replicas), unique=True, max_size=len(replicas)))
            h.state(t, p, leader, epochs[(t, p)], controller_epoch, isr, op="CREATE" if first else "SET")
        elif kind == "request":
            h.add(f"/admin/delete_topics/{draw(st.sampled_from(sorted(topics)))}", "CREATE")
        elif kind == "delete":
            t = draw(st.sampled_from(sorted(topics)))
            for p in sorted(topics.pop(t)):
                if epochs.pop((t, p), None) is not None:
                    h.add(f"/brokers/topics/{t}/partitions/{p}/state", "DELETE")
            h.add(f"/brokers/topics/{t}", "DELETE")
        else:  # reassignment: a partition's replicas change
            t = draw(st.sampled_from(sorted(topics)))
            p = draw(st.sampled_from(sorted(topics[t])))
            topics[t][p] = draw(st.lists(BROKERS, min_size=1, max_size=3, unique=True))
            h.add(f"/brokers/topics/{t}", "SET", zc.encode_topic_assignment(topics[t], "2.0"))
    if not h.rows:
        h.broker(1)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(len(h.rows) - 1, 1)), max_size=3))))
    return h.rows, draw(st.sampled_from(["2.2", "2.8"])), cuts


TABLES = ("partition_transitions", "replica_transitions")


def _pipeline(rows: list[dict[str, Any]], version: str, cuts: list[int]) -> tuple[pa.Table, dict[str, pa.Table]]:
    """Every batch through the keys' steps: (every metadata event, as the ``metadata_events`` view shows the
    history, the steps and the keys' final states)."""
    schema = spark_arrow_schema(ZNODE_EVENTS)
    runner = LocalRunner(buckets=4, kafka_version=version)
    out: dict[str, list[pa.Table]] = {t: [spark_arrow_schema(t).empty_table()] for t in TABLES}
    bronze = pa.Table.from_pylist([{f: {**r, "cluster": "test"}.get(f) for f in schema.names} for r in rows],
                                  schema=schema)
    for lo, hi in zip([0, *cuts], [*cuts, len(rows)], strict=True):
        batch = bronze.slice(lo, hi - lo)
        for _, _, table, got in runner.step(batch, spark_arrow_schema(CONTROLLER_DECISIONS).empty_table()):
            if table in out:
                out[table].append(got.select(spark_arrow_schema(table).names))
    buckets = [s for s in runner.states.values() if isinstance(s, BucketState)]
    states = {t: pa.concat_tables([getattr(s, t) for s in buckets]) if buckets else spark_arrow_schema(t).empty_table()
              for t in ("partition_state", "replica_state")}
    steps = {t: pa.concat_tables(parts) for t, parts in out.items()}
    return metadata_events_of(bronze), {**steps, **states}


def _reference(meta: pa.Table, version: str) -> MetadataProjection:
    fields = ("topic", "partition", "broker", "controller_id", "controller_epoch", "leader", "leader_epoch")
    events = []
    for r in sorted(meta.to_pylist(), key=lambda r: (r["zxid"], r["type"] == "TOPIC_DELETED")):
        events.append(MetadataEvent(zxid=r["zxid"], type=MetadataEventType(r["type"]), **{f: r[f] for f in fields},
                                    isr=None if r["isr"] is None else tuple(r["isr"]),
                                    replicas=None if r["replicas"] is None else tuple(r["replicas"])))
    return project_metadata(events, version)


def _assert_equal(got: dict[str, pa.Table], ref: MetadataProjection) -> None:
    pt = Counter((r["zxid"], r["topic"], r["partition"], r["from_state"], r["to_state"], r["legal"], r["cause"])
                 for r in got["partition_transitions"].to_pylist())
    assert pt == Counter((t.zxid, t.topic, t.partition, t.from_state, t.to_state, t.legal, t.cause)
                         for t in ref.partition_transitions)
    rt = Counter((r["zxid"], r["topic"], r["partition"], r["replica"], r["from_state"], r["to_state"], r["legal"],
                  r["cause"]) for r in got["replica_transitions"].to_pylist())
    assert rt == Counter((t.zxid, t.topic, t.partition, t.replica, t.from_state, t.to_state, t.legal, t.cause)
                         for t in ref.replica_transitions)
    states = {(r["topic"], r["partition"]): r["state"] for r in got["partition_state"].to_pylist()
              if r["state"] != "NonExistentPartition"}
    assert states == {k: str(s) for k, s in ref.partitions.items() if s != "NonExistentPartition"}
    replicas = {(r["topic"], r["partition"], r["replica"]): r["state"] for r in got["replica_state"].to_pylist()
                if r["state"] != "NonExistentReplica"}
    assert replicas == {k: str(s) for k, s in ref.replicas.items() if s != "NonExistentReplica"}
    ids = got["partition_transitions"]["event_id"].to_pylist() + got["replica_transitions"]["event_id"].to_pylist()
    assert len(ids) == len(set(ids))


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_batches_equal_the_reference(case: tuple[list[dict[str, Any]], str, list[int]]) -> None:
    rows, version, cuts = case
    meta, got = _pipeline(rows, version, cuts)
    _assert_equal(got, _reference(meta, version))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fixed_histories_equal_the_reference(seed: int) -> None:
    """A few fixed histories with failovers, broker churn, a reassignment and a topic deletion."""
    rows, version, cuts = _fixed(seed)
    meta, got = _pipeline(rows, version, cuts)
    _assert_equal(got, _reference(meta, version))


def _fixed(seed: int) -> tuple[list[dict[str, Any]], str, list[int]]:
    """A deterministic history with failovers, broker churn, a reassignment and a topic deletion."""
    h = History()
    h.broker(1).broker(2).broker(3).controller(1, 1)
    h.topic("t0", {0: [1, 2], 1: [2, 3]}).topic("t1", {0: [3, 1]})
    for p, (leader, isr) in enumerate([(1, [1, 2]), (2, [2, 3])]):
        h.state("t0", p, leader, 0, 1, isr, op="CREATE")
    h.state("t1", 0, 3, 0, 1, [3, 1], op="CREATE")
    h.broker(3, "DELETE")
    h.state("t0", 1, 2, 1, 1, [2])
    if seed >= 2:
        h.add("/controller", "DELETE").controller(2, 2)  # failover while broker 3 is gone
    h.broker(3)
    if seed >= 3:
        h.add("/brokers/topics/t0", "SET", zc.encode_topic_assignment({0: [1, 3], 1: [2, 3]}, "2.0"))
        h.add("/admin/delete_topics/t1", "CREATE")
        h.add("/brokers/topics/t1/partitions/0/state", "DELETE").add("/brokers/topics/t1", "DELETE")
    h.add("/controller", "DELETE").controller(3, 3)
    return h.rows, "2.8" if seed % 2 else "2.2", [len(h.rows) // 2]
