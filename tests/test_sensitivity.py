"""engines.regression.sensitivity: the omitted-variable sensitivity of Cinelli & Hazlett (2020), the
E-value of VanderWeele & Ding (2017), and the blocked linear probability model they are applied
to — cross-checked against PySensemakr (the authors' package, ported) and statsmodels' OLS."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from aequum.engines.regression.design import Categorical
from aequum.engines.regression.sensitivity import (
    ALL_CONTROLS, adjusted_estimate, adjusted_se, adjusted_t, controlled_lpm, e_value, e_value_ci,
    e_value_or, group_partial_r2, ovb_bounds, ovb_partial_r2_bound, partial_f, partial_f2, partial_r2,
    robustness_value,
)

sm = pytest.importorskip("statsmodels.api")
sensemakr = pytest.importorskip("sensemakr")

REL = 1e-8
LEVELS = ["a", "b", "c", "d"]


def close(a, b, rel=REL):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape and np.allclose(a, b, rtol=rel, atol=0), (a, b)


def world(n=4000, seed=0, effect=0.08, strong=0.0):
    """A numeric control (income-like, raw units), a categorical control (four levels, related
    to the group and to the outcome) and a 0/1 outcome from a linear probability."""
    rng = np.random.default_rng(seed)
    cat = rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])
    income = rng.lognormal(4.3, 0.5, n)  # thousands, raw
    d = (rng.random(n) < 0.25 + 0.1 * (cat == 2) + 0.1 * (income < 60) + strong * (income < 50)).astype(float)
    p = 0.15 + effect * d + 0.06 * cat - 0.001 * (income - 75) + strong * (income < 50)
    y = (rng.random(n) < np.clip(p, 0.01, 0.99)).astype(float)
    return y, d, income, cat


def statsmodels_fit(y, d, income, cat, drop_level):
    dummies = pd.get_dummies(pd.Series(cat), prefix="cat").astype(float).drop(columns=f"cat_{drop_level}")
    X = sm.add_constant(pd.concat([pd.DataFrame({"d": d, "income": income}), dummies], axis=1))
    return sm.OLS(y, X).fit(), list(dummies.columns)


# -- the closed forms ------------------------------------------------------------------------

@pytest.mark.parametrize("t,dof", [(0.3, 50), (2.1, 783), (4.18445, 783), (-6.0, 120), (25.0, 10),
                                   (60.0, 40), (1.5, 3), (300.0, 5000)])
@pytest.mark.parametrize("q", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("alpha", [None, 0.05, 0.01, 0.5])
def test_robustness_values_equal_sensemakr(t, dof, q, alpha):
    """Including the corner of RV_{q,α} where the R²_{Y~Z|D,X} ≤ 1 constraint binds (large t
    for its dof: (25, 10), (60, 40))."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = sensemakr.robustness_value(t_statistic=pd.Series([t]), dof=dof, q=q,
                                            alpha=1.0 if alpha is None else alpha)
    close(robustness_value(t, dof, q, alpha), float(theirs.iloc[0]))
    close(partial_r2(t, dof), sensemakr.partial_r2(t_statistic=t, dof=dof))
    close(partial_f2(t, dof), sensemakr.partial_f2(t_statistic=t, dof=dof))
    close(partial_f(t, dof), sensemakr.partial_f(t_statistic=t, dof=dof))


def test_the_corner_of_rv_alpha_is_reached_and_differs_from_the_plain_formula():
    t, dof, alpha = 25.0, 10, 0.05
    fq = t / np.sqrt(dof)
    from scipy.stats import t as student_t
    f_crit = abs(student_t.ppf(alpha / 2, dof - 1)) / np.sqrt(dof - 1)
    assert fq > 1 / f_crit
    fqa = fq - f_crit
    plain = 0.5 * (np.sqrt(fqa ** 4 + 4 * fqa ** 2) - fqa ** 2)
    assert robustness_value(t, dof, alpha=alpha) == pytest.approx((fq ** 2 - f_crit ** 2) / (1 + fq ** 2))
    assert abs(robustness_value(t, dof, alpha=alpha) - plain) > 1e-3


