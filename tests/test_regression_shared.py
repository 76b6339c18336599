"""What the regression and pricing engines share between fits gives what each fit alone gives:
several outcomes on one design (``with_outcome`` + ``linear_fits``, the pricing fields) equal a
design each; a logit started from a related fit (``start_from``, the engine's second round)
converges to the same estimates as from its own linear model; the rows sorted by cell in the
stable order; the engine's tables in piece order whatever the rounds."""
from __future__ import annotations

import numpy as np
import pytest

from aequum.engines.regression.absorb import no_effects
from aequum.engines.regression.design import _by_cell, design, with_outcome
from aequum.engines.regression.linear import linear_fits
from aequum.engines.regression.logit import controlled_logit
from aequum.engines.regression.sensitivity import controlled_lpm
from test_regression_cells import _inputs, world


def _close(a, b, tol):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert np.allclose(a, b, rtol=tol, atol=tol * np.max(np.abs(b))), (a, b)


def test_outcomes_sharing_a_design_equal_a_design_each():
    y, d, income, dti, purpose, lender, market, kind = world(3000, seed=4)
    inputs = _inputs(y, d, income, dti, purpose, lender, market, kind)
    rng = np.random.default_rng(1)
    prices = [income * 0.01 + 0.4 * d + rng.normal(0, 1, len(y)), 3.0 + 0.2 * dti - 0.1 * d + rng.gamma(2, 1, len(y))]
    rows = np.flatnonzero(rng.random(len(y)) < 0.9)
    args = (d, inputs["x_blocks"], inputs["names"], rows, None, inputs["fixed"], inputs["fixed_names"],
            inputs["cluster"])
    base = design(prices[0], *args)
    shared = [base, with_outcome(base, prices[1])]
    linear_fits(shared)
    for price, des in zip(prices, shared):
        together = controlled_lpm(price, d, **inputs, rows=rows, prepared=des)
        alone = controlled_lpm(price, d, **inputs, rows=rows)
        assert together.n == alone.n and together.dof == alone.dof and together.raw_difference == pytest.approx(
            alone.raw_difference, rel=1e-12)
        for field in ("estimate", "se", "se_robust", "se_cluster", "r_squared", "rv_q", "test_p_value"):
            _close(getattr(together, field), getattr(alone, field), 1e-9)
        _close(together.coefficients["y"], alone.coefficients["y"], 1e-9)
        assert [c.name for c in together.sensitivity] == [c.name for c in alone.sensitivity]
        _close([c.r2yxj_dx for c in together.sensitivity], [c.r2yxj_dx for c in alone.sensitivity], 1e-9)


def test_outcomes_in_the_room_of_one_buffer_give_the_same_bits():
    """A design with ``room`` for other outcomes holds their centred values in the rows after its
    own (no copy of its columns for their cross products): the same bits as each outcome in an
    array of its own. An outcome that cannot share takes no row; one beyond the room gets an
    array of its own. A dropped numeric control leaves the room after the rows kept."""
    y, d, income, dti, purpose, lender, market, kind = world(3000, seed=5)
    inputs = _inputs(y, d, income, dti, purpose, lender, market, kind)
    rng = np.random.default_rng(2)
    prices = [income * 0.01 + 0.4 * d + rng.normal(0, 1, len(y)), 3.0 - 0.1 * d + rng.gamma(2, 1, len(y)),
              1.0 + 0.05 * income + rng.normal(0, 2, len(y))]
    flat = np.full(len(y), 7.0)  # a numeric control without variance: dropped, its row given up
    for blocks, names in ((inputs["x_blocks"], inputs["names"]), ([*inputs["x_blocks"], flat], [*inputs["names"], "flat"])):
        args = (d, blocks, names, None, None, inputs["fixed"], inputs["fixed_names"], inputs["cluster"])
        apart = [design(prices[0], *args)]
        apart += [with_outcome(apart[0], p) for p in prices[1:]]
        roomy = design(prices[0], *args, room=2)
        assert with_outcome(roomy, np.full(len(y), 2.0)) is None and roomy.spare_used == 0
        together = [roomy, *(with_outcome(roomy, p) for p in prices[1:])]
        assert [t.spare_row for t in together[1:]] == [0, 1] and roomy.spare_used == 2
        assert all(np.shares_memory(t.centred, roomy.outcomes) for t in together[1:])
        assert np.shares_memory(roomy.columns, roomy.outcomes) and len(roomy.outcomes) == len(roomy.columns) + 2
        beyond = with_outcome(roomy, prices[2])  # no room left: its own array
        assert beyond.spare_row is None and not np.shares_memory(beyond.centred, roomy.outcomes)
        for a, b in zip(linear_fits(apart), linear_fits(together)):
            assert np.array_equal(a.coef, b.coef) and a.tss == b.tss and np.array_equal(a.centred, b.centred)
        for price, a, b in zip(prices, apart, together):
            one = controlled_lpm(price, d, blocks, names, rows=None, prepared=a, fixed=inputs["fixed"],
                                 fixed_names=inputs["fixed_names"], cluster=inputs["cluster"])
            two = controlled_lpm(price, d, blocks, names, rows=None, prepared=b, fixed=inputs["fixed"],
                                 fixed_names=inputs["fixed_names"], cluster=inputs["cluster"])
            assert (one.estimate, one.se, one.se_cluster, one.r_squared) == (two.estimate, two.se, two.se_cluster,
                                                                             two.r_squared)


