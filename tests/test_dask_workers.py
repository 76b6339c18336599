"""An audit on an external Dask scheduler and worker reports to the flow's Prefect API.

The audit runs as a user would start it (no PREFECT_API_URL: Prefect's temporary server in the
flow's process). The Dask worker must not start a Prefect server of its own, and the engine task
runs it executes must be recorded by the flow's server.
"""
from __future__ import annotations

import json
import sys
from contextlib import suppress

import psutil
import pytest

from conftest import REPO
from aequum.flows.warehouse import Warehouse
from services import BIN, base_env, free_port, port_open, run, service

pytestmark = pytest.mark.prefect

DRIVER = """
import json, sys, time
from prefect import get_client
from aequum.flows.audit import run_audit

spec, warehouse, lake, address = sys.argv[1:]
run_id = run_audit(spec, warehouse=warehouse, lake=lake, engines=["outcome", "raguel"],
                   dask_address=address)
with get_client(sync_client=True) as client:  # the flow's temporary server, still up
    deadline = time.monotonic() + 30
    while True:
        flows, tasks = client.read_flow_runs(), client.read_task_runs()
        if len(tasks) >= 2 and all(t.state_type and t.state_type.value == "COMPLETED" for t in tasks):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
print("RESULT " + json.dumps({
    "run_id": run_id,
    "flow_runs": [{"id": str(f.id), "state": f.state_type.value} for f in flows],
    "task_runs": [{"name": t.name, "flow_run_id": str(t.flow_run_id),
                   "state": t.state_type.value if t.state_type else None} for t in tasks]}))
"""


def descendants(pid: int) -> list[str]:
    """The command lines of every live process below ``pid``."""
    lines = []
    for p in psutil.Process(pid).children(recursive=True):
        with suppress(psutil.Error):  # exited (or a zombie) meanwhile
            lines.append(" ".join(p.cmdline()))
    return lines


def test_audit_on_an_external_scheduler_reports_to_the_flows_prefect_api(tmp_path):
    spec = tmp_path / "loan.yaml"
    spec.write_text((REPO / "data" / "specs" / "loan.yaml").read_text().replace("rows: 5000", "rows: 1200"))
    env = base_env(tmp_path / "prefect-home")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    worker_log = tmp_path / "dask-worker.log"
    with service([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                  "--no-dashboard"], env, tmp_path / "dask-scheduler.log", port_open(port),
                 "dask scheduler"), \
         service([str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nworkers", "1",
                  "--nthreads", "2", "--no-dashboard"], env, worker_log,
                 lambda: "Registered to" in worker_log.read_text(), "dask worker") as worker:
        out = run([sys.executable, "-c", DRIVER, str(spec), str(tmp_path / "wh.duckdb"),
                   str(tmp_path / "lake"), address], env, 300, cwd=tmp_path)
        started = descendants(worker.pid)
        log = worker_log.read_text()
    assert not [c for c in started if "uvicorn" in c or "prefect.server" in c], started
    assert "Starting temporary server" not in log
    assert "Task run 'engine-" in log  # the engine tasks did run on this worker

    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    [flow_run] = result["flow_runs"]
    tasks = result["task_runs"]
    assert flow_run["state"] == "COMPLETED"
    assert sorted(t["name"].split("-")[0] for t in tasks) == ["engine", "engine"], tasks
    assert {(t["flow_run_id"], t["state"]) for t in tasks} == {(flow_run["id"], "COMPLETED")}, tasks
    with Warehouse(tmp_path / "wh.duckdb", read_only=True) as wh:
        assert wh.run(result["run_id"])["status"] == "succeeded"
        assert {e["status"] for e in wh.engine_status(result["run_id"]).values()} == {"succeeded"}
