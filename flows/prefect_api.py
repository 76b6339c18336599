"""Prefect's temporary API server for one run, started as Prefect starts it (uvicorn serving
``prefect.server.api.server:create_app`` in a subprocess) but without importing the server
into this process: that import alone took about 5.6 s of a 13 s small audit, before the
subprocess spent as long importing it again.
"""
from __future__ import annotations

import http.client
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

PORT_IN_USE = 3  # uvicorn's exit code when the port is taken


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _end_with_parent() -> None:
    """In the server's process before it starts (Linux): be sent SIGTERM when the process that
    started it ends, however it ends (kill -9 included), so that no server outlives its run."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the run's own ending stops it (stop)
        pass


class TemporaryAPI:
    """A Prefect API server on a free loopback port, for the life of one run."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.port = 0
        # the server's messages go to a file: a pipe nobody reads would fill and stall it
        self.log = tempfile.TemporaryFile()
        self._start()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def _start(self) -> None:
        self.port = _free_port()
        site = Path(importlib.util.find_spec("prefect").origin).parent.parent
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(site), "--factory",
             "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "error", "--lifespan", "on"],
            env=env, stdout=subprocess.DEVNULL, stderr=self.log, preexec_fn=_end_with_parent)

    def wait(self, timeout: float) -> str:
        """Block until the server answers its health check; its API URL."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code == PORT_IN_USE:  # another process took the port in between: try another
                self._start()
                continue
            if code is not None:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"Prefect's temporary API server exited with code {code}: {err}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=1) as response:
                    if response.status == 200:
                        return self.api_url
            except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException):
                # not answering yet, or another process took the port between its choice and the
                # server's start (a Dask listener answered its own protocol): the server then
                # exits with PORT_IN_USE and starts again on another port
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Prefect's temporary API server did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        """End the server (it keeps no state a later run needs)."""
        if self.process is not None and self.process.poll() is None:
            from aequum.flows.run_control import interrupt_signalled

            self.process.terminate()
            try:  # an interrupted run ends within seconds (flows.run_control)
                self.process.wait(timeout=1 if interrupt_signalled() else 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        self.log.close()
