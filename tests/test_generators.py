"""Built-in generators: determinism, the HMDA LAR schema and quirks, ground truth, streaming."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import shared_file
from aequum.engines.generators.hmda import (DTI_BINS, INTERVENTIONS, LAR_COLUMNS, MECHANISM, TRUTH, VALUE_SETS, data_browser_name,
                                     iter_hmda_batches, normalise_column_name)
from aequum.engines.generators.loan import generate_loan, iter_loan_batches


def hmda(n=60_000, seed=0, batch_rows=25_000, spelling="snapshot"):
    parts = list(iter_hmda_batches(n, seed, batch_rows, spelling))
    return (pl.from_arrow(pa.Table.from_batches([p[0] for p in parts])),
            pl.from_arrow(pa.Table.from_batches([p[1] for p in parts])))


def test_hmda_schema_is_the_public_lar():
    lar, _ = hmda(5_000)
    assert lar.columns == LAR_COLUMNS and len(LAR_COLUMNS) == 99
    assert all(t == pl.Utf8 for t in lar.dtypes)
    for col in ("derived_race", "derived_ethnicity", "derived_sex", "action_taken", "debt_to_income_ratio",
                "applicant_age", "loan_type"):
        assert set(lar[col].unique()) <= set(VALUE_SETS[col]), col


def test_hmda_quirks():
    lar, _ = hmda(60_000)
    assert (lar["income"] == "NA").sum() > 0 and (lar["property_value"] == "Exempt").sum() > 0
    assert {"NA", "Exempt"} <= set(lar["debt_to_income_ratio"].unique())
    assert {"36", "49", "<20%", "50%-60%"} <= set(lar["debt_to_income_ratio"].unique())
    amounts = lar["loan_amount"].cast(pl.Int64)
    assert (amounts % 10_000 == 5_000).all()                       # $10k-bin midpoints
    income = lar.filter(pl.col("income") != "NA")["income"].cast(pl.Int64)
    assert 40 < income.median() < 200                              # thousands of dollars
    assert lar["census_tract"].str.len_chars().eq(11).all() and lar["state_code"].str.starts_with("0").any()
    assert (lar["co_applicant_age"] == "9999").any()
    assert lar.filter(pl.col("action_taken") != "3")["denial_reason_1"].eq("10").all()
    assert (lar["applicant_race_2"] == "").all()


def test_hmda_marginals_follow_the_published_gaps():
    lar, _ = hmda(100_000, batch_rows=50_000)
    decided = lar.filter(pl.col("action_taken").is_in(["1", "2", "3"]))
    rate = {r: decided.filter(pl.col("derived_race") == r)["action_taken"].eq("3").mean()
            for r in ("White", "Black or African American")}
    assert 0.04 < rate["White"] < 0.08 and 0.12 < rate["Black or African American"] < 0.25
    out_of_scope = lar["action_taken"].is_in(["4", "5", "6"]).mean()
    assert 0.10 < out_of_scope < 0.18


def test_ground_truth_is_consistent_with_the_mechanism():
    lar, truth = hmda(60_000)
    df = pl.concat([lar, truth], how="horizontal")
    penalised = df["derived_race"].is_in(MECHANISM["penalised"]["derived_race"]) | \
        df["derived_ethnicity"].is_in(MECHANISM["penalised"]["derived_ethnicity"])
    assert (penalised == df["penalised"]).all()
    harmed = df.filter(pl.col("harmed"))
    assert harmed.height > 0 and harmed["penalised"].all() and (harmed["action_taken"] == "3").all()
    # without the penalty nobody unpenalised changes decision
    un = df.filter(~pl.col("penalised") & pl.col("decision").is_not_null())
    assert (un["decision"] == un["decision_without_mechanism"]).all()
    assert df["id"].to_list()[:3] == ["0", "1", "2"]


def test_total_effect_truth_follows_the_structural_equations():
    lar, truth = hmda(60_000)
    assert truth.columns == TRUTH.names
    df = pl.concat([lar, truth], how="horizontal").filter(pl.col("decision").is_not_null())
    for column, reference in INTERVENTIONS.items():
        do, total = f"decision_do_{column}", f"harmed_total_{column}"
        # do(column := reference) leaves the reference group as it was
        ref = df.filter(pl.col(column) == reference)
        assert (ref[do] == ref["decision"]).all() and not ref[total].any()
        assert (df[total] == ((df["decision"] == 0) & (df[do] == 1))).all()
    # for Black and for Female applicants every structural shift favours the reference value:
    # the intervention can only approve, and (race) it removes the penalty with the rest
    black = df.filter(pl.col("derived_race") == "Black or African American")
    assert (black["decision_do_derived_race"] >= black["decision"]).all()
    only_black = black.filter(pl.col("derived_ethnicity") != "Hispanic or Latino")
    assert only_black.filter(pl.col("harmed"))["harmed_total_derived_race"].all()
    assert only_black["harmed_total_derived_race"].sum() > 1.5 * only_black["harmed"].sum()
    # the controlled direct effect of race: the penalty alone, unless ethnicity keeps it
    assert only_black["harmed_direct_derived_race"].equals(only_black["harmed"])
    assert not black.filter(pl.col("derived_ethnicity") == "Hispanic or Latino")["harmed_direct_derived_race"].any()
    assert not df["harmed_direct_derived_sex"].any()
    assert (df["harmed_direct_derived_ethnicity"] <= df["harmed"]).all()
    female = df.filter(pl.col("derived_sex") == "Female")
    assert (female["decision_do_derived_sex"] >= female["decision"]).all()
    assert 0 < female["harmed_total_derived_sex"].sum() < black["harmed_total_derived_race"].sum()


# seed 0, 3,000 rows (the tract minority share drawn from its own stream before the decision, the
# denial reason citing the inputs as read; every other column as before: tests/test_worlds.py);
# the lenders and markets from hmda_lenders and the pricing fields from the risk-based pricer
# (engines.generators.hmda_pricing), every other column as before both (PINNED_BEFORE: the LAR
# without them, recorded from the generator before either)
PINNED_LAR_DIGEST = "e394cca0bd78bea6aed336c6e0b145f79c99b975d3874a62303e082c7cf2f4fe"
PINNED_BEFORE = "bda90f3cfa3510c9d73383e4e62f0748239a964527ad9597b909f684fbf3fbb6"
LENDERS = ["lei", "derived_msa_md"]
PRICING = ["interest_rate", "rate_spread", "total_loan_costs", "origination_charges", "discount_points", "lender_credits"]


def test_hmda_lar_is_pinned():
    """The LAR's values for a fixed seed (the truth columns may grow; the data must not move)."""
    import hashlib

    lar, _ = hmda(3_000, batch_rows=3_000)
    assert hashlib.sha256(lar.write_csv().encode()).hexdigest() == PINNED_LAR_DIGEST
    assert hashlib.sha256(lar.drop([*LENDERS, *PRICING]).write_csv().encode()).hexdigest() == PINNED_BEFORE


