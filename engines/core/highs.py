"""One way to start HiGHS: quiet, single threaded and seeded, so that every solve is
reproducible bit for bit on the same machine (PBA's twin LPs, FGCE's exact selections)."""
from __future__ import annotations

from aequum.engines.core.imports import load


def quiet_highs(mip_abs_gap: float):
    """A HiGHS instance with no output, one thread, random_seed 0, a relative MIP gap of 0 and
    the given absolute gap."""
    highspy = load("highspy")
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", mip_abs_gap)
    return h
