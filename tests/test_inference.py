"""The inference the regression and pricing models' tests use (engines.regression.wild): HC1
with one cluster (no cluster-robust claim), CR1 from min_clusters, and below it the wild
cluster bootstrap's p — the linear model's WCR bootstrap equal to the wildboottest package's at
the same weights, the logit's score bootstrap (Kline & Santos 2012) — with rejection rates near
5 % on a few-cluster null world where CR1 z-tests over-reject."""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy.stats import norm

from aequum.engines.core.data import AuditData
from aequum.engines.core.spec import parse_spec
from aequum.engines.regression.design import Categorical
from aequum.engines.regression.logit import controlled_logit
from aequum.engines.regression.sensitivity import controlled_lpm
from aequum.engines.regression.wild import Bootstrap, weights
from test_regression_engine import RAW, data, run

sm = pytest.importorskip("statsmodels.api")


def clustered_world(g=10, n=600, seed=1):
    """Cluster shocks in both the group share and the outcome; a numeric and a categorical control."""
    rng = np.random.default_rng(seed)
    cl = rng.integers(0, g, n)
    shock = rng.standard_normal(g)
    d = (rng.random(n) < 0.3 + 0.3 * (shock[cl] > 0)).astype(float)
    x = rng.standard_normal(n)
    cat = rng.integers(0, 3, n)
    y = 0.5 * x + shock[cl] + rng.standard_normal(n) + 0.3 * (cat == 1)
    return y, d, x, cat, cl


def labels(k):
    return [str(i) for i in range(k)]


# -- weights ------------------------------------------------------------------------------------

def test_weights_enumerate_when_they_can_and_are_seeded_otherwise():
    w, kind, enumerated = weights(12, Bootstrap())
    assert kind == "rademacher" and enumerated and w.shape == (4096, 12)
    assert len({tuple(r) for r in w}) == 4096 and set(np.unique(w)) == {-1.0, 1.0}
    w, kind, enumerated = weights(8, Bootstrap())
    assert kind == "webb" and not enumerated and w.shape == (9999, 8)
    assert np.allclose(sorted(np.unique(w) ** 2), [0.5, 0.5, 1, 1, 1.5, 1.5])
    assert np.array_equal(w, weights(8, Bootstrap())[0])                 # seeded: the same draws
    assert not np.array_equal(w, weights(8, Bootstrap(seed=1))[0])
    w, kind, enumerated = weights(4, Bootstrap())
    assert kind == "webb" and enumerated and w.shape == (6 ** 4, 4)       # every Webb vector
    w, kind, enumerated = weights(20, Bootstrap())
    assert kind == "rademacher" and not enumerated and w.shape == (9999, 20)


# -- the linear model's WCR bootstrap against wildboottest ----------------------------------------

@pytest.mark.parametrize("fixed", [False, True])
def test_wcr_p_value_equals_wildboottest_at_full_enumeration(fixed):
    """Rademacher weights, every one of the 2^10 sign vectors in both: the p-values are the
    same share of |t*| > |t| but for the two vectors w = ±1, whose |t*| is the observed |t|
    itself: ours never counts them (a relative margin of 1e-10), theirs does when rounding puts
    its t* a hair above its t. With a fixed effect as its dummies."""
    wb = pytest.importorskip("wildboottest.wildboottest")
    y, d, x, cat, cl = clustered_world()
    rng = np.random.default_rng(2)
    fe = rng.integers(0, 4, len(y))
    kw = dict(fixed=[Categorical(fe, list("abcd"))], fixed_names=["fe"]) if fixed else {}
    ours = controlled_lpm(y, d, [x, Categorical(cat, list("abc"))], ["x", "cat"], cluster=Categorical(cl, labels(10)),
                          bootstrap=Bootstrap(weights="rademacher"), **kw)
    X = pd.DataFrame({"const": 1.0, "d": d, "x": x, "c1": (cat == 1) * 1.0, "c2": (cat == 2) * 1.0})
    if fixed:
        for k in (1, 2, 3):
            X[f"fe{k}"] = (fe == k) * 1.0
    with pytest.warns(UserWarning, match="full_enumeration"):
        theirs = wb.wildboottest(sm.OLS(y, X), B=9999, cluster=cl, param="d", weights_type="rademacher",
                                 show=False, seed=1, parallel=False)
    assert ours.inference == "WCR-bootstrap" and ours.clusters == 10
    assert ours.bootstrap_draws == 1024 and ours.bootstrap_weights == "rademacher (all)"
    assert abs(ours.test_p_value - float(theirs["p-value"].iloc[0])) <= 2 / 1024 + 1e-12
    assert ours.estimate / ours.se_cluster == pytest.approx(float(theirs["statistic"].iloc[0]), rel=1e-9)
    # the interval is CR1's with t(G - 1) critical values
    ols = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": cl}, use_t=True)
    assert [ours.test_ci_low, ours.test_ci_high] == pytest.approx(list(ols.conf_int().loc["d"]), rel=1e-9)