def test_hmda_is_deterministic_and_independent_of_batch_size():
    a, ta = hmda(70_000, batch_rows=20_000)
    b, tb = hmda(70_000, batch_rows=70_000)
    assert a.equals(b) and ta.equals(tb)
    c, _ = hmda(70_000, seed=1)
    assert not a.equals(c)


def test_data_browser_spelling_round_trips():
    lar, _ = hmda(1_000, spelling="data_browser")
    assert "derived_msa-md" in lar.columns and "loan_to_value_ratio" in lar.columns
    assert "co-applicant_race-1" in lar.columns and "denial_reason-1" in lar.columns
    assert [normalise_column_name(c) for c in lar.columns] == LAR_COLUMNS
    assert normalise_column_name(data_browser_name("aus_3")) == "aus_3"


def test_hmda_lar_csv_is_read_and_normalised(tmp_path, warehouse):
    from aequum.engines.core.spec import load_spec, parse_spec
    from aequum.flows.commands.generate import generate_to_file
    from aequum.flows.store.staging import stage
    from conftest import REPO

    lar, _ = hmda(3_000, spelling="data_browser")
    (tmp_path / "lar.txt").write_text(
        "|".join(lar.columns) + "\n" + "\n".join("|".join(r) for r in lar.iter_rows()) + "\n")
    raw = load_spec(REPO / "data" / "specs" / "hmda.yaml").model_dump(mode="json")
    raw["source"] = {"kind": "hmda_lar", "path": "lar.txt", "id_column": None}
    ref = stage(parse_spec(raw), tmp_path, warehouse, tmp_path / "lake")
    assert ref.rows_read == 3_000 and ref.rows_out_of_scope > 0 and 0 < ref.rows_quarantined < 150
    q = warehouse.con.execute("SELECT DISTINCT field FROM audit.quarantine").fetchall()
    assert {f for (f,) in q} <= {"income", "debt_to_income_ratio", "property_value",
                                "combined_loan_to_value_ratio"}
    # the pricing fields ("NA" unless originated, "Exempt", empty points and credits) are staged as
    # numbers and nulls: no record is quarantined for them, and the originations keep their prices
    staged = warehouse.staged(ref.version)
    for field in ("rate_spread", "interest_rate", "total_loan_costs", "discount_points", "lender_credits",
                  "origination_charges"):
        values = staged[field]
        assert values.type == pa.float64()
        rows = staged["_row"].to_numpy()
        text = lar[field].to_numpy()[rows]
        reported = ~np.isin(text, ["NA", "Exempt", ""])
        assert values.null_count == (~reported).sum() and reported.sum() > 300
        assert np.allclose(values.to_numpy(zero_copy_only=False)[reported], text[reported].astype(float))
    assert set(staged["lien_status"].to_pylist()) == {"1"} and set(staged["action_taken"].to_pylist()) <= {"1", "2", "3"}
    path = generate_to_file("hmda", tmp_path / "g.parquet", rows=1_000)
    assert pq.read_metadata(path).num_rows == 1_000 and (tmp_path / "g_truth.parquet").exists()


