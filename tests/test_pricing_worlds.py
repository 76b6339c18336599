"""The pricing engine on the generated HMDA LAR, whose pricer (engines.generators.hmda_pricing)
prices each loan by its risk, with the pricing_penalty world's planted add-on (0.25 points on
the rate spread of Black and of Hispanic borrowers' loans) or without it (the null world).

The public LAR lacks the credit score the pricer reads, and that score is lower on average for
Black applicants: on the LAR, the null world leaves a significant controlled difference, an
unexplained disparity that is never evidence by itself. The lender's records hold the score:
there the null world flags nothing and the add-on is recovered, and the score's strength
measured there (its partial R-squared with group and price) is the bound that tells the LAR's
fair differences from the planted add-on (decision.bounds; evidence for the right groups only)."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
import yaml

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import parse_spec
from aequum.engines.core.validation import validate_batch
from aequum.engines.generators.hmda import hmda_truth, iter_hmda_batches, iter_lender_batches
from aequum.engines.generators.hmda_pricing import ADD_ON
from aequum.engines.pricing.engine import PricingEngine

from conftest import REPO

ROWS, SEED = 40_000, 11
PRICES = ["rate_spread", "interest_rate"]  # the add-on's fields
PENALISED = {"race", "race=Black or African American", "ethnicity"}


def evidence(row) -> bool:
    """What findings_pricing.sql calls evidence on records lacking inputs of the decisions: a
    significant adverse difference that survives the stated bound on the inputs they lack."""
    return bool(row["significant"] and row["adverse"] and row["survives_bound"])


def lar_run(world: str, bounds: list[dict] | None = None) -> dict[tuple[str, str], dict]:
    raw = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    raw["source"].update(rows=ROWS, seed=SEED, world=world)
    raw["decision"]["bounds"] = bounds or []
    spec = parse_spec(raw)
    good, offset, categories = [], 0, {}
    for lar, _ in iter_hmda_batches(ROWS, SEED, 20_000, world=world):
        res = validate_batch(lar, spec, offset)
        offset += res.rows
        good.append(res.good)
        for name, seen in res.categories.items():  # the lender and market levels, as staging records them
            categories.setdefault(name, set()).update(seen)
    data = AuditData(spec, pa.concat_tables(good), {k: sorted(v) for k, v in categories.items()})
    out = run_serial(PricingEngine(), data, spec.engines.pricing)
    return {(r["attribute"], r["field"]): r for r in out["pricing_estimates"].to_pylist()}


def measured_bounds(world: str) -> list[dict]:
    """decision.bounds from the lender's records of ``world``: the credit score's partial R-squared
    per group and price field (rounded up), the internal race comparison (Black against White)
    for the LAR's pooled race and its Black comparison, ethnicity for ethnicity, and the largest
    of each for every other comparison."""
    strength = internal(world, strength=True)
    up = lambda x: math.ceil(x * 1000) / 1000  # noqa: E731
    out = []
    for field in PRICES:
        rows = {a: r for (a, f), r in strength.items() if f == field}
        for attribute, names in (("race", ["race", "race=Black or African American"]), ("ethnicity", ["ethnicity"])):
            r = rows[attribute]
            out.append({"outcome": field, "attributes": names, "r2_group": up(r["r2dxj_x"]),
                        "r2_outcome": up(r["r2yxj_dx"]), "source": f"lender's records, {world}"})
        out.append({"outcome": field, "r2_group": up(max(r["r2dxj_x"] for r in rows.values())),
                    "r2_outcome": up(max(r["r2yxj_dx"] for r in rows.values())), "source": f"lender's records, {world}"})
    return out


@pytest.fixture(scope="module")
def lar():
    return {world: lar_run(world, measured_bounds(world)) for world in ("null", "pricing_penalty")}


def test_the_planted_add_on_is_evidence_for_black_and_hispanic_borrowers_only(lar):
    est = lar["pricing_penalty"]
    for attribute in PENALISED:
        for field in PRICES:
            row = est[(attribute, field)]
            assert evidence(row), row
            assert 0.5 * ADD_ON < row["estimate"] < 1.5 * ADD_ON
    for (attribute, field), row in est.items():
        if evidence(row):  # only the penalised groups, alone or in an intersection
            assert field in PRICES and any(a in PENALISED for a in attribute.split("&")), (attribute, field)
    for attribute in ("sex", "race=Asian", "tract"):
        assert not any(evidence(est[(attribute, f)]) for f in PRICES), attribute
    # the costs carry no add-on
    assert not any(evidence(r) for (a, f), r in est.items() if f not in PRICES)
    # compared within market and lender as the regression is (the HMDA spec's), tested with
    # lender-clustered errors: the interval is the cluster one, wider than the classical
    race = est[("race", "rate_spread")]
    assert race["fixed_effects"] == "derived_msa_md, lei" and race["cluster"] == "lei" and race["clusters"] > 100
    assert race["ci_high"] - race["ci_low"] > 2 * 1.96 * race["se"] * 0.99 and race["se_cluster"] > 0


def test_the_null_world_is_no_evidence(lar):
    """Significant differences the omitted credit score makes do not survive the score's measured
    strength: unexplained disparities, never evidence."""
    est = lar["null"]
    assert not any(evidence(r) for r in est.values())
    black = est[("race=Black or African American", "rate_spread")]
    assert black["significant"] and black["adverse"] and black["survives_bound"] is False
    assert black["estimate"] < 0.5 * ADD_ON and black["bound_source"] == "lender's records, null"
    assert all(r["estimate"] is not None for (a, f), r in est.items() if a in ("race", "ethnicity", "sex"))


def internal(world: str, strength: bool = False) -> dict[tuple[str, str], dict]:
    """The lender's records (the credit score among them) with the LAR's prices and loan type: the
    pricing estimates, or (``strength``) the credit score's partial R-squared per unit and field."""
    lender = pa.Table.from_batches([b for b, _ in iter_lender_batches(ROWS, SEED, ROWS, world=world)])
    lar = pa.Table.from_batches([b for b, _ in iter_hmda_batches(ROWS, SEED, ROWS, world=world)])
    table = lender
    for c in ("loan_type", "lien_status", *PRICES):
        table = table.append_column(c, lar[c])
    raw = {"name": "internal", "source": {"kind": "csv", "path": "x.csv", "id_column": None},
           "protected": [{"name": "race", "column": "derived_race", "protected_values": ["Black or African American"],
                          "reference_values": ["White"], "unmapped": "exclude"},
                         {"name": "ethnicity", "column": "derived_ethnicity",
                          "protected_values": ["Hispanic or Latino"], "reference_values": ["Not Hispanic or Latino"],
                          "unmapped": "exclude"}],
           "decision": {"column": "action_taken", "favourable": ["1", "2"], "unfavourable": ["3"],
                        "out_of_scope": ["4", "5", "6"], "inputs": "complete"},
           "features": [{"name": c} for c in ("log_income", "debt_to_income", "ltv", "credit_score")]
           + [{"name": "loan_type", "type": "categorical", "categories": ["1", "2", "3", "4"]}],
           "pricing": {"fields": PRICES, "rate_spread": "rate_spread", "lien": "lien_status"},
           "engines": {"run": ["pricing"], "pricing": {"intersections": []}}}
    spec = parse_spec(raw)
    res = validate_batch(table, spec, 0)
    out = run_serial(PricingEngine(), AuditData(spec, res.good), spec.engines.pricing)
    if strength:
        return {(r["attribute"], r["field"]): r for r in out["pricing_input_strength"].to_pylist()
                if r["control"] == "credit_score"}
    return {(r["attribute"], r["field"]): r for r in out["pricing_estimates"].to_pylist()}


