"""A controlled difference under a stated bound on the inputs the records lack
(``engines.regression.bounds``, ``decision.bounds``): the bias formula with explicit partial R²
(Cinelli & Hazlett 2020, eq. 11-13) against the long regression that includes the omitted input,
against PySensemakr, the spec's checks, and the verdicts it gives the findings."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import t as student_t

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.regression.bounds import under_bound
from aequum.engines.regression.engine import RegressionEngine
from aequum.engines.regression.sensitivity import controlled_lpm


def ols(y, x):
    """Coefficients, classical standard errors and residual dof of y ~ x (x with its constant)."""
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    dof = len(y) - x.shape[1]
    cov = resid @ resid / dof * np.linalg.inv(x.T @ x)
    return beta, np.sqrt(np.diag(cov)), dof, resid


def partial_r2_of(z, target, others):
    """Partial R² of z with target given others (the residual-on-residual R²)."""
    rz = z - others @ np.linalg.lstsq(others, z, rcond=None)[0]
    rt = target - others @ np.linalg.lstsq(others, target, rcond=None)[0]
    return (rz @ rt) ** 2 / ((rz @ rz) * (rt @ rt))


def world(n=20_000, effect=0.0, seed=0):
    """A price driven mostly by a score the records lack, lower on average for the group."""
    rng = np.random.default_rng(seed)
    d = (rng.random(n) < 0.3).astype(float)
    z = rng.normal(-0.5 * d, 1.0)                      # the credit score, omitted
    x = rng.normal(0.3 * d, 1.0)                       # a recorded control
    y = 0.2 * x - 0.6 * z + effect * d + rng.normal(0, 0.3, n)
    return d, z, x, y


def test_the_exact_partial_r2_of_the_omitted_input_recover_the_long_regression():
    """With the omitted input's in-sample partial R² (with d given X, with y given d and X) the
    bound moves the short regression's estimate exactly onto the long regression's (C&H eq. 12
    is an identity), whatever the true effect."""
    for effect in (0.0, 0.3):
        d, z, x, y = world(effect=effect)
        one = np.ones_like(d)
        short, se_short, dof, _ = ols(y, np.column_stack([one, d, x]))
        long, *_ = ols(y, np.column_stack([one, d, x, z]))
        r2_group = partial_r2_of(z, d, np.column_stack([one, x]))
        r2_outcome = partial_r2_of(z, y, np.column_stack([one, d, x]))
        bound = SimpleNamespace(r2_group=r2_group, r2_outcome=r2_outcome, source="the long regression")
        out = under_bound(short[1], se_short[1], dof, se_short[1], dof, 0.95, bound)
        assert short[1] > long[1] + 0.2  # the omitted score makes the short gap far larger
        assert out["bounded_estimate"] == pytest.approx(long[1], abs=1e-9)
        assert (out["bounded_p_value"] < 0.05) is (effect > 0)


def test_the_bounded_estimate_and_error_equal_sensemakr():
    sensemakr = pytest.importorskip("sensemakr")
    d, z, x, y = world(n=5000, effect=0.2, seed=3)
    one = np.ones_like(d)
    beta, se, dof, _ = ols(y, np.column_stack([one, d, x]))
    bound = SimpleNamespace(r2_group=0.05, r2_outcome=0.4, source="s")
    ours = under_bound(beta[1], se[1], dof, se[1], dof, 2 * student_t.cdf(1.0, dof) - 1, bound)  # ± 1 se_Z
    theirs = sensemakr.adjusted_estimate(estimate=float(beta[1]), se=float(se[1]), dof=int(dof), r2dz_x=0.05, r2yz_dx=0.4)
    theirs_se = sensemakr.adjusted_se(se=float(se[1]), dof=int(dof), r2dz_x=0.05, r2yz_dx=0.4)
    assert ours["bounded_estimate"] == pytest.approx(float(np.asarray(theirs).ravel()[0]), rel=1e-10)
    half = (ours["bounded_ci_high"] - ours["bounded_ci_low"]) / 2
    assert half == pytest.approx(float(np.asarray(theirs_se).ravel()[0]), rel=1e-10)


def test_no_bound_or_no_estimate_leaves_the_columns_empty():
    assert set(under_bound(0.1, 0.01, 100, 0.01, 100, 0.95, None).values()) == {None}
    b = SimpleNamespace(r2_group=0.1, r2_outcome=0.2, source="s")
    out = under_bound(None, None, None, None, None, 0.95, b)
    assert out["bound_source"] == "s" and out["bounded_estimate"] is None and out["bounded_p_value"] is None


def test_survival_is_adjusted_across_the_run_and_nothing_survives_a_bias_that_reaches_it():
    """Fifteen bounded tests at p = 0.01 each: Holm leaves none significant, as the unbounded
    tests of the run are adjusted; a bias at least the estimate leaves p = 1."""
    import pyarrow as pa

    from aequum.engines.regression.bounds import COLUMNS, survive

    b = SimpleNamespace(r2_group=0.5, r2_outcome=0.9, source="s")
    gone = under_bound(0.01, 0.01, 1000, 0.01, 1000, 0.95, b)
    assert gone["bounded_p_value"] == 1.0
    rows = [{**dict.fromkeys(COLUMNS), "bound_source": "s", "bounded_p_value": 0.01} for _ in range(15)]
    rows.append(dict.fromkeys(COLUMNS))  # no bound stated: no verdict
    table = survive(pa.Table.from_pylist(rows, pa.schema([(c, pa.float64() if "p_" in c or "r2" in c or "bounded_e" in c
                                                           or "ci" in c else pa.bool_() if c == "survives_bound"
                                                           else pa.string()) for c in COLUMNS])), "holm", 0.95)
    assert table["survives_bound"].to_pylist() == [False] * 15 + [None]
    assert table["bounded_p_adjusted"].to_pylist()[0] == pytest.approx(0.15)


# -- the spec ------------------------------------------------------------------------------------

RAW = {
    "name": "b", "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "race", "column": "race", "protected_values": ["B"], "reference_values": ["W"]}],
    "decision": {"column": "y", "favourable": [1], "missing_inputs": ["credit score"],
                 "bounds": [{"outcome": "denial", "r2_group": 0.05, "r2_outcome": 0.3, "source": "internal run 7"}]},
    "features": [{"name": "income"}, {"name": "other"}],
    "engines": {"run": ["regression"], "regression": {"intersections": [], "controls": ["income"]}},
}


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["decision"]["bounds"][0].update(outcome="rate_spread"), "decision.bounds[0].outcome: 'rate_spread'"),
    (lambda r: r["decision"]["bounds"][0].update(attributes=["sex"]), "decision.bounds[0].attributes: ['sex']"),
    (lambda r: r["decision"]["bounds"][0].update(r2_group=1.0), "r2_group"),
    (lambda r: r["decision"]["bounds"][0].pop("source"), "source"),
    (lambda r: r["decision"].update(inputs="complete"), "inputs: complete says no input is missing"),
])
def test_a_bad_bound_is_one_line_naming_the_field(edit, message):
    raw = copy.deepcopy(RAW)
    edit(raw)
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_spec(raw)


def test_the_most_specific_bound_applies_and_ties_take_the_strongest():
    raw = copy.deepcopy(RAW)
    raw["decision"]["bounds"] = [
        {"outcome": "any", "r2_group": 0.5, "r2_outcome": 0.5, "source": "a"},
        {"outcome": "denial", "r2_group": 0.01, "r2_outcome": 0.2, "source": "b"},
        {"outcome": "denial", "r2_group": 0.03, "r2_outcome": 0.1, "source": "c"},
        {"outcome": "denial", "attributes": ["race"], "r2_group": 0.02, "r2_outcome": 0.3, "source": "d"}]
    decision = parse_spec(raw).decision
    assert decision.bound_for("denial", "race").source == "d"
    both = decision.bound_for("denial", "sex")
    assert (both.r2_group, both.r2_outcome, both.source) == (0.03, 0.2, "b; c")
    assert decision.bound_for("interest_rate", "race").source == "a"
    assert parse_spec(raw).run_parameters()["audit"]["missing_inputs"] == ["credit score"]


# -- the verdict ------------------------------------------------------------------------------------

def lar(effect: float, n: int = 12_000, seed: int = 1) -> tuple[AuditData, dict]:
    """Denials driven by a score the records lack (lower for B) and a recorded income; B applicants
    carry ``effect`` on the denial probability. Returns the records and the score's in-sample
    strength (partial R² with group and with denial, given the recorded control)."""
    rng = np.random.default_rng(seed)
    race = (rng.random(n) < 0.3).astype(np.int8)
    score = rng.normal(-0.6 * race, 1.0)
    income = rng.lognormal(4.3 - 0.1 * race, 0.4)
    p = np.clip(0.25 - 0.12 * score - 0.001 * (income - 75) + effect * race, 0.01, 0.99)
    denied = (rng.random(n) < p).astype(float)
    one = np.ones(n)
    strength = {"r2_group": partial_r2_of(score, race.astype(float), np.column_stack([one, income])),
                "r2_outcome": partial_r2_of(score, denied, np.column_stack([one, race, income]))}
    table = pa.table({"_id": [str(i) for i in range(n)], "_row": pa.array(np.arange(n)),
                      "race": np.where(race, "B", "W"), "_g_race": pa.array(race),
                      "_decision": pa.array((1 - denied).astype(np.int8)), "income": income,
                      "other": rng.normal(size=n)})
    return table, strength


@pytest.mark.parametrize("effect", [0.0, 0.08])
def test_a_bound_measured_where_the_score_is_recorded_separates_fair_from_penalised(effect):
    """On records lacking the score, the fair lender's gap is large and significant; under the
    bound measured where the score is recorded it does not survive, and a real penalty does."""
    table, strength = lar(effect)
    raw = copy.deepcopy(RAW)
    raw["decision"]["bounds"] = [{"outcome": "denial", **{k: float(v) * 1.02 for k, v in strength.items()},
                                  "source": "the lender's own records"}]
    row = run_serial(RegressionEngine(), AuditData(parse_spec(raw), table),
                     parse_spec(raw).engines.regression)["regression_estimates"].to_pylist()[0]
    assert row["estimate"] > 0.03 and row["p_value"] < 1e-6  # the unexplained gap alone
    assert row["bound_source"] == "the lender's own records"
    assert row["survives_bound"] is (effect > 0)
    if effect:
        assert row["bounded_ci_low"] <= effect <= row["bounded_ci_high"] + 0.02


def test_aequum_bounds_prints_spec_entries_from_an_internal_audit(tmp_path, capsys):
    """The lender's records (hmda_lender: the credit score a control of the regression) measured
    once; `aequum bounds` prints decision.bounds entries that a LAR spec accepts, rounded up, with
    the run as their source; an unknown control is one line and exit 2."""
    import yaml

    from aequum.flows.commands.cli import main
    from audit_tables import small_audit
    from conftest import REPO

    path = small_audit(tmp_path, rows=6000, engines=["regression"], run_id="inside", spec_name="hmda_lender.yaml",
                       edit=lambda raw: raw["engines"]["regression"].update(intersections=[]))
    assert main(["bounds", "--control", "credit_score", "--warehouse", str(path)]) == 0
    printed = capsys.readouterr().out
    entries = yaml.safe_load(printed)["bounds"]
    assert {e["outcome"] for e in entries} == {"denial"} and {e["attributes"][0] for e in entries} == {
        "race", "ethnicity", "sex", "tract"}
    assert all(e["source"].startswith("internal audit run inside (spec hmda_lender") for e in entries)
    assert all(round(e["r2_group"], 3) == e["r2_group"] and 0 <= e["r2_group"] < 1 for e in entries)
    lar = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    lar["decision"]["bounds"] = entries
    assert parse_spec(lar).decision.bound_for("denial", "race").source == entries[0]["source"]
    assert main(["bounds", "--control", "nope", "--warehouse", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "control 'nope'" in err[0]
