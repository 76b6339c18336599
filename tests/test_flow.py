"""The audit flow end to end: real Prefect (ephemeral server), real Dask LocalCluster, real files."""
from __future__ import annotations

from pathlib import Path

import pytest

from aequum.flows.audit import run_audit
from aequum.flows.store.warehouse import Warehouse

pytestmark = pytest.mark.prefect

SPEC = """
name: flowtest
source: {{kind: csv, path: d.csv, id_column: id}}
protected:
  - {{name: sex, column: sex, protected_values: [F], reference_values: [M]}}
decision: {{column: y, favourable: [1]}}
label: {{column: repaid, positive: [1]}}
features: [{{name: income, range: [0, 100000]}}]
ingest: {{max_bad_fraction: 0.2}}
engines: {{run: {engines}}}
"""


def write_case(tmp_path, engines="[outcome]", bad_rows=0):
    lines = ["id,sex,y,repaid,income"]
    for i in range(400):
        sex = "F" if i % 3 == 0 else "M"
        y = int((i * 7919) % 100 < (35 if sex == "F" else 60))
        lines.append(f"{i},{sex},{y},{int((i * 31) % 100 < 55)},{1000 + 10 * i}")
    for j in range(bad_rows):
        lines.append(f"b{j},F,1,1,not-a-number")
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "s.yaml").write_text(SPEC.format(engines=engines))
    return tmp_path / "s.yaml"


def test_audit_run_writes_results_and_rerun_replaces_them(prefect_server, tmp_path):
    spec = write_case(tmp_path, bad_rows=3)
    wh_path, lake = str(tmp_path / "wh.duckdb"), str(tmp_path / "lake")
    run_id = run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="r-1", workers=2)
    assert run_id == "r-1"
    assert not list(Path(lake).rglob(".results*"))  # the engines' spooled results are gone
    with Warehouse(wh_path, read_only=True) as wh:
        run = wh.run("r-1")
        assert run["status"] == "succeeded", run
        assert run["dataset_version"] and run["source_fingerprint"].startswith("403:")
        first = wh.result("outcome_gaps", "r-1").to_pylist()
        assert first and wh.engine_status("r-1")["outcome"]["status"] == "succeeded"
        assert wh.con.execute("SELECT count(*) FROM audit.quarantine").fetchall()[0][0] == 3
        trend = wh.con.execute("SELECT run_id, attribute FROM audit.outcome_trends").fetchall()
        assert trend == [("r-1", "sex")]
        assert wh.con.execute("SELECT run_id FROM audit.latest_runs").fetchall() == [("r-1",)]
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="r-1", workers=2)
    with Warehouse(wh_path, read_only=True) as wh:
        again = wh.result("outcome_gaps", "r-1").to_pylist()
        assert again == first
        assert wh.con.execute("SELECT count(*) FROM audit.runs").fetchall()[0][0] == 1
        assert wh.con.execute("SELECT count(*) FROM audit.datasets").fetchall()[0][0] == 1


def test_failed_engine_is_recorded_and_others_land(prefect_server, tmp_path):
    # CST needs an SCM over the features; a spec whose SCM names a parent with no members in
    # one group makes the engine fail at run time, while the outcome metrics still land.
    spec = write_case(tmp_path, engines="[outcome, cst]")
    text = spec.read_text() + (
        "scm: {equations: [{target: income, parents: [sex]}]}\n"
        "model: {kind: linear, features: [income], coefficients: {income: 1.0}, intercept: -1e9}\n")
    text = text.replace("engines: {run: [outcome, cst]}",
                        "engines: {run: [outcome, cst], cst: {k: [100000]}}")
    spec.write_text(text)
    wh_path = str(tmp_path / "wh.duckdb")
    run_audit(str(spec), warehouse=wh_path, lake=str(tmp_path / "lake"), run_id="r-2", workers=2)
    with Warehouse(wh_path, read_only=True) as wh:
        run = wh.run("r-2")
        status = wh.engine_status("r-2")
        assert run["status"] == "partial" and "cst" in run["error"]
        assert status["cst"]["status"] == "failed" and status["cst"]["error"]
        assert status["outcome"]["status"] == "succeeded"
        assert "cst_claims" not in wh.table_names() or wh.result("cst_claims", "r-2").num_rows == 0


