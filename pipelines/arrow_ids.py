"""Vectorised row ids: the ``models.ids`` functions over Arrow columns (one definition of each id format there)."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

_ID_SEP = "\x1f"  # models.ids.event_id joins its parts with U+001F


def event_ids(*parts: pa.Array | str) -> pa.Array:
    """Vectorised ``models.ids.event_id`` over columns (strings or ints; a str part is a constant)."""
    n = next(len(p) for p in parts if not isinstance(p, str))
    cols = [pa.repeat(pa.scalar(p), n) if isinstance(p, str) else pc.cast(p, pa.string()) for p in parts]
    cols = [pc.fill_null(c, "") for c in cols]
    joined = pc.binary_join_element_wise(*cols, _ID_SEP).to_pylist()
    return pa.array([hashlib.sha1(s.encode("utf-8")).hexdigest()[:24] for s in joined], pa.string())


def metadata_event_ids(cluster: pa.Array, zxid: pa.Array, path: pa.Array, op: pa.Array,
                       seq: pa.Array | None = None) -> pa.Array:
    """Vectorised ``models.ids.metadata_event_id`` (``seq`` 0 when not given): one sha1 per distinct znode."""
    znode = pc.binary_join_element_wise(*(pc.fill_null(pc.cast(p, pa.string()), "") for p in (cluster, path, op)),
                                        _ID_SEP)
    encoded = pc.dictionary_encode(znode)  # the distinct znodes and each row's, in one hash pass
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    hashes = _ZNODE_HASHES.lookup(encoded.dictionary)
    seq_text = pa.scalar("0") if seq is None else pc.cast(seq, pa.string())
    return pc.binary_join_element_wise(pc.fill_null(pc.cast(zxid, pa.string()), ""),
                                       pc.take(hashes, encoded.indices), seq_text, "-")


class _ZnodeHashes:
    """The znode hashes this process has computed, as two Arrow arrays: a batch looks its distinct znodes up in
    one vectorised pass and hashes only the new ones (a cluster has a bounded set of znodes, so successive
    batches mostly find theirs)."""

    LIMIT = 2_000_000

    def __init__(self) -> None:
        # one (keys, hashes) pair, replaced whole: the decode threads may look up at once
        self.known = (pa.array([], pa.string()), pa.array([], pa.string()))

    def lookup(self, znodes: pa.Array) -> pa.Array:
        """The hash of each "cluster<US>path<US>op" key: ``event_id(cluster, "meta", path, op)``."""
        keys, hashes = self.known
        at = pc.index_in(znodes, value_set=keys)
        if at.null_count == 0:
            return pc.take(hashes, at)
        new = znodes.filter(pc.is_null(at))
        fresh = pa.array([_znode_hash(s) for s in new.to_pylist()], pa.string())
        if len(keys) + len(new) > self.LIMIT:
            keys, hashes = new, fresh
        else:
            keys, hashes = pa.concat_arrays([keys, new]), pa.concat_arrays([hashes, fresh])
        self.known = (keys, hashes)
        return pc.take(hashes, pc.index_in(znodes, value_set=keys))


_ZNODE_HASHES = _ZnodeHashes()


def _znode_hash(cluster_path_op: str) -> str:
    cluster, rest = cluster_path_op.split(_ID_SEP, 1)
    return hashlib.sha1(f"{cluster}{_ID_SEP}meta{_ID_SEP}{rest}".encode()).hexdigest()[:24]


def step_ids(source_ids: pa.Array, partitions: pa.Array, machine: str, step_n: npt.NDArray[np.int64]) -> pa.Array:
    """Vectorised ``models.ids.step_id``."""
    steps = pc.binary_join_element_wise(pa.scalar(machine), pc.cast(pa.array(step_n), pa.string()), "")
    return pc.binary_join_element_wise(source_ids, pc.cast(partitions, pa.string()), steps, "/")
