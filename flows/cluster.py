"""The Dask cluster of an audit: the task runner on an existing scheduler or on a LocalCluster
started and closed here (:func:`dask_runner`), its workers started as the audit's size asks
(:func:`size_workers`) and renewed between the engines of a large audit (:func:`renew_workers`)."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Any

from aequum.flows.run_control import close_cluster, drain_worker


LOOPBACK = "127.0.0.1"


def dashboard_asked(dashboard: bool | None = None) -> bool:
    """Whether the run's LocalCluster serves the Dask dashboard: ``dashboard``, or when it is
    None the environment's ``AEQUUM_DASHBOARD`` (1, true, yes)."""
    if dashboard is not None:
        return dashboard
    return os.environ.get("AEQUUM_DASHBOARD", "").strip().lower() in ("1", "true", "yes", "on")


def local_cluster_options(dashboard: bool = False) -> dict:
    """The network settings of a LocalCluster that aequum starts: the scheduler, the workers and
    the nannies listen on the loopback interface only, and so does the scheduler's HTTP server
    (a free port), which serves the dashboard only when ``dashboard`` is asked. (Dask's
    ``dashboard_address=":0"`` listened on every interface, 0.0.0.0: anyone who could reach the
    machine could read the audit's task graph and data summaries; with the dashboard off, Dask
    still starts the HTTP server, on port 8787 unless a port is named.)"""
    return {"host": LOOPBACK, "dashboard_address": None,
            "scheduler_kwargs": {"dashboard": dashboard, "dashboard_address": f"{LOOPBACK}:0"}}


@contextmanager
def dask_runner(address: str | None = None, workers: int | None = None, dashboard: bool | None = None, say=None):
    """The Dask task runner of an audit: the scheduler at ``address``, or a LocalCluster of
    ``workers`` processes started here and closed at the end.

    The local workers start in the background (``scale`` does not wait for them), each
    importing the audit flow (``preload``: Prefect, the engines' core, torch) meanwhile, so their
    start overlaps the Prefect API's and the staging; the engine tasks wait for them. With the
    default number of workers only one starts here, and the others once staging shows at
    least ``ONE_WORKER_ROWS`` records (:func:`size_workers`): on two cores a second worker's
    start (about 2 CPU-s of imports) delayed the Prefect API's, which a small audit waits for,
    and a small audit's engines do not need it. At the end each worker first drains its
    Prefect log and event queues, so that it exits when asked instead of being killed after a
    timeout. The dashboard (``dashboard``, default ``AEQUUM_DASHBOARD``) is off unless asked,
    and on loopback when asked (:func:`local_cluster_options`); ``say`` is told its link."""
    from prefect_dask import DaskTaskRunner

    if address:
        yield DaskTaskRunner(address=address)
        return
    from distributed import LocalCluster

    n = workers or max(1, min(2, os.cpu_count() or 1))
    # the scheduler's HTTP server on a free loopback port: with no address it still takes 8787,
    # and a second audit at the same time warned that it was in use
    show = dashboard_asked(dashboard)
    cluster = LocalCluster(n_workers=0, threads_per_worker=1, processes=True, preload=["aequum.flows.audit"],
                           **local_cluster_options(show))
    if show and say is not None:
        say(f"Dask dashboard (this machine only): {cluster.dashboard_link}")
    _OWN_CLUSTERS[cluster.scheduler_address] = (cluster, n)
    try:
        cluster.scale(n if workers else 1)
        yield DaskTaskRunner(address=cluster.scheduler_address)
    finally:
        _OWN_CLUSTERS.pop(cluster.scheduler_address, None)
        close_cluster(cluster)


# the local clusters dask_runner started in this process, by scheduler, each with its number
# of workers once the audit's size is known
_OWN_CLUSTERS: dict[str, tuple[Any, int]] = {}


ONE_WORKER_ROWS = 20_000  # below this many staged records a default local cluster keeps one worker


def size_workers(cluster, rows: int, say) -> None:
    """Start the rest of the workers of the run's own default cluster (:func:`dask_runner`)
    when the audit has at least ``ONE_WORKER_ROWS`` staged records; their start overlaps the
    model step. Nothing for another cluster, or one that has its workers."""
    if cluster is None or rows < ONE_WORKER_ROWS:
        return
    planned, running = _OWN_CLUSTERS[cluster.scheduler_address][1], len(cluster.worker_spec)
    if running < planned:
        cluster.scale(planned)
        say(f"{rows:,} staged records: starting {planned - running} more Dask worker(s)")


def owned_cluster():
    """The flow run's Dask cluster if :func:`dask_runner` started it in this process (its
    workers are the run's alone), else None (another task runner, or an external cluster,
    whose workers may serve others)."""
    from prefect.context import get_run_context

    own = _OWN_CLUSTERS.get(getattr(get_run_context().task_runner, "address", None))
    return own[0] if own else None


def renew_workers(cluster, say) -> None:
    """New worker processes for the run's own cluster between two engines of a large audit. An
    engine's preparation over millions of records leaves its worker holding memory that no
    allocator call gives back: at 8.4M staged records, 0.6 GB above a fresh worker after CST
    (Arrow's Parquet reader keeps some of every large read outside its pool; ``release_memory``
    on every worker changed nothing, measured), and the next engine's peak came on top of it.
    The workers' Prefect task logs are sent first (:func:`drain_worker`); they are then retired
    and as many started as at the cluster's start (``Client.restart`` instead left no worker at
    its second call in a 10M audit: the restarted processes did not come back within 120 s).
    Costs the workers' start, about 6 s."""
    from distributed import Client

    t0 = time.perf_counter()
    n = len(cluster.worker_spec)
    with Client(cluster, set_as_default=False) as client:
        client.run(drain_worker)
        cluster.scale(0)
        deadline = time.monotonic() + 60
        while client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster.scale(n)
        client.wait_for_workers(n, timeout=300)
    say(f"started {n} fresh worker(s) for the next engine in {time.perf_counter() - t0:.1f} s")
