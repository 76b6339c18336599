"""The logit's Newton passes on an external Dask scheduler (``engines.regression.passes.Executor``,
``aequum bench regression --scheduler``): a ``dask scheduler`` and two ``dask worker`` processes
started here on 127.0.0.1, as a user starts them; the fit with its passes on 1 worker, on 2 and
on every worker the scheduler has is the serial fit bit for bit, the actors called straight or
through the scheduler, and the fit lets its actors go. No timing asserts."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from test_regression_cells import _inputs, world

from aequum.engines.regression import cells, passes
from aequum.engines.regression.logit import controlled_logit


def _wait_for(path, seconds: float = 60.0):
    end = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()):
        if time.monotonic() > end:
            raise TimeoutError(f"no scheduler file {path} after {seconds} s")
        time.sleep(0.2)
    return json.loads(path.read_text())["address"]


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """The address of a ``dask scheduler`` with two single-threaded ``dask worker`` processes,
    each in its own process (the workers import the aequum this test imports: the environment
    is passed on)."""
    tmp = tmp_path_factory.mktemp("external")
    file = tmp / "scheduler.json"
    env = {**os.environ, "DASK_LOGGING__DISTRIBUTED": "error"}
    common = dict(env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file", str(file)], **common)]
    try:
        address = _wait_for(file)
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "2",
                                       "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard",
                                       "--local-directory", str(tmp)], **common))
        yield address
    finally:
        for proc in procs[::-1]:
            proc.terminate()
        for proc in procs[::-1]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _values(fit) -> tuple:
    return (fit.coefficient, fit.se, fit.ame, fit.ame_se, fit.log_likelihood, fit.iterations,
            *fit.coefficients["coef"], *fit.coefficients["se"])


def test_passes_on_one_and_two_external_workers_are_the_serial_fit_bit_for_bit(scheduler, monkeypatch):
    from distributed import Client

    monkeypatch.setattr(cells, "PART_ROWS", 300)  # 16 parts of the 6,000 rows
    y, d, income, dti, purpose, lender, market, kind = world(seed=7, n=6000)
    kw = _inputs(y, d, income, dti, purpose, lender, market, kind)
    serial = controlled_logit(y, d, **kw)
    assert serial.converged and serial.coefficient is not None
    for direct in (True, False):  # the actors' calls straight to the workers, or through the scheduler
        with Client(scheduler, set_as_default=False, timeout="30s", direct_to_workers=direct) as client:
            client.wait_for_workers(2, timeout=120)
            workers = sorted(client.sync(client.scheduler.identity, n_workers=-1)["workers"])
            assert len(workers) == 2
            for used in ([workers[0]], workers, None):
                executor = passes.Executor(client, used)
                fit = controlled_logit(y, d, executor=executor, **kw)
                assert _values(fit) == _values(serial), (used, direct)
                # one call a worker a pass, to the actor that holds its parts
                assert executor.passes > 0 and executor.tasks == executor.passes * (1 if used and len(used) == 1 else 2)
                # the fit let its actors, and the parts they hold, go on the workers (not at a garbage collection)
                actors = lambda: any(client.run(lambda dask_worker: len(dask_worker.state.actors)).values())  # noqa: E731
                end = time.monotonic() + 30
                while actors() and time.monotonic() < end:
                    time.sleep(0.1)
                assert not actors()


def test_the_bench_checks_the_external_scheduler(scheduler):
    from aequum.flows.bench.regression import check_scheduler
    from aequum.flows.store.guard import UsageError

    assert len(check_scheduler(scheduler, 2)) == 2
    with pytest.raises(UsageError, match="the scheduler has 2 worker"):
        check_scheduler(scheduler, 3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(UsageError, match="no Dask scheduler answers there"):
        check_scheduler(closed, timeout="2s")


def test_scheduler_option_is_for_bench_regression(capsys):
    from aequum.flows.commands.cli import main

    assert main(["bench", "audit", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "--scheduler is for bench regression" in capsys.readouterr().err


def test_bench_regression_runs_each_size_of_rows(monkeypatch, capsys):
    """``aequum bench regression --rows N [N ...]`` runs the bench at each size in turn (by
    default 1M, --quick 200k); a size too small for it is one line."""
    from aequum.flows.bench import regression
    from aequum.flows.commands.cli import main

    ran = []
    monkeypatch.setattr(regression, "_run_size", lambda n, scheduler, addresses: ran.append((n, scheduler)))
    assert main(["bench", "regression", "--rows", "4000000", "10000000"]) == 0
    assert main(["bench", "regression"]) == 0
    assert main(["bench", "regression", "--quick"]) == 0
    assert ran == [(4_000_000, None), (10_000_000, None), (1_000_000, None), (200_000, None)]
    assert main(["bench", "regression", "--rows", "1000"]) == 2
    assert capsys.readouterr().err == "aequum: error: --rows 1000: bench regression needs 10,000 rows or more\n"
    assert len(ran) == 4
