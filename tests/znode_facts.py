"""What a real broker of each Kafka line writes to ZooKeeper (tests/data/kafka/<line>/znodes.json): znode path
patterns, the JSON keys of each payload and its version. The real brokers of tests/kafkalab are checked against
these facts, and so is the simulator (tests/simulator/test_conformance.py): both must write what they say."""

from __future__ import annotations

import base64
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

FACTS = Path(__file__).resolve().parent / "data" / "kafka"
VERSIONS = sorted(p.name for p in FACTS.iterdir() if (p / "znodes.json").is_file())


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


def spec_of(version: str, path: str) -> dict[str, Any] | None:
    for spec in facts(version)["znodes"]:
        if _pattern(spec["path"]).match(path):
            return dict(spec)
    return None


def is_topic_id(value: object) -> bool:
    """Kafka's Uuid.toString: 16 bytes, URL-safe base64 without padding (22 characters)."""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_-]{22}", value):
        return False
    return len(base64.urlsafe_b64decode(value + "==")) == 16


def check_payload(version: str, path: str, data: bytes | None, op: str = "SET") -> list[str]:
    """Where one write differs from what a real broker of ``version`` writes there (empty: it conforms)."""
    spec = spec_of(version, path)
    if spec is None:
        return [f"{path}: Kafka {version} writes no such znode"]
    kind = spec["payload"]
    if kind == "empty":
        return [] if not data else [f"{path}: Kafka writes no payload here, got {data[:60]!r}"]
    if op == "CREATE" and not data and spec.get("created_empty"):
        return []  # created empty, its payload set in the same multi (or right after)
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
        problems.append(f"{path}: version {obj.get('version')!r} != {spec['payload_version']!r}")
    for item in obj.get("partitions", []) if "item_keys" in spec else []:
        if set(item) != set(spec["item_keys"]):
            problems.append(f"{path}: partition entry keys {sorted(item)} != {spec['item_keys']}")
    if spec.get("topic_id") == "base64url-uuid" and "topic_id" in obj and not is_topic_id(obj["topic_id"]):
        problems.append(f"{path}: topic_id {obj['topic_id']!r} is not a Kafka Uuid")
    return problems