def test_wcr_with_webb_weights_is_near_wildboottests():
    """Webb weights, 9,999 draws each (different generators): Monte Carlo error only."""
    wb = pytest.importorskip("wildboottest.wildboottest")
    y, d, x, cat, cl = clustered_world(g=8, seed=3)
    ours = controlled_lpm(y, d, [x], ["x"], cluster=Categorical(cl, labels(8)))
    assert ours.bootstrap_weights == "webb" and ours.bootstrap_draws == 9999
    X = pd.DataFrame({"const": 1.0, "d": d, "x": x})
    theirs = wb.wildboottest(sm.OLS(y, X), B=9999, cluster=cl, param="d", weights_type="webb", show=False,
                             seed=7, parallel=False)
    assert abs(ours.test_p_value - float(theirs["p-value"].iloc[0])) < 0.03   # 6 Monte Carlo s.e.


# -- few clusters: CR1 over-rejects, the bootstraps do not -----------------------------------------

def test_on_a_few_cluster_null_the_bootstraps_reject_near_five_percent():
    """8 clusters of 50, the group share and the outcome both driven by cluster shocks, no
    group effect: 600 worlds. CR1 with normal critical values (the logit's z) rejects about
    11 % of them; the WCR and score bootstraps about 6 % (fixed seeds: these counts are what they
    are, run to run)."""
    g, per, reps = 8, 50, 600
    cl = np.repeat(np.arange(g), per)
    cluster = Categorical(cl, labels(g))
    boot = Bootstrap(draws=999)
    reject = dict(cr1_z=0, wcr=0, logit_z=0, score=0)
    for r in range(reps):
        rng = np.random.default_rng(7000 + r)
        a = rng.standard_normal(g)
        d = (rng.random(len(cl)) < 1 / (1 + np.exp(-3 * a[cl]))).astype(float)
        x = rng.standard_normal(len(cl))
        e = rng.standard_normal(g)[cl] + rng.standard_normal(len(cl))
        lpm = controlled_lpm(0.5 * x + e, d, [x], ["x"], cluster=cluster, bootstrap=boot, multipliers=())
        reject["wcr"] += lpm.test_p_value < 0.05
        reject["cr1_z"] += 2 * norm.sf(abs(lpm.estimate / lpm.se_cluster)) < 0.05
        logit = controlled_logit((e + 0.5 * x > 0.3).astype(float), d, [x], ["x"], cluster=cluster, bootstrap=boot)
        assert logit.inference == "score-bootstrap" and logit.bootstrap_weights == "webb"
        reject["score"] += logit.p_value < 0.05
        reject["logit_z"] += 2 * norm.sf(abs(logit.coefficient / logit.se_cluster)) < 0.05
    rate = {k: v / reps for k, v in reject.items()}
    assert rate["cr1_z"] > 0.085 and rate["logit_z"] > 0.085, rate
    assert abs(rate["wcr"] - 0.05) < 0.025 and abs(rate["score"] - 0.05) < 0.025, rate
    assert rate["wcr"] < rate["cr1_z"] and rate["score"] < rate["logit_z"]


