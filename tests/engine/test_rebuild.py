"""End to end on literal histories: bronze Delta -> rebuild -> derived Delta tables. Most run the pipeline's steps in
the driver (``engine.local_run``); the Spark query's own rebuild and monitor run where they are the point."""

from __future__ import annotations

from typing import Any

import pytest

from engine.local_run import run_local
from engine.rebuild import batch_bytes, rebuild
from engine.stateful import checkpoint_writer, stateful_checkpoint
from services.metadata_events import read_any
from tests.history import clean_history


def _rows(lake: Any, table: str) -> list[dict[str, Any]]:
    return read_any(lake, table).to_pylist()  # a stored table, or the metadata_events view


def _kinds(lake: Any) -> list[str]:
    return sorted(r["kind"] for r in _rows(lake, "anomalies"))


def test_a_replica_goes_offline_when_its_broker_is_gone_not_when_it_falls_behind(lake: Any) -> None:
    h = clean_history()  # the ISR shrinks to [1] and grows back while broker 2 stays registered
    h.broker(2, op="DELETE")  # broker 2 dies; the controller drops it from the ISR
    h.state("t", 0, 1, 0, 1, [1])
    h.broker(2)  # it comes back and catches up
    h.state("t", 0, 1, 0, 1, [1, 2])
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    run_local(lake)
    assert _kinds(lake) == []
    steps = [(r["zxid"], r["from_state"], r["to_state"], r["cause"])
             for r in sorted(_rows(lake, "replica_transitions"), key=lambda r: r["zxid"]) if r["replica"] == 2]
    assert [s[1:] for s in steps] == [("NonExistentReplica", "NewReplica", "assignment"),
                                      ("NewReplica", "OnlineReplica", "in isr"),
                                      ("OnlineReplica", "OfflineReplica", "broker deregistered"),
                                      ("OfflineReplica", "OnlineReplica", "broker registered")]
    events = {r["type"]: r["zxid"] for r in _rows(lake, "metadata_events") if r["type"].startswith("BROKER_")}
    assert steps[2][0] == events["BROKER_DEREGISTERED"]  # when the controller sees the broker go (onBrokerFailure)
    assert steps[3][0] == events["BROKER_REGISTERED"] and steps[3][0] > steps[2][0]  # and come back


def test_the_controller_taking_a_live_replica_out_of_the_isr_makes_it_offline(lake: Any) -> None:
    h = clean_history()
    h.state("t", 0, 1, 1, 1, [1])  # controlled shutdown of broker 2: the controller's write bumps leader_epoch
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    run_local(lake)
    last = max((r for r in _rows(lake, "replica_transitions") if r["replica"] == 2), key=lambda r: r["zxid"])
    assert (last["from_state"], last["to_state"], last["cause"]) == ("OnlineReplica", "OfflineReplica",
                                                                     "removed from isr")
    assert {r["replica"]: r["state"] for r in _rows(lake, "replica_state")} == {1: "OnlineReplica",
                                                                                2: "OfflineReplica"}


def test_clean_history_rebuilds_states_and_no_anomalies(lake: Any) -> None:
    lake.append("znode_events", clean_history().rows, writer_id="t", batch_seq=1)
    counts = run_local(lake)
    assert _kinds(lake) == []
    ps = _rows(lake, "partition_state")
    assert [(r["topic"], r["partition"], r["state"], r["leader"], r["isr"]) for r in ps] == [
        ("t", 0, "OnlinePartition", 1, [1, 2])]
    steps = sorted((r["zxid"], r["from_state"], r["to_state"]) for r in _rows(lake, "partition_transitions"))
    assert [s[1:] for s in steps] == [("NonExistentPartition", "NewPartition"), ("NewPartition", "OnlinePartition")]
    rs = {r["replica"]: r["state"] for r in _rows(lake, "replica_state")}
    assert rs == {1: "OnlineReplica", 2: "OnlineReplica"}
    rt = [(r["replica"], r["to_state"]) for r in sorted(_rows(lake, "replica_transitions"), key=lambda r: r["zxid"])]
    # broker 2 stays registered: the leader dropping it from the ISR is not a replica state change
    assert sorted(rt) == [(1, "NewReplica"), (1, "OnlineReplica"), (2, "NewReplica"), (2, "OnlineReplica")]
    tenure = [(r["controller_id"], r["controller_epoch"], r["source"]) for r in _rows(lake, "controller_tenure")]
    assert tenure == [(1, 1, "zk")]
    assert counts["decode_quarantine"] == 0


