"""Kernels over ``list<int>`` columns (ISR, replicas) with Spark's array semantics, vectorised with numpy.

Kafka's lists are short (a replication factor of 3-5), so a list column is laid out as an n x width matrix
(``padded``) and membership is a row-wise comparison: linear in the elements, where a sort-based ``np.isin``
over (row, value) pairs cost seconds per million rows. A null list element compares like a value
(``NULL_ELEMENT``), as Spark's ``array_except``/``array_distinct`` do.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Lists: TypeAlias = pa.Array | pa.ChunkedArray
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

NULL_ELEMENT = -(2**40)  # a null list element, compared like a value
_PAD = -(2**42)  # padding of column j is _PAD - j: never equal to a value, a null element or another pad
_CHUNK_CELLS = 20_000_000  # bound on a comparison's temporary (elements x width)


def flat(lists: Lists) -> tuple[IntArray, IntArray, IntArray]:
    """(owning row, value, position in its list) of every element; a null element is ``NULL_ELEMENT``."""
    arr = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    parents = pc.list_parent_indices(arr).to_numpy().astype(np.int64)
    values = pc.fill_null(pc.cast(pc.list_flatten(arr), pa.int64()), NULL_ELEMENT).to_numpy(zero_copy_only=False)
    lengths = lengths_of(arr)
    starts = np.cumsum(lengths) - lengths  # null lists hold no elements in the flattened values
    return parents, values.astype(np.int64), np.arange(len(parents)) - starts[parents]


def lengths_of(lists: Lists) -> IntArray:
    """Elements per row (0 for a null list)."""
    out: IntArray = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return out


def padded(lists: Lists) -> npt.NDArray[np.int64]:
    """The lists as an n x (longest list) matrix; the cells past a row's end hold distinct pads."""
    parents, values, position = flat(lists)
    width = int(position.max()) + 1 if len(position) else 0
    out = np.broadcast_to(_PAD - np.arange(width, dtype=np.int64), (len(lists), width)).copy()
    out[parents, position] = values
    return out


def member_of_row(values: IntArray, rows: IntArray, matrix: npt.NDArray[np.int64]) -> BoolArray:
    """``values[i] in matrix[rows[i]]`` for every i (``matrix`` from ``padded``)."""
    out = np.zeros(len(values), bool)
    if matrix.shape[1] == 0:
        return out
    step = max(1, _CHUNK_CELLS // matrix.shape[1])
    for lo in range(0, len(values), step):
        hi = lo + step
        out[lo:hi] = (matrix[rows[lo:hi]] == values[lo:hi, None]).any(axis=1)
    return out


def list_contains(lists: Lists, values: Lists) -> pa.Array:
    """SQL ``array_contains(lists, values)``: null for a null list or value, or no match in a list holding a null."""
    n = len(lists)
    parents, elements, _ = flat(lists)
    want = pc.fill_null(pc.cast(values, pa.int64()), NULL_ELEMENT).to_numpy(zero_copy_only=False)
    hit = np.zeros(n, bool)
    has_null = np.zeros(n, bool)
    hit[parents[(elements == want[parents]) & (elements != NULL_ELEMENT)]] = True
    has_null[parents[elements == NULL_ELEMENT]] = True
    null = ~pc.is_valid(lists).to_numpy(zero_copy_only=False) | (want == NULL_ELEMENT) | (~hit & has_null)
    return pa.array(hit, pa.bool_(), mask=null)


def list_has_outside(lists: Lists, allowed: Lists) -> BoolArray:
    """Per row: ``size(array_except(lists, allowed)) > 0`` (False when either list is null)."""
    parents, elements, _ = flat(lists)
    inside = member_of_row(elements, parents, padded(allowed))
    out = np.zeros(len(lists), bool)
    out[parents[~inside]] = True
    both: BoolArray = pc.and_(pc.is_valid(lists), pc.is_valid(allowed)).to_numpy(zero_copy_only=False)
    return out & both


def list_has_duplicates(lists: Lists) -> BoolArray:
    """Per row: ``size(array_distinct(lists)) != size(lists)``."""
    matrix = np.sort(padded(lists), axis=1)  # pads are distinct, so only real elements can repeat
    if matrix.shape[1] < 2:
        return np.zeros(len(lists), bool)
    dupes: BoolArray = (matrix[:, 1:] == matrix[:, :-1]).any(axis=1)
    return dupes
