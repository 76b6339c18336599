"""PBA end to end: German credit with the paper's (100, 50) network, generated HMDA in the flow."""
from __future__ import annotations

import polars as pl
import pytest

from conftest import REPO, shared_file
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import load_spec, parse_spec
from aequum.engines.verification.engine import PBAEngine


def german(staged_data, **pba):
    shared_file("FGCE", "GermanCredit.data")
    raw = load_spec(REPO / "data" / "specs" / "german_credit_pba.yaml").model_dump(mode="json")
    raw["engines"]["pba"].update({"time_limit": None, **pba})  # no solver time limit in a test
    spec = parse_spec(raw)
    return staged_data(spec, REPO / "data" / "specs")


def check_invariants(summary: pl.DataFrame) -> None:
    s = summary
    assert ((s["verified"] + s["falsified"] + s["inconclusive"]) == s["considered"]).all()
    wide = s.pivot(on="setting", index=["attribute", "group_name", "delta"], values="pba")
    assert (wide["observed"] + wide["flipped"] <= 1 + 1e-12).all()
    for _, g in s.sort("delta").group_by("attribute", "group_name", "setting"):
        assert (g["verified"].diff().drop_nulls() <= 0).all()      # a larger box proves less


def test_german_credit_sample_with_the_papers_network(staged_data):
    data = german(staged_data, sample=120, deltas=[1.0, 3.0])
    assert data.model.hidden == [100, 50]
    out = run_serial(PBAEngine(), data, data.spec.engines.pba)
    s = pl.from_arrow(out["pba_summary"])
    assert set(s["group_name"]) == {"protected", "reference"} and s["sampled"].all()
    assert s.filter(pl.col("delta") == 1.0)["inputs"].sum() == 2 * 120
    check_invariants(s)
    # most inputs are decided without an LP (the centre, the symbolic bound or the search)
    assert s["decided_without_lp"].sum() >= 0.9 * s["considered"].sum()
    assert s["verified"].sum() > 0


@pytest.mark.slow
def test_german_credit_table_3(staged_data):
    """The paper's Table 3 form on all 1,000 applicants, δ = 1, 2, 3 (printed with -s)."""
    from aequum.flows.bench.pba import paper_table

    data = german(staged_data)
    out = run_serial(PBAEngine(), data, data.spec.engines.pba)
    s = pl.from_arrow(out["pba_summary"])
    check_invariants(s)
    assert s.filter(pl.col("setting") == "observed")["inputs"].sum() == 3 * 1000
    print(paper_table(s, {"protected": "Junior", "reference": "Senior"}))


BLACK = "race=Black or African American"


def hmda_spec(tmp_path, rows=2000):
    """The shipped HMDA spec on a few thousand generated applications, PBA only, sampled."""
    import yaml

    raw = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    raw["source"]["rows"] = rows
    raw["engines"]["run"] = ["pba"]
    # the pooled race and one of its per-value comparisons (protected[].compare: both)
    raw["engines"]["pba"].update(sample=100, batch_size=50, attributes=["race", BLACK], time_limit=None)
    raw["model"]["epochs"] = 60
    spec = tmp_path / "hmda.yaml"
    spec.write_text(yaml.safe_dump(raw))
    return spec


def test_hmda_spec_runs_pba_on_its_surrogate(staged_data, tmp_path, warehouse):
    """PBA flips race in the HMDA surrogate; its tables land in the warehouse and pba_trends
    reads them."""
    data = staged_data(hmda_spec(tmp_path))
    out = run_serial(PBAEngine(), data, data.spec.engines.pba)
    s = pl.from_arrow(out["pba_summary"])
    assert set(s["attribute"]) == {"race", BLACK} and s["sampled"].all()
    assert s.filter((pl.col("setting") == "observed") & (pl.col("delta") == 1.0))["inputs"].sum() == 200
    assert out["pba_inputs"].num_rows == 2 * 100 * 3 * 2
    check_invariants(s)
    warehouse.start_run("h-1", "hmda", "x", "0", {})
    warehouse.write_results("h-1", {name: (PBAEngine.tables[name], t) for name, t in out.items()})
    warehouse.finish_run("h-1", "succeeded", "v", "2000:ff", None)
    assert "pba_trends" in warehouse.create_views()
    trend = warehouse.con.execute("SELECT count(*), min(delta), max(delta) FROM audit.pba_trends").fetchall()
    assert trend == [(s.height, 1.0, 3.0)]


@pytest.mark.slow
@pytest.mark.prefect
def test_hmda_spec_runs_pba_on_its_surrogate_in_the_flow(prefect_server, tmp_path):
    """The shipped HMDA spec (a few thousand generated applications, sampled inputs) through
    the audit flow on Dask: PBA's tables land in the warehouse and pba_trends reads them."""
    from aequum.flows.audit import run_audit
    from aequum.flows.store.warehouse import Warehouse

    spec = hmda_spec(tmp_path)
    wh_path = str(tmp_path / "wh.duckdb")
    run_audit(str(spec), warehouse=wh_path, lake=str(tmp_path / "lake"), run_id="h-1", workers=2)
    with Warehouse(wh_path, read_only=True) as wh:
        assert wh.engine_status("h-1")["pba"]["status"] == "succeeded", wh.engine_status("h-1")
        s = pl.from_arrow(wh.result("pba_summary", "h-1"))
        rows = pl.from_arrow(wh.result("pba_inputs", "h-1"))
        trend = wh.con.execute("SELECT count(*), min(delta), max(delta) FROM audit.pba_trends").fetchall()
    assert set(s["attribute"]) == {"race", BLACK} and s["sampled"].all()
    assert s.filter((pl.col("setting") == "observed") & (pl.col("delta") == 1.0))["inputs"].sum() == 200
    assert rows.height == 2 * 100 * 3 * 2
    assert trend == [(s.height, 1.0, 3.0)]
    check_invariants(s)
