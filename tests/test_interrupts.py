"""An interrupted audit ends cleanly within seconds: SIGINT to the process group (Ctrl-C) or to the
process alone, or SIGTERM, during staging, the model fit or the engines, exits 130 with the run
abandoned, no process left, the temporary Prefect API stopped, the spool removed and one line on
the terminal (no traceback: the rest is in the log file it names); the temporary API does not outlive a process killed with -9; spool folders of
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


def interrupt_case(tmp_path, phase: str):
    """A spec and the line of the audit's output after which ``phase`` is under way: staging
    (the flow has begun), the model fit (HMDA's surrogate, fitted in a process of its own) or
    the engines (the first has run and CST, the long one, is under way)."""
    if phase == "model":
        raw = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
        raw["source"]["rows"] = 6000
        raw["engines"] = {"run": ["outcome"]}
        marker = "staged"
    else:
        raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
        raw["source"]["rows"] = 8000 if phase == "engines" else 1_000_000
        raw["engines"] = {"run": ["outcome", "cst"], "cst": {"k": [15, 30, 50, 100]}}
        # staging: its first batch of 250,000 records has been read (staging.stage's batch_rows)
        marker = "engine outcome: 1/1 pieces done" if phase == "engines" else "read 250,000 rows"
    raw["name"] = "loan"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path / "s.yaml", marker


@pytest.mark.parametrize("phase", ["staging", "model", "engines"])
@pytest.mark.parametrize("how", ["SIGINT to the group", "SIGINT to the process", "SIGTERM"])
def test_an_interrupt_ends_the_run_abandoned_quietly(tmp_path, how, phase):
    """Exit 130 within seconds, the run abandoned, no process left, the spool gone, and on the
    terminal no traceback: the one line names the log file that holds the rest."""
    from aequum.flows.store.warehouse import Warehouse

    spec, marker = interrupt_case(tmp_path, phase)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}  # a temporary API
    env.update(PREFECT_LOGGING_LEVEL="INFO", AEQUUM_LOG_DIR=str(tmp_path / "logs"))
    err = tmp_path / "stderr.txt"
    with open(err, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", str(spec),
                                 "--warehouse", str(tmp_path / "wh.duckdb"), "--lake", str(tmp_path / "lake")],
                                stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True, env=env, cwd=tmp_path)
    pgid = os.getpgid(proc.pid)
    try:
        while marker not in err.read_text():
            assert proc.poll() is None, f"the audit ended before {phase}:\n{err.read_text()[-3000:]}"
            time.sleep(0.05)
        # the run's spool holds the outcome's results once they are written, a moment after the line
        while phase == "engines" and not list((tmp_path / "lake" / "loan").glob(".results.*.tmp")):
            assert proc.poll() is None, f"the audit ended before its spool was written:\n{err.read_text()[-3000:]}"
            time.sleep(0.05)
        before = err.stat().st_size
        t0 = time.monotonic()
        if how == "SIGINT to the group":
            os.killpg(pgid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT if how == "SIGINT to the process" else signal.SIGTERM)
        proc.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(pgid, signal.SIGKILL)
    after = err.read_bytes()[before:].decode(errors="replace")
    logs = list((tmp_path / "logs").glob("audit-*.log"))
    assert proc.returncode == 130 and took < 15, (proc.returncode, took, after[-3000:])
    assert len(logs) == 1 and after.endswith(f"aequum: interrupted; the run is abandoned (details: {logs[0]})\n"), after
    assert "Traceback" not in after and "Error" not in after, after
    assert "write-write conflict" not in logs[0].read_text()
    time.sleep(0.5)
    assert group_members(pgid) == []  # no worker, nanny or Prefect server left
    assert not list((tmp_path / "lake").glob("*/.*.tmp"))
    with Warehouse(tmp_path / "wh.duckdb", read_only=True) as wh:
        runs = wh.runs().to_pylist()
    assert [r["status"] for r in runs] == ["abandoned"] and "interrupted" in runs[0]["error"], runs


def test_a_normal_audit_prints_no_traceback_as_it_ends(tmp_path):
    """The run's processes closing (a Dask heartbeat's CommClosedError) go to the log only."""
    spec, _ = interrupt_case(tmp_path, "engines")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(PREFECT_LOGGING_LEVEL="INFO", AEQUUM_LOG_DIR=str(tmp_path / "logs"))
    out = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", str(spec),
                          "--engines", "outcome", "--warehouse", str(tmp_path / "wh.duckdb"),
                          "--lake", str(tmp_path / "lake")], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "Error logging to API" not in out.stderr, out.stderr[-3000:]
    assert "run loan-" in out.stdout and ": succeeded" in out.stdout


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


def test_an_interrupt_whose_exception_was_swallowed_still_ends_the_run(tmp_path):
    """Python ignores an exception raised in a gc callback (Dask's scheduler installs one), so
    the signal's KeyboardInterrupt can be lost on its way: the run went on and exited 0. The
    interrupt is still seen when the watched block ends."""
    script = (
        "import os, signal, sys\n"
        "from aequum.flows.run_control import ending_on_interrupt\n"
        "try:\n"
        "    with ending_on_interrupt(sys.argv[1], sys.argv[2]):\n"
        "        try:\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "            for _ in range(10_000):\n"
        "                pass\n"
        "        except KeyboardInterrupt:\n"
        "            print('swallowed')\n"
        "        print('went on')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "    sys.exit(130)\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "wh.duckdb"), str(tmp_path / "lake")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 130 and out.stdout.split() == ["swallowed", "went", "on", "interrupted"], out
