"""The watch collector's restart state: the newest row per path, read back from the lake in Arrow batches."""

from __future__ import annotations

from typing import Any

from collectors.bronze import BronzeWriter, change_row
from collectors.zk_watch import Known, load_view
from models.events import Source, ZnodeChange, ZnodeOp


def _write(lake: Any, changes: list[tuple[ZnodeChange, Source]], cluster: str = "test", seq: int = 0) -> None:
    writer = BronzeWriter(lake, f"view-test:{cluster}:{seq}")
    writer.write([change_row(c, cluster=cluster, source=s) for c, s in changes])


def _c(zxid: int, path: str, op: ZnodeOp, version: int | None = None, czxid: int | None = None) -> ZnodeChange:
    return ZnodeChange(zxid=zxid, path=path, op=op, version=version, czxid=czxid, mzxid=zxid if version is not None else None)


def test_load_view_keeps_the_newest_row_per_path_and_drops_deleted_ones(lake: Any) -> None:
    w, r = Source.WATCH, Source.RESYNC
    # rows arrive out of zxid order across commits, as the collector's delete stamps make them
    _write(lake, [(_c(5, "/a", ZnodeOp.CREATE, 0, 5), w), (_c(9, "/a", ZnodeOp.SET, 1, 5), w),
                  (_c(6, "/b", ZnodeOp.CREATE, 0, 6), w), (_c(7, "/c", ZnodeOp.CREATE, 0, 7), w)], seq=0)
    _write(lake, [(_c(12, "/b", ZnodeOp.DELETE), r), (_c(11, "/a", ZnodeOp.DELETE), w),
                  (_c(30, "/", ZnodeOp.GAP), w)], seq=1)
    # /a re-created at 11 (its delete was stamped at that same zxid: the delete comes first), /c set later
    _write(lake, [(_c(11, "/a", ZnodeOp.CREATE, 0, 11), r), (_c(20, "/c", ZnodeOp.SET, 3, 7), w)], seq=2)
    # other clusters' rows and the transaction log's rows are not this collector's
    _write(lake, [(_c(40, "/b", ZnodeOp.CREATE, 0, 40), Source.TXNLOG)], seq=3)
    _write(lake, [(_c(50, "/z", ZnodeOp.CREATE, 0, 50), w)], cluster="other", seq=4)
    view, max_zxid = load_view(lake)
    assert view == {"/a": Known(0, 11, 11), "/c": Known(3, 20, 7)}
    assert max_zxid == 30  # the GAP's zxid counts; other clusters' and sources' rows do not


def test_load_view_on_a_lake_without_the_table(lake: Any) -> None:
    assert load_view(lake) == ({}, 0)
