"""Bias-corrected situation testing: each neighbour's decision brought to the complainant's inputs.

Situation testing compares a complainant's k nearest members of each group. Where one group is
sparse around the complainant its k nearest are drawn from farther off — in the lending data,
where that group is dense, with better or worse inputs — and the difference between the groups'
neighbourhoods is partly the difference of *where* they are, not of how they were treated: on a
lender without any discriminatory term, majority-minority tracts' refused applicants compared
with low-minority tracts' found a third of them "significantly" worse treated. Matching
estimators carry this bias whenever the matched units' inputs differ (Abadie & Imbens 2006,
"Large sample properties of matching estimators", Econometrica 74(1), Thm. 1); Abadie & Imbens
(2011, "Bias-corrected matching estimators for average treatment effects", J. Bus. Econ. Stat.
29(1), Sec. 2, Eq. 7) remove it by moving each matched unit's outcome by the change of that
group's regression function between the unit and the one it stands for:

    ỹ_j = y_j + μ̂_g(x_c) − μ̂_g(x_j)

with μ̂_g fitted on group g. Here y is "refused", μ̂_g a logistic regression of it on the
distance's metric coordinates within group g (a lender's decision is a threshold on a score:
its probability is a sigmoid, not a line — a straight line left most of the bias in place), with
a small ridge penalty so that a group whose decisions its inputs separate exactly (the lender's
own records: every input of a deterministic rule) still has an estimate, a steep one. The shares
p_c and p_t are then the means of the moved decisions, clipped to [0, 1]; Δp, its interval and
the test follow as before (``situation_testing.claims``). Where both groups follow one rule the
two fitted surfaces agree at the complainant and Δp shrinks to the residual noise; where one
group is held to another standard the surfaces differ there and Δp keeps it.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

RIDGE = 1e-6       # the penalty per record on the slopes (standardised coordinates), never the intercept
FIT_RECORDS = 200_000  # a surface is fitted on at most this many of its group's records (evenly spaced)
ITERATIONS = 50
TOLERANCE = 1e-8   # the largest Newton step at convergence


def fit_logistic(x: np.ndarray, refused: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """(intercept, slopes) of the ridge-penalised logistic regression of ``refused`` on ``x``
    (rows: a group's records), by Newton–Raphson on ``Σ ℓᵢ − ridge·n·|β|²/2`` with step halving.
    Columns are centred and scaled inside; the result is on ``x``'s scale. A group of one
    decision (all refused, or none) gets a flat surface at that share."""
    n, d = x.shape
    y = refused.astype(np.float64)
    share = y.mean() if n else 0.0
    if n == 0 or share in (0.0, 1.0):
        return np.r_[0.0 if n == 0 else (40.0 if share == 1.0 else -40.0), np.zeros(d)]
    mean, sd = x.mean(0), x.std(0)
    sd[sd == 0] = 1.0
    z = np.column_stack([np.ones(n), (x - mean) / sd])
    beta = np.zeros(d + 1)
    beta[0] = np.log(share / (1 - share))
    penalty = np.full(d + 1, ridge * n)
    penalty[0] = 0.0

    def objective(b):
        eta = z @ b
        return float(np.sum(y * eta - np.logaddexp(0.0, eta)) - 0.5 * np.sum(penalty * b * b))

    current = objective(beta)
    for _ in range(ITERATIONS):
        p = expit(z @ beta)
        grad = z.T @ (y - p) - penalty * beta
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hess + 1e-12 * np.eye(d + 1), grad)
        t = 1.0
        while t > 1e-8 and objective(beta + t * step) < current:
            t /= 2
        if t <= 1e-8:  # no ascent left along Newton's direction: at the maximum to rounding
            break
        beta = beta + t * step
        current = objective(beta)
        if np.max(np.abs(t * step)) < TOLERANCE:
            break
    slopes = beta[1:] / sd
    return np.r_[beta[0] - mean @ slopes, slopes]


def fit_group(metric: np.ndarray, refused: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """:func:`fit_logistic` on the records ``rows`` of a group (indices in record order), at most
    :data:`FIT_RECORDS` of them evenly spaced: five coefficients need no more, and a group of
    millions would cost seconds an iteration."""
    rows = rows[::-(-len(rows) // FIT_RECORDS)] if len(rows) > FIT_RECORDS else rows
    return fit_logistic(metric[rows], refused[rows])


def surface(beta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """μ̂(x): the fitted probability of refusal at each row of ``x`` (``beta``: one surface, or
    one per row, broadcast against ``x``'s leading axes)."""
    return expit(beta[..., 0] + np.sum(x * beta[..., 1:], axis=-1))


def shifts(centres: np.ndarray, neighbours: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """μ̂(x_centre) − μ̂(x_neighbour) for each neighbour j of centre i (``centres``: (m, d)
    metric coordinates; ``neighbours``: (m, k, d)), the amount Eq. 7 moves each neighbour's
    decision by; ``beta``: one surface, or one per centre (m, d + 1)."""
    per_centre = beta if beta.ndim == 1 else beta[:, None, :]
    return surface(beta, centres)[:, None] - surface(per_centre, neighbours)
