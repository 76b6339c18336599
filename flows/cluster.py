"""The Dask cluster of an audit: the task runner on an existing scheduler or on a LocalCluster
started and closed here (:func:`dask_runner`), its workers started as the audit's size asks
(:func:`size_workers`) and renewed between the engines of a large audit (:func:`renew_workers`)."""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from typing import Any

import dask

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
    # the scheduler's routes as a list of this cluster's own: without bokeh, distributed appends its
    # "bokeh is missing" page to the configured list itself when a dashboard is asked, so a later
    # cluster of the same process would serve it with its dashboard off
    routes = [r for r in dask.config.get("distributed.scheduler.http.routes") if not r.endswith(".missing_bokeh")]
    quiet = {} if show else QUIET_MONITORING
    with dask.config.set({"distributed.scheduler.http.routes": routes, **quiet}):
        cluster = LocalCluster(n_workers=0, threads_per_worker=1, processes=True, preload=["aequum.flows.audit"],
                               **local_cluster_options(show))
    if show and say is not None:
        say(f"Dask dashboard (this machine only): {cluster.dashboard_link}")
    # with the dashboard off, prefect-dask's "The Dask dashboard is available at" would name a page
    # that is not there (the scheduler's HTTP server's)
    logging.getLogger("prefect.task_runner.dask").setLevel(logging.NOTSET if show else logging.WARNING)
    _OWN_CLUSTERS[cluster.scheduler_address] = (cluster, n)
    try:
        # (for every worker the run starts: sized, renewed, restarted)
        with dask.config.set(quiet):
            cluster.scale(n if workers else 1)
            yield DaskTaskRunner(address=cluster.scheduler_address)
    finally:
        _OWN_CLUSTERS.pop(cluster.scheduler_address, None)
        close_cluster(cluster)


# what a LocalCluster's processes measure for the dashboard, less often or not at all when no
# dashboard is shown: each worker's statistical profiler (every 10 ms while a task runs) and
# the system monitor's samples (CPU, memory, disk: every 0.5 s, in the flow's scheduler too).
# Idle, 2 workers and their scheduler spent 0.067 CPU-s a second with Dask's defaults, 0.049
# so. The memory monitors that pause or restart a worker keep their intervals
QUIET_MONITORING = {"distributed.worker.profile.enabled": False, "distributed.admin.system-monitor.interval": "2s",
                    "distributed.admin.system-monitor.disk": False}

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


# resident memory of a worker above which it is renewed after an engine (:func:`renew_workers`):
# a fresh worker holds 0.2-0.5 GB (0.45 GB with torch imported); at 8.4M records the regression
# left 0.92 GB and CST 0.95, and the next engine's peak came on top of it (the pricing phase
# 5.29 GB summed with 1024 here, 5.00 with 512: 4 renewals instead of 1)
RENEW_ABOVE_MB = 512


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2 ** 20


def renew_workers(cluster, say) -> bool:
    """New worker processes for the run's own cluster between two engines of a large audit,
    when a worker holds more than ``RENEW_ABOVE_MB`` resident (True when they were renewed). An
    engine's preparation over millions of records leaves its worker holding memory that no
    allocator call gives back: at 8.4M staged records, 0.6 GB above a fresh worker after CST
    (Arrow's Parquet reader keeps some of every large read outside its pool; ``release_memory``
    on every worker changed nothing, measured), and the next engine's peak came on top of it.
    The workers' Prefect task logs are sent first (:func:`drain_worker`); they are then retired
    and as many started as at the cluster's start (``Client.restart`` instead left no worker at
    its second call in a 10M audit: the restarted processes did not come back within 120 s).
    Costs the workers' start, about 4-6 s."""
    from distributed import Client

    t0 = time.perf_counter()
    n = len(cluster.worker_spec)
    with Client(cluster, set_as_default=False) as client:
        held = max(client.run(_rss_mb).values(), default=0.0)
        if held <= RENEW_ABOVE_MB:
            say(f"the workers hold at most {held:,.0f} MB: kept for the next engine (renewed above "
                f"{RENEW_ABOVE_MB:,} MB)")
            return False
        client.run(drain_worker)
        cluster.scale(0)
        deadline = time.monotonic() + 60
        while client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster.scale(n)
        client.wait_for_workers(n, timeout=300)
    say(f"a worker held {held:,.0f} MB: started {n} fresh worker(s) for the next engine in "
        f"{time.perf_counter() - t0:.1f} s")
    return True


LOST_WORKERS_GRACE = 60.0  # seconds a run waits with no Dask worker before it fails
_POLL = 0.5  # seconds between two looks at the scheduler's workers


class WorkersLost(RuntimeError):
    """The run's Dask workers were lost and none came back (one line naming them)."""