def test_gather_is_the_fancy_index_and_raises_out_of_bounds():
    """``design.gather``: ``values[rows]`` into ``out``, converted to its type; an index out of
    bounds raises as the fancy index would (never clipped)."""
    from aequum.engines.regression.design import gather

    values = np.arange(10, dtype=np.float64) * 1.5
    rows = np.array([9, 0, 3, 3], np.int32)
    assert np.array_equal(gather(values, rows, np.empty(4)), values[rows])
    assert np.array_equal(gather(np.arange(10, dtype=np.int8), rows, np.empty(4)), rows.astype(float))
    for bad in ([10, 0], [-1, 2]):
        if bad[0] < 0:  # a negative index counts from the end, as numpy's
            assert np.array_equal(gather(values, np.array(bad), np.empty(2)), values[bad])
            continue
        with pytest.raises(IndexError):
            gather(values, np.array(bad), np.empty(2))
    assert len(gather(values, np.array([], np.int64), np.empty(0))) == 0


def test_an_outcome_whose_design_could_differ_is_not_shared():
    y, d, income, dti, purpose, lender, market, kind = world(2000, seed=2)
    inputs = _inputs(y, d, income, dti, purpose, lender, market, kind)
    price = income * 0.02 + d
    base = design(price, d, inputs["x_blocks"], inputs["names"], None, None, inputs["fixed"], inputs["fixed_names"])
    assert with_outcome(base, y) is None                       # 0/1: its one-outcome levels would be dropped
    assert with_outcome(base, np.full(len(y), 2.0)) is None    # one value: no fit
    assert with_outcome(base, np.where(d == 1, np.inf, price)) is None
    binary = design(y, d, inputs["x_blocks"], inputs["names"], None, None)
    assert with_outcome(binary, price) is None                 # a 0/1 design dropped rows by its outcome


def test_a_logit_started_from_a_related_fit_converges_to_the_same_estimates():
    y, d, income, dti, purpose, lender, market, kind = world(4000, seed=0)
    inputs = _inputs(y, d, income, dti, purpose, lender, market, kind)
    pooled = controlled_logit(y, d, **inputs)
    sub = np.flatnonzero(kind != 2)  # a related comparison: other rows, the same columns
    own = controlled_logit(y, d, **inputs, rows=sub)
    started = controlled_logit(y, d, **inputs, rows=sub,
                               start_from=dict(zip(pooled.coefficients["columns"], pooled.coefficients["coef"])))
    assert own.converged and started.converged
    for field in ("coefficient", "se", "se_classical", "ame", "ame_se", "p_value", "log_likelihood", "e_value"):
        _close(getattr(started, field), getattr(own, field), 1e-7)
    _close(started.coefficients["coef"], own.coefficients["coef"], 1e-6)
    # a start that is no help (every slope far off) still converges, from the linear model's start if need be
    wild = controlled_logit(y, d, **inputs, rows=sub, start_from={c: 5.0 for c in pooled.coefficients["columns"]})
    _close(wild.coefficient, own.coefficient, 1e-7)


@pytest.mark.parametrize("n_levels", [3, 40])
def test_rows_sorted_by_cell_in_the_stable_order(n_levels):
    rng = np.random.default_rng(n_levels)
    n = 5000
    keep = np.sort(rng.choice(20000, n, replace=False))
    codes = [rng.integers(0, n_levels, 20000), rng.integers(0, 4, 20000)]
    effects = no_effects(n)
    got, _, starts = _by_cell(keep, effects, codes)
    key = codes[0][keep] * 4 + codes[1][keep]
    order = np.argsort(key, kind="stable")
    assert np.array_equal(got, keep[order])
    assert np.array_equal(starts, np.flatnonzero(np.r_[True, np.diff(key[order]) != 0]))
