"""The regression engine's full coefficient table (``regression_coefficients``) and the logit's
fit statistics (issue 50): equal to statsmodels' Logit and OLS on the design the table names."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import statsmodels.api as sm

from aequum.engines.regression.coefficients import null_log_likelihood
from test_regression_engine import RAW, data, run


def one_attribute(**edit) -> dict:
    raw = copy.deepcopy(RAW)
    raw["protected"] = raw["protected"][:1]
    raw["engines"]["regression"].update(edit)
    return raw


def design(d, terms: list[str]) -> np.ndarray:
    """The columns the table's terms name, built from the records: const, the group, a numeric
    control by name, ``name=level`` a dummy of that level."""
    cols = []
    for t in terms:
        if t == "const":
            cols.append(np.ones(len(d)))
        elif t == "race":
            cols.append(d.groups["race"].astype(float))
        elif "=" in t:
            name, level = t.split("=", 1)
            cols.append((d.column_values(name) == d.levels(name).index(level)).astype(float))  # codes
        else:
            cols.append(np.asarray(d.column_values(t), dtype=float))
    return np.column_stack(cols)


def table_of(out, model: str) -> list[dict]:
    return [r for r in out["regression_coefficients"] if r["model"] == model]


def test_the_coefficients_equal_statsmodels():
    d = data(n=2000, penalty=0.05, raw=one_attribute())
    out = run(d)
    y = 1.0 - d.decision
    for model in ("logit", "lpm"):
        rows = table_of(out, model)
        terms = [r["term"] for r in rows]
        assert terms[:2] == ["const", "race"] and "income" in terms and "dti=45" in terms
        assert [r["kind"] for r in rows[:2]] == ["intercept", "group"]
        x = design(d, terms)
        fit = (sm.Logit(y, x).fit(disp=0, tol=1e-12) if model == "logit" else sm.OLS(y, x).fit())
        assert np.array([r["estimate"] for r in rows]) == pytest.approx(fit.params, rel=1e-6, abs=1e-9)
        assert np.array([r["se"] for r in rows]) == pytest.approx(fit.bse, rel=1e-5)
        odds = [r["odds_ratio"] for r in rows]
        assert odds == (pytest.approx(np.exp(fit.params)) if model == "logit" else [None] * len(rows))
        if model == "logit":
            est = out["regression_estimates"][0]
            assert est["logit_log_likelihood"] == pytest.approx(fit.llf, rel=1e-9)
            assert est["logit_pseudo_r2"] == pytest.approx(fit.prsquared, rel=1e-7)
        else:
            assert out["regression_estimates"][0]["r_squared"] == pytest.approx(fit.rsquared, rel=1e-9)


def test_one_const_and_one_group_row_per_comparison_and_model():
    raw = copy.deepcopy(RAW)
    raw["engines"]["regression"].update(segments=["loan_type"], min_segment_size=100)
    out = run(data(n=3000, penalty=0.05, raw=raw))
    rows = out["regression_coefficients"]
    comparisons = {(r["attribute"], r["segment"]) for r in rows}
    assert ("race", None) in comparisons and ("sex", None) in comparisons
    assert ("race", "loan_type = 1") in comparisons
    for attribute, segment in comparisons:
        for model in ("logit", "lpm"):
            mine = [r for r in rows if (r["attribute"], r["segment"], r["model"]) == (attribute, segment, model)]
            assert [r["kind"] for r in mine].count("intercept") == 1
            assert [r["term"] for r in mine if r["kind"] == "group"] == [attribute]
            # the other attribute's groups are held as cells, not listed as a control
            assert any(r["kind"] == "held groups" for r in mine)
            assert all(r["estimate"] is not None and r["se"] > 0 for r in mine)


def test_fixed_effects_are_named_not_listed():
    raw = one_attribute(fixed_effects=["loan_type"])
    raw["engines"]["regression"]["controls"] = ["income", "dti"]
    out = run(data(n=2000, penalty=0.05, raw=raw))
    for model in ("logit", "lpm"):
        rows = table_of(out, model)
        assert not any(r["kind"] == "intercept" for r in rows)
        (fe,) = [r for r in rows if r["kind"] == "fixed effects"]
        assert fe["term"] == "fixed effects: loan_type (absorbed, 3 levels)" and fe["estimate"] is None
        assert not any(r["term"].startswith("loan_type") for r in rows if r["kind"] == "control")


def test_the_null_log_likelihood():
    assert null_log_likelihood(10, 3) == pytest.approx(3 * np.log(0.3) + 7 * np.log(0.7))
    assert null_log_likelihood(10, 0) == 0.0 and null_log_likelihood(0, 0) is None


def test_the_report_lines():
    """The report's fold: the rows fitted, left out and why, the fit; the two models side by side."""
    from aequum.flows.reporting.regression import coefficient_rows, fit_line

    row = {"n": 1000, "n_protected": 300, "n_reference": 700, "dropped_null": 12, "separated_rows": 5,
           "separated_levels": "loan_type=3", "logit_log_likelihood": -500.25, "logit_pseudo_r2": 0.1234,
           "r_squared": 0.2}
    assert fit_line(row) == ("1,000 applicants fitted (300 protected, 700 reference); 12 left out for a missing "
                             "input; 5 left out in levels where every applicant had one outcome (loan_type=3); "
                             "logit log-likelihood -500.2; McFadden pseudo R² 0.123; linear model R² 0.200.")
    terms = [{"term": "const", "model": "logit", "estimate": -1.0, "se": 0.1, "odds_ratio": 0.3679},
             {"term": "const", "model": "lpm", "estimate": 0.25, "se": 0.01, "odds_ratio": None},
             {"term": "race", "model": "lpm", "estimate": 0.05, "se": 0.02, "odds_ratio": None}]
    assert coefficient_rows(terms) == [  # the linear model in points of denial, as the sentences
        {"term": "const", "logit estimate": "-1", "logit se": "0.1", "odds ratio": "0.3679",
         "linear estimate (points)": "+25.00", "linear se (points)": "1.00"},
        {"term": "race", "logit estimate": "", "logit se": "", "odds ratio": "", "linear estimate (points)": "+5.00",
         "linear se (points)": "2.00"}]
