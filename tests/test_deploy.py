"""prefect.yaml as the README deploys it: a real Prefect server, the `aequum` process pool, a worker."""
from __future__ import annotations

import json

import pytest

from conftest import REPO
from aequum.flows.warehouse import Warehouse
from services import BIN, prefect_server, run

pytestmark = pytest.mark.prefect

PREFECT = str(BIN / "prefect")


def test_deploy_all_then_a_process_worker_runs_the_audit_into_the_warehouse(tmp_path):
    warehouse, lake = tmp_path / "wh.duckdb", tmp_path / "lake"
    with prefect_server(tmp_path) as env:
        run([PREFECT, "work-pool", "create", "aequum", "--type", "process"], env, 60)
        # the pull step's working directory is AEQUUM_HOME as it is when deploying
        run([PREFECT, "--no-prompt", "deploy", "--all"], env | {"AEQUUM_HOME": str(REPO)}, 120)
        # list endpoints send "limit": null, which the server refused with 422 (fastapi >= 0.151)
        listed = run([PREFECT, "deployment", "ls"], env, 60)
        assert "aequum-scheduled-audit/loan-nightly" in listed
        assert "aequum-scheduled-audit/hmda-weekly" in listed
        run([PREFECT, "work-pool", "ls"], env, 60)
        # the deployment's own spec (data/specs/loan.yaml, relative to AEQUUM_HOME), tmp outputs;
        # the worker runs elsewhere and without AEQUUM_HOME
        run([PREFECT, "deployment", "run", "aequum-scheduled-audit/loan-nightly",
             "--param", f"warehouse={warehouse}", "--param", f"lake={lake}"], env, 60)
        run([PREFECT, "worker", "start", "--pool", "aequum", "--run-once"], env, 300, cwd=tmp_path)
        completed = json.loads(run([PREFECT, "flow-run", "ls", "--state-type", "COMPLETED", "-o", "json"],
                                   env, 60))
        assert len(completed) == 2, completed  # the deployment's flow run and its audit subflow
    with Warehouse(warehouse, read_only=True) as wh:
        runs = wh.con.execute("SELECT run_id, spec_name, status FROM audit.runs").fetchall()
        assert len(runs) == 1 and runs[0][1:] == ("loan", "succeeded"), runs
        engines = wh.engine_status(runs[0][0])
        assert sorted(engines) == ["cst", "fgce", "outcome", "raguel"]
        assert {e["status"] for e in engines.values()} == {"succeeded"}, json.dumps(engines, default=str)
