"""The rebuild's bronze chunks read file by file (Delta log statistics) hold exactly the rows a filtered scan
of each zxid range holds: files that overlap, files out of zxid order, cuts inside files."""

from __future__ import annotations

import random
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.chunks import ZnodeChunks, zxid_chunks
from lakehouse import Lake

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _write_files(root: Path, files: list[list[int]]) -> Lake:
    """One Delta commit (one data file) per list, rows in the list's order; event ids unique."""
    lake = Lake(root, cluster="test")
    for seq, zxids in enumerate(files):
        rows = [{"zxid": z, "path": f"/n/{z}", "op": "SET", "source": "txnlog" if seq % 2 else "watch",
                 "observed_at": T0, "event_id": f"f{seq}-{i}"} for i, z in enumerate(zxids)]
        lake.append("znode_events", rows, writer_id="w", batch_seq=seq)
    return lake


def _chunk_ids(lake: Lake, chunk_rows: int) -> tuple[list[list[str]], list[list[str]]]:
    """Each chunk's event ids read through the files and through a filtered scan."""
    version = int(lake.version("znode_events") or 0)
    ranges = zxid_chunks(lake, version, chunk_rows)
    by_files = ZnodeChunks(None, lake, version, local_max_rows=1 << 40)
    assert by_files.spans is not None  # delta-rs writes statistics: the file path is the one tested
    by_scan = ZnodeChunks(None, lake, version, local_max_rows=1 << 40)
    by_scan.spans = None  # the fallback: one filtered scan per chunk
    files = [sorted(by_files.read(r).column("event_id").to_pylist()) for r in ranges]
    scans = [sorted(by_scan.read(r).column("event_id").to_pylist()) for r in ranges]
    return files, scans


def test_overlapping_and_unordered_files_give_each_row_to_exactly_one_chunk(tmp_path: Path) -> None:
    shuffled = list(range(50, 150))
    random.Random(1).shuffle(shuffled)
    files = [list(range(100)), shuffled, list(range(200, 300)), list(range(160, 150, -1)), [120, 120, 120]]
    lake = _write_files(tmp_path / "lake", files)
    by_files, by_scan = _chunk_ids(lake, chunk_rows=60)
    assert len(by_files) > 3  # cuts fall inside files
    assert by_files == by_scan
    every = [i for chunk in by_files for i in chunk]
    assert len(every) == len(set(every)) == sum(map(len, files))


def test_one_chunk_takes_every_file_whole(tmp_path: Path) -> None:
    lake = _write_files(tmp_path / "lake", [[5, 3, 4], [1, 2]])
    by_files, by_scan = _chunk_ids(lake, chunk_rows=0)
    assert by_files == by_scan == [sorted(["f0-0", "f0-1", "f0-2", "f1-0", "f1-1"])]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=st.lists(st.lists(st.integers(0, 60), min_size=1, max_size=25), min_size=1, max_size=5),
       sort_files=st.lists(st.booleans(), min_size=5, max_size=5), chunk_rows=st.integers(1, 40))
def test_random_file_layouts_read_like_filtered_scans(files: list[list[int]], sort_files: list[bool],
                                                      chunk_rows: int) -> None:
    files = [sorted(f) if s else f for f, s in zip(files, sort_files, strict=False)]
    with tempfile.TemporaryDirectory() as root:
        lake = _write_files(Path(root) / "lake", files)
        by_files, by_scan = _chunk_ids(lake, chunk_rows)
    assert by_files == by_scan
    every = [i for chunk in by_files for i in chunk]
    assert len(every) == len(set(every)) == sum(map(len, files))
