"""engines.regression.absorb: lender and market fixed effects absorbed through the partitioned
normal equations, never expanded — the logit's and the linear model's group coefficient,
classical and cluster-robust (CR1) errors, marginal effect and sensitivity equal statsmodels
with the fixed effects as dummy columns; levels with one outcome dropped with a note; nested
effects; row order and blocks change nothing."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from aequum.engines.regression.design import Categorical
from aequum.engines.regression.logit import controlled_logit
from aequum.engines.regression.sensitivity import controlled_lpm

sm = pytest.importorskip("statsmodels.api")

REL = 1e-6
LEVELS = ["a", "b", "c", "d"]


def close(a, b, rel=REL):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape and np.allclose(a, b, rtol=rel, atol=0), (a, b, np.max(np.abs(a / b - 1)))


def world(n=5000, seed=0, lenders=40, markets=6, effect=0.4):
    """Applicants of ``lenders`` lenders (sizes from a Zipf-like law) in ``markets`` markets;
    a lender effect and a market effect on denial, a group more common at some lenders."""
    rng = np.random.default_rng(seed)
    lender = rng.choice(lenders, n, p=(w := 1 / np.arange(1, lenders + 1) ** 0.7) / w.sum())
    market = (lender % markets + (rng.random(n) < 0.3) * rng.integers(0, markets, n)) % markets
    cat = rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])
    income = rng.lognormal(4.3, 0.5, n)
    d = (rng.random(n) < 0.2 + 0.3 * (lender % 3 == 0) + 0.1 * (income < 60)).astype(float)
    alpha = rng.normal(0, 0.6, lenders)
    gamma = rng.normal(0, 0.4, markets)
    eta = -1.0 + effect * d + 0.3 * cat - 0.012 * (income - 75) + alpha[lender] + gamma[market]
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    return y, d, income, cat.astype(float), lender, market


def ours(model, y, d, income, cat, lender, market, cluster=True, **kw):
    return model(y, d, [income, Categorical(cat, LEVELS)], ["income", "cat"],
                 fixed=[Categorical(market, [str(i) for i in range(market.max() + 1)]),
                        Categorical(lender, [str(i) for i in range(lender.max() + 1)])],
                 fixed_names=["market", "lender"],
                 cluster=Categorical(lender, [str(i) for i in range(lender.max() + 1)]) if cluster else None, **kw)


def dummies(y, d, income, cat, lender, market, rows):
    frame = pd.DataFrame({"d": d[rows], "income": income[rows]})
    parts = [frame]
    for name, codes in (("cat", cat), ("market", market), ("lender", lender)):
        dm = pd.get_dummies(pd.Series(codes[rows].astype(int)), prefix=name).astype(float)
        parts.append(dm.iloc[:, 1:])
    return sm.add_constant(pd.concat(parts, axis=1).reset_index(drop=True))


@pytest.mark.parametrize("seed", [0, 1])
def test_logit_equals_statsmodels_with_dummies(seed):
    y, d, income, cat, lender, market = world(seed=seed)
    clustered = ours(controlled_logit, y, d, income, cat, lender, market)
    classical = ours(controlled_logit, y, d, income, cat, lender, market, cluster=False)
    assert clustered.converged and clustered.fixed_effects == ("market", "lender")
    assert clustered.n == len(y) and clustered.clusters == 40
    X = dummies(y, d, income, cat, lender, market, np.arange(len(y)))
    model = sm.Logit(y, X)
    plain = model.fit(disp=0, method="newton", tol=1e-12, maxiter=100)
    robust = model.fit(disp=0, method="newton", tol=1e-12, maxiter=100, cov_type="cluster",
                       cov_kwds={"groups": lender})
    close(clustered.coefficient, plain.params["d"])
    close(classical.se, plain.bse["d"])
    close(clustered.se_classical, plain.bse["d"])
    close(clustered.se, robust.bse["d"])
    close(clustered.log_likelihood, plain.llf)
    close([clustered.or_ci_low, clustered.or_ci_high], np.exp(robust.conf_int().loc["d"].values))
    close(clustered.p_value, robust.pvalues["d"])
    m_plain = plain.get_margeff(at="overall", method="dydx", dummy=True)
    m_robust = robust.get_margeff(at="overall", method="dydx", dummy=True)
    close([classical.ame, classical.ame_se], [m_plain.margeff[0], m_plain.margeff_se[0]])
    close([clustered.ame, clustered.ame_se], [m_robust.margeff[0], m_robust.margeff_se[0]])
    close(clustered.coefficients["coef"], plain.params[["d", "income", "cat_1", "cat_2", "cat_3"]].values)
    assert clustered.intercept is None and classical.intercept is None


def test_lpm_equals_statsmodels_ols_with_dummies():
    y, d, income, cat, lender, market = world(seed=3)
    fit = ours(controlled_lpm, y, d, income, cat, lender, market)
    X = dummies(y, d, income, cat, lender, market, np.arange(len(y)))
    ols = sm.OLS(y, X).fit()
    k = X.shape[1]
    assert fit.dof == len(y) - k == int(ols.df_resid) and fit.absorbed == 1 + 5 + 39
    close([fit.estimate, fit.se, fit.t, fit.p_value], [ols.params["d"], ols.bse["d"], ols.tvalues["d"], ols.pvalues["d"]])
    close(fit.se_robust, ols.get_robustcov_results("HC1").bse[list(X.columns).index("d")])
    close(fit.se_cluster, sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": lender}).bse["d"])
    close(fit.r_squared, ols.rsquared)
    # the benchmark partial R² of income with y, given d, the other controls and the effects
    t_income = ols.tvalues["income"]
    close(fit.sensitivity[0].r2yxj_dx, t_income ** 2 / (t_income ** 2 + ols.df_resid))
    # ... and with d, from d ~ X + effects
    aux = sm.OLS(d, X.drop(columns="d")).fit()
    close(fit.sensitivity[0].r2dxj_x, aux.tvalues["income"] ** 2 / (aux.tvalues["income"] ** 2 + aux.df_resid))


def test_levels_with_one_outcome_are_dropped_with_a_note():
    y, d, income, cat, lender, market = world(seed=4)
    y[lender == 7] = 0.0           # a lender that approves everyone
    lender[-1] = 40                # a lender with one applicant
    fit = ours(controlled_logit, y, d, income, cat, lender, market)
    gone = (lender == 7) | (lender == 40)
    assert fit.n == int((~gone).sum()) and fit.converged
    assert "levels with one outcome only" in fit.note and "2 of lender" in fit.note
    rows = np.flatnonzero(~gone)
    X = dummies(y, d, income, cat, lender, market, rows)
    theirs = sm.Logit(y[rows], X).fit(disp=0, method="newton", tol=1e-12, maxiter=100)
    close(fit.coefficient, theirs.params["d"])
    lpm = ours(controlled_lpm, y, d, income, cat, lender, market)
    assert lpm.n == fit.n  # both models on the same rows


def test_nested_effects_leave_the_group_identified():
    """A market served only by two lenders found nowhere else: its effect is the sum of
    theirs. The group's coefficient and error are those of the model without that market."""
    y, d, income, cat, lender, market = world(seed=5)
    market = market.copy()
    market[np.isin(lender, [30, 31])] = 6
    market[~np.isin(lender, [30, 31]) & (market == 6)] = 0
    fit = ours(controlled_logit, y, d, income, cat, lender, market, cluster=False)
    X = dummies(y, d, income, cat, lender, market, np.arange(len(y))).drop(columns="market_6")
    theirs = sm.Logit(y, X).fit(disp=0, method="newton", tol=1e-12, maxiter=100)
    close([fit.coefficient, fit.se], [theirs.params["d"], theirs.bse["d"]])


