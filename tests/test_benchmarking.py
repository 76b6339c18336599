"""What the benchmarks measure with: the process tree's memory."""
from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from aequum.flows.benchmarking import TreePeak


def test_tree_peak_counts_the_memory_of_child_processes():
    code = "import time; x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(1.5)"
    with TreePeak(interval=0.05) as tree:
        own = psutil.Process().memory_info().rss / 2 ** 20
        subprocess.run([sys.executable, "-c", code], check=True)
    assert tree.peak_mb > own + 280  # the child's 300 MB, which the parent's own peak never sees
    assert any(mb > 280 for mb in tree.per_process_mb.values())


def test_a_step_in_a_fresh_process_returns_its_result_or_names_its_failure():
    from aequum.flows.benchmarking import in_fresh_process

    assert in_fresh_process("json", "loads", "[1, 2]") == [1, 2]
    with pytest.raises(RuntimeError, match=r"(?s)loads\('not json',\) failed \(exit status 1\).*JSONDecodeError"):
        in_fresh_process("json", "loads", "not json")
