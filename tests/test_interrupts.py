"""An interrupted audit ends cleanly within seconds: SIGINT to the process group (Ctrl-C) during
the engines exits with the run abandoned, no process left, the temporary Prefect API stopped and
the spool removed; the temporary API does not outlive a process killed with -9; spool folders of
dead processes go at the next staging, even when the staged copy is reused."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from conftest import REPO


def group_members(pgid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def test_sigint_to_the_process_group_during_the_engines_ends_the_run_abandoned(tmp_path):
    from aequum.flows.store.warehouse import Warehouse

    raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    raw["source"]["rows"] = 8000
    raw["engines"] = {"run": ["outcome", "cst"], "cst": {"k": [15, 30, 50, 100]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}  # a temporary API
    env["PREFECT_LOGGING_LEVEL"] = "INFO"
    proc = subprocess.Popen([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", str(tmp_path / "s.yaml"),
                             "--warehouse", str(tmp_path / "wh.duckdb"), "--lake", str(tmp_path / "lake")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=env, cwd=tmp_path)
    pgid = os.getpgid(proc.pid)
    try:
        for line in proc.stderr:  # until an engine has run and CST, the long one, is under way
            if "engine outcome: 1/1 pieces done" in line:
                break
        else:
            pytest.fail("the audit ended before its engines ran")
        time.sleep(0.5)
        assert list((tmp_path / "lake" / "loan").glob(".results.*.tmp"))  # the run's spool
        assert len(group_members(pgid)) >= 3  # the command, the temporary API, the Dask processes
        t0 = time.monotonic()
        os.killpg(pgid, signal.SIGINT)
        proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(pgid, signal.SIGKILL)
    assert proc.returncode == 130 and took < 15, took
    time.sleep(0.5)
    assert group_members(pgid) == []  # no worker, nanny or Prefect server left
    assert not list((tmp_path / "lake" / "loan").glob(".*.tmp"))
    with Warehouse(tmp_path / "wh.duckdb", read_only=True) as wh:
        runs = wh.runs().to_pylist()
    assert [r["status"] for r in runs] == ["abandoned"] and "interrupted" in runs[0]["error"], runs


def test_the_temporary_api_does_not_outlive_a_killed_process(tmp_path):
    code = ("from aequum.flows.prefect_api import TemporaryAPI\n"
            "import sys, time\nserver = TemporaryAPI()\nprint(server.process.pid, flush=True)\ntime.sleep(60)\n")
    env = {**os.environ, "PREFECT_HOME": str(tmp_path)}
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    server = psutil.Process(int(parent.stdout.readline()))
    assert server.is_running()
    parent.kill()
    parent.wait()
    server.wait(timeout=15)  # it ends with its parent (psutil.TimeoutExpired otherwise)


def test_spool_folders_of_dead_processes_go_also_when_the_source_is_reused(tmp_path, warehouse):
    from test_integrity import dead_pid, small_csv_spec

    from aequum.flows.store.staging import stage

    spec = small_csv_spec(tmp_path)
    stage(spec, tmp_path, warehouse, tmp_path / "lake")
    dead = tmp_path / "lake" / "small" / f".results.{dead_pid()}.0a1b2c3d.tmp"
    alive = tmp_path / "lake" / "small" / f".results.{os.getpid()}.0a1b2c3d.tmp"
    for folder in (dead, alive):
        (folder / "cst").mkdir(parents=True)
    assert stage(spec, tmp_path, warehouse, tmp_path / "lake").reused
    assert not dead.exists() and alive.exists()



def test_an_interrupted_process_abandons_its_own_runs_only(warehouse):
    """Its running run and one it recorded failed while being interrupted (the results' write
    records the run failed first) are abandoned; a run of an earlier process with the same pid
    is not."""
    for run_id in ("running", "failed", "earlier"):
        warehouse.start_run(run_id, "s", "h", "0", {})
    warehouse.finish_run("failed", "failed", error="writing the results did not complete")
    warehouse.finish_run("earlier", "failed", error="a real failure")
    warehouse.con.execute("UPDATE audit.runs SET pid_started = pid_started - 3600 WHERE run_id = 'earlier'")
    assert sorted(warehouse.abandon_own_runs("interrupted")) == ["failed", "running"]
    status = {r["run_id"]: r["status"] for r in warehouse.runs().to_pylist()}
    assert status == {"running": "abandoned", "failed": "abandoned", "earlier": "failed"}
