"""Quasi-complete separation by a categorical level, dropped as Stata's logit and fixest's feglm
drop it: a lender with a hard DTI cap (every application in the top bins denied) still gets a
logit estimate in every comparison, with the dropped applications counted and the levels named,
equal to statsmodels' Logit on the rows and columns left; the linear model fits the same rows;
dropping repeats when it leaves another level with one outcome; a segment keeps its estimate."""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from aequum.engines.core.data import AuditData
from aequum.engines.regression.design import Categorical
from aequum.engines.regression.logit import controlled_logit
from aequum.engines.regression.sensitivity import controlled_lpm
from test_regression_engine import DTI, RAW, data, run

sm = pytest.importorskip("statsmodels.api")

BINS = ["<30%", "30%-40%", "40%-50%", "50%-60%", ">60%"]


def capped_lender(n=5000, seed=0):
    """A LAR-like lender: DTI bins, log income, a loan type, race; denials logistic in them, and
    a hard cap: every application at 50 % DTI or more denied."""
    rng = np.random.default_rng(seed)
    d = (rng.random(n) < 0.3).astype(float)
    dti = np.clip(np.round(rng.normal(1.6 + 0.3 * d, 1.1)), 0, 4).astype(int)
    income = rng.lognormal(4.4 - 0.2 * d, 0.5)
    loan = rng.choice(3, n, p=[0.6, 0.3, 0.1])
    eta = -2.0 + 0.5 * dti - 0.01 * (income - 80) + 0.3 * (loan == 1) + 0.3 * d
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    y[dti >= 3] = 1.0
    return y, d, np.log(income), dti, loan


def blocks(income, dti, loan):
    return [income, Categorical(dti, BINS), Categorical(loan, ["1", "2", "3"])], ["log income", "dti", "loan_type"]


def dummies(codes, prefix):
    """Dummies of the levels present, the most frequent (first on a tie) left out, as ours."""
    present, counts = np.unique(codes, return_counts=True)
    ref = present[np.argmax(counts)]
    return pd.DataFrame({f"{prefix}[{v}]": (codes == v).astype(float) for v in present if v != ref})


def test_a_dti_cap_is_dropped_and_the_logit_equals_statsmodels_on_the_rest():
    y, d, income, dti, loan = capped_lender()
    b, names = blocks(income, dti, loan)
    fit = controlled_logit(y, d, b, names, outcome=("approval", "denial"))
    capped = dti >= 3
    assert fit.converged and not fit.separation and fit.coefficient is not None
    assert fit.separated_rows == int(capped.sum()) > 500 and fit.n == len(y) - fit.separated_rows
    assert set(fit.separated) == {"dti = 50%-60%", "dti = >60%"}
    assert (f"dti = 50%-60%, >60% predict denial perfectly: levels and their {int(capped.sum()):,} rows dropped, "
            "as Stata's logit and fixest's feglm do") in fit.note
    keep = ~capped
    X = sm.add_constant(pd.concat([pd.DataFrame({"d": d[keep], "log income": income[keep]}),
                                   dummies(dti[keep], "dti"), dummies(loan[keep], "loan")], axis=1))
    theirs = sm.Logit(y[keep], X).fit(disp=0, method="newton", tol=1e-12, maxiter=100)
    assert np.allclose(fit.coefficients["coef"], theirs.params.values, rtol=1e-8, atol=0)
    assert np.allclose(fit.coefficients["se"], theirs.bse.values, rtol=1e-8, atol=0)
    assert fit.p_value == pytest.approx(theirs.pvalues["d"], rel=1e-8)
    # the linear model on the same rows and columns, equal to OLS there
    lpm = controlled_lpm(y, d, b, names, outcome=("approval", "denial"))
    assert (lpm.n, lpm.separated_rows, lpm.separated) == (fit.n, fit.separated_rows, fit.separated)
    ols = sm.OLS(y[keep], X).fit()
    assert lpm.estimate == pytest.approx(ols.params["d"], rel=1e-9)
    assert lpm.se == pytest.approx(ols.bse["d"], rel=1e-9)


