"""engines.regression.cells: the regression's passes over cells of rows (the categorical controls'
dummies and the fixed effects never expanded) give the sums the dense rows give, and the models
fitted from them equal a dense reference fit — every column of the design as a dummy, fixed
effects included, Newton–Raphson and OLS in plain numpy here — on a design with categorical
controls, absorbed fixed effects, clusters and a separated level, to 1e-8."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from aequum.engines.regression.absorb import Normal
from aequum.engines.regression.cells import Cells
from aequum.engines.regression.design import Categorical, design, fill
from aequum.engines.regression.logit import controlled_logit
from aequum.engines.regression.sensitivity import controlled_lpm


def world(n=4000, seed=0):
    """Two categorical controls (one with a level whose applicants are all denied: separated),
    a numeric one, lenders (the cluster too) and markets, a group effect."""
    rng = np.random.default_rng(seed)
    lender = rng.choice(25, n, p=(w := 1 / np.arange(1, 26) ** 0.8) / w.sum())
    market = (lender % 4 + (rng.random(n) < 0.3) * rng.integers(0, 4, n)) % 4
    dti = rng.choice(6, n, p=[0.3, 0.25, 0.2, 0.15, 0.07, 0.03])
    purpose = rng.choice(3, n, p=[0.6, 0.3, 0.1])
    kind = rng.choice(4, n, p=[0.5, 0.2, 0.2, 0.1])
    income = rng.lognormal(4.3, 0.5, n)
    d = (rng.random(n) < 0.25 + 0.2 * (lender % 3 == 0)).astype(float)
    eta = -1.2 + 0.35 * d + 0.25 * dti - 0.3 * (purpose == 2) - 0.01 * (income - 75) + rng.normal(0, .5, 25)[lender]
    y = (rng.random(n) < expit(eta)).astype(float)
    y = np.where(kind == 3, (rng.random(n) < 0.5).astype(float), y)
    y[dti == 5] = 1.0                      # every applicant in the last DTI level denied
    return y, d, income, dti, purpose, lender, market, kind


def _inputs(y, d, income, dti, purpose, lender, market, kind):
    cat = lambda c: Categorical(c, [str(i) for i in range(int(c.max()) + 1)])  # noqa: E731
    return dict(x_blocks=[income, cat(dti), cat(purpose), cat(kind)], names=["income", "dti", "purpose", "kind"],
                fixed=[cat(market), cat(lender)], fixed_names=["market", "lender"], cluster=cat(lender))


def _dense(des, columns, income, dti, purpose, kind, market, lender, d):
    """The design of the rows ``des`` kept as dense columns: 1, d, income, each dummy our fit
    reports (``name[code]``), and every fixed effect's levels but its first present."""
    rows = des.keep
    out = [np.ones(len(rows)), d[rows], income[rows]]
    source = {"dti": dti, "purpose": purpose, "kind": kind}
    for c in columns[2:]:
        name, code = c[:-1].split("[")
        out.append((source[name][rows] == int(code)).astype(float))
    for f in (market, lender):
        for level in np.unique(f[rows])[1:]:
            out.append((f[rows] == level).astype(float))
    return np.column_stack(out)


def _cr1(scores, cluster, n, k):
    s = np.zeros((cluster.max() + 1, scores.shape[1]))
    np.add.at(s, cluster, scores)
    g = len(s)
    return s.T @ s * g / (g - 1) * (n - 1) / (n - k)