def test_loan_generator_matches_the_reference_marginals():
    ref = pl.read_csv(shared_file("counterfactual-situation-testing", "data", "LoanApplication_v2.csv"),
                      separator="|")
    ours = pl.from_arrow(generate_loan(20_000, seed=1))
    assert ours.columns[1:] == ref.columns
    for sex in (0, 1):
        r, o = ref.filter(pl.col("Gender") == sex), ours.filter(pl.col("Gender") == sex)
        for col in ("AnnualSalary", "AccountBalance"):
            assert abs(o[col].mean() - r[col].mean()) < 0.05 * abs(r[col].mean()), (sex, col)
        assert abs((o["LoanApproval"] < 0).mean() - (r["LoanApproval"] < 0).mean()) < 0.04
    assert abs(ours["Gender"].mean() - 0.35) < 0.01
    score = ours["AnnualSalary"] + 5 * ours["AccountBalance"] - 225000
    assert ((score >= 0) == (ours["LoanApproval"] > 0)).all()


def test_loan_generator_is_deterministic_and_checks_input():
    a = pa.Table.from_batches(list(iter_loan_batches(600_000, 3, 250_000)))
    b = pa.Table.from_batches(list(iter_loan_batches(600_000, 3, 250_000)))
    assert a.equals(b) and a.num_rows == 600_000 and len(set(a["id"].to_pylist())) == 600_000
    with pytest.raises(ValueError, match="female_share"):
        generate_loan(10, female_share=1.5)
    assert np.isin(generate_loan(100)["LoanApproval"].to_numpy(), [-1, 1]).all()
    assert DTI_BINS[3] == "36"


def test_cec_synthetic_design():
    from aequum.engines.generators.cec_synthetic import FINANCIAL, NOISE, PROXY, WEIGHTS, generate_cec

    t = pl.from_arrow(generate_cec(20_000, seed=2))
    assert t.height == 20_000 and len(FINANCIAL + PROXY + NOISE) == 20
    g1, g0 = t.filter(pl.col("group") == 1), t.filter(pl.col("group") == 0)
    for c in PROXY:
        assert abs((g1[c].mean() - g0[c].mean()) - 0.5) < 0.06
    for c in FINANCIAL + NOISE:
        assert abs(g1[c].mean() - g0[c].mean()) < 0.06
    # the label is a function of the financial features (plus noise) only
    score = t.select(FINANCIAL).to_numpy() @ WEIGHTS
    assert np.corrcoef(score, t["label"].to_numpy())[0, 1] > 0.7
    assert abs(np.corrcoef(t["proxy_1"].to_numpy(), t["label"].to_numpy())[0, 1]) < 0.03
    assert generate_cec(100, seed=2).equals(generate_cec(100, seed=2))


