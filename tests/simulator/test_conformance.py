"""The simulator held to the real thing: for the same operations, the znodes it writes (paths, JSON keys, payload
versions) and the log lines it writes (templates of the census) are those of a real broker of the same line.

The expected facts live in tests/data/kafka/<version>/znodes.json (tests/znode_facts.py), written from Kafka's
sources (ZkData, KafkaZkClient, Partition) and checked against real brokers of the 2.8 and 3.9 lines by
tests/kafkalab/test_real_kafka.py.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from collectors.log_parser import census
from models.decisions import NOT_TEMPLATES, LogTemplate
from simulator.scenarios import list_scenarios, run_scenario
from tests.znode_facts import VERSIONS, check_payload, facts, is_topic_id

pytestmark = pytest.mark.integration

SCENARIOS = [n for n in list_scenarios() if n != "failover-storm"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_simulated_znodes_and_log_lines_match_kafka(zk_hosts: str, tmp_path: Path, version: str, scenario: str) -> None:
    result = run_scenario(scenario, zk_hosts, version, tmp_path / "logs", seed=5)
    problems = [p for w in result.znode_writes if w.op in ("CREATE", "SET")
                for p in check_payload(version, w.path, w.data, w.op)]
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
    assert is_topic_id("AAAAAAAAAAAAAAAAAAAAAA") and not is_topic_id("sim000005t000AAAAAA")