@pytest.mark.parametrize("r2dxj,r2yxj", [(0.01, 0.02), (0.2, 0.1), (0.3, 0.6), (0.001, 0.9)])
@pytest.mark.parametrize("kd,ky", [(1, 1), (2, 2), (3, 3), (1, 2), (0.5, 4)])
def test_bounds_equal_sensemakr(r2dxj, r2yxj, kd, ky):
    est, se, dof = 0.8, 0.2, 500
    if kd * r2dxj / (1 - r2dxj) >= 1:  # no such confounder: sensemakr exits, ours is NaN
        with pytest.raises(SystemExit):
            sensemakr.ovb_partial_r2_bound(r2dxj_x=r2dxj, r2yxj_dx=r2yxj, kd=[kd], ky=[ky])
        assert all(np.isnan(v) for v in ovb_partial_r2_bound(r2dxj, r2yxj, kd, ky))
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # kd, ky as lists: its cap of r2yz_dx at 1 fails on a scalar
        theirs = sensemakr.ovb_partial_r2_bound(r2dxj_x=r2dxj, r2yxj_dx=r2yxj, kd=[kd], ky=[ky])
        r2dz, r2yz = ovb_partial_r2_bound(r2dxj, r2yxj, kd, ky)
        close(r2dz, theirs["r2dz_x"].iloc[0])
        close(r2yz, theirs["r2yz_dx"].iloc[0])
        close(adjusted_estimate(est, se, dof, r2dz, r2yz),
              sensemakr.adjusted_estimate(r2dz, r2yz, estimate=est, se=se, dof=dof))
        close(adjusted_se(se, dof, r2dz, r2yz), sensemakr.adjusted_se(r2dz, r2yz, se=se, dof=dof))
        close(adjusted_t(est, se, dof, r2dz, r2yz),  # ±inf where r2yz_dx is capped at 1
              sensemakr.adjusted_t(r2dz, r2yz, estimate=est, se=se, dof=dof))
    assert 0 <= r2yz <= 1


def test_an_impossible_multiplier_is_nan_not_an_exit():
    """sensemakr stops the interpreter (sys.exit) where no confounder k times as strong can exist."""
    r2dz, r2yz = ovb_partial_r2_bound(0.6, 0.1, kd=1)
    assert np.isnan(r2dz) and np.isnan(r2yz)
    found = ovb_bounds(0.5, 0.1, 100, np.array([0.1, 0.6]), np.array([0.1, 0.1]))
    assert np.isfinite(found["adjusted_estimate"][0]) and np.isnan(found["adjusted_estimate"][1])


def test_group_partial_r2_of_one_column_is_the_partial_r2():
    assert group_partial_r2(2.5 ** 2, 1, 300) == pytest.approx(partial_r2(2.5, 300), rel=1e-15)
    close(group_partial_r2(3.0, 4, 100), sensemakr.group_partial_r2(f_statistic=3.0, p=4, dof=100))


# -- invariants ---------------------------------------------------------------------------------

def test_robustness_value_invariants():
    dof = 1000
    ts = np.linspace(12, 0, 241)
    for q in (0.5, 1.0):
        rv = np.asarray(robustness_value(ts, dof, q))
        rva = np.asarray(robustness_value(ts, dof, q, 0.05))
        assert ((0 <= rv) & (rv <= 1) & (0 <= rva) & (rva <= 1)).all()
        assert (np.diff(rv) < 0).all()       # falls as |t| falls
        assert (np.diff(rva) <= 0).all()
        assert (rva <= rv + 1e-15).all()     # losing significance takes less than losing the estimate
        assert (rva[ts < 1.96] == 0).all()   # not significant already
    assert robustness_value(-3.0, dof) == robustness_value(3.0, dof)
    assert robustness_value(1e6, 10) <= 1 and robustness_value(1e6, 10, alpha=0.05) <= 1


