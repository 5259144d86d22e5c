"""The stateful sink's driver-side rule for anomalies two keys found: one row per id, its earliest finding."""

from __future__ import annotations

import pyarrow as pa

from engine.stateful_sink import APPENDED, REPLACED, one_per_id
from lakehouse.spark_schema import spark_arrow_schema
from models.tables import ANOMALIES, DERIVED_TABLES


def _found(rows: list[dict[str, object]]) -> pa.Table:
    schema = spark_arrow_schema(ANOMALIES)
    return pa.Table.from_pylist([{"cluster": "c", "kind": "SPLIT_BRAIN", "severity": "critical", **r} for r in rows],
                                schema=schema)


def test_one_row_per_id_at_its_lowest_zxid_then_lowest_last_evidence() -> None:
    found = _found([
        {"anomaly_id": "a", "zxid": 9, "evidence": ["x", "e1"]},
        {"anomaly_id": "a", "zxid": 4, "evidence": ["e9"]},  # lowest zxid wins
        {"anomaly_id": "b", "zxid": None, "evidence": ["e1"]},  # a null zxid sorts last
        {"anomaly_id": "b", "zxid": 7, "evidence": []},
        {"anomaly_id": "c", "zxid": 3, "evidence": ["e5"]},
        {"anomaly_id": "c", "zxid": 3, "evidence": ["z", "e2"]},  # same zxid: the lower last evidence id
        {"anomaly_id": "d", "zxid": 1, "evidence": None},
    ])
    kept = {r["anomaly_id"]: (r["zxid"], r["evidence"]) for r in one_per_id(found).to_pylist()}
    assert kept == {"a": (4, ["e9"]), "b": (7, []), "c": (3, ["z", "e2"]), "d": (1, None)}
    assert one_per_id(found.slice(0, 0)).num_rows == 0


def test_the_sink_writes_every_derived_table_in_one_way() -> None:
    ways = [ANOMALIES, *APPENDED, *REPLACED]
    assert sorted(t.name for t in ways) == sorted(t.name for t in DERIVED_TABLES)


def test_a_rebuild_gives_an_older_release_s_anomalies_table_today_s_columns(tmp_path: object) -> None:
    from deltalake import DeltaTable, write_deltalake

    from engine.stateful_sink import reset_derived
    from lakehouse import Lake

    lake = Lake(str(tmp_path), "c")
    today = spark_arrow_schema(ANOMALIES)
    older = pa.schema([f for f in today if f.name not in ("episode_id", "ended_at", "ended_zxid", "duration_ms")])
    write_deltalake(lake.table_path(ANOMALIES.name), older.empty_table())  # as a release before them wrote it

    def columns() -> set[str]:
        return {f.name for f in DeltaTable(lake.table_path(ANOMALIES.name)).schema().fields}

    assert "episode_id" not in columns()
    reset_derived(lake, "rebuild")
    assert set(today.names) <= columns()
