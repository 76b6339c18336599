"""The temporary Prefect API server of a command-line run (flows/prefect_api.py), and engines on
an external Dask scheduler reporting to it."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import psutil
import pytest
import yaml

from conftest import REPO
from aequum.flows.store.warehouse import Warehouse
from services import BIN, base_env, free_port, port_open, service

pytestmark = pytest.mark.prefect


def test_a_command_line_audit_on_its_own_temporary_server_with_an_external_scheduler(tmp_path):
    """`aequum audit` with no Prefect server configured and its engines on an external Dask
    scheduler and worker: it starts its own server (TemporaryAPI: a free port, answered health
    checks), the worker starts none and reports the engine task runs to the flow's server, and
    the CLI drains its logs before stopping the server, leaving nothing running or complaining."""
    raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    raw["source"]["rows"] = 400
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    home = tmp_path / "prefect"
    env = base_env(home)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    worker_log = tmp_path / "dask-worker.log"
    with service([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                  "--no-dashboard"], env, tmp_path / "dask-scheduler.log", port_open(port),
                 "dask scheduler"), \
         service([str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nworkers", "1",
                  "--nthreads", "2", "--no-dashboard"], env, worker_log,
                 lambda: "Registered to" in worker_log.read_text(), "dask worker") as worker:
        out = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", str(tmp_path / "s.yaml"),
                              "--engines", "outcome,raguel", "--dask-address", address,
                              "--warehouse", str(tmp_path / "wh.duckdb"), "--lake", str(tmp_path / "lake")],
                             capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
        started = _descendants(worker.pid)
        log = worker_log.read_text()
    assert out.returncode == 0, out.stderr[-3000:]
    assert ": succeeded" in out.stdout
    for noise in ("Error logging to API", "leaked", "Traceback"):
        assert noise not in out.stderr, out.stderr[-3000:]
    # no link to the run on a server that is gone by the time it is read; the run id and the
    # warehouse holding its results instead
    assert "View at" not in out.stdout + out.stderr, (out.stdout + out.stderr)[-6000:]
    assert f"{tmp_path / 'wh.duckdb'}" in out.stdout and "run loan-" in out.stdout
    assert _servers_of(home) == []  # its server was stopped, not left behind
    assert not [c for c in started if "uvicorn" in c or "prefect.server" in c], started
    assert "Starting temporary server" not in log
    assert "Task run 'engine-" in log  # the engine tasks did run on this worker
    assert "Error logging to API" not in log  # drained before the flow's server stopped

    # what the flow's server recorded (its database stays in PREFECT_HOME)
    with sqlite3.connect(home / "prefect.db") as db:
        flows = db.execute("SELECT id, state_type FROM flow_run").fetchall()
        tasks = db.execute("SELECT name, flow_run_id, state_type FROM task_run").fetchall()
    [(flow_id, flow_state)] = flows
    assert flow_state == "COMPLETED"
    assert sorted(name.split("-")[0] for name, _, _ in tasks) == ["engine", "engine"], tasks
    assert {(f, s) for _, f, s in tasks} == {(flow_id, "COMPLETED")}, tasks
    with Warehouse(tmp_path / "wh.duckdb", read_only=True) as wh:
        [(run_id, status)] = wh.con.execute("SELECT run_id, status FROM audit.runs").fetchall()
        assert status == "succeeded"
        assert {e["status"] for e in wh.engine_status(run_id).values()} == {"succeeded"}


def test_a_command_line_audit_on_a_configured_server_keeps_its_links(tmp_path, prefect_server):
    """With PREFECT_API_URL naming a server that outlives the run, Prefect's link to the flow
    run stays in the output: it leads somewhere."""
    raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    raw["source"]["rows"] = 200
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    env = base_env(tmp_path / "prefect", PREFECT_API_URL=prefect_server)
    out = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", str(tmp_path / "s.yaml"),
                          "--engines", "outcome", "--workers", "1",
                          "--warehouse", str(tmp_path / "wh.duckdb"), "--lake", str(tmp_path / "lake")],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    ui = prefect_server.removesuffix("/api")
    assert f"View at {ui}/runs/flow-run/" in out.stdout + out.stderr, (out.stdout + out.stderr)[-3000:]
    assert _servers_of(tmp_path / "prefect") == []  # it started no server of its own


def test_a_command_line_audit_that_fails_its_checks_leaves_no_server(tmp_path):
    """The CLI starts the temporary server early (its start-up overlaps Prefect's and Dask's
    imports), but only once the spec and source pass their checks: a spec that fails them ends
    with one line, exit 2, and no server."""
    (tmp_path / "s.yaml").write_text("name: broken\nsource: {kind: csv, path: missing.csv}\n")
    env = base_env(tmp_path / "prefect")
    out = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", str(tmp_path / "s.yaml"),
                          "--warehouse", str(tmp_path / "wh.duckdb"), "--lake", str(tmp_path / "lake")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert _servers_of(tmp_path / "prefect") == []
    assert not (tmp_path / "wh.duckdb").exists()


def _servers_of(prefect_home) -> list[int]:
    """Prefect API server processes running with ``prefect_home`` as their PREFECT_HOME."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if b"prefect.server.api.server:create_app" in args and f"PREFECT_HOME={prefect_home}".encode() in env:
            found.append(int(proc.name))
    return found


def _descendants(pid: int) -> list[str]:
    """The command lines of every live process below ``pid``."""
    lines = []
    for p in psutil.Process(pid).children(recursive=True):
        with suppress(psutil.Error):  # exited (or a zombie) meanwhile
            lines.append(" ".join(p.cmdline()))
    return lines


def test_the_temporary_server_starts_on_another_port_when_its_port_is_taken_by_another_protocol(tmp_path, monkeypatch):
    """Between choosing a free port and the server binding it, another process may take it (in
    CI a Dask worker's listener did): the health check then meets a non-HTTP answer, and the
    server, unable to bind, starts again on another free port."""
    import socket
    import threading

    from aequum.flows import prefect_api

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()

    def answer_garbage():  # as a Dask comm greets: not an HTTP status line
        while True:
            try:
                conn, _ = taken.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"\x00\x00\x00*\x00\x00compression pickle-protocol\r\n\r\n")

    threading.Thread(target=answer_garbage, daemon=True).start()
    ports = [taken.getsockname()[1]]
    real = prefect_api._free_port
    monkeypatch.setattr(prefect_api, "_free_port", lambda: ports.pop() if ports else real())
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    server = prefect_api.TemporaryAPI()
    try:
        url = server.wait(180)
        assert server.port != taken.getsockname()[1] and url.endswith(f":{server.port}/api")
    finally:
        server.stop()
        taken.close()