def test_bad_spec_fails_before_any_write(prefect_server, tmp_path):
    from aequum.engines.core.spec import SpecError

    spec = write_case(tmp_path)
    spec.write_text(spec.read_text().replace("favourable: [1]", "favourable: []"))
    with pytest.raises(SpecError, match="decision.favourable"):
        run_audit(str(spec), warehouse=str(tmp_path / "wh.duckdb"), lake=str(tmp_path / "lake"))
    assert not (tmp_path / "wh.duckdb").exists()


def test_ingest_flow_stages_once(prefect_server, tmp_path):
    from aequum.flows.audit import ingest_flow

    spec = write_case(tmp_path, bad_rows=2)
    args = dict(spec_path=str(spec), warehouse=str(tmp_path / "wh.duckdb"), lake=str(tmp_path / "lake"))
    first = ingest_flow(**args)
    again = ingest_flow(**args)
    assert first["rows_staged"] == 400 and first["rows_quarantined"] == 2 and not first["reused"]
    assert again["version"] == first["version"] and again["reused"]


def test_raguel_and_fgce_run_in_the_flow(prefect_server, tmp_path):
    """The recourse engines as Dask tasks under Prefect, their tables and trend views written."""
    spec = write_case(tmp_path, engines="[raguel, fgce]")
    text = spec.read_text()
    text = text.replace("features: [{name: income, range: [0, 100000]}]",
                        "features: [{name: income, range: [0, 100000], recourse_weight: 1.0, step: 10}]")
    text = text.replace("engines: {run: [raguel, fgce]}",
                        "engines: {run: [raguel, fgce], raguel: {boundary: linear, coefficients: {income: 1.0}, "
                        "intercept: -4000, block_size: 10, sweep_tolerances: [0.5]}, fgce: {epsilon: 0.05}}")
    spec.write_text(text)
    wh_path = str(tmp_path / "wh.duckdb")
    run_audit(str(spec), warehouse=wh_path, lake=str(tmp_path / "lake"), run_id="r-3", workers=2)
    with Warehouse(wh_path, read_only=True) as wh:
        status = wh.engine_status("r-3")
        assert status["raguel"]["status"] == "succeeded" and status["fgce"]["status"] == "succeeded", status
        assert len(wh.result("raguel_ranking", "r-3")) > 0
        assert {r["group_name"] for r in wh.result("fgce_k0d0", "r-3").to_pylist()} == {"protected", "reference"}
        assert wh.con.execute("SELECT count(*) FROM audit.fgce_trends").fetchall()[0][0] == 2
        assert wh.con.execute("SELECT count(*) FROM audit.raguel_trends").fetchall()[0][0] == 2


