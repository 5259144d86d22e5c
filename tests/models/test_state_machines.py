"""The state-machine tables, the one-step apply, the explicit fold and the integer matrices.

Golden source: ``validPreviousStates`` in apache/kafka
``core/src/main/scala/kafka/controller/PartitionStateMachine.scala`` and ``ReplicaStateMachine.scala``
at 3.8.0 (771b957), identical at 1.0.0 … 3.8.0 except ReplicaDeletionIneligible, which gained
OfflineReplica in 2.3.0 (KAFKA-8237, commit 17c8016; RSM@2.2.0 l440 vs @2.3.0 l433).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.errors import IllegalTransitionError, OutOfOrderEventError
from models.fold import (
    INITIAL_PARTITION_CODE,
    INITIAL_REPLICA_CODE,
    PARTITION_CODES,
    PARTITION_STATES_BY_CODE,
    REPLICA_CODES,
    REPLICA_STATES_BY_CODE,
)
from models.reference_fold import (
    PartitionTarget,
    ReplicaTarget,
    apply_partition,
    apply_replica,
    compose,
    fold_codes,
    legal_matrix,
    project,
    target_function,
    transition_matrix,
)
from models.states import PartitionState as P
from models.states import ReplicaState as R
from models.states import legal_pairs, partition_valid_previous, replica_valid_previous

# Literal transcription of the Scala (target: valid previous states), in Kafka's own state names.
KAFKA_PARTITION_TABLE = {
    "NewPartition": {"NonExistentPartition"},
    "OnlinePartition": {"NewPartition", "OnlinePartition", "OfflinePartition"},
    "OfflinePartition": {"NewPartition", "OnlinePartition", "OfflinePartition"},
    "NonExistentPartition": {"OfflinePartition"},
}
_REPLICA_COMMON = {
    "NewReplica": {"NonExistentReplica"},
    "OnlineReplica": {"NewReplica", "OnlineReplica", "OfflineReplica", "ReplicaDeletionIneligible"},
    "OfflineReplica": {"NewReplica", "OnlineReplica", "OfflineReplica", "ReplicaDeletionIneligible"},
    "ReplicaDeletionStarted": {"OfflineReplica"},
    "ReplicaDeletionSuccessful": {"ReplicaDeletionStarted"},
    "NonExistentReplica": {"ReplicaDeletionSuccessful"},
}
KAFKA_REPLICA_TABLE_2_2 = {**_REPLICA_COMMON, "ReplicaDeletionIneligible": {"ReplicaDeletionStarted"}}
KAFKA_REPLICA_TABLE_2_3 = {
    **_REPLICA_COMMON,
    "ReplicaDeletionIneligible": {"OfflineReplica", "ReplicaDeletionStarted"},
}
REPLICA_VERSIONS = [("2.2", KAFKA_REPLICA_TABLE_2_2), ("2.3", KAFKA_REPLICA_TABLE_2_3)]


def _as_strings(table: object) -> dict[str, set[str]]:
    return {str(t): {str(p) for p in prevs} for t, prevs in table.items()}  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["1.0", "1.1", "2.0", "2.4", "2.8", "3.0", "3.8"])
def test_partition_table_is_kafkas(version: str) -> None:
    assert _as_strings(partition_valid_previous(version)) == KAFKA_PARTITION_TABLE


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.0", KAFKA_REPLICA_TABLE_2_2),
        ("2.2.2", KAFKA_REPLICA_TABLE_2_2),
        ("2.3.0", KAFKA_REPLICA_TABLE_2_3),
        ("3.8", KAFKA_REPLICA_TABLE_2_3),
    ],
)
def test_replica_table_is_kafkas(version: str, expected: dict[str, set[str]]) -> None:
    assert _as_strings(replica_valid_previous(version)) == expected


def test_state_names_and_codes_are_kafkas() -> None:
    # PartitionState.state byte codes (PSM) and ReplicaState codes (RSM) minus one
    assert [str(s) for s in PARTITION_STATES_BY_CODE] == [
        "NewPartition",
        "OnlinePartition",
        "OfflinePartition",
        "NonExistentPartition",
    ]
    assert [str(s) for s in REPLICA_STATES_BY_CODE] == [
        "NewReplica",
        "OnlineReplica",
        "OfflineReplica",
        "ReplicaDeletionStarted",
        "ReplicaDeletionSuccessful",
        "ReplicaDeletionIneligible",
        "NonExistentReplica",
    ]
    assert INITIAL_PARTITION_CODE == 3 and INITIAL_REPLICA_CODE == 6


@pytest.mark.parametrize(("from_state", "to_state"), list(itertools.product(P, P)))
def test_every_partition_pair(from_state: P, to_state: P) -> None:
    legal = str(from_state) in KAFKA_PARTITION_TABLE[str(to_state)]
    step = apply_partition(from_state, to_state, cause="test")
    assert step.transition is not None
    assert (step.transition.from_state, step.transition.to_state) == (str(from_state), str(to_state))
    assert step.transition.legal is legal
    if legal:
        assert step.state is to_state and step.violation is None
    else:
        assert step.state is from_state  # Kafka 1.1+: logged and skipped
        assert step.violation is not None and step.violation.kind == "ILLEGAL_PARTITION_TRANSITION"
        with pytest.raises(IllegalTransitionError):
            apply_partition(from_state, to_state, strict=True)


@pytest.mark.parametrize(("version", "table"), REPLICA_VERSIONS)
@pytest.mark.parametrize(("from_state", "to_state"), list(itertools.product(R, R)))
def test_every_replica_pair_both_versions(
    version: str, table: dict[str, set[str]], from_state: R, to_state: R
) -> None:
    legal = str(from_state) in table[str(to_state)]
    step = apply_replica(from_state, to_state, "test", version)
    assert step.transition is not None and step.transition.legal is legal
    assert step.state is (to_state if legal else from_state)
    assert (step.violation is None) is legal
    if not legal:
        assert step.violation is not None
        assert step.violation.kind == "ILLEGAL_REPLICA_TRANSITION" and step.violation.kafka_version == version


def test_kafka_8237_offline_to_ineligible_differs_by_version() -> None:
    assert apply_replica(R.OFFLINE, R.DELETION_INELIGIBLE, kafka_version="2.2").violation is not None
    assert apply_replica(R.OFFLINE, R.DELETION_INELIGIBLE, kafka_version="2.3").violation is None


def test_none_state_means_non_existent() -> None:
    assert apply_partition(None, P.NEW).state is P.NEW
    assert apply_partition(None, P.ONLINE).state is P.NON_EXISTENT
    assert apply_replica(None, R.NEW).state is R.NEW
    assert apply_replica(None, R.ONLINE).violation is not None


def test_project_keeps_state_on_illegal_steps() -> None:
    targets = [
        PartitionTarget(1, "t", 0, P.NEW),
        PartitionTarget(2, "t", 0, P.NON_EXISTENT, "bogus"),  # New -> NonExistent: illegal
        PartitionTarget(3, "t", 0, P.ONLINE),
        PartitionTarget(4, "t", 0, P.NEW, "bogus"),  # Online -> New: illegal
        ReplicaTarget(1, "t", 0, 1, R.NEW),
        ReplicaTarget(2, "t", 0, 1, R.DELETION_SUCCESSFUL, "bogus"),  # New -> Successful: illegal
        ReplicaTarget(3, "t", 0, 1, R.ONLINE),
    ]
    proj = project(sorted(targets, key=lambda t: t.zxid))
    assert proj.partitions[("t", 0)] is P.ONLINE
    assert proj.replicas[("t", 0, 1)] is R.ONLINE
    assert [(v.zxid, v.from_state, v.to_state) for v in proj.violations] == [
        (2, "NewPartition", "NonExistentPartition"),
        (2, "NewReplica", "ReplicaDeletionSuccessful"),
        (4, "OnlinePartition", "NewPartition"),
    ]
    assert [t.legal for t in proj.partition_transitions] == [True, False, True, False]


def test_project_rejects_out_of_order_and_strict_raises() -> None:
    with pytest.raises(OutOfOrderEventError):
        project([PartitionTarget(5, "t", 0, P.NEW), PartitionTarget(4, "t", 0, P.ONLINE)])
    with pytest.raises(IllegalTransitionError):
        project([PartitionTarget(1, "t", 0, P.ONLINE)], strict=True)


@pytest.mark.parametrize("version", ["2.2", "2.3", "3.8"])
def test_matrix_equals_apply_on_all_pairs(version: str) -> None:
    pm, pl = transition_matrix("partition", version), legal_matrix("partition", version)
    for s, t in itertools.product(P, P):
        step = apply_partition(s, t, kafka_version=version)
        assert PARTITION_STATES_BY_CODE[pm[PARTITION_CODES[s]][PARTITION_CODES[t]]] is step.state
        assert pl[PARTITION_CODES[s]][PARTITION_CODES[t]] is (step.violation is None)
    rm, rl = transition_matrix("replica", version), legal_matrix("replica", version)
    for s, t in itertools.product(R, R):
        step = apply_replica(s, t, kafka_version=version)
        assert REPLICA_STATES_BY_CODE[rm[REPLICA_CODES[s]][REPLICA_CODES[t]]] is step.state
        assert rl[REPLICA_CODES[s]][REPLICA_CODES[t]] is (step.violation is None)
    # the matrix has exactly the table's legal pairs
    n_legal = sum(map(sum, rl))
    assert n_legal == len(legal_pairs(replica_valid_previous(version)))


def test_matrix_kind_is_checked() -> None:
    with pytest.raises(ValueError):
        transition_matrix("broker", "3.8")  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from(["2.2", "3.8"]),
    targets=st.lists(st.sampled_from(list(R)), max_size=40),
)
def test_fold_equals_matrix_scan_and_composition(version: str, targets: list[R]) -> None:
    """Random replica target sequences: the object fold, the code scan and the composed maps agree."""
    proj = project([ReplicaTarget(i, "t", 0, 1, t) for i, t in enumerate(targets)], version)
    m = transition_matrix("replica", version)
    codes = fold_codes(m, INITIAL_REPLICA_CODE, [REPLICA_CODES[t] for t in targets])
    assert [t.to_state if t.legal else t.from_state for t in proj.replica_transitions] == [
        str(REPLICA_STATES_BY_CODE[c]) for c in codes
    ]
    composed = tuple(range(len(REPLICA_STATES_BY_CODE)))  # identity
    for t in targets:
        composed = compose(composed, target_function(m, REPLICA_CODES[t]))
    final = REPLICA_STATES_BY_CODE[composed[INITIAL_REPLICA_CODE]]
    assert proj.replicas.get(("t", 0, 1), R.NON_EXISTENT) is final


@settings(max_examples=100, deadline=None)
@given(
    a=st.lists(st.sampled_from(list(P)), max_size=10),
    b=st.lists(st.sampled_from(list(P)), max_size=10),
)
def test_composition_is_associative_over_segments(a: list[P], b: list[P]) -> None:
    """Scanning a then b equals composing the two segment summaries (what a parallel scan relies on)."""
    m = transition_matrix("partition")

    def summary(seq: list[P]) -> tuple[int, ...]:
        f = tuple(range(4))
        for t in seq:
            f = compose(f, target_function(m, PARTITION_CODES[t]))
        return f

    for s0 in range(4):
        whole = fold_codes(m, s0, [PARTITION_CODES[t] for t in a + b])
        expected = whole[-1] if whole else s0
        assert compose(summary(a), summary(b))[s0] == expected