def engine_results(futures: list, address: str, say, own=None, grace: float | None = None) -> list:
    """The results of the engine tasks' Prefect ``futures`` (submitted to the scheduler at
    ``address``), in order, while watching the scheduler's workers, so that a lost worker never
    hangs the run. A worker process that dies is restarted by its nanny and Dask runs its tasks
    again (a task whose workers die ``distributed.scheduler.allowed-failures`` + 1 times fails
    with ``KilledWorker``: here :class:`WorkersLost`, naming the last worker). But a worker the
    scheduler dropped (missed heartbeats on a loaded machine: "Scheduler was unaware of this
    worker; shutting down") closes with its nanny, and the scheduler then waited with no worker
    and its tasks queued, forever (11 minutes until a SIGTERM, in one audit). So: each lost
    worker is said; when the run's own cluster (``own``, see :func:`owned_cluster`) has lost
    its workers and has no nanny left to start one, new workers are started (at most
    ``_RESTARTS`` times); and with no worker for ``grace`` seconds (default
    ``LOST_WORKERS_GRACE``) after a loss, or none ever for ``_START_GRACE`` times that, the run
    fails with :class:`WorkersLost`."""
    from distributed import Client

    grace = LOST_WORKERS_GRACE if grace is None else grace
    wrapped = [f.wrapped_future for f in futures]
    t0 = time.monotonic()
    with Client(address, set_as_default=False) as client:
        present = _workers(client, address)
        lost: list[str] = []
        empty_since, restarts = None, 0
        while not all(w.done() for w in wrapped):
            time.sleep(_POLL)
            now = _workers(client, address)
            for gone in sorted(present - now):
                lost.append(gone)
                say(f"Dask worker {gone} was lost; its tasks run again on the others or on a restarted worker")
            present = now
            if now:
                empty_since = None
                continue
            if not lost:  # the workers are still starting (in the background since the run began)
                if time.monotonic() - t0 > _START_GRACE * grace:
                    raise WorkersLost(f"no Dask worker joined the scheduler at {address} within "
                                      f"{_START_GRACE * grace:.0f} s")
                continue
            empty_since = empty_since or time.monotonic()
            if own is not None and restarts < _RESTARTS and _nannies_gone(own):
                restarts += 1
                say(f"no Dask worker left; starting {_restart(own)} new worker(s)")
            if time.monotonic() - empty_since > grace:
                raise WorkersLost(f"the run's Dask worker(s) {', '.join(lost)} were lost and none came back "
                                  f"within {grace:.0f} s")
    for w in wrapped:
        if w.status == "error":
            exc = w.exception()
            if type(exc).__name__ == "KilledWorker":
                raise WorkersLost(f"a Dask worker running an engine died {_allowed_failures() + 1} times: "
                                  f"{str(exc).splitlines()[0] if str(exc) else exc!r}")
    return [f.result() for f in futures]


_RESTARTS = 3  # times a run's own cluster is given new workers after losing them all
_START_GRACE = 5  # a run's workers that never joined: LOST_WORKERS_GRACE times this


def _allowed_failures() -> int:
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures"))


def worker_addresses(client) -> set[str]:
    """The addresses of the scheduler's workers, asked of the scheduler now (see :func:`_workers`)."""
    return set(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def _workers(client, address: str) -> set[str]:
    """The addresses of the scheduler's workers, asked of the scheduler now. Not through
    ``client.scheduler_info()``: that fetches them into the client's cached identity and returns
    the cache, which the client's periodic update (every 2 s) overwrites with an identity
    without workers; on a loaded machine the overwrite came between the two, and the run said
    both its workers were lost while they went on running its engine (the regression of a 1M
    audit), and would have failed with no worker after ``LOST_WORKERS_GRACE`` of such reads."""
    try:
        return worker_addresses(client)
    except OSError as exc:
        raise WorkersLost(f"the Dask scheduler at {address} no longer answers ({exc})") from None


_GONE = ("stopping", "stopped", "closing", "closing_gracefully", "closed", "failed")


def _nannies_gone(cluster) -> bool:
    """Whether every nanny of the local ``cluster`` is closed or closing (none will start a
    worker again; a nanny that runs restarts a worker process that died)."""
    return all(getattr(getattr(w, "status", None), "value", "closed") in _GONE for w in cluster.workers.values())


def _restart(cluster) -> int:
    """Start the local ``cluster``'s workers again (as many as it had); their number. The
    nannies that closed (or are closing: ``scale(0)`` waited on them for a minute) are taken out
    of the cluster's books, so that ``scale`` starts new ones in their place at once."""
    n = max(len(cluster.worker_spec), 1)
    for name, nanny in list(cluster.workers.items()):
        if getattr(getattr(nanny, "status", None), "value", "closed") in _GONE:
            cluster.workers.pop(name, None)
            cluster.worker_spec.pop(name, None)
    cluster.scale(n)
    return n