def test_dropping_repeats_until_no_level_has_one_outcome():
    """Dropping the capped bins leaves loan type 3's remaining applications all approved: that
    level goes in the next round (as Stata's and fixest's repeated checks do)."""
    y, d, income, dti, loan = capped_lender(seed=1)
    y[(loan == 2) & (dti < 3)] = 0.0
    b, names = blocks(income, dti, loan)
    fit = controlled_logit(y, d, b, names, outcome=("approval", "denial"))
    gone = (dti >= 3) | (loan == 2)
    assert fit.converged and fit.separated_rows == int(gone.sum()) and fit.n == int((~gone).sum())
    assert set(fit.separated) == {"dti = 50%-60%", "dti = >60%", "loan_type = 3"}
    assert "loan_type = 3 predicts approval perfectly: level and its" in fit.note
    keep = ~gone
    X = sm.add_constant(pd.concat([pd.DataFrame({"d": d[keep], "log income": income[keep]}),
                                   dummies(dti[keep], "dti"), dummies(loan[keep], "loan")], axis=1))
    theirs = sm.Logit(y[keep], X).fit(disp=0, method="newton", tol=1e-12, maxiter=100)
    assert fit.coefficient == pytest.approx(theirs.params["d"], rel=1e-8)
    # a continuous y (a price) drops nothing: separation is the logit's
    price = income + d
    assert controlled_lpm(price, d, b, names).separated_rows == 0


def test_without_separation_nothing_changes():
    y, d, income, dti, loan = capped_lender(seed=2)
    y[dti >= 3] = np.where(np.arange(int((dti >= 3).sum())) % 7 == 0, 0.0, 1.0)  # one approval in seven
    b, names = blocks(income, dti, loan)
    fit = controlled_logit(y, d, b, names)
    assert fit.separated_rows == 0 and fit.separated == () and fit.note is None and fit.n == len(y)


def test_every_comparison_of_a_dti_capped_lender_and_its_segments_has_a_logit_estimate():
    """The engine on a lender denying every application at 50 % DTI or more (and, within loan
    type 2, at 36 % or more): every pooled and segment comparison has an odds ratio, a p-value
    and a test, the dropped applications counted in separated_rows."""
    raw = copy.deepcopy(RAW)
    raw["engines"]["regression"] = {"intersections": [], "segments": ["loan_type"], "min_segment_size": 300}
    d = data(n=6000, penalty=0.05, seed=3, raw=raw)
    dti = d.column_values("dti")
    loan = d.column_values("loan_type")
    cap = (dti >= DTI.index("50%-60%")) | ((loan == 1) & (dti >= DTI.index("36")))
    decision = np.where(cap, 0, d.decision).astype(np.int8)
    out = run(AuditData(d.spec, d.table.set_column(d.table.schema.get_field_index("_decision"), "_decision",
                                                  pa.array(decision))))
    assert out["regression_estimates"] and out["regression_segments"]
    for r in [*out["regression_estimates"], *out["regression_segments"]]:
        assert r["odds_ratio"] is not None and r["logit_note"] is None, r
        assert r["p_value"] is not None and r["logit_p_adjusted"] is not None and r["logit_significant"] is not None
        assert r["separated_rows"] > 0 and "dti = >60%" in r["separated_levels"]
        assert "predict denial perfectly" in r["note"]
        assert r["inference"] == r["logit_inference"] == "classical"
    seg2 = [r for r in out["regression_segments"] if r["segment"] == "loan_type = 2"]
    assert seg2 and all("dti = 36" in r["separated_levels"] for r in seg2)


def test_a_fixed_effect_level_of_one_outcome_is_counted_beside_the_control_levels():
    y, d, income, dti, loan = capped_lender(seed=5)
    lender = np.random.default_rng(6).integers(0, 30, len(y))
    y[(lender == 4) & (dti < 3)] = 0.0  # lender 4 approves everything under the cap
    b, names = blocks(income, dti, loan)
    fe = Categorical(lender, [f"L{i}" for i in range(30)])
    fit = controlled_logit(y, d, b, names, fixed=[fe], fixed_names=["lender"])
    lpm = controlled_lpm(y, d, b, names, fixed=[fe], fixed_names=["lender"])
    gone = (dti >= 3) | (lender == 4)
    assert fit.separated_rows == lpm.separated_rows == int(gone.sum()) and fit.n == lpm.n == int((~gone).sum())
    assert fit.separated == lpm.separated == ("lender (1 level)", "dti = 50%-60%", "dti = >60%")
    assert "1 of lender" in fit.note and fit.converged


def test_when_every_level_has_one_outcome_no_row_is_left_and_both_models_say_so():
    """A small segment whose every lender approved all or denied all: every row goes with its
    level, and both models return a note and no estimate instead of failing."""
    rng = np.random.default_rng(3)
    n = 60
    lender = np.repeat(np.arange(6), 10)
    y = (lender % 2).astype(float)                 # each lender: one outcome
    d = rng.integers(0, 2, n).astype(float)
    income = rng.normal(size=n)
    fixed = [Categorical(lender, [f"L{i}" for i in range(6)])]
    lpm = controlled_lpm(y, d, [income], ["income"], fixed=fixed, fixed_names=["lei"])
    logit = controlled_logit(y, d, [income], ["income"], fixed=fixed, fixed_names=["lei"])
    assert lpm.estimate is None and lpm.note and logit.coefficient is None and logit.note
