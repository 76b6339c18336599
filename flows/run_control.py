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


def close_cluster(cluster) -> None:
    """Close a LocalCluster whose workers ran Prefect tasks (see ``finish_worker``)."""
    from distributed import Client

    try:
        with Client(cluster, set_as_default=False) as client:
            client.run(finish_worker)
    finally:
        cluster.close(timeout=10)




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
    """
    from prefect.settings import (PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED,
                                  PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, temporary_settings)

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
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield
            # the run's last logs and events reach the server before it stops (else Prefect's
            # log worker retries against a closed port)
            _QueueServiceBase.drain_all(timeout=10, at_exit=False)
    finally:
        server.stop()