def test_lender_records_are_the_same_applications_decided_by_the_lender_rule():
    from aequum.engines.generators.hmda import LENDER_RULE, iter_lender_batches

    lar, truth = hmda(60_000)
    parts = list(iter_lender_batches(60_000, 0, 35_000))
    lender = pl.from_arrow(pa.Table.from_batches([p[0] for p in parts]))
    assert pl.from_arrow(pa.Table.from_batches([p[1] for p in parts])).equals(truth)
    whole = pl.from_arrow(pa.Table.from_batches([b for b, _ in iter_lender_batches(60_000, 0, 60_000)]))
    assert whole.equals(lender)
    for c in ("derived_race", "derived_ethnicity", "derived_sex", "action_taken"):
        assert lender[c].equals(lar[c])
    # the LAR's published income (thousands, rounded) is the lender's, binned DTI its exact DTI's bin
    shown = lar["income"] != "NA"
    assert ((lar.filter(shown)["income"].cast(pl.Float64) - lender.filter(shown)["log_income"].exp()).abs() <= 0.5).all()
    # the rule (approved iff score >= 0) reproduces every in-scope decision but where one
    # applicant carries both indicators (the rule counts the penalty twice)
    w = LENDER_RULE["coefficients"]
    score = (LENDER_RULE["intercept"] + sum(w[c] * lender[c].to_numpy() for c in w if c in lender.columns)
             + w["race"] * (lender["derived_race"] == "Black or African American").to_numpy()
             + w["ethnicity"] * (lender["derived_ethnicity"] == "Hispanic or Latino").to_numpy())
    decided = truth["decision"].is_not_null().to_numpy()
    wrong = decided & ((score >= 0) != (truth["decision"].fill_null(0).to_numpy() == 1))
    both = ((lender["derived_race"] == "Black or African American")
            & (lender["derived_ethnicity"] == "Hispanic or Latino")).to_numpy()
    assert wrong.sum() > 0 and both[wrong].all()


def test_harm_posteriors_are_calibrated():
    """p_harmed*: the Bayes posterior of harm given the exact underwriting variables — among
    refused applicants its mean matches the harm rate, overall and by decile of the posterior."""
    _, truth = hmda(150_000, batch_rows=150_000)
    refused = truth.filter(pl.col("decision") == 0)
    assert truth.filter(pl.col("decision") != 0)["p_harmed"].null_count() == truth.filter(pl.col("decision") != 0).height
    for p, h in [("p_harmed", "harmed"), *[(f"p_harmed_total_{c}", f"harmed_total_{c}") for c in INTERVENTIONS]]:
        assert refused[p].is_between(0, 1).all()
        assert abs(refused[p].mean() - refused[h].mean()) < 0.01, p
        bins = refused.with_columns((pl.col(p) * 10).floor().clip(0, 9).alias("bin")).group_by("bin").agg(
            pl.col(p).mean().alias("expected"), pl.col(h).mean().alias("observed"), pl.len().alias("n"))
        big = bins.filter(pl.col("n") >= 400)
        assert big.height >= (1 if p.endswith("sex") else 3), (p, big)
        assert ((big["expected"] - big["observed"]).abs() < 0.06).all(), (p, big)
    # nobody unpenalised can be harmed directly
    assert (refused.filter(~pl.col("penalised"))["p_harmed"] == 0).all()


def test_generate_lender_file_with_truth(tmp_path):
    from aequum.engines.generators.hmda import LENDER
    from aequum.flows.commands.generate import generate_to_file

    path = generate_to_file("hmda_lender", tmp_path / "l.parquet", rows=1_200, batch_rows=500)
    assert pq.read_schema(path) == LENDER and pq.read_metadata(path).num_rows == 1_200
    truth = pq.read_table(tmp_path / "l_truth.parquet")
    assert truth["id"].to_pylist()[-1] == "1199" and (tmp_path / "l_mechanism.json").exists()
