"""The simulator held to the real thing: for the same operations, the znodes it writes (paths, JSON keys, payload
versions) and the log lines it writes (templates of the census) are those of a real broker of the same line.

The expected facts live in tests/data/kafka/<version>/znodes.json, written from Kafka's sources (ZkData,
KafkaZkClient, Partition); captured payloads of real brokers can be added there in the same shape.
"""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from collectors.log_parser import census
from models.decisions import NOT_TEMPLATES, LogTemplate
from simulator.scenarios import list_scenarios, run_scenario

pytestmark = pytest.mark.integration

FACTS = Path(__file__).resolve().parents[1] / "data" / "kafka"
VERSIONS = sorted(p.name for p in FACTS.iterdir() if (p / "znodes.json").is_file())
SCENARIOS = [n for n in list_scenarios() if n != "failover-storm"]


@cache
def facts(version: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FACTS / version / "znodes.json").read_text(encoding="utf-8"))
    return doc


def _pattern(template: str) -> re.Pattern[str]:
    names = {"{id}": r"\d+", "{topic}": r"[\w.-]+", "{partition}": r"\d+", "{seq}": r"\d{10}"}
    out = re.escape(template)
    for name, rx in names.items():
        out = out.replace(re.escape(name), rx)
    return re.compile(f"^{out}$")


def _spec(version: str, path: str) -> dict[str, Any] | None:
    for spec in facts(version)["znodes"]:
        if _pattern(spec["path"]).match(path):
            return dict(spec)
    return None


def _is_topic_id(value: object) -> bool:
    """Kafka's Uuid.toString: 16 bytes, URL-safe base64 without padding (22 characters)."""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_-]{22}", value):
        return False
    return len(base64.urlsafe_b64decode(value + "==")) == 16


def check_payload(version: str, path: str, data: bytes | None) -> list[str]:
    """Where one write differs from what a real broker of ``version`` writes there (empty: it conforms)."""
    spec = _spec(version, path)
    if spec is None:
        return [f"{path}: Kafka {version} writes no such znode"]
    kind = spec["payload"]
    if kind == "empty":
        return [] if not data else [f"{path}: Kafka writes no payload here, got {data[:60]!r}"]
    if kind == "decimal":
        return [] if data is not None and data.decode().isdigit() else [f"{path}: not a decimal: {data!r}"]
    try:
        obj = json.loads(data or b"")
    except ValueError:
        return [f"{path}: not JSON: {data[:60]!r}" if data else f"{path}: no payload"]
    problems = []
    keys, optional = set(spec["keys"]), set(spec.get("optional_keys", []))
    if not keys <= set(obj) or not set(obj) <= keys | optional:
        problems.append(f"{path}: keys {sorted(obj)} != Kafka {version}'s {sorted(keys)} (+ optional {sorted(optional)})")
    if obj.get("version") != spec["payload_version"]:
        problems.append(f"{path}: version {obj.get('version')} != {spec['payload_version']}")
    for item in obj.get("partitions", []) if "item_keys" in spec else []:
        if set(item) != set(spec["item_keys"]):
            problems.append(f"{path}: partition entry keys {sorted(item)} != {spec['item_keys']}")
    if spec.get("topic_id") == "base64url-uuid" and "topic_id" in obj and not _is_topic_id(obj["topic_id"]):
        problems.append(f"{path}: topic_id {obj['topic_id']!r} is not a Kafka Uuid")
    return problems


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_simulated_znodes_and_log_lines_match_kafka(zk_hosts: str, tmp_path: Path, version: str, scenario: str) -> None:
    result = run_scenario(scenario, zk_hosts, version, tmp_path / "logs", seed=5)
    problems = [p for w in result.znode_writes if w.op in ("CREATE", "SET")
                for p in check_payload(version, w.path, w.data)]
    assert problems == []
    notes = [w for w in result.znode_writes if w.path.startswith("/isr_change_notification/") and w.op == "CREATE"]
    assert bool(notes) <= facts(version)["uses_isr_change_notification"]  # 2.7+: AlterIsr, no notifications
    templates: Counter[LogTemplate] = Counter()
    for f in result.log_files:
        c = census(f.read_text(encoding="utf-8").splitlines())
        assert c.unknown == [], (f.name, c.unknown[:3])
        assert c.counts[LogTemplate.CUT] == 0
        templates.update(c.counts)
    assert sum(n for t, n in templates.items() if t not in NOT_TEMPLATES) > 0


def test_facts_reject_what_kafka_does_not_write() -> None:
    """The checker can fail: payloads of the wrong line are caught."""
    v1_topic = b'{"version":1,"partitions":{"0":[1,2]}}'
    assert check_payload("2.0", "/brokers/topics/t", v1_topic) == []
    assert check_payload("3.9", "/brokers/topics/t", v1_topic)  # 3.9 writes v3 with adding/removing replicas
    ctl_v1 = b'{"version":1,"brokerid":1,"timestamp":"1"}'
    assert check_payload("2.8", "/controller", ctl_v1) == [] and check_payload("3.9", "/controller", ctl_v1)
    v3 = b'{"version":3,"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{},"topic_id":"short"}'
    assert any("topic_id" in p for p in check_payload("2.8", "/brokers/topics/t", v3))
    assert check_payload("2.8", "/brokers/topics/t/partitions/0/state/extra", b"") != []
    assert _is_topic_id("AAAAAAAAAAAAAAAAAAAAAA") and not _is_topic_id("sim000005t000AAAAAA")
