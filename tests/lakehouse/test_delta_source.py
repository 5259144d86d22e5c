"""How the Delta stream source packs a micro-batch's files into read tasks."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from lakehouse.delta_source import group_files

sizes = st.lists(st.integers(min_value=0, max_value=100), max_size=30)


@given(sizes, st.integers(min_value=1, max_value=250))
def test_groups_keep_every_file_once_in_order_and_stay_under_the_budget(file_sizes: list[int], budget: int) -> None:
    files = [(f"f{i}.parquet", n) for i, n in enumerate(file_sizes)]
    groups = group_files(files, budget)
    assert [f for g in groups for f in g.files] == [f for f, _ in files]
    size = dict(files)
    for g in groups:
        total = sum(size[f] for f in g.files)
        assert total <= budget or len(g.files) == 1  # only a file bigger than the budget is alone over it
    # greedy: a group is closed only when the next file would not fit
    for g, nxt in pairwise(groups):
        assert sum(size[f] for f in g.files) + size[nxt.files[0]] > budget


def test_small_commits_share_one_task() -> None:
    groups = group_files([("a", 10), ("b", 10), ("c", 10)], 64)
    assert [g.files for g in groups] == [("a", "b", "c")]
