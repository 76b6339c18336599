"""How an audit run ends: its Prefect API, its Dask workers, a user error and an interrupt.

The temporary Prefect API of a run is stopped and its workers drained and closed however the
run ends; a user or configuration error found inside the flow ends the flow run as ``Failed``
with its one-line message (no traceback) and is raised again to the caller as the same error.
"""
from __future__ import annotations

import atexit
import os
import sys
from contextlib import contextmanager

from aequum.flows import terminal


def user_failure(exc: BaseException):
    """The flow run's end for a user error: a ``Failed`` state holding the error (Prefect logs
    its message on one line, not a traceback)."""
    from prefect.states import Failed

    return Failed(message=str(exc), data=exc)


def flow_result(state):
    """What a flow run returned, or the error that ended it raised again (a user error from
    :func:`user_failure` as the same one-line error)."""
    result = state.result(raise_on_failure=False)
    if state.is_failed() and isinstance(result, BaseException):
        raise result
    if state.is_failed():
        raise RuntimeError(f"the flow run ended {state.type.value}: {state.message}")
    return result


async def drain_worker() -> None:
    """Send what a worker's Prefect services still hold (task run logs, events) to the API.
    Run on the worker's event loop by ``Client.run``."""
    from prefect._internal.concurrency.services import _QueueServiceBase

    await _QueueServiceBase.drain_all(timeout=5)


def drain_workers(address: str) -> None:
    """Every worker's last task run logs and events to the flow's Prefect API while it still
    answers (a temporary one stops when the flow ends, before the cluster closes)."""
    from distributed import Client

    with Client(address, set_as_default=False) as client:
        client.run(drain_worker)


async def finish_worker() -> None:
    """Ready a local worker process to exit at once when its cluster closes: drain its Prefect
    services (``drain_worker``), then have the process end with ``os._exit`` as its first exit
    step instead of tearing down torch and Prefect module by module, which on a loaded machine
    outlasts the nanny's 4 s and gets it killed. Run on the worker's event loop by
    ``Client.run``."""
    await drain_worker()
    atexit.register(_exit_now)  # registered last, so run first


def _exit_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def quiet_api_logging() -> None:
    """No "--- Error logging to API --- / All connection attempts failed" after a command's
    last line: Prefect's API log worker writes it to standard error (when
    ``logging.raiseExceptions``) for a log it sends after the run's temporary API has stopped
    (the run's own logs reach the API before it stops: :func:`flow_api`)."""
    import logging

    logging.raiseExceptions = False


def close_cluster(cluster) -> None:
    """Close a LocalCluster whose workers ran Prefect tasks (see ``finish_worker``)."""
    from distributed import Client

    if interrupt_signalled():  # the run's ending kills its workers at once: no close to wait on
        return
    try:
        with Client(cluster, set_as_default=False) as client:
            client.run(finish_worker)
    finally:
        try:
            cluster.close(timeout=10)
        except KeyError:  # (distributed's watch of the workers died on the removal of a worker it had
            pass  # forgotten, met renewing them in a 10M audit; the workers and scheduler are closed by then)




@contextmanager
def flow_api(server=None):
    """A Prefect API URL in the flow's settings, which Dask workers inherit with each task.

    prefect-dask ships the flow's settings with every task run. With no ``PREFECT_API_URL``
    configured, Prefect starts a temporary server in the flow's process but keeps its URL out of
    the settings, so a Dask worker that does not find the URL in its own environment (any worker
    of an external cluster) started, and left running, a temporary server of its own, and its
    task runs never reached the flow's. Here a temporary server (``flows.prefect_api``, run as
    Prefect runs its own) is started up front, its URL set for the flow, and it is stopped when
    the run ends: the workers report to it. A configured URL is used as it is, and with
    ephemeral mode off Prefect's own error stands. ``server``: a ``TemporaryAPI`` the caller
    started earlier (its start-up, seconds, then overlaps the caller's), used in place of a new
    one, or stopped unused when the settings configure an API; stopped at the end either way.

    Prefect logs a "View at <UI URL>" link to each flow run it starts. A temporary server is
    gone when the run ends and serves no UI, so its link would lead nowhere: the UI URL is set
    empty for the run (Prefect then prints no link); the run id and the warehouse holding its
    results are what the command line prints. A configured server keeps its links.
    """
    from prefect.settings import (PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED,
                                  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, PREFECT_UI_URL,
                                  temporary_settings)

    from aequum.flows.prefect_api import TemporaryAPI

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        if server is not None:
            server.stop()
        yield
        return
    from prefect._internal.concurrency.services import _QueueServiceBase

    server = server or TemporaryAPI()
    try:
        url = server.wait(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
        with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_UI_URL: ""}):
            try:
                yield
            finally:
                # the run's last logs and events reach the server before it stops, however the
                # run ended (else Prefect's log worker retries against a closed port); not after
                # an interrupt, which stopped the server with the rest of the process group
                if not interrupt_signalled():
                    _QueueServiceBase.drain_all(timeout=10, at_exit=False)
    finally:
        server.stop()