def test_rebuild_twice_is_identical_in_one_micro_batch_or_several(spark: Any, lake: Any) -> None:
    h = clean_history()
    h.state("t", 0, 2, 1, 1, [2])  # unclean: 2 was not... (it was in the ISR: clean)
    half = len(h.rows) // 2
    lake.append("znode_events", h.rows[:half], writer_id="t", batch_seq=1)
    lake.append("znode_events", h.rows[half:], writer_id="t", batch_seq=2)
    rebuild(spark, lake)
    writer = checkpoint_writer(stateful_checkpoint(None, lake.root))
    assert lake.last_batch_seq("partition_state", writer) == 0
    first = {t: sorted(map(str, _rows(lake, t))) for t in ("metadata_events", "partition_transitions", "anomalies")}
    rebuild(spark, lake, max_bytes_per_trigger="1b")  # a cap below one file: a file per batch
    assert lake.last_batch_seq("partition_state", checkpoint_writer(stateful_checkpoint(None, lake.root))) == 1
    second = {t: sorted(map(str, _rows(lake, t))) for t in ("metadata_events", "partition_transitions", "anomalies")}
    assert first == second and first["metadata_events"]


def test_the_rebuild_batch_setting_is_delta_s_byte_cap() -> None:
    assert (batch_bytes(32), batch_bytes(0)) == ("32m", None)


def test_malformed_payload_is_quarantined(lake: Any) -> None:
    h = clean_history()
    h.add("/brokers/topics/t/partitions/0/state", "SET", b"{not json")
    h.add("/controller", "DELETE", zxid=5, source="watch")  # a watch's phantom DELETE where the txnlog covers zxid 5
    h.add("/controller", "DELETE", source="watch")  # past the txnlog's last zxid: kept
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    run_local(lake)
    q = _rows(lake, "decode_quarantine")
    assert len(q) == 1 and q[0]["ref"].endswith("/partitions/0/state:SET") and q[0]["reason"]
    resigned = [r["zxid"] for r in _rows(lake, "metadata_events") if r["type"] == "CONTROLLER_RESIGNED"]
    assert resigned == [h.zxid]


def test_collector_quarantine_survives_rebuild_and_monitor(spark: Any, lake: Any, tmp_path: Any) -> None:
    # the collectors' rejects are bronze: no rebuild or monitor may drop them (nothing re-collects them)
    from collectors.kafka_logs import collect_logs
    from engine.monitor import drain_monitor

    log = tmp_path / "controller.log"
    log.write_text("2019/08/12 ERROR no layout here\n", encoding="utf-8")
    assert collect_logs(lake, log)["quarantined"] == 1
    collected = _rows(lake, "quarantine")
    h = clean_history()
    h.add("/brokers/topics/t/partitions/0/state", "SET", b"{not json")
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    rebuild(spark, lake)
    derived = _rows(lake, "decode_quarantine")
    assert len(derived) == 1 and derived[0]["ref"].endswith("/partitions/0/state:SET")
    rebuild(spark, lake)
    assert _rows(lake, "quarantine") == collected and _rows(lake, "decode_quarantine") == derived
    h.add("/brokers/topics/t/partitions/0/state", "SET", b"[1, 2")  # arrives after the rebuild
    lake.append("znode_events", h.rows[-1:], writer_id="t", batch_seq=2)
    drain_monitor(spark, lake)  # on the rebuild's checkpoint
    assert _rows(lake, "quarantine") == collected and len(_rows(lake, "decode_quarantine")) == 2
    rebuild(spark, lake)
    assert _rows(lake, "quarantine") == collected and len(_rows(lake, "decode_quarantine")) == 2


