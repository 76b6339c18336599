"""RAGUEL's fairness definitions (Haldar et al., seed 002, §3.2; NOTES "RAGUEL").

Groups are integer codes 0..G−1 (two for a binary attribute; more for several groups, §3.6).
``p`` holds every group's global share.

* Fair representation (Def. 3.1): |p_S,g − p_g| ≤ ε_g with ε_g = t·p_g for every group g.
  In counts for a set of k records: k(p_g − ε_g) ≤ n_g ≤ k(p_g + ε_g). Short prefixes can
  make this unsatisfiable by *any* integer count (k = 2, p = 0.35, t = 1/3 admits no n_g), which
  would make Def. 3.2 fail at the second record of every ranking. With ``rounding="nearest"``
  (default) the counts nearest to k·p_g are then accepted; ``"strict"`` keeps the paper's
  inequality literally.
* Ranked fair representation (Def. 3.2): Def. 3.1 for every prefix of length ≥ 2.
* Recourse fairness ratio (Eq. 4): r = min_g μ_g / max_g μ_g over the groups present (mean
  recourse costs); a set with one group present has r = 1. Defs 3.3/3.4: r ≥ 1 − ε_r for the set
  / every prefix.
"""
from __future__ import annotations

import numpy as np

TOL = 1e-9


def shares(group: np.ndarray, n_groups: int) -> np.ndarray:
    """Global share p_g of each group."""
    counts = np.bincount(group, minlength=n_groups).astype(np.float64)
    return counts / max(len(group), 1)


def count_bounds(k: np.ndarray | int, p: np.ndarray, t: float, rounding: str = "nearest") -> tuple[np.ndarray, np.ndarray]:
    """Allowed [lo, hi] count of each group in a set of k records (Def. 3.1 in counts).

    Returns arrays shaped (len(k), G) (or (G,) for scalar k)."""
    k_arr = np.atleast_1d(np.asarray(k, np.float64))[:, None]
    eps = t * p[None, :]
    lo = np.ceil(k_arr * (p - eps) - TOL)
    hi = np.floor(k_arr * (p + eps) + TOL)
    lo = np.maximum(lo, 0)
    hi = np.minimum(hi, k_arr)
    if rounding == "nearest":
        empty = lo > hi
        kp = k_arr * p[None, :]
        near_lo = np.floor(kp + 0.5 - TOL)          # nearest integer(s) to k·p
        near_hi = np.ceil(kp - 0.5 + TOL)
        lo = np.where(empty, np.minimum(near_lo, near_hi), lo)
        hi = np.where(empty, np.maximum(near_lo, near_hi), hi)
    elif rounding != "strict":
        raise ValueError(f"rounding must be 'nearest' or 'strict', got {rounding!r}")
    if np.ndim(k) == 0:
        return lo[0], hi[0]
    return lo, hi


def represented(counts: np.ndarray, p: np.ndarray, t: float, rounding: str = "nearest") -> bool:
    """Def. 3.1 for a set with these group counts."""
    k = int(counts.sum())
    lo, hi = count_bounds(k, p, t, rounding)
    return bool(np.all((counts >= lo) & (counts <= hi)))


def ranked_represented(group: np.ndarray, p: np.ndarray, t: float, rounding: str = "nearest") -> np.ndarray:
    """Def. 3.2 per prefix: bool per prefix length 1..n (length 1 is always fair)."""
    n, G = len(group), len(p)
    if n == 0:
        return np.zeros(0, bool)
    onehot = np.zeros((n, G), np.int64)
    onehot[np.arange(n), group] = 1
    counts = np.cumsum(onehot, axis=0)
    lo, hi = count_bounds(np.arange(1, n + 1), p, t, rounding)
    ok = np.all((counts >= lo) & (counts <= hi), axis=1)
    ok[0] = True
    return ok


def ratio(sums: np.ndarray, counts: np.ndarray) -> float:
    """Eq. 4: min over max of the group mean costs among groups present (1 with one group)."""
    present = counts > 0
    if present.sum() < 2:
        return 1.0
    mu = sums[present] / counts[present]
    hi = mu.max()
    return 1.0 if hi <= 0 else float(mu.min() / hi)


def ratio_of(cost: np.ndarray, group: np.ndarray, n_groups: int) -> float:
    return ratio(np.bincount(group, weights=cost, minlength=n_groups),
                 np.bincount(group, minlength=n_groups))


def ranked_ratio(cost: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """r of every prefix (Def. 3.4's quantity), vectorised."""
    n = len(cost)
    onehot = np.zeros((n, n_groups))
    onehot[np.arange(n), group] = 1
    counts = np.cumsum(onehot, axis=0)
    sums = np.cumsum(onehot * cost[:, None], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    lo, hi = np.nanmin(mu, axis=1), np.nanmax(mu, axis=1)
    two = (counts > 0).sum(axis=1) >= 2
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(two & (hi > 0), lo / np.where(hi > 0, hi, 1), 1.0)
    return r


def cost_interval(sums: np.ndarray, counts: np.ndarray, g: int, R: float) -> tuple[float, float]:
    """The costs c a new member of group g may have so that r(set + it) ≥ R (Def. 3.4 solved
    for the newcomer's cost). With m, M the smallest and largest mean of the *other* groups
    present, r ≥ R ⇔ m ≥ R·M and R·M ≤ μ_g ≤ m/R, μ_g = (S_g + c)/(n_g + 1).
    Returns (lo, hi) with lo > hi when no cost works."""
    others = (counts > 0)
    others[g] = False
    if R <= 0 or not others.any():
        return -np.inf, np.inf
    mu = sums[others] / counts[others]
    m, M = mu.min(), mu.max()
    if m < R * M - TOL * max(M, 1):
        return np.inf, -np.inf
    n1 = counts[g] + 1
    return n1 * R * M - sums[g] - TOL, n1 * m / R - sums[g] + TOL


def eq3_bound(mu1: float, n1: int, mu2: float, n2: int, c_leave: float) -> float | None:
    """β of Eq. 3 (as rebuilt in NOTES): the bound on the cost of the under-represented point
    pulled into a block (group 1, |s₁| = n1 members with mean μ₁) while the over-represented
    point of cost c_leave leaves (group 2, n2 members, mean μ₂):

        β = μ₁·[(n1 + 1)(n2·μ₂ − c_l) / ((n2 − 1)·μ₂) − n1]

    Require c ≥ β when μ₁ < μ₂ and c ≤ β when μ₁ > μ₂: exactly the costs for which the new
    ratio μ₁'/μ₂' is no further from 1 than μ₁/μ₂ on the side it starts (Theorem 3.5).
    None in the proof's trivial cases (n1 = 0: any cost improves; n2 ≤ 1: group 2 leaves).
    """
    if n1 == 0 or n2 <= 1 or mu2 <= 0:
        return None
    return mu1 * ((n1 + 1) * (n2 * mu2 - c_leave) / ((n2 - 1) * mu2) - n1)
