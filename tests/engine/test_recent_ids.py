"""The monitor's in-memory record of committed metadata event ids answers like a scan of the lake."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from engine.carry import RecentIds

batch = st.lists(st.integers(min_value=0, max_value=60), max_size=12)


@given(st.lists(batch, max_size=15), st.integers(min_value=0, max_value=60), st.integers(min_value=0, max_value=20))
def test_recent_ids_answer_every_covered_range_like_the_whole_history(batches: list[list[int]], lo: int,
                                                                       width: int) -> None:
    recent = RecentIds(floor=None, max_rows=10)
    committed: list[tuple[int, str]] = []
    floors = []
    for n, zxids in enumerate(batches):
        ids = [f"{z}-{n}-{i}" for i, z in enumerate(zxids)]
        recent.add(pa.chunked_array([pa.array(zxids, pa.int64())]), pa.chunked_array([pa.array(ids, pa.string())]))
        committed += zip(zxids, ids, strict=True)
        floors.append(recent.floor)
    hi = lo + width
    if recent.covers(lo):
        assert recent.between(lo, hi) == {i for z, i in committed if lo <= z <= hi}
    raised = [f for f in floors if f is not None]
    assert raised == sorted(raised)  # the floor only rises


def test_a_process_that_found_rows_in_the_lake_answers_only_above_them() -> None:
    recent = RecentIds(floor=101)  # the lake held zxids up to 100 at start
    recent.add(pa.chunked_array([pa.array([101, 150])]), pa.chunked_array([pa.array(["a", "b"])]))
    assert not recent.covers(100)  # below: the lake is asked
    assert recent.covers(101) and recent.between(101, 120) == {"a"}


def test_memory_stays_bounded_and_the_floor_rises() -> None:
    recent = RecentIds(floor=None, max_rows=10)
    for start in range(0, 100, 10):
        zxids = list(range(start, start + 10))
        recent.add(pa.chunked_array([pa.array(zxids, pa.int64())]),
                   pa.chunked_array([pa.array([str(z) for z in zxids])]))
        assert len(recent.zxids) <= 20
    assert recent.floor is not None and recent.floor > 50
    assert not recent.covers(0) and recent.between(95, 99) == {"95", "96", "97", "98", "99"}
