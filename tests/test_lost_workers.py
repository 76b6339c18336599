"""A lost Dask worker never hangs an audit (issue 49): a worker process killed mid-engine is
restarted by its nanny and its engine runs again; a worker closed with its nanny (as the
scheduler has one close when it missed its heartbeats on a loaded machine) leaves the run's own
cluster with no worker, and the run starts new ones; on a cluster the run does not own, it
fails with one line naming the lost worker once ``LOST_WORKERS_GRACE`` passes."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO

pytestmark = pytest.mark.prefect


def loan_spec(tmp_path: Path) -> Path:
    raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    raw["source"]["rows"] = 8000
    raw["engines"] = {"run": ["outcome", "cst"], "cst": {"k": [15, 30, 50, 100]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path / "s.yaml"


def pid_of(dask_worker) -> int:
    return os.getpid()


def close_with_nanny(dask_worker) -> None:
    """What a worker does when the scheduler says it does not know it: close, nanny and all."""
    dask_worker.loop.add_callback(dask_worker.close, reason="scheduler was unaware of this worker")


def during_cst(lake: Path, address, act) -> threading.Thread:
    """A thread that, once the outcome engine's results are spooled (CST, the long one, under
    way), connects to the run's scheduler and does ``act(client)``."""
    from distributed import Client

    def watch():
        deadline = time.monotonic() + 600
        while not list(lake.glob("loan/.results.*.tmp/outcome")) and time.monotonic() < deadline:
            time.sleep(0.2)
        with Client(address(), set_as_default=False) as client:
            act(client)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def own_address() -> str:
    from aequum.flows.cluster import _OWN_CLUSTERS

    return next(iter(_OWN_CLUSTERS))


def finished_in_thread(fn, limit: float = 600):
    """``fn()`` in a thread; its result or error, or a failure if it has not ended in ``limit`` s
    (today's code waited for ever)."""
    out: dict = {}

    def call():
        try:
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), "the audit still waits on its lost workers"
    return out


def _survives(tmp_path, run_id: str, act) -> list:
    """A one-worker loan audit whose worker meets ``act(client)`` during CST: the run and its
    CST engine succeed; what ``act`` recorded (a list it appends to) is returned."""
    from aequum.flows.audit import run_audit
    from aequum.flows.store.warehouse import Warehouse

    spec, wh = loan_spec(tmp_path), str(tmp_path / "wh.duckdb")
    done = []
    during_cst(tmp_path / "lake", own_address, lambda client: act(client, done))
    out = finished_in_thread(lambda: run_audit(str(spec), warehouse=wh, lake=str(tmp_path / "lake"),
                                               run_id=run_id, workers=1))
    assert "error" not in out, out
    with Warehouse(wh, read_only=True) as w:
        assert w.run(run_id)["status"] == "succeeded"
        assert w.engine_status(run_id)["cst"]["status"] == "succeeded"
    return done


def test_a_killed_worker_process_is_restarted_and_the_run_succeeds(prefect_server, tmp_path):
    killed = _survives(tmp_path, "killed", lambda client, done: done.extend(
        os.kill(p, signal.SIGKILL) or p for p in client.run(pid_of).values()))
    assert killed


def test_a_worker_closed_with_its_nanny_is_replaced_and_the_run_succeeds(prefect_server, tmp_path):
    closed = _survives(tmp_path, "closed", lambda client, done: done.append(client.run(close_with_nanny)))
    assert closed


def test_losing_every_worker_of_an_external_cluster_fails_the_run_with_one_line(prefect_server, tmp_path,
                                                                                monkeypatch):
    from distributed import LocalCluster

    from aequum.flows import cluster
    from aequum.flows.audit import run_audit
    from aequum.flows.store.warehouse import Warehouse

    monkeypatch.setattr(cluster, "LOST_WORKERS_GRACE", 15.0)
    spec, wh = loan_spec(tmp_path), str(tmp_path / "wh.duckdb")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, preload=["aequum.flows.audit"],
                      **cluster.local_cluster_options()) as external:
        workers = []
        during_cst(tmp_path / "lake", lambda: external.scheduler_address,
                   lambda client: workers.extend(client.run(close_with_nanny)))
        out = finished_in_thread(lambda: run_audit(str(spec), warehouse=wh, lake=str(tmp_path / "lake"),
                                                   run_id="lost", dask_address=external.scheduler_address))
    error = out.get("error")
    assert isinstance(error, cluster.WorkersLost), out
    assert str(error) == (f"the run's Dask worker(s) {workers[0]} were lost and none came back within 15 s")
    with Warehouse(wh, read_only=True) as w:
        run = w.run("lost")
    assert run["status"] == "failed" and "WorkersLost" in run["error"] and workers[0] in run["error"]


def test_the_workers_are_asked_of_the_scheduler_not_read_from_the_clients_cache():
    """The client's periodic update leaves an identity without workers in its cache; a look at
    the workers read from that cache said every worker was lost (issue 48's 1M audit)."""
    from distributed import Client, LocalCluster

    from aequum.flows.cluster import _workers, local_cluster_options

    quiet = {k: v for k, v in local_cluster_options().items() if k != "host"}  # no HTTP server on port 8787
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, **quiet) as cluster, \
            Client(cluster, set_as_default=False) as client:
        async def no_workers(n_workers=0):  # what the periodic update leaves in the cache
            client._scheduler_identity = {"workers": {}}

        client._update_scheduler_info = no_workers
        assert client.scheduler_info()["workers"] == {}  # the cache, as a loaded machine read it
        assert _workers(client, cluster.scheduler_address) == set(cluster.scheduler_info["workers"])
        assert len(_workers(client, cluster.scheduler_address)) == 1


def test_closing_a_cluster_whose_watch_died_on_a_forgotten_worker_is_quiet(monkeypatch):
    """distributed's LocalCluster re-raises at its close the KeyError its watch of the workers
    died on (the removal of a worker it had already forgotten, met renewing workers in a 10M
    audit, after the run had completed): the close lets it pass; any other error still shows."""
    import contextlib

    import distributed

    from aequum.flows.run_control import close_cluster

    class Closing:
        def __init__(self, error):
            self.error, self.closed = error, False

        def close(self, timeout=None):
            self.closed = True
            raise self.error

    class Client(contextlib.nullcontext):
        def __init__(self, cluster, set_as_default=False):
            super().__init__(self)

        def run(self, fn):
            return {}

    monkeypatch.setattr(distributed, "Client", Client)
    watch = Closing(KeyError("tcp://127.0.0.1:35021"))
    close_cluster(watch)
    assert watch.closed
    with pytest.raises(OSError):
        close_cluster(Closing(OSError("other")))
