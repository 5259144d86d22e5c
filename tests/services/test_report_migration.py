"""The report's ZooKeeper -> KRaft migration section, on a small migration written into a lake's bronze tables as
the collectors land it (`znode_events` from the transaction log, `kraft_records` from the metadata log's
segments), with no rebuild: the phases as bands, the settled points as ticks, the divergences, the findings and
the verdict, all as `models.migration` judges them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from models.events import Source, ZnodeOp
from models.migration import BlockReason, MigrationPhase, ZkMigrationState
from models.tables import KRAFT_RECORDS, ZNODE_EVENTS
from services.report import (
    MIGRATION_TITLE,
    PHASE_COLORS,
    PHASE_LABELS,
    load_report_data,
    render_html,
)
from simulator.payloads import (
    encode_broker_registration,
    encode_config,
    encode_controller,
    encode_controller_epoch,
    encode_migration,
    encode_partition_state,
    encode_topic_assignment,
)
from tests import kraft_bytes as kb
from tests import kraft_history as kh
from tests import sample_data as sd
from zkledger import cli
from zkledger.commands.migration import recorded_migration

KAFKA = "3.9"
START = datetime(2026, 3, 1, tzinfo=UTC)
CONTROLLER = 3000  # the KRaft controller's node id
DRIVER = 0xD1  # its ZooKeeper session
ZK_CONTROLLER = 0xB1  # broker 1's session, the ZooKeeper controller before the migration
ADMIN = 0xAD  # an operator's script writing ZooKeeper directly
BROKERS = (1, 2, 3)
HOSTILE = "<img src=x onerror=alert(1)>"
PLANTED = "99"  # the retention.ms the script sets behind KRaft's back (the log keeps 1000)


def migration_state(state: ZkMigrationState) -> bytes:
    """A ZkMigrationStateRecord (api key 21) v0."""
    return kb.metadata_value(21, 0, kb.i8(int(state)) + kb.tagged())


def register(broker: int, epoch: int, *, migrating: bool) -> bytes:
    """A RegisterBrokerRecord v2 (the version with isMigratingZkBroker), fenced."""
    body = (kb.i32(broker) + kb.boolean(migrating) + kb.uuid_bytes(kh.topic_id(f"b{broker}")) + kb.i64(epoch)
            + kb.carray([]) + kb.carray([]) + kb.cstring(None) + kb.boolean(True) + kb.boolean(False) + kb.tagged())
    return kb.metadata_value(0, 2, body)


def state_znode(p: int) -> str:
    return f"/brokers/topics/orders/partitions/{p}/state"


class MigrationLake:
    """Both stores of one cluster written in step, one second per ZooKeeper transaction or log batch, as the
    rows `collect txnlog` and `collect kraft` write."""

    def __init__(self) -> None:
        self.zk_rows: list[dict[str, Any]] = []
        self.kraft_rows: list[dict[str, Any]] = []
        self.zxid, self.offset, self.tick = 0x100, 0, 0
        self.migration_offset = -1  # what /migration says

    def _now(self) -> datetime:
        self.tick += 1
        return START + timedelta(seconds=self.tick)

    def zk(self, *writes: tuple[str, ZnodeOp, bytes | None], session: int = DRIVER) -> int:
        """One ZooKeeper transaction (a multi when several writes); its zxid."""
        self.zxid += 1
        at = self._now()
        for n, (path, op, data) in enumerate(writes):
            self.zk_rows.append({
                "zxid": self.zxid, "path": path, "op": str(op), "data": data, "version": 0, "czxid": self.zxid,
                "mzxid": self.zxid, "pzxid": self.zxid, "ephemeral_owner": 0, "session_id": session, "txn_time": at,
                "source": str(Source.TXNLOG), "observed_at": at, "event_id": f"{self.zxid}-{n}"})
        return self.zxid

    def kraft(self, *values: bytes, control: bytes | None = None) -> int:
        """One batch of the log (a control batch when ``control`` is its key); its last offset."""
        at, base = self._now(), self.offset
        for value in values:
            self.kraft_rows.append({
                "offset": self.offset, "batch_base_offset": base, "batch_last_offset": base + len(values) - 1,
                "leader_epoch": 1, "batch_timestamp": at, "is_control": control is not None, "key": control,
                "value": value, "source": "segment", "file_name": "00000000000000000000.log", "collected_at": at})
            self.offset += 1
        return self.offset - 1

    def migration_write(self, offset: int | None = None) -> int:
        if offset is not None:
            self.migration_offset = offset
        return self.zk(("/migration", ZnodeOp.SET, encode_migration(CONTROLLER, 1, self.migration_offset, 1)))

    def write(self, lake: Any) -> None:
        lake.append(ZNODE_EVENTS.name, self.zk_rows, writer_id="test:txnlog", batch_seq=0)
        lake.append(KRAFT_RECORDS.name, self.kraft_rows, writer_id="test:kraft", batch_seq=0)


def zookeeper_mode(m: MigrationLake) -> None:
    """Three ZooKeeper-mode brokers, broker 1 controller at epoch 1, topic orders (2 partitions, retention 1000)."""
    for b in BROKERS:
        m.zk((f"/brokers/ids/{b}", ZnodeOp.CREATE, encode_broker_registration(b, f"b{b}", 9092, KAFKA)),
             session=0xB0 + b)
    m.zk(("/controller_epoch", ZnodeOp.CREATE, encode_controller_epoch(1)),
         ("/controller", ZnodeOp.CREATE, encode_controller(1, 0, KAFKA)), session=ZK_CONTROLLER)
    m.zk(("/brokers/topics/orders", ZnodeOp.CREATE,
          encode_topic_assignment({0: [1, 2, 3], 1: [2, 3, 1]}, KAFKA, topic_id=kh.topic_id("orders"))),
         (state_znode(0), ZnodeOp.CREATE, encode_partition_state(1, 0, 1, [1, 2, 3], KAFKA)),
         (state_znode(1), ZnodeOp.CREATE, encode_partition_state(2, 0, 1, [2, 3, 1], KAFKA)),
         ("/config/topics/orders", ZnodeOp.CREATE, encode_config({"retention.ms": "1000"})), session=ZK_CONTROLLER)


def migration(*, finalized: bool = False) -> MigrationLake:
    """A migration through every phase to the brokers on KRaft, with a script's config write during dual-write
    (an out-of-band write, then a divergence at the next settled point) and one after the last settled point on a
    hostile path; then finalization when ``finalized``."""
    m = MigrationLake()
    zookeeper_mode(m)
    key, value = kh.leader_change(CONTROLLER, (CONTROLLER,))
    m.kraft(value, control=key)
    m.kraft(migration_state(ZkMigrationState.PRE_MIGRATION))  # pre-migration
    m.zk(("/migration", ZnodeOp.CREATE, encode_migration(CONTROLLER, 1, -1, 1)))
    for b in BROKERS:
        m.kraft(register(b, 10 + b, migrating=True), kh.fence(b, 10 + b, fenced=False))
    m.zk(("/controller_epoch", ZnodeOp.SET, encode_controller_epoch(2)), ("/controller", ZnodeOp.DELETE, None),
         ("/controller", ZnodeOp.CREATE, encode_controller(CONTROLLER, 0, KAFKA, 1)))  # the claim: loading
    m.migration_write()
    m.kraft(kh.transaction("begin", "Migrating ZK metadata"), kh.topic("orders"),
            kh.partition("orders", 0, [1, 2, 3], [1, 2, 3], 1), kh.partition("orders", 1, [2, 3, 1], [2, 3, 1], 2),
            kh.config("orders", "retention.ms", "1000"))
    m.migration_write(m.kraft(migration_state(ZkMigrationState.MIGRATION), kh.transaction("end")))  # dual-write
    for b in BROKERS:  # each restarted as a KRaft broker: the last one makes the phase KRaft brokers
        m.zk((f"/brokers/ids/{b}", ZnodeOp.DELETE, None), session=0xB0 + b)
        m.kraft(register(b, 20 + b, migrating=False), kh.fence(b, 20 + b, fenced=False))
    m.zk(("/config/topics/orders", ZnodeOp.SET, encode_config({"retention.ms": PLANTED})), session=ADMIN)
    shrunk = m.kraft(kh.partition_change("orders", 0, isr=[1, 2]))  # a dual-write: the ISR shrinks
    m.zk((state_znode(0), ZnodeOp.SET, encode_partition_state(1, 0, 1, [1, 2], KAFKA)),
         ("/migration", ZnodeOp.SET, encode_migration(CONTROLLER, 1, m.migration_offset, 1)))
    m.migration_write(shrunk)
    m.zk((f"/config/topics/{HOSTILE}", ZnodeOp.CREATE, encode_config({"x": "<b>bold</b>"})), session=ADMIN)
    if finalized:
        m.kraft(migration_state(ZkMigrationState.POST_MIGRATION))
    return m


def section(page: str) -> str:
    """The migration section's HTML."""
    found = re.search(r"<section><h2>ZooKeeper → KRaft migration</h2>.*?</section>", page, re.S)
    assert found, "no migration section"
    return found.group(0)


