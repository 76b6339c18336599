"""One way to start HiGHS: quiet, single threaded and seeded, so that every solve is
reproducible bit for bit on the same machine (PBA's twin LPs, FGCE's exact selections).

HiGHS prints its banner ("Running HiGHS 1.x ...: Copyright ...", two lines) on the process's
standard output (file descriptor 1, from C++) when the first instance of a process is
constructed, before any option can be set: every audit printed it once per Dask worker that
solved an LP, in the middle of the command's output. :func:`silent_highs` constructs that
first instance with file descriptor 1 pointed at ``/dev/null``."""
from __future__ import annotations

import os
import sys
import threading

from aequum.engines.core.imports import load

_FIRST = threading.Lock()
_BANNER_SHOWN: list[bool] = []  # set once this process has constructed an instance


def silent_highs():
    """A ``highspy.Highs`` with ``output_flag`` off, whose construction printed nothing."""
    highspy = load("highspy")
    if _BANNER_SHOWN:
        h = highspy.Highs()
    else:
        with _FIRST:
            h = _construct_muted(highspy) if not _BANNER_SHOWN else highspy.Highs()
            _BANNER_SHOWN.append(True)
    h.setOptionValue("output_flag", False)
    return h


def _construct_muted(highspy):
    """The process's first instance, with standard output (the descriptor) sent to /dev/null
    for the microseconds of its construction."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def quiet_highs(mip_abs_gap: float):
    """A HiGHS instance with no output, one thread, random_seed 0, a relative MIP gap of 0 and
    the given absolute gap."""
    h = silent_highs()
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", mip_abs_gap)
    return h
