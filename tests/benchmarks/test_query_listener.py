"""`benchmarks.query_listener`: the CPU it attributes to a window includes the processes below this one."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.query_listener import tree_cpu_s


def test_a_childs_cpu_counts_while_it_runs() -> None:
    before = tree_cpu_s()
    spin = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\nprint('done', flush=True)\ninput()"
    child = subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        assert tree_cpu_s() - before >= 0.5  # alive, below this process: its CPU is in the tree's
    finally:
        child.communicate("\n", timeout=30)