INTERRUPTED = "interrupted (SIGINT or SIGTERM) while it ran"


def interrupted_line() -> str:
    """The command's one line for an interrupted run (the log file holds the rest)."""
    log = terminal.log_path()
    return f"aequum: interrupted; the run is abandoned (details: {log})" if log else "aequum: interrupted"


def owns_the_ending() -> bool:
    """Whether an interrupt of this process's run is ended by :func:`ending_on_interrupt` (which
    marks the run abandoned: the flow's own failure path then leaves the warehouse alone; both
    rebuilding its views at once failed with a DuckDB write-write conflict)."""
    return bool(_ENDING)


class _Ending:
    """The interrupt handling of one run (:func:`ending_on_interrupt`)."""

    def __init__(self, warehouse: str, lake: str, grace: float):
        import threading

        self.warehouse, self.lake, self.grace = warehouse, lake, grace
        self.fired, self.finished, self.once = threading.Event(), threading.Event(), threading.Lock()

    def interrupted(self) -> None:
        """The run was interrupted: give its unwinding ``grace`` seconds, then end it."""
        import threading

        if not self.fired.is_set():
            self.fired.set()
            terminal.quiet()  # the processes' tracebacks as they are stopped go to the log only
            threading.Thread(target=self._watchdog, name="aequum-interrupt", daemon=True).start()

    def end(self) -> None:
        with self.once:
            if not self.finished.is_set():
                self.finished.set()
                _end_interrupted(self.warehouse, self.lake)

    def _watchdog(self) -> None:
        if not self.finished.wait(self.grace):
            self.end()
            terminal.detach_console()  # a live progress display ends here: the cursor shown again
            terminal.say(interrupted_line())
            os._exit(130)


_ENDING: list[_Ending] = []  # the run of this process that ending_on_interrupt watches


def interrupt_signalled() -> bool:
    """Whether the watched run of this process has been sent SIGINT or SIGTERM."""
    return bool(_ENDING) and _ENDING[-1].fired.is_set()


def interrupted() -> None:
    """Called where an interrupt is seen (the flow, when Prefect turned SIGTERM into its own
    TerminationSignal): the watched run is ended within its grace period however its
    unwinding goes. Nothing outside :func:`ending_on_interrupt`."""
    if _ENDING:
        _ENDING[-1].interrupted()


@contextmanager
def ending_on_interrupt(warehouse: str, lake: str, grace: float = 5.0):
    """Run the block so that SIGINT (Ctrl-C, to the whole process group) or SIGTERM ends the
    audit within seconds: the signal raises KeyboardInterrupt here (Prefect turns SIGTERM in a
    flow into its TerminationSignal, and the flow calls :func:`interrupted`), the run unwinds as
    for any error, and then, or after ``grace`` seconds if the unwinding hangs (a Dask close
    waiting for workers the signal killed), every process this one started is ended (the
    temporary Prefect API, the cluster), the run is marked ``abandoned`` and its spool folders
    are removed; a hung unwinding ends the process with exit code 130. Only in the main thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ending = _Ending(warehouse, lake, grace)

    def handler(signum, frame) -> None:
        terminal.quiet()
        if not ending.fired.is_set():
            ending.interrupted()
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _ENDING.append(ending)
    try:
        yield
    finally:
        _ENDING.remove(ending)
        for s, h in previous.items():
            signal.signal(s, h)
        if ending.fired.is_set():
            ending.end()
    if ending.fired.is_set():  # the signal's KeyboardInterrupt was swallowed on its way (Python
        raise KeyboardInterrupt  # ignores one raised in a gc callback, as Dask's scheduler installs)


def _end_interrupted(warehouse: str, lake: str) -> None:
    """What an interrupted run leaves: every process this one started ended, its runs marked
    ``abandoned``, its spool and incoming lake folders removed."""
    import shutil
    from pathlib import Path

    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        with suppress_gone():
            child.terminate()
    _gone, alive = psutil.wait_procs(children, timeout=1)
    for child in alive:
        with suppress_gone():
            child.kill()
    try:
        from aequum.flows.store.warehouse import Warehouse

        with Warehouse(warehouse, wait=5) as wh:
            wh.abandon_own_runs(INTERRUPTED)
    except Exception:  # noqa: BLE001 - the next writer marks it abandoned (its process is gone)
        pass
    for leftover in Path(lake).glob(f"*/.*.{os.getpid()}.*.tmp"):
        shutil.rmtree(leftover, ignore_errors=True)


@contextmanager
def suppress_gone():
    import psutil

    try:
        yield
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
