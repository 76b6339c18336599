"""Tests, multiple-testing adjustment, empirical-Bayes shrinkage, flags and the notes of one
family (one comparison × field: every lender, or every market).

* Test: t = θ̂ / se, two-sided, Student's t with the unit's degrees of freedom (records compared
  minus two per stratum), interval θ̂ ± t_{1−α/2} se.
* Adjustment across the family's tested units: Benjamini–Hochberg (1995) by default.
* Shrinkage (normal–normal empirical Bayes; Efron & Morris 1975, Morris 1983): θ̂_i ~ N(θ_i, s_i²),
  θ_i ~ N(μ, τ²); τ² by the method of moments (DerSimonian & Laird 1986:
  τ̂² = max(0, (Q − (k − 1)) / (Σw − Σw²/Σw)), w = 1/s², Q = Σ w (θ̂ − θ̄_w)²), μ̂ the
  1/(s² + τ̂²)-weighted mean; θ*_i = μ̂ + τ̂²/(τ̂² + s_i²) (θ̂_i − μ̂), with the posterior interval
  θ*_i ± z sqrt(τ̂² s_i² / (τ̂² + s_i²)) (μ̂'s own error left out). A lender with 40 applications
  has a large s_i and is pulled most of the way to μ̂: noise cannot top the list.
* Flag: significant after the adjustment AND the shrunk estimate adverse (above 0; below for a
  borrower-favourable price such as lender credits).
* Notes in the screeners' words: "not enough applications", "not enough variance in variables",
  "no peer lenders in its markets", "statistically significant disparity", "no significant
  disparity" (and "statistically significant difference in the protected group's favour").
"""
from __future__ import annotations

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from aequum.engines.outcome.stats import adjust_p_values

ENOUGH, VARIANCE, PEERS = "not enough applications", "not enough variance in variables", "no peer lenders in its markets"
SIGNIFICANT, NOT_SIGNIFICANT = "statistically significant disparity", "no significant disparity"
FAVOURABLE = "statistically significant difference in the protected group's favour"


def shrink(est: np.ndarray, se: np.ndarray, tested: np.ndarray, z: float, prior: tuple | None = None):
    """``(shrunk, low, high, mu, tau2)`` over the ``tested`` units (NaN elsewhere); fewer than
    three tested units: no shrinkage (the estimates as they are, their own intervals).
    ``prior``: ``(mu, tau2)`` estimated elsewhere (every lender of the file, for focused lenders)."""
    shrunk, low, high = (np.full(len(est), np.nan) for _ in range(3))
    k = int(tested.sum())
    if k == 0:
        return shrunk, low, high, None, None
    t, s2 = est[tested], se[tested] ** 2
    if prior is not None and prior[0] is not None:
        mu, tau2 = prior
        b = tau2 / (tau2 + s2)
        shrunk[tested] = mu + b * (t - mu)
        post = np.sqrt(b * s2)
        low[tested], high[tested] = shrunk[tested] - z * post, shrunk[tested] + z * post
        return shrunk, low, high, mu, float(tau2)
    if k < 3:
        shrunk[tested], low[tested], high[tested] = t, t - z * np.sqrt(s2), t + z * np.sqrt(s2)
        return shrunk, low, high, None, None
    w = 1 / s2
    mean_w = (w * t).sum() / w.sum()
    q = (w * (t - mean_w) ** 2).sum()
    tau2 = max(0.0, (q - (k - 1)) / (w.sum() - (w * w).sum() / w.sum()))
    ws = 1 / (s2 + tau2)
    mu = float((ws * t).sum() / ws.sum())
    b = tau2 / (tau2 + s2)
    post = np.sqrt(b * s2)
    shrunk[tested] = mu + b * (t - mu)
    low[tested], high[tested] = shrunk[tested] - z * post, shrunk[tested] + z * post
    return shrunk, low, high, mu, float(tau2)


def family(est: np.ndarray, se: np.ndarray, dof: np.ndarray, enough: np.ndarray, varies: np.ndarray,
           peers: np.ndarray, lower_is_adverse: bool, params, prior: tuple | None = None) -> dict:
    """The family's tests, adjusted p-values, shrinkage, flags and notes (module docstring).
    ``enough``/``varies``/``peers``: per unit, whether it has the records, an outcome that varies,
    and peers to compare with; ``prior``: the shrinkage's (μ, τ²) when estimated elsewhere."""
    alpha = 1 - params.confidence
    ok = np.isfinite(est) & np.isfinite(se) & (se > 0)
    tested = ok & enough & varies & peers
    d = np.maximum(dof, 1.0)
    crit = student_t.ppf(1 - alpha / 2, d)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(tested, 2 * student_t.sf(np.abs(est / se), d), np.nan)
    p_adj = adjust_p_values(p, params.correction)
    significant = tested & (p_adj < alpha)
    sign = -1.0 if lower_is_adverse else 1.0
    adverse = np.where(ok, sign * est > 0, False)
    shrunk, s_low, s_high, mu, tau2 = shrink(est, se, tested, float(norm.ppf(1 - alpha / 2)), prior)
    flagged = significant & (sign * np.nan_to_num(shrunk) > 0)
    note = np.where(~peers, PEERS, np.where(~enough, ENOUGH, np.where(~(varies & ok), VARIANCE,
                    np.where(significant & adverse, SIGNIFICANT, np.where(significant, FAVOURABLE, NOT_SIGNIFICANT)))))
    return {"ci_low": np.where(ok, est - crit * se, np.nan), "ci_high": np.where(ok, est + crit * se, np.nan),
            "p_value": p, "p_adjusted": p_adj, "significant": np.where(tested, significant, False),
            "tested": tested, "adverse": adverse, "shrunk": shrunk, "shrunk_low": s_low, "shrunk_high": s_high,
            "flagged": flagged, "note": note, "mu": mu, "tau": None if tau2 is None else float(np.sqrt(tau2))}