def test_with_the_credit_score_the_null_world_flags_nothing_and_the_add_on_is_recovered():
    null = internal("null")
    assert not any(r["significant"] for r in null.values()), [k for k, r in null.items() if r["significant"]]
    assert null[("race", "rate_spread")]["controls"] == "log_income, debt_to_income, ltv, credit_score, loan_type"
    penalty = internal("pricing_penalty")
    for attribute in ("race", "ethnicity"):
        for field in PRICES:
            row = penalty[(attribute, field)]
            assert row["significant"] and row["adverse"] and row["robust"]
            # borrowers both Black and Hispanic carry the add-on once, which the additive model
            # (the other attribute's groups held beside the group) reads as a little less for each
            assert abs(row["estimate"] - ADD_ON) < 0.03 and row["ci_high"] - row["ci_low"] < 0.06, row


def test_the_truth_names_the_overcharged_loans():
    truth = hmda_truth(20_000, SEED, "pricing_penalty")
    lar = pa.Table.from_batches([b for b, _ in iter_hmda_batches(20_000, SEED, 20_000, world="pricing_penalty")])
    race, eth = np.asarray(lar["derived_race"]), np.asarray(lar["derived_ethnicity"])
    originated = np.asarray(lar["action_taken"]) == "1"
    penalised = (race == "Black or African American") | (eth == "Hispanic or Latino")
    over = np.asarray(truth["overcharged"].to_numpy(zero_copy_only=False))
    assert (over == (originated & penalised)).all() and over.sum() > 500
    points = np.asarray(truth["rate_spread_overcharge"].to_numpy(zero_copy_only=False), np.float64)
    assert np.isnan(points[~originated]).all() and (points[over] == ADD_ON).all() and (points[originated & ~over] == 0).all()
    assert not any(truth["harmed"].to_pylist())  # the decisions are the null world's
    assert truth["decision"].equals(hmda_truth(20_000, SEED, "null")["decision"])
    null = hmda_truth(20_000, SEED, "null")
    assert not any(null["overcharged"].to_pylist())
    # the prices differ from the null world's by the add-on exactly where it applies
    base = pa.Table.from_batches([b for b, _ in iter_hmda_batches(20_000, SEED, 20_000, world="null")])
    priced = np.isin(np.asarray(lar["action_taken"]), ["1", "2"]) & (np.asarray(lar["rate_spread"]) != "Exempt")
    diff = np.asarray(lar["rate_spread"])[priced].astype(float) - np.asarray(base["rate_spread"])[priced].astype(float)
    assert np.allclose(diff, np.where(penalised[priced], ADD_ON, 0.0), atol=1.5e-3)


