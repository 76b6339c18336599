"""prefect.yaml as the README deploys it: a real Prefect server (the session's), the `aequum`
process pool, a worker."""
from __future__ import annotations

import re

import pytest

from conftest import REPO
from aequum.flows.store.warehouse import Warehouse
from services import BIN, base_env, run

pytestmark = pytest.mark.prefect

PREFECT = str(BIN / "prefect")


def test_deploy_all_then_a_process_worker_runs_the_audit_into_the_warehouse(tmp_path, prefect_server):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    warehouse, lake = tmp_path / "wh.duckdb", tmp_path / "lake"
    env = base_env(tmp_path / "prefect-home", PREFECT_API_URL=prefect_server)
    run([PREFECT, "work-pool", "create", "aequum", "--type", "process"], env, 60)
    # the pull step's working directory is AEQUUM_HOME as it is when deploying
    run([PREFECT, "--no-prompt", "deploy", "--all"], env | {"AEQUUM_HOME": str(REPO)}, 120)
    # list endpoints send "limit": null, which the server refused with 422 (fastapi >= 0.151)
    listed = run([PREFECT, "deployment", "ls"], env, 60)
    assert "aequum-scheduled-audit/loan-nightly" in listed
    assert "aequum-scheduled-audit/hmda-weekly" in listed
    # the deployment's own spec (data/specs/loan.yaml, relative to AEQUUM_HOME), tmp outputs;
    # the worker runs elsewhere and without AEQUUM_HOME
    created = run([PREFECT, "deployment", "run", "aequum-scheduled-audit/loan-nightly",
                   "--param", f"warehouse={warehouse}", "--param", f"lake={lake}"], env, 60)
    flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", created).group(1)
    run([PREFECT, "worker", "start", "--pool", "aequum", "--run-once"], env, 300, cwd=tmp_path)
    with get_client(sync_client=True) as client:  # the session's server: other tests' runs too
        assert client.read_flow_run(flow_run_id).state_type.value == "COMPLETED"
        [subflow] = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])))
        assert subflow.state_type.value == "COMPLETED"  # the audit flow
    with Warehouse(warehouse, read_only=True) as wh:
        runs = wh.con.execute("SELECT run_id, spec_name, status FROM audit.runs").fetchall()
        assert len(runs) == 1 and runs[0][1:] == ("loan", "succeeded"), runs
        engines = wh.engine_status(runs[0][0])
        assert sorted(engines) == ["cst", "fgce", "outcome", "raguel"]
        assert {e["status"] for e in engines.values()} == {"succeeded"}, engines