def test_a_large_audit_runs_each_engine_on_fresh_workers_of_its_own_cluster(prefect_server, tmp_path, monkeypatch):
    """Above ``RENEW_WORKERS_ROWS`` staged records (0 here), on a cluster the run started, the
    engines run one at a time and every worker is restarted between two of them when one holds
    more than ``RENEW_ABOVE_MB`` (0 here: what one engine's preparation left in a worker is not
    held beside the next one's), with the same results; workers under it are kept; the workers
    of a cluster the run did not start are never restarted."""
    import os

    from distributed import Client, LocalCluster

    from aequum.flows import audit
    from aequum.flows import cluster as cluster_module

    spec = write_case(tmp_path, engines="[outcome, raguel]")
    spec.write_text(spec.read_text().replace(
        "features: [{name: income, range: [0, 100000]}]",
        "features: [{name: income, range: [0, 100000], recourse_weight: 1.0, step: 10}]").replace(
        "engines: {run: [outcome, raguel]}",
        "engines: {run: [outcome, raguel], raguel: {boundary: linear, coefficients: {income: 1.0}, "
        "intercept: -4000, block_size: 10, sweep_tolerances: [0.5]}}"))
    wh_path, lake = str(tmp_path / "wh.duckdb"), str(tmp_path / "lake")
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="together", workers=2)

    def pids(address):
        with Client(address, set_as_default=False) as client:
            return set(client.run(os.getpid).values())

    renewed, real = [], audit.renew_workers

    def renew(cluster, say):
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)  # both started (slow on a loaded machine)
        before = pids(cluster.scheduler_address)
        real(cluster, say)
        renewed.append((before, pids(cluster.scheduler_address)))

    monkeypatch.setattr(audit, "renew_workers", renew)
    monkeypatch.setattr(audit, "RENEW_WORKERS_ROWS", 0)
    monkeypatch.setattr(cluster_module, "RENEW_ABOVE_MB", 1 << 20)  # every worker under it: kept
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="kept", workers=2)
    assert len(renewed) == 1 and renewed[0][0] == renewed[0][1]
    monkeypatch.setattr(cluster_module, "RENEW_ABOVE_MB", 0)
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="fresh", workers=2)
    assert len(renewed) == 2
    before, after = renewed[1]
    assert len(before) == len(after) == 2 and not before & after
    with Warehouse(wh_path, read_only=True) as wh:
        for name in ("outcome", "raguel"):
            assert wh.engine_status("fresh")[name]["status"] == "succeeded"
        for table in ("outcome_gaps", "raguel_ranking"):
            together = wh.result(table, "together").drop_columns(["run_id"])
            for r in ("kept", "fresh"):
                assert together.num_rows and wh.result(table, r).drop_columns(["run_id"]).equals(together), (r, table)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="external", dask_address=cluster.scheduler_address)
    assert len(renewed) == 2


def test_a_default_cluster_starts_its_other_workers_only_for_an_audit_that_needs_them(prefect_server, tmp_path,
                                                                                     monkeypatch):
    """With the default number of workers the run's own cluster starts one; the others start
    after staging, and only when the audit has at least ``ONE_WORKER_ROWS`` staged records;
    a number given starts them all at once. The results are the same either way."""
    import os

    from aequum.flows import audit, cluster

    seen, real = [], audit.size_workers

    def size(cluster, rows, say):
        before = len(cluster.worker_spec)
        real(cluster, rows, say)
        seen.append((before, len(cluster.worker_spec)))

    monkeypatch.setattr(audit, "size_workers", size)
    spec = write_case(tmp_path, engines="[outcome]")
    wh_path, lake = str(tmp_path / "wh.duckdb"), str(tmp_path / "lake")
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="small")
    monkeypatch.setattr(cluster, "ONE_WORKER_ROWS", 0)
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="grown")
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="given", workers=2)
    n = max(1, min(2, os.cpu_count() or 1))
    assert seen == [(1, 1), (1, n), (2, 2)]
    with Warehouse(wh_path, read_only=True) as wh:
        small = wh.result("outcome_gaps", "small").drop_columns(["run_id"])
        assert small.num_rows
        for run in ("grown", "given"):
            assert wh.result("outcome_gaps", run).drop_columns(["run_id"]).equals(small)


def test_a_model_made_in_its_own_process_reaches_the_engines_packed(prefect_server, tmp_path, monkeypatch):
    """Above ``OWN_PROCESS_ROWS`` staged records (0 here) the model step runs in a process of its
    own and the flow holds its model packed (``PackedModel``: never unpickled in the flow's
    process); the engines unpack it where they run, with the same results and the same model
    fingerprint as the model made in the flow's process."""
    from aequum.flows import audit
    from aequum.flows import model_step as step

    spec = write_case(tmp_path, engines="[cst]")
    spec.write_text(spec.read_text().replace("engines: {run: [cst]}", "engines: {run: [cst], cst: {k: [5]}}") + (
        "scm: {equations: [{target: income, parents: [sex]}]}\n"
        "model: {kind: linear, features: [income], coefficients: {income: 1.0}, intercept: -3000}\n"))
    wh_path, lake = str(tmp_path / "wh.duckdb"), str(tmp_path / "lake")
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="here", workers=2)
    packed = []
    real = audit.prepare_model

    def prepare(*args, **kwargs):
        out = real(*args, **kwargs)
        packed.append(isinstance(out[0], step.PackedModel))
        return out

    monkeypatch.setattr(audit, "prepare_model", prepare)
    monkeypatch.setattr(step, "OWN_PROCESS_ROWS", 0)
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="packed", workers=2)
    assert packed == [True]
    with Warehouse(wh_path, read_only=True) as wh:
        assert wh.engine_status("packed")["cst"]["status"] == "succeeded"
        assert wh.run("packed")["model_fingerprint"] == wh.run("here")["model_fingerprint"] is not None
        for table in ("cst_claims", "cst_summary"):
            a, b = (wh.result(table, r).drop_columns(["run_id"]) for r in ("packed", "here"))
            assert a.num_rows and a.equals(b), table