def test_an_hmda_audit_writes_the_tables_the_findings_and_the_report(tmp_path):
    """Through the real staging and warehouse: audit.pricing_estimates and pricing_hpml, their
    findings rows (the findings contract), the trend view and the report section."""
    from audit_tables import small_audit
    from aequum.flows.commands.report import write_report
    from aequum.flows.store.warehouse import Warehouse

    def edit(raw):
        raw.pop("model", None)
        raw["source"]["world"] = "pricing_penalty"

    path = small_audit(tmp_path, rows=20_000, engines=["pricing"], run_id="hmda-pricing", spec_name="hmda.yaml",
                       edit=edit)
    with Warehouse(path, read_only=True) as wh:
        from test_findings import CONTRACT, columns

        assert [c for c, _ in columns(wh, "findings_pricing")] == [*CONTRACT]
        est = wh.con.sql("SELECT * FROM audit.pricing_estimates").to_arrow_table().to_pylist()
        hpml = wh.con.sql("SELECT * FROM audit.pricing_hpml").to_arrow_table().to_pylist()
        found = wh.con.sql("SELECT * FROM audit.findings WHERE engine = 'pricing'").to_arrow_table().to_pylist()
        trends = wh.con.execute("SELECT count(*) FROM audit.pricing_trends").fetchall()[0][0]
    assert len(found) == len(est) + len(hpml) and trends == len(est) and all(f["statement"] for f in found)
    (black,) = [f for f in found if f["attribute"] == "race=Black or African American"
                and f["finding"] == "adjusted rate_spread difference"]
    row = next(r for r in est if r["attribute"] == black["attribute"] and r["field"] == "rate_spread")
    # the LAR lacks the credit score, and this spec states no bound on it: flagged, not evidence
    assert black["flagged"] and not black["evidence"] and black["value"] == row["estimate"]
    assert black["statement"].startswith("Among originated loans, after controlling for income, ")
    assert "the rate_spread of Black or African American applicants was" in black["statement"]
    assert "higher than that of White applicants (" in black["statement"]  # race=Black's reference
    assert "An unexplained disparity for review, not evidence: the records lack" in black["statement"]
    # one price, one claim: the interest rate supports the rate spread's finding
    (rate,) = [f for f in found if f["attribute"] == "race=Black or African American"
               and f["finding"] == "adjusted interest_rate difference"]
    assert not rate["headline"] and not rate["flagged"] and "Counted once" in rate["statement"]
    assert "  " not in black["statement"]
    assert black["basis"].startswith("controls: income, combined_loan_to_value_ratio") and \
        black["estimand"] == "adjusted disparity"
    (share,) = [f for f in found if f["attribute"] == "race=Black or African American" and f["measure"] == "hpml_ratio"]
    assert share["estimand"] == "raw disparity" and "were higher-priced (rate spread at least 1.5" in share["statement"]
    text = write_report(path, "hmda-pricing", tmp_path / "pricing.html").read_text()
    assert 'id="engine-pricing"' in text and "Higher-priced loans (Reg Z 1026.35" in text
    assert "Black or African American against White" in text
