"""What the benchmarks measure with: the process tree's memory."""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import psutil
import pytest

from aequum.flows.bench.measure import TreePeak, process_roles


def test_tree_peak_counts_the_memory_of_child_processes_by_role_and_phase():
    code = "import time; x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(1.5)"
    with TreePeak(interval=0.05) as tree:
        own = psutil.Process().memory_info().rss / 2 ** 20
        own_pss = psutil.Process().memory_full_info().pss / 2 ** 20
        tree.mark("child")
        subprocess.run([sys.executable, "-c", code], check=True)
        tree.mark("after")
        time.sleep(0.3)
    assert tree.peak_mb > own + 280  # the child's 300 MB, which the parent's own peak never sees
    assert tree.peak_phase == "child" and tree.peak_pss_phase == "child"
    # a page of its own is counted whole in its PSS too; shared library pages are divided
    assert own_pss + 280 < tree.peak_pss_mb <= tree.peak_mb
    got = tree.figures()
    assert got["roles"]["other"]["rss_mb"] > 280 and got["roles"]["other"]["rss_phase"] == "child"
    assert 280 < got["roles"]["other"]["pss_mb"] <= got["roles"]["other"]["rss_mb"]
    assert list(got["roles"])[0] == "flow" and got["roles"]["flow"]["pss_mb"] <= got["roles"]["flow"]["rss_mb"]
    assert got["phases"]["after"]["rss_mb"] < got["phases"]["child"]["rss_mb"] - 250
    assert got["phases"]["after"]["roles"].get("other", {"rss_mb": 0})["rss_mb"] < 200  # (the suite's servers)
    assert got["sampling"]["samples"] > 5 and got["sampling"]["pss_rounds"] >= 1


def test_tree_peak_counts_the_cpu_of_child_processes_by_role_and_phase():
    """A child that spins for a second of CPU in phase "busy" (its process still running at
    the samples that see it) and sleeps in "idle": its seconds are counted there, by role."""
    code = ("import time, sys\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"
            "sys.stdout.write('spun\\n'); sys.stdout.flush(); time.sleep(2.0)")
    with TreePeak(interval=0.05) as tree:
        tree.mark("busy")
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "spun"
        time.sleep(0.3)  # a sample after the spinning
        tree.mark("idle")
        child.wait()
    cpu = tree.figures()["cpu"]
    assert 0.9 < cpu["phases"]["busy"]["other"] < 3.0
    assert cpu["phases"].get("idle", {}).get("other", 0.0) < 0.3
    assert cpu["roles"]["other"] > 0.9 and "flow" in cpu["roles"]
    assert cpu["total_s"] == pytest.approx(sum(cpu["roles"].values()))


def _sleep(seconds):
    time.sleep(seconds)


def test_the_processes_of_an_audit_are_told_apart_by_role():
    """A spawned child (the model's, ``flows.child_process``) and the pids the Dask nannies
    name; anything else is ``other``."""
    ctx = multiprocessing.get_context("spawn")
    spawned = ctx.Process(target=_sleep, args=(3,))
    spawned.start()
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    try:
        roles = {p.pid: r for p, r in process_roles(psutil.Process(), {worker.pid: 2}).items()}
    finally:
        for p in (plain, worker):
            p.kill(), p.wait()
        spawned.kill(), spawned.join()
    assert roles[os.getpid()] == "flow" and roles[spawned.pid] == "model child"
    assert roles[plain.pid] == "other" and roles[worker.pid] == "dask worker 2"


def test_the_fork_server_of_the_workers_has_a_role_of_its_own():
    """Workers forked from a fork server (Dask's multiprocessing-method ``forkserver``): the
    server is not the model's child."""
    from multiprocessing import forkserver

    forked = multiprocessing.get_context("forkserver").Process(target=_sleep, args=(2,))
    forked.start()
    try:
        server = forkserver._forkserver._forkserver_pid
        roles = {p.pid: r for p, r in process_roles(psutil.Process(), {forked.pid: 1}).items()}
    finally:
        forked.join()
    assert roles[server] == "dask fork server" and roles[forked.pid] == "dask worker 1"


