"""Ranked-fairness measures rKL, rND and rRD (Yang & Stoyanovich 2017), exactly normalised.

The conventions are the authors' own implementation (the FairRank repository's ``measures.py``,
which RAGUEL's figures use; NOTES "RAGUEL"), not the printed formulas. For a ranking of N
items, |S+| of them protected (|S−| = N − |S+|), with c_i protected items in the top i, summed
over the cut-offs i = 10, 20, … ≤ N:

    rND = 1/Z Σ_i |c_i / i − |S+| / N| / log2(i + 1)
    rRD = 1/Z Σ_i |min(c_i / (i − c_i), R) − R| / log2(i + 1),  R = |S+| / |S−|
          (one-sided, as their FATML poster; the ratio is taken as 0 when the top i holds no
          unprotected item)
    rKL = 1/Z Σ_i KL((P_i, 1 − P_i) ‖ (|S+|/N, |S−|/N)) / log2(i + 1),  in bits, where
          P_i = c_i / i, replaced by 0.001 when it is 0 or 1 (their guard against log 0)

A list no longer than the first cut-off (N ≤ 10) has no cut-off that says anything (the whole
list is always proportional), so every measure would be 0 whatever the order; such lists use
the cut-offs that fit, i = 1, 2, …, N (:func:`cutoff_step`), and the engine's summary says so.

Z is the largest value the unnormalised sum can take over *all* rankings with the same N and
|S+| — computed exactly by dynamic programming over the cut-offs (the count can grow by at
most the gap between consecutive cut-offs), where the authors estimate it by sampling. A
ranking whose every cut-off is proportional scores 0; the most unfair one scores 1. (RAGUEL,
seed 002, reports these for rankings before and after re-ranking.)
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.ndimage import maximum_filter1d

MEASURES = ("rKL", "rND", "rRD")
STEP = 10                 # the authors' cut-off step
KL_GUARD = 0.001          # the authors' stand-in for a top-i share of 0 or 1


def cutoff_step(n: int, step: int = STEP) -> int:
    """``step`` when the list is longer than the first cut-off, else 1 (the cut-offs that fit)."""
    return step if n > step else 1


def cutoffs(n: int, step: int = STEP) -> np.ndarray:
    """Cut-offs i = s, 2s, … ≤ n with s = :func:`cutoff_step` (n itself when a multiple, as
    the authors' loop; it contributes 0: the whole list is proportional)."""
    s = cutoff_step(n, step)
    return np.arange(s, n + 1, s, dtype=np.int64)


def _terms(measure: str, c: np.ndarray, i: np.ndarray, n_pos: int, n: int) -> np.ndarray:
    """Per-cut-off deviation for protected counts ``c`` (broadcast with cut-offs ``i``)."""
    c = np.asarray(c, np.float64)
    i = np.asarray(i, np.float64)
    if measure == "rND":
        return np.abs(c / i - n_pos / n)
    if measure == "rRD":
        R = n_pos / (n - n_pos)
        neg = i - c
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(neg > 0, c / np.where(neg > 0, neg, 1), 0.0)
        return np.abs(np.minimum(ratio, R) - R)
    if measure == "rKL":
        q = n_pos / n
        p = c / i
        p = np.where((p == 0) | (p == 1), KL_GUARD, p)
        with np.errstate(invalid="ignore"):        # counts above i: infeasible, masked by callers
            return p * np.log2(p / q) + (1 - p) * np.log2((1 - p) / (1 - q))
    raise ValueError(f"unknown measure {measure!r}; one of {MEASURES}")


def raw_score(measure: str, protected: np.ndarray) -> float:
    """The unnormalised sum for a ranking given as a bool array (True = protected), top first."""
    protected = np.asarray(protected, bool)
    n, n_pos = len(protected), int(protected.sum())
    cuts = cutoffs(n)
    if not len(cuts):
        return 0.0
    counts = np.cumsum(protected)[cuts - 1]
    return float((_terms(measure, counts, cuts, n_pos, n) / np.log2(cuts + 1)).sum())


@lru_cache(maxsize=256)
def normaliser(measure: str, n: int, n_pos: int) -> float:
    """Z: the exact maximum of ``raw_score`` over all rankings of n items, n_pos protected."""
    c = np.arange(n_pos + 1)
    best = np.full(n_pos + 1, -1e300)      # best value with count c at the previous cut-off
    best[0] = 0.0                          # before the first item the count is 0
    prev = 0
    for i in cutoffs(n):
        gap = int(min(i - prev, n_pos))
        # count at cut-off i can exceed the previous one by 0..gap: a trailing window maximum
        reach = maximum_filter1d(best, size=gap + 1, origin=gap // 2, mode="constant", cval=-1e300)
        feasible = (c <= i) & (i - c <= n - n_pos)
        best = np.where(feasible, reach + _terms(measure, c, np.full_like(c, i), n_pos, n) / np.log2(i + 1),
                        -1e300)
        prev = int(i)
    return float(best.max()) if prev else 0.0      # any feasible count completes to a ranking


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
        out[m] = min(raw_score(m, protected) / z, 1.0) if z > 0 else 0.0   # 1 + rounding at the maximum
    return out