def report_page(lake: Any) -> str:
    judged = recorded_migration(lake)
    assert judged is not None
    return render_html(load_report_data(lake, judged.report))


def test_the_section_draws_the_phases_points_divergences_findings_and_verdict(lake: Any) -> None:
    migration().write(lake)
    html = section(report_page(lake))
    svg = re.search(r"<svg[^>]*aria-label='ZooKeeper to KRaft migration'.*?</svg>", html, re.S)
    assert svg, "no migration timeline"
    bands = re.findall(r"<rect x='[\d.]+' y='[\d.]+' width='[\d.]+' height='[\d.]+' rx='3' fill='(#\w+)'[^>]*/>"
                       r"(?:<text[^>]*>[^<]*</text>)?<title>([^<]*)</title>", svg.group(0))
    drawn = [(color, title.split(" from ")[0]) for color, title in bands]
    phases = [MigrationPhase.ZOOKEEPER, MigrationPhase.PRE_MIGRATION, MigrationPhase.LOADING,
              MigrationPhase.DUAL_WRITE, MigrationPhase.KRAFT_BROKERS]
    assert drawn == [(PHASE_COLORS[p], PHASE_LABELS[p]) for p in phases]
    assert [PHASE_LABELS[p] for p in phases[1:]] == ["pre-migration", "loading", "dual-write", "KRaft brokers"]
    # the settled aligned points as ticks: the load's (the stores agree), then the ISR change's (they do not)
    ticks = re.findall(r"fill='(#\w+)'/><line[^>]*/><title>settled point zxid (0x[0-9a-f]+) / offset (\d+): "
                       r"(\d+) divergence\(s\)</title>", svg.group(0))
    assert [(color, int(n)) for color, _, _, n in ticks] == [("#2e7d32", 0), ("#c62828", 1)]
    # the divergence and the findings, each where it shows
    assert re.search(r"<td>orders</td><td>retention\.ms</td><td>99</td><td>1000</td>", html)
    planted_zxid = re.search(r"<td>(zxid 0x[0-9a-f]+)</td><td class='tp'>/config/topics/orders</td>", html)
    assert planted_zxid, "the out-of-band write's row"
    rows = re.findall(r"<tr><td><span class='chip'[^>]*>(\w+)</span></td><td><b>(\w+)</b></td><td>[^<]*</td>"
                      r"<td>([^<]*)</td><td class='tp'>([^<]*)</td>", html)
    assert [(sev, kind, path) for sev, kind, _, path in rows] == [
        ("error", "MIGRATION_OUT_OF_BAND_ZK_WRITE", "/config/topics/orders"),
        ("error", "MIGRATION_STORES_DIVERGED", "orders"),
        ("error", "MIGRATION_OUT_OF_BAND_ZK_WRITE", "/config/topics/&lt;img src=x onerror=alert(1)&gt;"),
    ]
    diverged_at = rows[1][2]
    assert diverged_at == f"zxid {ticks[1][1]} / offset {ticks[1][2]}"
    # the verdict, with the rule's reasons
    assert "Verdict: not safe to finalize." in html
    for reason in (BlockReason.STORES_DIVERGED, BlockReason.UNJUDGED_ZK_WRITES):
        assert f"<li><b>{reason}</b>: " in html


