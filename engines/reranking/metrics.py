"""Ranked-fairness measures rKL, rND and rRD (Yang & Stoyanovich 2017), exactly normalised.

For a ranking of N items, |S+| of them protected, and cut-offs i = 10, 20, … (multiples of 10
up to N, plus N itself when N is not a multiple of 10), with c_i protected items in the top i:

    rND = 1/Z Σ_i |c_i / i − |S+| / N| / log2 i
    rRD = 1/Z Σ_i |c_i / (i − c_i) − |S+| / |S−|| / log2 i      (a prefix with no unprotected
                                                                  item contributes ratio 0)
    rKL = 1/Z Σ_i KL((c_i/i, 1 − c_i/i) ‖ (|S+|/N, |S−|/N)) / log2 i   (0·log 0 = 0)

Z is the largest value the unnormalised sum can take over *all* rankings with the same N and
|S+| — computed exactly by dynamic programming over the cut-offs (the count can grow by at
most the gap between consecutive cut-offs), not estimated by sampling rankings. A ranking
whose every cut-off is proportional scores 0; the most unfair one scores 1. (RAGUEL, seed 002,
reports these for rankings before and after re-ranking.)
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.ndimage import maximum_filter1d

MEASURES = ("rKL", "rND", "rRD")


def cutoffs(n: int, step: int = 10) -> np.ndarray:
    cuts = list(range(step, n + 1, step))
    if not cuts or cuts[-1] != n:
        cuts.append(n)
    return np.array(cuts, dtype=np.int64)


def _terms(measure: str, c: np.ndarray, i: np.ndarray, n_pos: int, n: int) -> np.ndarray:
    """Per-cut-off deviation for protected counts ``c`` (broadcast with cut-offs ``i``)."""
    c = c.astype(np.float64)
    i = i.astype(np.float64)
    if measure == "rND":
        return np.abs(c / i - n_pos / n)
    if measure == "rRD":
        neg = i - c
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(neg > 0, c / np.maximum(neg, 1), 0.0)
        return np.abs(ratio - n_pos / (n - n_pos))
    if measure == "rKL":
        p, q = c / i, n_pos / n

        def xlogy(x, y):
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(x > 0, x * np.log(np.where(x > 0, x, 1) / y), 0.0)

        return xlogy(p, q) + xlogy(1 - p, 1 - q)
    raise ValueError(f"unknown measure {measure!r}; one of {MEASURES}")


def raw_score(measure: str, protected: np.ndarray) -> float:
    """The unnormalised sum for a ranking given as a bool array (True = protected), top first."""
    protected = np.asarray(protected, bool)
    n, n_pos = len(protected), int(protected.sum())
    cuts = cutoffs(n)
    counts = np.cumsum(protected)[cuts - 1]
    return float((_terms(measure, counts, cuts, n_pos, n) / np.log2(cuts)).sum())


@lru_cache(maxsize=256)
def normaliser(measure: str, n: int, n_pos: int) -> float:
    """Z: the exact maximum of ``raw_score`` over all rankings of n items, n_pos protected."""
    cuts = cutoffs(n)
    c = np.arange(n_pos + 1)
    best = np.full(n_pos + 1, -1e300)      # best value with count c at the previous cut-off
    best[0] = 0.0                          # before the first item the count is 0
    prev = 0
    for i in cuts:
        gap = int(min(i - prev, n_pos))
        # count at cut-off i can exceed the previous one by 0..gap: a trailing window maximum
        reach = maximum_filter1d(best, size=gap + 1, origin=gap // 2, mode="constant", cval=-1e300)
        feasible = (c <= i) & (i - c <= n - n_pos)
        best = np.where(feasible, reach + _terms(measure, c, np.full_like(c, i), n_pos, n) / np.log2(i), -1e300)
        prev = i
    return float(best[n_pos])


def ranked_fairness(protected: np.ndarray) -> dict[str, float | None]:
    """rKL, rND, rRD in [0, 1] for a ranking (True = protected), top first; None when a group
    is empty (every ranking is then equally fair)."""
    protected = np.asarray(protected, bool)
    n, n_pos = len(protected), int(protected.sum())
    out: dict[str, float | None] = {}
    for m in MEASURES:
        if n_pos in (0, n):
            out[m] = None
            continue
        z = normaliser(m, n, n_pos)
        out[m] = raw_score(m, protected) / z if z > 0 else 0.0
    return out
