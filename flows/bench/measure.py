"""What every benchmark measures the same way."""
from __future__ import annotations

import json
import subprocess
import sys
import time


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (VmHWM: reset at exec, unlike getrusage's
    ru_maxrss, which a child started by fork + exec inherits from its parent)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def in_fresh_process(module: str, fn: str, *args: str, env: dict | None = None, show: bool = False) -> dict:
    """``module.fn(*args)`` in a fresh Python process, so that its peak memory is its own; its
    result (JSON) is read from the line it prints marked ``RESULT``, whatever else it prints.
    ``show``: the process's standard error (its log and progress lines) goes on to this one's
    as it comes. A failure raises RuntimeError naming the step, with the end of the process's
    error output."""
    code = f"import json, {module} as m; print('RESULT ' + json.dumps(m.{fn}(*{list(args)!r})))"
    if show:
        returncode, stdout, stderr = _shown(code, env)
    else:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        returncode, stdout, stderr = out.returncode, out.stdout, out.stderr
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if returncode or not lines:
        raise RuntimeError(f"{fn}{args!r} failed (exit status {returncode}):\n{stderr.strip()[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _shown(code: str, env: dict | None) -> tuple[int, str, str]:
    """Run ``code``, its standard error copied to this process's as it comes (and its last
    lines kept for an error message)."""
    import collections
    import threading

    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    tail: collections.deque[str] = collections.deque(maxlen=200)

    def copy() -> None:
        for line in proc.stderr:
            tail.append(line)
            sys.stderr.write(line)
            sys.stderr.flush()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    stdout = proc.stdout.read()
    returncode = proc.wait()
    thread.join()
    return returncode, stdout, "".join(tail)


def every(seconds: float):
    """A progress callable printing a line to standard error at most every ``seconds``."""
    last = [time.monotonic()]

    def say(line: str) -> None:
        if time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            print(f"  {line}", file=sys.stderr, flush=True)

    return say


class TreePeak:
    """Peak of the summed resident memory of this process and all its descendants (Dask
    workers, the Prefect API server), sampled every ``interval`` seconds while in the block:
    what the machine must hold for an audit, where ``peak_rss_mb`` sees one process."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.peak_mb, self.per_process_mb = interval, 0.0, {}
        self._stop = None

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(self.interval):
            total = 0.0
            for p in [me, *me.children(recursive=True)]:
                try:
                    mb = p.memory_info().rss / 2 ** 20
                    name = " ".join(p.cmdline()[1:4])[:80]
                except psutil.Error:  # exited between the listing and the reading
                    continue
                total += mb
                self.per_process_mb[name] = max(self.per_process_mb.get(name, 0.0), mb)
            self.peak_mb = max(self.peak_mb, total)

    def __enter__(self) -> "TreePeak":
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