def test_e_values():
    # VanderWeele & Ding (2017): RR 3.9 (95% CI 1.8 to 8.7) -> E-values 7.26 and 3.0
    assert e_value(3.9) == pytest.approx(3.9 + np.sqrt(3.9 * 2.9)) and round(e_value(3.9), 1) == 7.3
    assert e_value_ci(1.8, 8.7) == pytest.approx(3.0)
    assert e_value(1.0) == 1.0
    rr = np.array([0.2, 0.5, 0.9, 1.1, 2.0, 10.0])
    e = np.asarray(e_value(rr))
    assert (e >= 1).all()
    close(e, e_value(1 / rr), rel=1e-14)        # RR and 1/RR alike
    assert e_value_ci(0.8, 1.3) == 1.0           # the interval includes 1
    assert e_value_ci(0.3, 0.6) == pytest.approx(e_value(0.6))  # the limit nearer 1
    assert np.isnan(e_value(0.0)) and np.isnan(e_value(-1.0))
    point, ci = e_value_or(4.0, 2.25, 9.0, common=True)  # common outcome: RR ~ sqrt(OR)
    assert point == pytest.approx(e_value(2.0)) and ci == pytest.approx(e_value(1.5))
    point, ci = e_value_or(4.0, common=False)
    assert point == pytest.approx(e_value(4.0)) and ci is None


# -- the controlled LPM against statsmodels and PySensemakr --------------------------------------