def test_a_finalized_migration_ends_in_the_finalized_band(lake: Any) -> None:
    migration(finalized=True).write(lake)
    html = section(report_page(lake))
    labels = re.findall(r"<title>([^<]*) from \d{4}-", html)
    assert labels[-1] == "finalized" and labels.count("finalized") == 1
    assert f"<li><b>{BlockReason.ALREADY_FINALIZED}</b>: " in html


def test_user_controlled_strings_stay_text(lake: Any) -> None:
    migration().write(lake)
    page = report_page(lake)
    assert "<img" not in page.lower() and "<b>bold" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_report_command_on_a_lake_of_bronze_tables_only(lake: Any, tmp_path: Path) -> None:
    """No `zkledger rebuild` yet: the migration is drawn and every other section says its table is not built."""
    migration().write(lake)
    out = tmp_path / "report.html"
    code = cli.main(["--lake", str(lake.root), "--cluster", lake.cluster, "report", "--out", str(out)])
    assert code == 0
    page = out.read_text(encoding="utf-8")
    section(page)
    for title in ("Controller tenure", "Counts over time", "Partitions with anomalies", "Anomalies"):
        body = re.search(rf"<h2>{title}</h2>(.*?)</section>", page, re.S)
        assert body and "Not built yet" in body.group(1), title
    assert "<p class='ok'>No anomalies.</p>" not in page  # a table that is not there is no clean bill of health


def test_a_lake_without_a_migration_has_no_section(lake: Any) -> None:
    sd.write_story(lake)
    assert recorded_migration(lake) is None
    assert MIGRATION_TITLE not in render_html(load_report_data(lake))


def test_both_histories_but_no_migration_phase_is_no_migration(lake: Any) -> None:
    m = MigrationLake()
    zookeeper_mode(m)
    key, value = kh.leader_change(CONTROLLER, (CONTROLLER,))
    m.kraft(value, control=key)
    m.write(lake)
    assert recorded_migration(lake) is None


@pytest.mark.parametrize("source", [Source.WATCH])
def test_a_zookeeper_history_from_watches_only_is_no_recorded_migration(lake: Any, source: Source) -> None:
    """Without the transaction log no write is attributed to its session: the report draws no migration."""
    m = migration()
    for row in m.zk_rows:
        row["source"] = str(source)
    m.write(lake)
    assert recorded_migration(lake) is None
