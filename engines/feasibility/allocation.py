"""The allocation of k counterfactuals across weakly connected components (Fragkathoulas et al.,
seed 001, Sec. III-B dynamic programme: :func:`allocate_k`) and the coverage and cost curves
over k and d that FGCE's measures integrate (:func:`coverage_curve`, :func:`cost_curve`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from aequum.engines.feasibility.greedy import greedy, greedy_coverage
from aequum.engines.feasibility.reach import Infeasible, Reach, _check_d, _check_k


@dataclass(frozen=True)
class Allocation:
    """Counterfactuals per component (``alloc[c]``) and the total coverage reached."""

    alloc: np.ndarray
    total: float
    max_per_component: int


def allocate_k(per_component_curves: Sequence[Sequence[float]], k: int,
               require_all: bool = False) -> Allocation:
    """Allocate k counterfactuals across components to maximise total coverage (FGCE
    Sec. III-B dynamic programme, F(1..i, k) = max_{k'} F(1..i−1, k−k') + F(i, k')).

    ``per_component_curves[c][t]`` is the coverage of component c with t counterfactuals
    (t = 0, 1, ...); a curve shorter than k+1 is extended with its last value (more
    counterfactuals never reduce coverage). With ``require_all`` every component that needs a
    counterfactual (curve rises above curve[0]) must get at least one, so each can receive at
    most k − m + 1 (m = number of such components; the paper's "k − m" is off by one).
    Ties: the smallest allocation to later components. Total allocated ≤ k.
    """
    k = _check_k(k)
    curves, needs = [], []
    for cur in per_component_curves:
        a = np.asarray(cur, dtype=np.float64).ravel()
        if a.size == 0:
            a = np.zeros(1)
        if np.any(~np.isfinite(a)):
            raise ValueError("coverage curves must be finite")
        needs.append(bool(a.max() > a[0]))     # over the whole curve, not only t ≤ k
        if a.size < k + 1:
            a = np.concatenate([a, np.full(k + 1 - a.size, a[-1])])
        curves.append(a[:k + 1])
    m_need = sum(needs) if require_all else 0
    cap = k - m_need + 1 if m_need else k
    if require_all and m_need > k:
        raise Infeasible(f"{m_need} components each need a counterfactual but k={k}")
    M = len(curves)
    if M == 0:
        return Allocation(np.zeros(0, dtype=np.int64), 0.0, cap)
    NEG = -np.inf
    F = np.full((M + 1, k + 1), NEG)
    F[0, :] = 0.0                      # budget ≤ b
    arg = np.zeros((M + 1, k + 1), dtype=np.int64)
    for i, a in enumerate(curves):
        lo_t = 1 if (require_all and needs[i]) else 0
        hi_t = min(k, cap)
        for b in range(k + 1):
            best, bt = NEG, -1
            for t in range(lo_t, min(hi_t, b) + 1):
                v = F[i, b - t] + a[t]
                if v > best:
                    best, bt = v, t
            F[i + 1, b], arg[i + 1, b] = best, bt
    if not np.isfinite(F[M, k]):
        raise Infeasible("no feasible allocation")
    alloc = np.zeros(M, dtype=np.int64)
    b = k
    for i in range(M, 0, -1):
        t = arg[i, b]
        alloc[i - 1] = t
        b -= t
    return Allocation(alloc, float(F[M, k]), cap)


def coverage_curve(reach: Reach, ks: Sequence[int], d: float = math.inf) -> np.ndarray:
    """Greedy coverage (Problem 1) for each k in ``ks`` at budget d; non-decreasing in k
    because the greedy picks for k are a prefix of those for any larger k."""
    ks = np.asarray([_check_k(x) for x in ks], dtype=np.int64)
    if ks.size == 0:
        return np.zeros(0, dtype=np.int64)
    _, covered_after = greedy_coverage(reach, int(ks.max()), d)
    after = np.concatenate([[0], covered_after])
    return after[np.minimum(ks, after.size - 1)]


def cost_curve(reach: Reach, ds: Sequence[float], k: int) -> np.ndarray:
    """Coverage with k counterfactuals for each budget d in ``ds`` (Problem 1).

    Greedy per d, made non-decreasing: plain greedy coverage is not monotone in d (a larger
    budget can lure the first pick away), so the best set found at any smaller budget is
    re-evaluated at the current one and the better coverage kept (still an achievable value
    ≥ the greedy's, and ≤ the optimum).
    """
    k = _check_k(k)
    ds = np.asarray([_check_d(x) for x in ds], dtype=np.float64)
    out = np.zeros(ds.size, dtype=np.int64)
    best_set = np.zeros(0, dtype=np.int64)
    for pos in np.argsort(ds, kind="stable"):
        d = ds[pos]
        cov, _ = reach.covering(d)
        g = greedy(reach, k, d)
        prev = int(np.count_nonzero(np.diff(cov[:, best_set].indptr))) if best_set.size else 0
        if g.n_covered >= prev:
            best_set, out[pos] = g.chosen, g.n_covered
        else:
            out[pos] = prev
    return out
