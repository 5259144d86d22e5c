"""The Delta stream sources: read tasks of the rows stream, the data files of streamed commits."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lake_append_loop import batch_rows

from lakehouse import Lake
from lakehouse.delta_source import (
    DeltaChangeNotSupported,
    added_files,
    commit_manifest,
    group_files,
    read_data_files,
)

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


def _commit_lines(lake: Lake, table: str) -> list[tuple[str, str]]:
    log_dir = Path(lake.table_path(table)) / "_delta_log"
    commits = [f for f in sorted(log_dir.iterdir()) if f.name.endswith(".json")]  # what stream_commits reads
    return [(f.name, line) for f in commits for line in f.read_text().splitlines()]


def test_commit_manifest_lists_added_files_in_version_order_after_a_version(tmp_path: Path) -> None:
    lake = Lake(tmp_path, "c")
    for seq in range(3):
        lake.append("znode_events", batch_rows(seq), writer_id="w", batch_seq=seq)
    lake.checkpoint("znode_events")  # a checkpoint file in the log is not a commit
    (Path(lake.table_path("znode_events")) / "_delta_log" / "_commit_x.json.tmp").write_text("{}\n")
    path = lake.table_path("znode_events")
    lines = _commit_lines(lake, "znode_events")
    every = commit_manifest(path, reversed(lines))  # the order rows arrive in does not matter
    assert every == [f for v in (1, 2, 3) for f, _ in added_files(path, v)]
    assert commit_manifest(path, lines, after_version=2) == [f for f, _ in added_files(path, 3)]
    assert read_data_files("znode_events", every).num_rows == lake.row_count("znode_events")


def test_commit_manifest_refuses_a_commit_that_removes_data(tmp_path: Path) -> None:
    lake = Lake(tmp_path, "c")
    lake.append("znode_events", batch_rows(0), writer_id="w", batch_seq=0)
    lake.overwrite("znode_events", batch_rows(1), writer_id="w", batch_seq=1)
    with pytest.raises(DeltaChangeNotSupported, match="removes data"):
        commit_manifest(lake.table_path("znode_events"), _commit_lines(lake, "znode_events"))
    # the overwrite is at or below the version a consumer starts after: nothing to refuse
    assert commit_manifest(lake.table_path("znode_events"), _commit_lines(lake, "znode_events"), after_version=2) == []
