"""The ground truth's consensus rule: a sample keeps what every answering broker agrees on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kafkalab.truth import Answer, PartitionView, agreed, settled_points

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FULL = PartitionView(1, 3, (1, 2, 3), (1, 2, 3))
SHRUNK = PartitionView(2, 4, (2, 3), (1, 2, 3))


def sample(i: int, *answers: Answer):  # type: ignore[no-untyped-def]
    at = T0 + timedelta(seconds=i / 2)
    return agreed(at, at + timedelta(milliseconds=5), list(answers))


def test_a_partition_the_brokers_report_differently_is_disputed_not_reported() -> None:
    s = sample(0, Answer(1, 1, {("t", 0): FULL, ("t", 1): FULL}), Answer(2, 1, {("t", 0): SHRUNK, ("t", 1): FULL}))
    assert s.partitions == {("t", 1): FULL}
    assert s.disputed == {("t", 0)}
    assert s.reported == {("t", 0), ("t", 1)}
    assert s.brokers == (1, 2)
    assert s.controller_agreed and s.controller_id == 1


def test_a_partition_one_broker_does_not_report_is_disputed() -> None:
    s = sample(0, Answer(1, 1, {("t", 0): FULL}), Answer(3, 1, {}))
    assert s.partitions == {} and s.disputed == {("t", 0)}


def test_brokers_naming_different_controllers_settle_no_controller_point() -> None:
    agree = Answer(1, 2, {("t", 0): FULL})
    samples = [sample(0, agree), sample(1, agree, Answer(2, 3, {("t", 0): FULL})), sample(2, agree)]
    points, unsettled = settled_points(samples)
    assert [(p.key, p.view) for p in points] == [(("t", 0), FULL)]
    assert unsettled == 1


def test_one_stale_broker_leaves_the_partition_unsettled_while_it_trails() -> None:
    fresh, stale = Answer(1, 1, {("t", 0): SHRUNK}), Answer(2, 1, {("t", 0): FULL})
    samples = [sample(i, fresh, stale if i < 3 else fresh) for i in range(6)]
    points, _ = settled_points(samples)
    assert [p.at for p in points if p.key is not None] == [samples[4].at]
    assert all(p.view == SHRUNK for p in points if p.key is not None)