def test_a_step_in_a_fresh_process_returns_its_result_or_names_its_failure():
    from aequum.flows.bench.measure import in_fresh_process

    assert in_fresh_process("json", "loads", "[1, 2]") == [1, 2]
    with pytest.raises(RuntimeError, match=r"(?s)loads\('not json',\) failed \(exit status 1\).*JSONDecodeError"):
        in_fresh_process("json", "loads", "not json")


def test_the_fixed_cost_floors_are_each_the_fastest_start_and_the_servers_stop(monkeypatch):
    """``bench audit``'s floors: each the fastest of its runs; every temporary API started is
    stopped, also when it fails to answer; the cluster's and the imports' code runs in a fresh
    interpreter with the environment given."""
    import itertools

    from aequum.flows import prefect_api
    from aequum.flows.bench import audit as bench_audit

    clock = itertools.count()
    monkeypatch.setattr(bench_audit.time, "perf_counter", lambda: next(clock))
    started, stopped, ran = [], [], []

    class FakeAPI:
        def __init__(self):
            started.append(self)

        def wait(self, timeout):
            next(clock)  # the answer takes one tick more in each run
            for _ in range(len(started) - 1):
                next(clock)
            return "http://127.0.0.1:1/api"

        def stop(self):
            stopped.append(self)

    def run(args, check, capture_output, env):
        ran.append((args[0], args[1], env["MARK"]))
        if "LocalCluster" in args[2]:
            next(clock)

    monkeypatch.setattr(prefect_api, "TemporaryAPI", FakeAPI)
    monkeypatch.setattr(bench_audit.subprocess, "run", run)
    floors = bench_audit.start_floors({"MARK": "x"})
    assert floors == {"server_start_s": 2, "cluster_start_s": 2, "flow_import_s": 1}
    assert len(started) == bench_audit.FIXED_COST_REPEAT and stopped == started
    assert {r for r in ran} == {(sys.executable, "-c", "x")}
    # the cluster of a small audit: one worker (flows.cluster.dask_runner with the default number)
    assert "n_workers=1," in bench_audit._CLUSTER_START and "wait_for_workers(1)" in bench_audit._CLUSTER_START
    assert "aequum.flows.audit" in bench_audit._CLUSTER_START

    class Silent(FakeAPI):
        def wait(self, timeout):
            raise RuntimeError("did not answer")

    started.clear(), stopped.clear()
    monkeypatch.setattr(prefect_api, "TemporaryAPI", Silent)
    with pytest.raises(RuntimeError, match="did not answer"):
        bench_audit.start_floors({"MARK": "x"})
    assert stopped == started and len(started) == 1


def test_the_fixed_cost_uses_the_command_lines_prefect_settings_and_leaves_the_process_its_own(monkeypatch, tmp_path):
    """The servers of the fixed cost run under the command line's PREFECT_HOME and logging
    level; the stages the bench measures afterwards see the bench process's settings again."""
    import os

    from aequum.flows.bench import audit as bench_audit

    monkeypatch.delenv("PREFECT_HOME", raising=False)
    monkeypatch.delenv("PREFECT_LOGGING_LEVEL", raising=False)
    seen = {}
    monkeypatch.setattr(bench_audit, "_fixed_cost", lambda tmp: seen.update(
        home=os.environ.get("PREFECT_HOME"), level=os.environ.get("PREFECT_LOGGING_LEVEL")) or {"ok": True})
    assert bench_audit.fixed_cost(tmp_path) == {"ok": True}
    assert seen["home"] and "aequum-prefect" in seen["home"] and seen["level"] == "INFO"
    assert "PREFECT_HOME" not in os.environ and "PREFECT_LOGGING_LEVEL" not in os.environ
