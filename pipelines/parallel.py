"""Work on every core for one batch of rows (a Spark task's, or the driver-side runner's).

Runs of whole keys (the fold) and runs of rows (decode) are independent, and their heavy lifting is numpy and
Arrow kernels that release the GIL, so threads overlap.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import pyarrow as pa

T = TypeVar("T")
R = TypeVar("R")

THREADS = max(1, os.cpu_count() or 1)


def parallel_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, in order, on up to ``THREADS`` threads."""
    if len(items) <= 1 or THREADS == 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(THREADS, len(items)), thread_name_prefix="zkledger") as pool:
        return list(pool.map(fn, items))


def use_system_allocator() -> None:
    """Arrow buffers from the C library's malloc instead of the bundled mimalloc, for this process.

    Decode and the fold allocate and drop large short-lived arrays, which mimalloc served slower here (for less
    resident memory). An explicit ``ARROW_DEFAULT_MEMORY_POOL`` still wins. Entry points call it.
    """
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        pa.set_memory_pool(pa.system_memory_pool())


@contextmanager
def arrow_memory_pool(name: str) -> Iterator[None]:
    """Arrow's new buffers from the pool ``name`` (``"mimalloc"``, ``"system"``, ``"jemalloc"``) while the block
    runs, then from the pool before it. The pool keeps the pages it holds free for its next block (mimalloc purges
    them only when it is next called). A pyarrow built without that pool keeps its own."""
    try:
        pool = getattr(pa, f"{name}_memory_pool")()
    except (AttributeError, NotImplementedError):
        yield
        return
    before = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def release_free_memory() -> None:
    """Hand the C library's free heap pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    A Python worker of the query keeps what glibc freed after its largest chunk until it exits, so each of the
    session's workers would hold its high-water mark while the others work; the query calls it after each routed
    chunk and at the end of each operator task."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


_LIBC = _glibc()


def concat_or_empty(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty_table()