def test_row_order_and_blocks_change_nothing():
    y, d, income, cat, lender, market = world(seed=6, n=3000)
    a = ours(controlled_logit, y, d, income, cat, lender, market)
    order = np.random.default_rng(1).permutation(len(y))
    b = ours(controlled_logit, y[order], d[order], income[order], cat[order], lender[order], market[order],
             block_rows=211)
    close([a.coefficient, a.se, a.ame, a.ame_se, a.log_likelihood], [b.coefficient, b.se, b.ame, b.ame_se,
                                                                     b.log_likelihood], 1e-9)
    la = ours(controlled_lpm, y, d, income, cat, lender, market)
    lb = ours(controlled_lpm, y[order], d[order], income[order], cat[order], lender[order], market[order],
              block_rows=97)
    close([la.estimate, la.se, la.se_robust, la.se_cluster, la.rv_q], [lb.estimate, lb.se, lb.se_robust,
                                                                      lb.se_cluster, lb.rv_q], 1e-9)


def test_group_constant_within_the_effects_is_a_note():
    y, d, income, cat, lender, market = world(seed=7)
    d = (lender % 2).astype(float)   # the group is a lender attribute: nothing left within lenders
    for model in (controlled_logit, controlled_lpm):
        fit = ours(model, y, d, income, cat, lender, market, cluster=False)
        est = fit.coefficient if model is controlled_logit else fit.estimate
        assert est is None and "the group is constant within the levels of lender, market" in fit.note