def test_a_large_audit_fits_the_model_beside_the_engines_that_do_not_read_it(prefect_server, tmp_path, monkeypatch):
    """Above ``RENEW_WORKERS_ROWS`` staged records (0 here) the model step runs on a thread of
    its own while the engines that do not read the model run one at a time, then the engines
    that read it; the results are those of a small run. A model step that fails ends the run,
    recorded failed with its error."""
    import threading

    from prefect.context import FlowRunContext

    from aequum.flows import audit
    from aequum.flows import cluster as cluster_module

    spec = write_case(tmp_path, engines="[outcome, cst]")
    spec.write_text(spec.read_text().replace("engines: {run: [outcome, cst]}",
                                             "engines: {run: [outcome, cst], cst: {k: [5]}}") + (
        "scm: {equations: [{target: income, parents: [sex]}]}\n"
        "model: {kind: linear, features: [income], coefficients: {income: 1.0}, intercept: -3000}\n"))
    wh_path, lake = str(tmp_path / "wh.duckdb"), str(tmp_path / "lake")
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="small", workers=2)
    threads, real = [], audit.prepare_model

    def prepare(*args, **kwargs):  # on its thread, in the flow run's context (its settings, its API)
        threads.append((threading.current_thread().name, FlowRunContext.get() is not None))
        return real(*args, **kwargs)

    monkeypatch.setattr(audit, "prepare_model", prepare)
    monkeypatch.setattr(audit, "RENEW_WORKERS_ROWS", 0)
    monkeypatch.setattr(cluster_module, "RENEW_ABOVE_MB", 1 << 20)  # no renewal: not what is tested
    run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="large", workers=2)
    assert threads == [("aequum-model", True)]
    with Warehouse(wh_path, read_only=True) as wh:
        assert {n: e["status"] for n, e in wh.engine_status("large").items()} == {"outcome": "succeeded",
                                                                                 "cst": "succeeded"}
        for r in ("small", "large"):  # when each engine started (run_engines.started)
            assert all(e["started"] > 0 for e in wh.engine_status(r).values()), r
        for table in ("outcome_gaps", "cst_claims"):
            a, b = (wh.result(table, r).drop_columns(["run_id"]) for r in ("large", "small"))
            assert a.num_rows and a.equals(b), table

    def broken(*args, **kwargs):
        raise OSError("model file unreadable")

    monkeypatch.setattr(audit, "prepare_model", broken)
    with pytest.raises(Exception, match="model file unreadable"):
        run_audit(str(spec), warehouse=wh_path, lake=lake, run_id="broken", workers=2)
    with Warehouse(wh_path, read_only=True) as wh:
        run = wh.run("broken")
        assert run["status"] == "failed" and "model file unreadable" in run["error"]


def test_a_large_run_takes_the_light_engines_first_while_the_model_is_fitted():
    from aequum.flows.audit import LIGHT_ENGINES, light_first

    names = ["regression", "outcome", "pricing", "lenders", "reasons", "proxy", "geography"]
    assert light_first(names) == ["outcome", "lenders", "reasons", "geography", "regression", "pricing", "proxy"]
    assert light_first(["pricing", "regression"]) == ["pricing", "regression"] and light_first([]) == []
    assert set(LIGHT_ENGINES) <= {"outcome", "reasons", "geography", "lenders"}
