"""pipelines.parallel: what the query's Python workers do with the memory they freed."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from pipelines.parallel import _LIBC, arrow_memory_pool

_FREED_THEN_RELEASED = r"""
import ctypes
from pipelines.parallel import release_free_memory

def resident_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(64 * 1024) for _ in range(4000)]  # 250 MiB in chunks below glibc's mmap threshold
for block in blocks:
    ctypes.memset(block, 1, 64 * 1024)
top = libc.malloc(64)  # a live chunk above them: glibc cannot shrink its heap past it
ctypes.memset(top, 1, 64)
for block in blocks:
    libc.free(block)
freed = resident_mib()
release_free_memory()
print(freed, resident_mib())
"""


@pytest.mark.skipif(_LIBC is None, reason="glibc's malloc_trim only")
def test_release_free_memory_hands_freed_heap_pages_back() -> None:
    """Freed chunks stay resident under glibc until released (a worker would hold its largest chunk's memory while
    the other workers run); after ``release_free_memory`` they are gone."""
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    out = subprocess.run([sys.executable, "-c", _FREED_THEN_RELEASED], capture_output=True, text=True, env=env,
                         check=True)
    freed, released = (int(v) for v in out.stdout.split())
    assert freed >= 200, out.stdout  # held after free
    assert released <= freed - 150, out.stdout


def test_arrow_memory_pool_serves_the_block_from_the_named_pool_then_restores_the_one_before() -> None:
    before = pa.default_memory_pool().backend_name
    other = "mimalloc" if before != "mimalloc" else "system"
    with arrow_memory_pool(other):
        assert pa.default_memory_pool().backend_name == other
        assert pa.array(range(1000)).buffers()[1] is not None
    assert pa.default_memory_pool().backend_name == before
    with arrow_memory_pool("no-such-allocator"):  # a pool this pyarrow lacks: the one it has
        assert pa.default_memory_pool().backend_name == before
