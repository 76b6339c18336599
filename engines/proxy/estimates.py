"""Group rates and their gap when group membership is a probability (a BISG proxy), two ways.

``weighted`` — the CFPB's probability-weighted means (CFPB 2014, "Using publicly available
information to proxy for unidentified race and ethnicity"): each record counts towards a group
by its probability of belonging to it,

    m_k = sum_i q_ik y_i / sum_i q_ik.

Unbiased when the outcome is independent of race given the proxy's inputs (surname and
geography); where race itself moves the outcome, the proxy's errors mix the groups and the
gap is pulled toward zero (Chen, Kallus, Mao, Svacha & Udell 2019, "Fairness under
unawareness"). Its interval (the weighted means' sandwich variance) does not
contain that bias.

``corrected`` — the linear regression of the outcome on the group probabilities (no
intercept: they sum to one), with the controls centred when given:

    y_i = sum_k q_ik mu_k + (x_i - xbar)' beta + e_i.

If the outcome depends on the record's true group (and the controls) and not on its surname
and geography once those are known — the assumption under which McCartan, Goldin, Ho & Imai
(BIRDiE) identify disparities from BISG — then E[y | s, g, x] = sum_k P(k | s, g) mu_k +
x'beta, so with calibrated probabilities the coefficients are the groups' means and
mu_1 - mu_0 the gap, unbiased where weighting attenuates. Its HC1 sandwich interval (White
1980; MacKinnon & White 1985) holds the proxy's uncertainty: a record's unknown group is part of
its residual. The price is variance: the less the probabilities separate the groups, the wider.

``hard`` — means over the records whose most probable group clears a threshold (what engines
needing a hard group read); reported for comparison, biased by misassignment.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm


@dataclass(frozen=True)
class GapEstimate:
    """Protected and reference group means, their gap (protected − reference), its standard
    error and two-sided interval at ``confidence``, and the records behind each group (the sum
    of their probabilities: an expected count)."""

    protected: float | None
    reference: float | None
    gap: float | None
    se: float | None
    ci_low: float | None
    ci_high: float | None
    n_protected: float
    n_reference: float
    note: str | None = None


def _interval(gap: float, se: float, confidence: float) -> tuple[float, float]:
    z = norm.ppf(0.5 + confidence / 2)
    return gap - z * se, gap + z * se


def _empty(n1: float, n0: float, note: str) -> GapEstimate:
    return GapEstimate(None, None, None, None, None, None, n1, n0, note)


def weighted(y: np.ndarray, q1: np.ndarray, q0: np.ndarray, confidence: float = 0.95) -> GapEstimate:
    """The probability-weighted group means and their difference (see the module docstring);
    the variance of each weighted mean by the sandwich sum_i q_i^2 (y_i - m)^2 / (sum_i q_i)^2,
    with the covariance of the two means (the same records count towards both)."""
    y, q1, q0 = (np.asarray(a, np.float64) for a in (y, q1, q0))
    s1, s0 = q1.sum(), q0.sum()
    if s1 <= 0 or s0 <= 0:
        return _empty(s1, s0, "no probability mass in a group")
    m1, m0 = q1 @ y / s1, q0 @ y / s0
    r1, r0 = q1 * (y - m1) / s1, q0 * (y - m0) / s0
    se = float(np.sqrt(max(np.sum((r1 - r0) ** 2), 0.0)))
    gap = float(m1 - m0)
    return GapEstimate(float(m1), float(m0), gap, se, *_interval(gap, se, confidence), float(s1), float(s0))


def corrected(y: np.ndarray, q1: np.ndarray, q0: np.ndarray, controls: np.ndarray | None = None,
              confidence: float = 0.95) -> GapEstimate:
    """The regression of ``y`` on the probabilities of the protected group, the reference group
    and neither (``1 − q1 − q0``, left out when no record has any), plus centred ``controls``
    (rows × k), without intercept; the gap mu_1 − mu_0 with its HC1 standard error."""
    y, q1, q0 = (np.asarray(a, np.float64) for a in (y, q1, q0))
    q2 = np.clip(1.0 - q1 - q0, 0.0, 1.0)
    columns = [q1, q0] + ([q2] if q2.max() > 1e-12 else [])
    if controls is not None and controls.size:
        x = np.asarray(controls, np.float64)
        x = x - x.mean(axis=0)
        columns += [x[:, j] for j in range(x.shape[1]) if np.ptp(x[:, j]) > 0]
    design = np.column_stack(columns)
    n, k = design.shape
    s1, s0 = float(q1.sum()), float(q0.sum())
    if n <= k:
        return _empty(s1, s0, f"{n} records for {k} coefficients")
    xtx = design.T @ design
    if np.linalg.matrix_rank(xtx) < k:
        return _empty(s1, s0, "the group probabilities do not separate the groups (collinear)")
    inv = np.linalg.inv(xtx)
    beta = inv @ (design.T @ y)
    e = y - design @ beta
    meat = (design * (e ** 2)[:, None]).T @ design
    cov = inv @ meat @ inv * (n / (n - k))
    gap = float(beta[0] - beta[1])
    se = float(np.sqrt(max(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1], 0.0)))
    return GapEstimate(float(beta[0]), float(beta[1]), gap, se, *_interval(gap, se, confidence), s1, s0)


def hard(y: np.ndarray, group: np.ndarray, confidence: float = 0.95) -> GapEstimate:
    """Means of the records assigned to the protected (``group == 1``) and the reference group
    (``0``), with the unpooled (Welch) standard error of their difference."""
    y = np.asarray(y, np.float64)
    a, b = y[group == 1], y[group == 0]
    if len(a) < 2 or len(b) < 2:
        return _empty(float(len(a)), float(len(b)), "fewer than two records assigned to a group")
    gap = float(a.mean() - b.mean())
    se = float(np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)))
    return GapEstimate(float(a.mean()), float(b.mean()), gap, se, *_interval(gap, se, confidence),
                       float(len(a)), float(len(b)))