def test_state_zxid_accepts_decimal_and_hex() -> None:
    import argparse

    from zkledger.commands.state import parse_zxid

    assert parse_zxid("64") == parse_zxid("0x40") == parse_zxid("0X40") == 64
    with pytest.raises(argparse.ArgumentTypeError):
        parse_zxid("forty")


def test_zombie_write_is_also_a_split_brain_from_zookeeper(lake: Any) -> None:
    h = clean_history()
    h.controller(2, 2)
    h.state("t", 0, 2, 1, 2, [1, 2])  # new controller elects 2
    h.state("t", 0, 1, 2, 1, [1, 2])  # zombie (epoch 1) moves leadership back
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    run_local(lake)
    # the old epoch's controller acting during the new term: two controllers at once, seen in ZooKeeper
    assert _kinds(lake) == ["SPLIT_BRAIN", "ZOMBIE_CONTROLLER_WRITE"]


def test_state_at_zxid_answers_from_the_lake(lake: Any) -> None:
    from pipelines.time_travel import state_at

    h = clean_history()
    h.state("t", 0, 2, 1, 1, [2])
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    run_local(lake)
    meta, tr = _rows(lake, "metadata_events"), _rows(lake, "partition_transitions")
    before = state_at(meta, tr, zxid=6)  # the state znode was just created
    after = state_at(meta, tr, zxid=h.zxid)
    assert before["controller_id"] == 1 and before["controller_epoch"] == 1 and before["live_brokers"] == [1, 2]
    assert [(p["leader"], p["isr"], p["state"]) for p in before["partitions"]] == [(1, [1, 2], "OnlinePartition")]
    assert [(p["leader"], p["leader_epoch"], p["isr"]) for p in after["partitions"]] == [(2, 1, [2])]
    assert state_at(meta, tr, zxid=2)["partitions"] == []


def test_a_failover_reseeds_what_the_new_controller_sees_and_time_travel_shows_it(lake: Any) -> None:
    """The leader's broker vanished and no controller reacted (the old one lost its session): the next controller
    re-derives the partition Offline and the replica ineligible, then Offline (2.3+), without logging anything."""
    from pipelines.time_travel import state_at

    h = clean_history()  # brokers 1, 2; controller 1 epoch 1; t-0 on [1, 2], leader 1
    h.broker(1, op="DELETE")
    h.add("/controller", "DELETE")
    h.controller(2, 2)
    lake.append("znode_events", h.rows, writer_id="t", batch_seq=1)
    run_local(lake)
    assert _kinds(lake) == []
    failover = max(r["zxid"] for r in _rows(lake, "metadata_events") if r["type"] == "CONTROLLER_ELECTED")
    pt = [(r["from_state"], r["to_state"], r["legal"], r["cause"]) for r in _rows(lake, "partition_transitions")
          if r["zxid"] == failover]
    assert pt == [("OnlinePartition", "OfflinePartition", True, "failover reseed")]
    rt = sorted((r["replica"], r["from_state"], r["to_state"], r["cause"]) for r in _rows(lake, "replica_transitions")
                if r["zxid"] >= failover)
    assert rt == [(1, "OfflineReplica", "ReplicaDeletionIneligible", "failover reseed"),
                  (1, "ReplicaDeletionIneligible", "OfflineReplica", "failover: replica on a dead broker")]
    assert [(r["replica"], r["state"]) for r in _rows(lake, "replica_state")] == [(1, "OfflineReplica"),
                                                                                  (2, "OnlineReplica")]
    meta, tr = _rows(lake, "metadata_events"), _rows(lake, "partition_transitions")
    assert [p["state"] for p in state_at(meta, tr, zxid=failover - 1)["partitions"]] == ["OnlinePartition"]
    assert [p["state"] for p in state_at(meta, tr, zxid=failover)["partitions"]] == ["OfflinePartition"]
