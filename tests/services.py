"""Real services for the scheduling tests: Dask processes on loopback ports, commands run to the end.

Every service runs in its own process group, is waited for with a deadline and is killed with
everything it started when the block ends.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Callable, Iterator

import psutil

from conftest import REPO

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(prefect_home: Path, **extra: str) -> dict[str, str]:
    """This checkout's code and a private Prefect home; no Prefect API unless given in ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DASK_"))}
    env.update(PYTHONPATH=str(REPO), PREFECT_HOME=str(prefect_home),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="INFO",
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180", COLUMNS="250", NO_COLOR="1")
    env.update(extra)
    return env


def wait_for(ready: Callable[[], bool], proc: subprocess.Popen, log: Path, what: str,
             timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def stop_tree(proc: subprocess.Popen) -> None:
    """Terminate a service with every process it started (some start their own sessions)."""
    try:
        leader = psutil.Process(proc.pid)
        procs = [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        with suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        with suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left in its process group
    proc.wait(timeout=5)


@contextmanager
def service(cmd: list[str], env: dict[str, str], log: Path, ready: Callable[[], bool], what: str,
            timeout: float = 120.0, cwd: Path | None = None) -> Iterator[subprocess.Popen]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd or log.parent, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(ready, proc, log, what, timeout)
        yield proc
    finally:
        stop_tree(proc)


def port_open(port: int) -> Callable[[], bool]:
    def ready() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    return ready


def run(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path = REPO) -> str:
    """Run a command to completion; its output, or an assertion error that shows it."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_tree(proc)
        raise AssertionError(f"{' '.join(cmd)} still running after {timeout:.0f} s") from None
    assert proc.returncode == 0, f"{' '.join(cmd)} exited with {proc.returncode}:\n{out[-4000:]}"
    return out
