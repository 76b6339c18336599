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

with μ̂_g fitted on group g. Here y is "refused" and the situation test asks whether the two
groups are held to one standard, so the surface is fitted under that null hypothesis — one
surface μ̂ of both groups' records, as a score test fits its nuisance under the null (Rao 1948):

    ỹ_j = y_j + μ̂(x_c) − μ̂(x_j),   Δp = mean_control(ỹ) − mean_test(ỹ)
        = mean_control(y_j − μ̂(x_j)) − mean_test(y_j − μ̂(x_j))        (ST: both at x_c)
        + μ̂(x_c) − μ̂(x_c^CF)                                          (CST: test at x_c^CF)

— the two neighbourhoods' mean residuals about one rule, plus, for CST, what the rule makes of
the counterfactual's moved inputs. Under one standard each group's residuals have mean zero
wherever it has members, sparse or dense, so Δp keeps only noise; where the protected group is
held to a harsher standard its neighbours' refusals lie above the common surface and the
reference group's below, and Δp keeps the gap. A surface per group (Abadie & Imbens' μ̂_g) does
not: on complete records a lender's decisions are a deterministic rule of the inputs, each
group's refusals are separated from its approvals, no maximum-likelihood surface exists, and
the penalised fit's steepness is set by the penalty and the group's size, not by the data — two
groups under one rule got surfaces of different steepness, whose difference at a complainant
near the rule's boundary (up to 0.5) read as a double standard: a fair lender's refused
applicants in majority-minority tracts were 9-12 % "significant" at 20,000 records.

μ̂ is a logistic regression of y on the distance's metric coordinates (a lender's decision is a
threshold on a score: its probability is a sigmoid, not a line — a straight line left most of
the bias in place), with a small ridge penalty so that decisions its inputs separate exactly
still have an estimate, a steep one. The shares p_c and p_t are the means of the moved
decisions, clipped to [0, 1]; Δp, its interval and the test follow as before
(``situation_testing.claims``).
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

RIDGE = 1e-6       # the penalty per record on the slopes (standardised coordinates), never the intercept
FIT_RECORDS = 200_000  # the surface is fitted on at most this many records (evenly spaced)
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
        while t > 1e-8 and (tried := objective(beta + t * step)) < current:
            t /= 2
        if t <= 1e-8:  # no ascent left along Newton's direction: at the maximum to rounding
            break
        beta = beta + t * step
        current = tried  # the objective at the new beta, as computed in the step's test
        if np.max(np.abs(t * step)) < TOLERANCE:
            break
    slopes = beta[1:] / sd
    return np.r_[beta[0] - mean @ slopes, slopes]


def fit_group(metric: np.ndarray, refused: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """:func:`fit_logistic` on the records ``rows`` (indices in record order), at most
    :data:`FIT_RECORDS` of them evenly spaced: five coefficients need no more, and a group of
    millions would cost seconds an iteration."""
    rows = rows[::-(-len(rows) // FIT_RECORDS)] if len(rows) > FIT_RECORDS else rows
    return fit_logistic(metric[rows], refused[rows])


def surface(beta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """μ̂(x): the fitted probability of refusal at each row of ``x`` (its last axis the
    coordinates)."""
    return expit(beta[..., 0] + np.sum(x * beta[..., 1:], axis=-1))

