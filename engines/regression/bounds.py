"""A controlled difference under a stated bound on the inputs the records lack.

The robustness value and the benchmarks of ``engines.regression.sensitivity`` say how strong an
omitted confounder would have to be, measured against the recorded controls. On the public
HMDA LAR that is the wrong yardstick: the credit score it lacks drives denial and price far
more than any recorded field, so "twice as strong as the controls together" measures how weak
the LAR's controls are, not how strong the score is. What can settle it is a bound with
explicit values (Cinelli & Hazlett 2020, "Making sense of sensitivity", JRSS-B 82(1), Sec. 4.1
and eq. 11-13): an omitted Z with partial R² ``r2_group`` = R²_{D~Z|X} with group membership and
``r2_outcome`` = R²_{Y~Z|D,X} with the outcome moves the estimate by at most

    bias = se · sqrt(dof) · sqrt(r2_outcome · r2_group / (1 − r2_group))          (eq. 12)

(``se`` the classical standard error of the linear model, ``dof`` its residual degrees of
freedom), and the adjusted estimate ``sign(β)(|β| − bias)`` has the standard error

    se_Z = se_test · sqrt((1 − r2_outcome) / (1 − r2_group)) · sqrt(dof / (dof − 1))  (eq. 13)

where ``se_test`` is the error the row's own test uses (classical, HC1 or cluster-robust: the
factor is the ratio of residual scales, which carries over to a robust error). The bound
*survives* when the bounded estimate's p-value, adjusted across the run's tests as the
unbounded ones are, is significant (a bias that reaches the estimate leaves nothing). The values
come from where the input is recorded: a lender's internal records (``aequum bounds``), carried
to its public-data screening with their source (``decision.bounds`` in the spec).
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from scipy.stats import t as student_t

from aequum.engines.outcome.stats import adjust_p_values
from aequum.engines.regression.sensitivity import bias

COLUMNS = ("bound_source", "bound_r2_group", "bound_r2_outcome", "bounded_estimate",
           "bounded_ci_low", "bounded_ci_high", "bounded_p_value", "bounded_p_adjusted", "survives_bound")


def empty() -> dict:
    """The columns of a row with no bound (none stated, or no estimate)."""
    return dict.fromkeys(COLUMNS)


def under_bound(estimate: float | None, se: float | None, dof: int | None, se_test: float | None,
                test_dof: int | None, confidence: float, bound) -> dict:
    """The row's estimate under ``bound`` (an ``InputBound``: ``r2_group``, ``r2_outcome``,
    ``source``): the bounded estimate (eq. 12, taken towards zero), its ``confidence`` interval
    with t(``test_dof``) critical values on ``se_Z`` (eq. 13), and the two-sided p of the bounded
    estimate (1 where the bias reaches the estimate: nothing of it is left). Whether it survives
    is decided across the run's tests (:func:`survive`). Empty columns without a bound or an
    estimate."""
    if bound is None:
        return empty()
    out = {**empty(), "bound_source": bound.source, "bound_r2_group": float(bound.r2_group),
           "bound_r2_outcome": float(bound.r2_outcome)}
    if estimate is None or se is None or dof is None or se_test is None or dof < 2 or not test_dof:
        return out
    b = float(bias(bound.r2_group, bound.r2_outcome, se, dof))
    moved = math.copysign(abs(estimate) - b, estimate)  # towards zero (sensemakr's reduce=True)
    se_z = se_test * math.sqrt((1 - bound.r2_outcome) / (1 - bound.r2_group)) * math.sqrt(dof / (dof - 1))
    critical = float(student_t.ppf(1 - (1 - confidence) / 2, test_dof))
    left = estimate != 0 and b < abs(estimate) and se_z > 0
    p = float(2 * student_t.sf(abs(moved) / se_z, test_dof)) if left else 1.0
    return {**out, "bounded_estimate": moved, "bounded_ci_low": moved - critical * se_z,
            "bounded_ci_high": moved + critical * se_z, "bounded_p_value": p}


def survive(table, correction: str, confidence: float):
    """``bounded_p_adjusted`` and ``survives_bound`` of an estimates table: the bounded p-values
    adjusted across the run's rows with the row's own correction (Holm by default), as the
    unbounded tests are; a difference survives when its adjusted bounded p is below 1 −
    confidence (null where no bound was stated)."""
    p = np.array([np.nan if v is None else v for v in table["bounded_p_value"].to_pylist()], dtype=np.float64)
    adjusted = adjust_p_values(p, correction)
    p_adj = [None if np.isnan(a) else float(a) for a in adjusted]
    sources = table["bound_source"].to_pylist()
    survives = [None if src is None else (a is not None and a < 1 - confidence) for a, src in zip(p_adj, sources)]
    for name, values, kind in (("bounded_p_adjusted", p_adj, pa.float64()), ("survives_bound", survives, pa.bool_())):
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values, kind))
    return table