@pytest.fixture(scope="module")
def fitted():
    y, d, income, cat = world()
    ours = controlled_lpm(y, d, [income, Categorical(cat, LEVELS)], ["income", "cat"], 0.95,
                          multipliers=[1, 2, 3])
    drop = int(np.argmax(np.bincount(cat)))  # ours leaves out the most frequent level
    same, _ = statsmodels_fit(y, d, income, cat, drop_level=drop)
    # another reference level for the cross-check: the block's numbers do not depend on it
    fit, dummies = statsmodels_fit(y, d, income, cat, drop_level=(drop + 1) % 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = sensemakr.Sensemakr(fit, "d", benchmark_covariates={"income": ["income"], "cat": dummies,
                                                                   "all": ["income", *dummies]},
                                     kd=[1, 2, 3], alpha=0.05)
    return ours, fit, dummies, theirs, (y, d, income, cat), same


def test_the_lpm_equals_statsmodels_ols(fitted):
    ours, other, *_, fit = fitted
    close(ours.estimate, other.params["d"])
    close(ours.estimate, fit.params["d"])
    close(ours.se, fit.bse["d"])
    close(ours.se_robust, fit.get_robustcov_results("HC1").bse[list(fit.params.index).index("d")])
    close(ours.t, fit.tvalues["d"])
    close(ours.p_value, fit.pvalues["d"])
    close(ours.r_squared, fit.rsquared)
    close(ours.intercept, fit.params["const"])
    assert ours.dof == fit.df_resid and ours.n == fit.nobs
    low, high = fit.conf_int(0.05).loc["d"]
    close([ours.ci_low, ours.ci_high], [low, high])


def test_every_sensitivity_number_equals_pysensemakr(fitted):
    ours, fit, dummies, theirs, (y, d, income, cat), _ = fitted
    stats = theirs.sensitivity_stats
    close(ours.estimate, stats["estimate"])
    close(ours.se, stats["se"])
    close(ours.t, stats["t_statistic"])
    assert ours.dof == stats["dof"]
    close(ours.partial_r2, stats["r2yd_x"])
    close(ours.rv_q, stats["rv_q"])
    close(ours.rv_qa, stats["rv_qa"])
    bounds = theirs.bounds.set_index("bound_label")
    for control, label in (("income", "income"), ("cat", "cat"), (ALL_CONTROLS, "all")):
        for k in (1, 2, 3):
            mine, row = ours.bound(control, float(k)), bounds.loc[f"{k}x {label}"]
            close(mine.r2dz_x, row["r2dz_x"])
            close(mine.r2yz_dx, row["r2yz_dx"])
            close(mine.adjusted_estimate, row["adjusted_estimate"])
            close(mine.adjusted_se, row["adjusted_se"])
            close(mine.adjusted_t, row["adjusted_t"])
            close([mine.adjusted_ci_low, mine.adjusted_ci_high],
                  [row["adjusted_lower_CI"], row["adjusted_upper_CI"]])
    # the categorical block's partial R² with y (the outcome model) and with d (d ~ 1 + X)
    sens = {c.name: c for c in ours.sensitivity}
    close(sens["cat"].r2yxj_dx, sensemakr.group_partial_r2(fit, covariates=dummies))
    close(sens["income"].r2yxj_dx, sensemakr.group_partial_r2(fit, covariates=["income"]))
    exog = pd.DataFrame(fit.model.exog, columns=fit.model.exog_names).drop(columns="d")
    treatment = sm.OLS(d, exog).fit()  # d ~ 1 + X, as sensemakr's ovb_partial_r2_bound fits it
    close(sens["cat"].r2dxj_x, sensemakr.group_partial_r2(treatment, covariates=dummies))
    close(sens["income"].r2dxj_x, sensemakr.group_partial_r2(treatment, covariates=["income"]))
    close(sens["income"].r2dxj_x, partial_r2(treatment.tvalues["income"], treatment.df_resid))
    assert sens["cat"].columns == 3 and sens["income"].columns == 1


def test_blocked_sums_equal_one_block_and_row_order_does_not_matter(fitted):
    ours, *_, (y, d, income, cat), _ = fitted
    def controls(order):
        return [income[order], Categorical(cat[order], LEVELS)]

    everything = np.arange(len(y))
    one = controlled_lpm(y, d, controls(everything), ["income", "cat"], block_rows=10 ** 9)
    small = controlled_lpm(y, d, controls(everything), ["income", "cat"], block_rows=97)
    order = np.random.default_rng(5).permutation(len(y))
    shuffled = controlled_lpm(y[order], d[order], controls(order), ["income", "cat"], block_rows=97)
    for other in (one, small, shuffled):
        for f in ("estimate", "se", "se_robust", "t", "p_value", "partial_r2", "rv_q", "rv_qa", "r_squared",
                  "raw_difference"):
            close(getattr(other, f), getattr(ours, f), rel=1e-12)
        for c_ours, c_other in zip(ours.sensitivity, other.sensitivity):
            close([c_other.r2dxj_x, c_other.r2yxj_dx], [c_ours.r2dxj_x, c_ours.r2yxj_dx], rel=1e-12)
            for b_ours, b_other in zip(c_ours.bounds, c_other.bounds):
                close([b_other.adjusted_estimate, b_other.adjusted_ci_low, b_other.adjusted_ci_high],
                      [b_ours.adjusted_estimate, b_ours.adjusted_ci_low, b_ours.adjusted_ci_high], rel=1e-12)
        assert (other.robust, other.strongest_control, other.dof) == (ours.robust, ours.strongest_control, ours.dof)


def test_rows_and_nulls_are_dropped_and_counted(fitted):
    ours, *_, (y, d, income, cat), _ = fitted
    n = len(y)
    extra = 50
    y2 = np.r_[y, np.full(extra, np.nan)]
    d2 = np.r_[d, np.ones(extra)]
    income2 = np.r_[income, np.ones(extra)]
    cat2 = np.r_[cat.astype(float), np.zeros(extra)]
    income2[n:n + 10], y2[n:n + 10] = np.nan, 1.0
    cat2[n + 10:n + 20], y2[n + 10:n + 20] = np.nan, 0.0
    out = controlled_lpm(y2, d2, [income2, Categorical(cat2, LEVELS)], ["income", "cat"])
    assert out.dropped_null == extra and out.n == n and "50 rows with a null" in out.note
    close(out.estimate, ours.estimate, rel=1e-12)
    # rows= selects without copying the caller's arrays
    picked = controlled_lpm(y2, d2, [income2, Categorical(cat2, LEVELS)], ["income", "cat"], rows=np.arange(n))
    assert picked.dropped_null == 0 and picked.note is None
    close(picked.estimate, ours.estimate, rel=1e-12)


# -- degenerate input: notes, not exceptions -------------------------------------------------------

def test_degenerate_input_gives_notes():
    y, d, income, cat = world(n=500, seed=2)
    both = (["income", "cat"], [income, Categorical(cat, LEVELS)])
    five = np.r_[np.flatnonzero(d == 1)[:2], np.flatnonzero(d == 0)[:3]]
    five = five[np.argsort(five)]
    y[five[:2]], y[five[2:]] = 1, 0  # both groups, both outcomes
    # numeric controls: a level of a categorical among five rows would predict its outcome and be dropped
    few = (["income", "square", "cube"], [income[five], income[five] ** 2, income[five] ** 3])
    none = (["income", "cat"], [income[:0], Categorical(cat[:0], LEVELS)])
    cases = {
        "one class of y": (np.zeros_like(y), d, both, "the outcome takes one value"),
        "d constant": (y, np.ones_like(d), both, "the group indicator takes one value"),
        "too few rows": (y[five], d[five], few, "5 rows for 5 parameters: too few to estimate"),
        "no rows": (y[:0], d[:0], none, "no rows to estimate from"),
        "all null": (np.full_like(y, np.nan), d, both, "no rows to estimate from"),
        "collinear controls": (y, d, (["income", "income_again"], [income, 2 * income + 1]),
                               "singular design: the controls ['income', 'income_again'] are collinear"),
        "d is a control": (y, d, (["income", "copy"], [income, d.copy()]),
                           "singular design: the group is an exact combination of the controls ['copy']"),
        "perfect fit": (d.copy(), d, both, "no residual variance"),
        "infinite income": (y, d, (["income", "cat"], [np.where(np.arange(len(y)) == 3, np.inf, income),
                                                       Categorical(cat, LEVELS)]), "infinite values in income"),
    }
    for what, (yy, dd, (names, blocks), expected) in cases.items():
        out = controlled_lpm(yy, dd, blocks, names)
        assert out.estimate is None and out.se is None and out.robust is None, what
        assert out.rv_q is None and out.sensitivity == (), what
        assert expected in out.note, (what, out.note)


def test_a_control_without_variance_is_dropped_with_a_note():
    y, d, income, cat = world(n=800, seed=3)
    out = controlled_lpm(y, d, [income, np.full(len(y), 7.0), Categorical(np.full(len(y), 2), LEVELS)],
                         ["income", "flat", "one_level"])
    assert out.controls == ("income",) and out.estimate is not None
    assert "'flat' has no variance" in out.note and "'one_level' has one level" in out.note
    ref = controlled_lpm(y, d, [income], ["income"])
    close(out.estimate, ref.estimate, rel=1e-12)


def test_no_controls_is_the_raw_difference():
    y, d, *_ = world(n=600, seed=4)
    out = controlled_lpm(y, d, [], [])
    close(out.estimate, y[d == 1].mean() - y[d == 0].mean(), rel=1e-12)
    close(out.raw_difference, out.estimate, rel=1e-12)
    assert out.robust is None and out.strongest_control is None and "no controls" in out.note


# -- robustness: a world a control's strength explains away, and one it cannot ------------------

def linear_world(strength_u: float, effect: float = 0.0, n: int = 40_000, seed: int = 11):
    """A world where the linear probability model is true: an observed control x and an
    unobserved u raise both the chance of being in the group and of denial (u with
    ``strength_u`` where x has 0.25), a weak observed control w, and a direct effect."""
    rng = np.random.default_rng(seed)
    x, u, w = rng.random(n), rng.random(n), rng.random(n)
    d = (rng.random(n) < 0.1 + 0.25 * x + strength_u * u).astype(float)
    y = (rng.random(n) < 0.1 + effect * d + 0.25 * x + strength_u * u + 0.05 * w).astype(float)
    return y, d, x, u, w


def test_a_spurious_disparity_from_a_factor_as_strong_as_a_control_is_not_robust():
    """No direct effect; an unobserved u as strong as the observed x drives group and denial.
    The regression on x and w finds a significant disparity; a confounder as strong as x (k =
    1) explains it away — robust False, x the strongest control — and its adjusted interval
    holds the estimate the regression would give had u been observed."""
    y, d, x, u, w = linear_world(0.25)
    out = controlled_lpm(y, d, [x, w], ["x", "w"])
    assert out.estimate > 0 and out.p_value < 1e-3  # spurious, and significant
    assert out.robust is False and out.strongest_control == ALL_CONTROLS
    singles = [c for c in out.sensitivity if c.name != ALL_CONTROLS]
    assert max(singles, key=lambda c: c.bounds[0].bias).name == "x"
    at1 = out.bound("x", 1.0)
    assert at1.adjusted_ci_low < 0 < at1.adjusted_ci_high
    with_u = controlled_lpm(y, d, [x, w, u], ["x", "w", "u"])
    assert at1.adjusted_ci_low < with_u.estimate < at1.adjusted_ci_high and with_u.p_value > 0.05


def test_a_confounder_stronger_than_every_control_is_beyond_the_benchmarks():
    """What the benchmarks cannot see: u twice as strong as x makes a spurious disparity that
    survives a confounder as strong as x (robust True, relative to the controls), while the
    robustness value says a confounder of u's actual strength would explain it away."""
    y, d, x, u, w = linear_world(0.5)
    out = controlled_lpm(y, d, [x, w], ["x", "w"])
    with_u = controlled_lpm(y, d, [x, w, u], ["x", "w", "u"])
    u_strength = {c.name: c for c in with_u.sensitivity}["u"]
    assert out.robust is True and out.p_value < 1e-6 and with_u.p_value > 0.05
    assert max(u_strength.r2dxj_x, u_strength.r2yxj_dx) > out.rv_q  # stronger than the RV on one side
    assert adjusted_estimate(out.estimate, out.se, out.dof, u_strength.r2dxj_x, u_strength.r2yxj_dx) < 0.01


def test_the_omitted_variable_bias_formula_is_exact_for_ols():
    """C&H eq. 12-13 are identities for OLS: the regression without u, adjusted by u's partial
    R² with d (given the controls) and with y (given d and the controls), is the regression with
    u — its estimate and its standard error."""
    y, d, x, u, w = linear_world(0.3, effect=0.05, n=5000, seed=3)
    out = controlled_lpm(y, d, [x, w], ["x", "w"])
    with_u = controlled_lpm(y, d, [x, w, u], ["x", "w", "u"])
    u_strength = {c.name: c for c in with_u.sensitivity}["u"]
    r2d, r2y = u_strength.r2dxj_x, u_strength.r2yxj_dx
    assert with_u.estimate < out.estimate  # u biases upwards: the adjustment's direction
    close(adjusted_estimate(out.estimate, out.se, out.dof, r2d, r2y), with_u.estimate, rel=1e-9)
    close(adjusted_se(out.se, out.dof, r2d, r2y), with_u.se, rel=1e-9)


def test_a_large_effect_with_weak_controls_is_robust():
    y, d, x, u, w = linear_world(0.0, effect=0.2, n=20_000, seed=12)
    out = controlled_lpm(y, d, [x, w], ["x", "w"])
    assert out.robust is True and out.estimate == pytest.approx(0.2, abs=0.03)
    assert out.rv_qa > 0.1 and out.strongest_control == ALL_CONTROLS
    assert all(b.adjusted_ci_low > 0 for c in out.sensitivity for b in c.bounds)


def test_a_held_block_is_in_the_model_but_no_benchmark(fitted):
    """The regression engine holds the other protected groups' cells (``held``): in the model,
    so the estimate is the full model's, but a confounder is measured against the recorded
    inputs only — PySensemakr's benchmark_covariates on the same fit."""
    _, fit, dummies, _, (y, d, income, cat), _ = fitted
    ours = controlled_lpm(y, d, [income, Categorical(cat, LEVELS)], ["income", "cat"], 0.95,
                          multipliers=[1, 2], held=1)
    close(ours.estimate, fit.params["d"])
    assert [c.name for c in ours.sensitivity] == ["income"] and ours.strongest_control == "income"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = sensemakr.Sensemakr(fit, "d", benchmark_covariates={"income": ["income"]}, kd=[1, 2], alpha=0.05)
    bounds = theirs.bounds.set_index("bound_label")
    for k in (1, 2):
        mine, row = ours.bound("income", float(k)), bounds.loc[f"{k}x income"]
        close([mine.r2dz_x, mine.r2yz_dx, mine.adjusted_estimate, mine.adjusted_se],
              [row["r2dz_x"], row["r2yz_dx"], row["adjusted_estimate"], row["adjusted_se"]])
