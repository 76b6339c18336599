"""A Dask worker's heap (flows.engine_tasks.heap_for_arrays): the nanny's MALLOC_TRIM_THRESHOLD_
turns off glibc's sliding mmap threshold, and every array above 128 KiB then faults its pages in
afresh each time it is allocated; the engines' pieces get glibc's thresholds back."""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# allocates and frees a 1 MB array 40 times; prints the minor page faults that took (1 MB: above
# glibc's 128 KiB mmap threshold, below the 4 MB from which numpy asks for transparent huge
# pages, whose few faults per array would hide the fresh pages; NUMPY_MADVISE_HUGEPAGE=0 too)
CHURN = """
import resource, sys
import numpy as np
if sys.argv[1] == "set":
    from aequum.flows.engine_tasks import heap_for_arrays
    heap_for_arrays()
np.ones(1 << 17).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    np.ones(1 << 17).sum()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def churn(env: dict, mode: str) -> int:
    """CHURN's faults in a process whose environment is ``env`` and no more: the suite's process
    holds what other tests' Dask nannies set there (``os.environ.update(pre_spawn_env)``)."""
    import os

    out = subprocess.run([sys.executable, "-c", CHURN, mode],
                         env={"PATH": os.environ.get("PATH", ""), "NUMPY_MADVISE_HUGEPAGE": "0", **env},
                         check=True, capture_output=True, text=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_worker_arrays_reuse_the_heap_instead_of_faulting_fresh_pages():
    dask_env = {"MALLOC_TRIM_THRESHOLD_": "65536"}  # as distributed's nanny starts its workers
    fresh = churn(dask_env, "keep")  # the nanny's setting: a fresh mmap per array, its pages faulted in
    assert fresh >= 40
    assert churn(dask_env, "set") * 10 < fresh  # glibc's thresholds back: the heap's pages reused
    assert churn({}, "keep") * 10 < fresh  # glibc's defaults (no variable), which heap_for_arrays keeps
