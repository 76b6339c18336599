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
*survives* when the adjusted estimate keeps its sign and its interval excludes zero. The values
come from where the input is recorded: a lender's internal records (``aequum bounds``), carried
to its public-data screening with their source (``decision.bounds`` in the spec).
"""
from __future__ import annotations

import math

from aequum.engines.regression.sensitivity import adjusted_estimate, bias

COLUMNS = ("bound_source", "bound_r2_group", "bound_r2_outcome", "bounded_estimate",
           "bounded_ci_low", "bounded_ci_high", "survives_bound")


def empty() -> dict:
    """The columns of a row with no bound (none stated, or no estimate)."""
    return dict.fromkeys(COLUMNS)


def under_bound(estimate: float | None, se: float | None, dof: int | None, se_test: float | None,
                critical: float, bound) -> dict:
    """The row's estimate under ``bound`` (an ``InputBound``: ``r2_group``, ``r2_outcome``,
    ``source``): the bounded estimate (eq. 12, taken towards zero), its interval ``± critical ·
    se_Z`` (eq. 13) and whether it survives. Empty columns without a bound or an estimate."""
    if bound is None:
        return empty()
    out = {**empty(), "bound_source": bound.source, "bound_r2_group": float(bound.r2_group),
           "bound_r2_outcome": float(bound.r2_outcome)}
    if estimate is None or se is None or dof is None or se_test is None or dof < 2 or not math.isfinite(critical):
        return out
    b = float(bias(bound.r2_group, bound.r2_outcome, se, dof))
    moved = float(adjusted_estimate(estimate, se, dof, bound.r2_group, bound.r2_outcome))
    se_z = se_test * math.sqrt((1 - bound.r2_outcome) / (1 - bound.r2_group)) * math.sqrt(dof / (dof - 1))
    low, high = moved - critical * se_z, moved + critical * se_z
    keeps = estimate != 0 and math.copysign(1.0, moved) == math.copysign(1.0, estimate) and abs(moved) > 0
    survives = bool(keeps and (low > 0 or high < 0) and b < abs(estimate))
    return {**out, "bounded_estimate": moved, "bounded_ci_low": float(low), "bounded_ci_high": float(high),
            "survives_bound": survives}
