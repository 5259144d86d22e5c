"""Where the query's keys land among its state partitions, and key numbers chosen so a cluster's buckets spread
evenly over them.

Spark sends each key of a stateful operator to state partition ``pmod(murmur3(key columns, seed 42), n)``. With
the bucket numbers 0..k-1 as keys, a cluster's buckets split over two partitions as the hash falls: cluster
"local" puts 21 of its 33 keys on one partition, so one core folds twenty buckets while the other folds twelve.
A new checkpoint's layout therefore numbers each cluster's buckets with keys picked in turn for each partition
(``place``); the fold never reads the number, only routes by it.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import count

from pipelines.bucket_fold import CLUSTER_STAGE, BucketLayout

SPARK_HASH_SEED = 42
"""The seed of Spark's ``Murmur3Hash`` (``hash()``, and the partitioning of a stateful operator's keys)."""
_MASK = 0xFFFF_FFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * 0xCC9E2D51) & _MASK, 15) * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def _hash_int(value: int, seed: int) -> int:
    return _fmix(_mix_h1(seed, _mix_k1(value & _MASK)), 4)


def _hash_utf8(text: str, seed: int) -> int:
    """Spark's hash of a string's UTF-8 bytes: whole little-endian words, then each remaining byte (signed) as a
    word of its own (Spark's variant, not the reference tail)."""
    data = text.encode()
    aligned = len(data) - len(data) % 4
    h1 = seed
    for at in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[at:at + 4], "little")))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    return _fmix(h1, len(data))


def state_partition(cluster: str, key: int, partitions: int) -> int:
    """The state partition of key (``cluster``, ``key``) among ``partitions`` (Spark's hash partitioning)."""
    h = _hash_int(key, _hash_utf8(cluster, SPARK_HASH_SEED))
    signed = h - (1 << 32) if h & 0x8000_0000 else h
    return signed % partitions  # Python's % of a positive modulus is Spark's pmod


def placed_keys(cluster: str, buckets: int, partitions: int) -> tuple[int, ...]:
    """Key numbers for a cluster's ``buckets`` (index i: bucket i's) that fill ``partitions`` in turn, beginning
    after the partition of the cluster's stage: each partition gets buckets // partitions of them or one more."""
    start = state_partition(cluster, CLUSTER_STAGE, partitions) + 1
    unused: dict[int, list[int]] = {p: [] for p in range(partitions)}  # keys found, by partition, not yet given
    candidates = count()  # each lands on a partition with probability 1/partitions: a few per bucket
    keys = []
    for p in ((start + i) % partitions for i in range(buckets)):
        while not unused[p]:
            key = next(candidates)
            unused[state_partition(cluster, key, partitions)].append(key)
        keys.append(unused[p].pop(0))
    return tuple(keys)


def place(layout: BucketLayout, partitions: int) -> BucketLayout:
    """``layout`` with each of its clusters' buckets numbered by ``placed_keys``."""
    return replace(layout, keys={c: placed_keys(c, n, partitions) for c, n in layout.clusters.items()})