def test_score_bootstrap_is_reproducible_and_rejects_a_real_effect():
    y, d, x, cat, cl = clustered_world(g=12, n=2400, seed=4)
    yb = (y + 1.0 * d > 0.8).astype(float)
    one = controlled_logit(yb, d, [x], ["x"], cluster=Categorical(cl, labels(12)))
    two = controlled_logit(yb, d, [x], ["x"], cluster=Categorical(cl, labels(12)))
    assert one.inference == "score-bootstrap" and one.bootstrap_weights == "rademacher (all)"
    assert one.p_value == two.p_value < 0.01 and one.bootstrap_draws == 4096
    # the interval: CR1 with t(G - 1) critical values
    from scipy.stats import t as student_t
    crit = student_t.ppf(0.975, 11)
    assert [one.ci_low, one.ci_high] == pytest.approx([one.coefficient - crit * one.se_cluster,
                                                       one.coefficient + crit * one.se_cluster], rel=1e-12)
    # from min_clusters on: CR1 z as before
    many = controlled_logit(yb, d, [x], ["x"], cluster=Categorical(cl, labels(12)), bootstrap=Bootstrap(min_clusters=12))
    assert many.inference == "CR1" and many.p_value == pytest.approx(2 * norm.sf(abs(many.z)), rel=1e-12)
    assert many.bootstrap_draws == 0 and many.se == one.se


# -- one cluster: HC1 ----------------------------------------------------------------------------

def test_one_cluster_uses_hc1_and_equals_statsmodels():
    y, d, x, cat, cl = clustered_world(n=1500, seed=5)
    yb = (y > 0.5).astype(float)
    one = Categorical(np.zeros(len(y), np.int64), ["only"])
    X = pd.DataFrame({"const": 1.0, "d": d, "x": x})
    logit = controlled_logit(yb, d, [x], ["x"], cluster=one)
    theirs = sm.Logit(yb, X).fit(disp=0, method="newton", tol=1e-12, cov_type="HC0")
    n, k = len(y), 3
    assert logit.inference == "HC1" and logit.clusters == 1 and logit.se_cluster is None
    assert logit.se == pytest.approx(theirs.bse["d"] * np.sqrt(n / (n - k)), rel=1e-7)
    assert logit.p_value == pytest.approx(2 * norm.sf(abs(logit.coefficient / logit.se)), rel=1e-12)
    assert logit.se_classical != logit.se
    lpm = controlled_lpm(yb, d, [x], ["x"], cluster=one)
    ols = sm.OLS(yb, X).fit(cov_type="HC1", use_t=True)
    assert lpm.inference == "HC1" and lpm.se_cluster is None
    assert lpm.se_robust == pytest.approx(ols.bse["d"], rel=1e-9)
    assert lpm.test_p_value == pytest.approx(ols.pvalues["d"], rel=1e-9)
    assert [lpm.test_ci_low, lpm.test_ci_high] == pytest.approx(list(ols.conf_int().loc["d"]), rel=1e-9)
    # no cluster: classical, as before
    plain = controlled_lpm(yb, d, [x], ["x"])
    assert plain.inference == "classical" and plain.test_p_value == plain.p_value


def test_the_engine_on_one_lenders_records_tests_with_hc1():
    """cluster: lender on one lender's own records: tested (p, adjusted p, significant never
    null), inference HC1 for both models, no bootstrap."""
    raw = copy.deepcopy(RAW)
    raw["features"].append({"name": "lender", "type": "categorical", "categories": ["L0"], "mutability": "immutable"})
    raw["engines"]["regression"] = {"intersections": [], "cluster": "lender"}
    d = data(n=3000, penalty=0.08, seed=6)
    table = d.table.append_column("lender", pa.array(["L0"] * len(d)))
    out = run(AuditData(parse_spec(raw), table))
    for r in out["regression_estimates"]:
        assert r["clusters"] == 1 and r["inference"] == r["logit_inference"] == "HC1"
        assert r["bootstrap_draws"] is None and r["se_cluster"] is None
        for col in ("p_value", "p_adjusted", "significant", "logit_p_value", "logit_p_adjusted", "logit_significant"):
            assert r[col] is not None, col
        assert r["ci_low"] == pytest.approx(r["estimate"] - (r["estimate"] - r["ci_low"]), rel=1e-12)