def test_cell_sums_equal_the_dense_rows():
    y, d, income, dti, purpose, lender, market, kind = world(seed=3)
    kw = _inputs(y, d, income, dti, purpose, lender, market, kind)
    rng = np.random.default_rng(0)
    for fixed in ((), kw["fixed"][1:], kw["fixed"]):
        des = design(y, d, kw["x_blocks"], kw["names"], None, None, fixed, kw["fixed_names"][2 - len(fixed):], None)
        assert des.separated_rows > 0 and any(s.startswith("dti = 5") for s in des.separated)
        p, n = des.p, des.n
        scale = rng.random(p) + 0.5
        w = rng.random(n)
        z = fill(np.empty((n, p)), slice(0, n), des) * scale
        dense = Normal(p, des.effects)
        dense.add(z, w, slice(0, n))
        cells = Cells(des, des.means, scale)
        ours = cells.normal(w)
        for a, b in ((ours.a, dense.a), (ours.bb, dense.bb), (ours.bs, dense.bs), (ours.d, dense.d),
                     (ours.solver().g, dense.solver().g)):
            assert np.allclose(a, b, rtol=1e-11, atol=1e-11 * np.abs(b).max(initial=1.0)), np.abs(a - b).max(initial=0)
        theta, fs, fb = rng.normal(size=p), rng.normal(size=des.effects.small), rng.normal(size=des.effects.sizes[0])
        whole = slice(0, n)
        assert np.allclose(cells.eta(theta, fs, fb), z @ theta + des.effects.eta(whole, fs, fb), rtol=0, atol=1e-12)
        r = rng.normal(size=n)
        zr, gs, gb = cells.tdot(r)
        gs0, gb0 = des.effects.sums(whole, r)
        assert np.allclose(zr, z.T @ r, atol=1e-10) and np.allclose(gb, gb0, atol=1e-10)
        assert np.allclose(gs, gs0, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_logit_and_lpm_equal_a_dense_reference(seed):
    y, d, income, dti, purpose, lender, market, kind = world(seed=seed)
    kw = _inputs(y, d, income, dti, purpose, lender, market, kind)
    logit = controlled_logit(y, d, **kw)
    lpm = controlled_lpm(y, d, **kw)
    des = design(y, d, kw["x_blocks"], kw["names"], None, None, kw["fixed"], kw["fixed_names"], kw["cluster"])
    assert logit.converged and logit.separated_rows == des.separated_rows > 0
    columns = list(logit.coefficients["columns"])
    x = _dense(des, columns, income, dti, purpose, kind, market, lender, d)
    yk, n, k = y[des.keep], des.n, x.shape[1]
    assert k == des.parameters
    cluster = np.unique(lender[des.keep], return_inverse=True)[1]

    # Newton–Raphson on the dense design, to the rounding of the solve
    beta = np.zeros(k)
    for _ in range(50):
        prob = expit(x @ beta)
        step = np.linalg.solve(x.T @ (x * (prob * (1 - prob))[:, None]), x.T @ (yk - prob))
        beta += step
        if np.max(np.abs(step)) < 1e-13:
            break
    prob = expit(x @ beta)
    inv = np.linalg.inv(x.T @ (x * (prob * (1 - prob))[:, None]))
    rel = 1e-8
    assert np.allclose(logit.coefficients["coef"], beta[1:len(columns) + 1], rtol=rel, atol=0)
    assert np.allclose(logit.coefficients["se"][1:], np.sqrt(np.diag(inv))[2:len(columns) + 1], rtol=rel, atol=0)
    assert logit.se_classical == pytest.approx(np.sqrt(inv[1, 1]), rel=rel)
    cov = inv @ _cr1(x * (yk - prob)[:, None], cluster, n, k) @ inv
    assert logit.se == logit.se_cluster == pytest.approx(np.sqrt(cov[1, 1]), rel=rel)
    x1, x0 = x.copy(), x.copy()
    x1[:, 1], x0[:, 1] = 1.0, 0.0
    assert logit.ame == pytest.approx(np.mean(expit(x1 @ beta) - expit(x0 @ beta)), rel=rel)
    ll = float(yk @ (x @ beta) - np.logaddexp(0, x @ beta).sum())
    assert logit.log_likelihood == pytest.approx(ll, rel=1e-12)

    # OLS on the same rows and columns
    b, *_ = np.linalg.lstsq(x, yk, rcond=None)
    e = yk - x @ b
    xtx = np.linalg.inv(x.T @ x)
    s2 = e @ e / (n - k)
    lpm_cols = list(lpm.coefficients["columns"])
    assert lpm_cols == columns
    assert np.allclose(lpm.coefficients["y"], b[1:len(columns) + 1], rtol=rel, atol=1e-14)
    assert np.allclose(lpm.coefficients["se"], np.sqrt(s2 * np.diag(xtx))[1:len(columns) + 1], rtol=rel, atol=0)
    assert lpm.estimate == pytest.approx(b[1], rel=rel) and lpm.dof == n - k
    cov = xtx @ _cr1(x * e[:, None], cluster, n, k) @ xtx
    assert lpm.se_cluster == pytest.approx(np.sqrt(cov[1, 1]), rel=rel)


def test_same_input_same_bits():
    y, d, income, dti, purpose, lender, market, kind = world(seed=2)
    kw = _inputs(y, d, income, dti, purpose, lender, market, kind)
    a, b = controlled_logit(y, d, **kw), controlled_logit(y, d, **kw)
    assert (a.coefficient, a.se, a.ame, a.ame_se, a.log_likelihood) == (b.coefficient, b.se, b.ame, b.ame_se,
                                                                         b.log_likelihood)
    assert np.array_equal(a.coefficients["coef"], b.coefficients["coef"])


def test_one_design_for_both_models_in_either_order():
    """The engine fits both models on one design (``prepared``): the same results as each alone,
    whichever runs first."""
    y, d, income, dti, purpose, lender, market, kind = world(seed=5)
    kw = _inputs(y, d, income, dti, purpose, lender, market, kind)
    alone_logit, alone_lpm = controlled_logit(y, d, **kw), controlled_lpm(y, d, **kw)
    for first_logit in (True, False):
        des = design(y, d, kw["x_blocks"], kw["names"], None, None, kw["fixed"], kw["fixed_names"], kw["cluster"])
        if first_logit:
            logit, lpm = controlled_logit(y, d, prepared=des, **kw), controlled_lpm(y, d, prepared=des, **kw)
        else:
            lpm, logit = controlled_lpm(y, d, prepared=des, **kw), controlled_logit(y, d, prepared=des, **kw)
        assert (logit.coefficient, logit.se, logit.ame, logit.note) == (alone_logit.coefficient, alone_logit.se,
                                                                      alone_logit.ame, alone_logit.note)
        assert (lpm.estimate, lpm.se, lpm.se_cluster, lpm.rv_q, lpm.note) == (
            alone_lpm.estimate, alone_lpm.se, alone_lpm.se_cluster, alone_lpm.rv_q, alone_lpm.note)


def test_sparse_cross_matrix_equal_to_rounding(monkeypatch):
    """The absorbed effect × the other effects' cross matrix taken sparse (as from 2^20 entries:
    5,000 lenders × 400 markets) gives the dense one's fit to rounding."""
    import aequum.engines.regression.cells as cells

    y, d, income, dti, purpose, lender, market, kind = world(seed=6)
    kw = _inputs(y, d, income, dti, purpose, lender, market, kind)
    dense_logit, dense_lpm = controlled_logit(y, d, **kw), controlled_lpm(y, d, **kw)
    monkeypatch.setattr(cells, "SPARSE_CROSS", 1)
    sparse_logit, sparse_lpm = controlled_logit(y, d, **kw), controlled_lpm(y, d, **kw)
    for a, b in ((dense_logit.coefficients["coef"], sparse_logit.coefficients["coef"]),
                 (dense_logit.coefficients["se"], sparse_logit.coefficients["se"]),
                 ([dense_logit.ame, dense_logit.se, dense_lpm.estimate, dense_lpm.se, dense_lpm.se_cluster],
                  [sparse_logit.ame, sparse_logit.se, sparse_lpm.estimate, sparse_lpm.se, sparse_lpm.se_cluster])):
        assert np.allclose(np.asarray(b, float), np.asarray(a, float), rtol=1e-9, atol=0)
