"""What every benchmark measures the same way."""
from __future__ import annotations


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (VmHWM: reset at exec, unlike getrusage's
    ru_maxrss, which a child started by fork + exec inherits from its parent)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")
