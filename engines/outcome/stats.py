"""Interval estimates and multiple-testing corrections of the outcome metrics.

- Wilson score interval of a proportion (Wilson 1927; Agresti & Coull 1998, eq. 2):
  (p̂ + z²/2n ± z·sqrt(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n), z = Φ⁻¹(1 − (1−c)/2).
- Log-method interval of a ratio of two proportions (Katz et al. 1978): the disparate impact
  ratio DI = (k₁/n₁)/(k₀/n₀) has ln DI ± z·sqrt(1/k₁ − 1/n₁ + 1/k₀ − 1/n₀), undefined when
  either group has no favourable decision. The same interval of the unfavourable-rate (in
  lending, denial-rate) ratio counts the unfavourable decisions instead.
- Woolf's interval of an odds ratio (Woolf 1955, "On estimating the relation between blood
  group and disease", Ann. Hum. Genet. 19: 251-253): OR = (a·d)/(b·c) of the 2×2 table
  [[a, b], [c, d]] has ln OR ± z·sqrt(1/a + 1/b + 1/c + 1/d). When a cell is 0, 0.5 is added to
  every cell (Haldane 1956, Ann. Hum. Genet. 20: 309-311), only then (statsmodels' ``Table2x2``
  with ``shift_zeros`` replaces the zero cells alone by 0.5, which is not Haldane's estimator).
- Holm's step-down adjustment (Holm 1979): sorted p₍ᵢ₎ ↦ max_{j≤i} min(1, (m−j+1)·p₍ⱼ₎).
- Benjamini–Hochberg step-up adjustment (1995): sorted p₍ᵢ₎ ↦ min_{j≥i} min(1, m·p₍ⱼ₎/j).

Both adjustments are those of ``statsmodels.stats.multitest.multipletests`` ('holm', 'fdr_bh').
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from aequum.engines.core.imports import load


@lru_cache(maxsize=16)  # asked for every group of a run, always at the run's one confidence
def z_value(confidence: float) -> float:
    """The two-sided standard-normal quantile of a confidence level (1.95996… at 0.95):
    Φ⁻¹(1 − (1−c)/2) by ``scipy.special.ndtri``, the function ``scipy.stats.norm.ppf``
    computes it with (the same value, bit for bit: tests/test_outcome_stats.py)."""
    # imported at first use, one import at a time (other engines may be importing scipy on
    # other threads); scipy.special alone, not scipy.stats: importing scipy.stats took 3.2 s
    # against 1.0 s, on the worker of a small audit's outcome engine and in the flow's process
    # for detection's intervals
    ndtri = load("scipy.special").ndtri
    return float(ndtri(1 - (1 - confidence) / 2))


def wilson_interval(k: int, n: int, confidence: float) -> tuple[float | None, float | None]:
    """Wilson score interval of the proportion k/n (None, None when n = 0)."""
    if n <= 0:
        return None, None
    z = z_value(confidence)
    p = k / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    # exact at the ends (k = 0: the bound is 0, k = n: 1), where rounding would put it past p
    low = 0.0 if k == 0 else max(0.0, (centre - half) / denom)
    high = 1.0 if k == n else min(1.0, (centre + half) / denom)
    return low, high


def ratio_log_interval(k1: int, n1: int, k0: int, n0: int,
                       confidence: float) -> tuple[float | None, float | None]:
    """Log-method interval of (k1/n1)/(k0/n0) (None, None when k1, k0, n1 or n0 is 0)."""
    if not (k1 and n1 and k0 and n0):
        return None, None
    z = z_value(confidence)
    ratio = (k1 / n1) / (k0 / n0)
    se = math.sqrt(1 / k1 - 1 / n1 + 1 / k0 - 1 / n0)
    return ratio * math.exp(-z * se), ratio * math.exp(z * se)


def odds_ratio_woolf(a: int, b: int, c: int, d: int, confidence: float
                     ) -> tuple[float | None, float | None, float | None, bool]:
    """Odds ratio (a/b)/(c/d) of the 2×2 table [[a, b], [c, d]] with Woolf's log interval:
    ``(odds ratio, low, high, corrected)``, ``corrected`` when a cell was 0 and Haldane's 0.5
    was added to every cell; all None when a row of the table is empty (no odds to compare)."""
    if a + b == 0 or c + d == 0:
        return None, None, None, False
    corrected = 0 in (a, b, c, d)
    if corrected:
        a, b, c, d = a + 0.5, b + 0.5, c + 0.5, d + 0.5
    log_or = math.log(a) + math.log(d) - math.log(b) - math.log(c)
    half = z_value(confidence) * math.sqrt(1 / a + 1 / b + 1 / c + 1 / d)
    return math.exp(log_or), math.exp(log_or - half), math.exp(log_or + half), corrected


def adjust_p_values(p: np.ndarray, method: str) -> np.ndarray:
    """Adjusted p-values of one family (NaN entries are not in the family and stay NaN)."""
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    present = np.flatnonzero(~np.isnan(p))
    m = len(present)
    if m == 0 or method == "none":
        out[present] = p[present]
        return out
    order = present[np.argsort(p[present], kind="stable")]
    sorted_p = p[order]
    if method == "holm":
        adjusted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * sorted_p))
    elif method == "bh":
        adjusted = np.minimum.accumulate(np.minimum(1.0, m * sorted_p / np.arange(1, m + 1))[::-1])[::-1]
    else:
        raise ValueError(f"unknown multiple-testing correction {method!r} (holm, bh, none)")
    out[order] = adjusted
    return out
