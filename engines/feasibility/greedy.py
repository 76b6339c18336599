"""FGCE Problem 1 by greed (Fragkathoulas et al., seed 001, Algorithm 1): choose at most k
candidates that cover the most factuals within a cost budget d, globally (:func:`greedy`,
a (1 − 1/e)-approximation) or per weakly connected component (:func:`greedy_by_component`)."""
from __future__ import annotations

import heapq
import math

import numpy as np
import scipy.sparse as sp

from aequum.engines.feasibility.reach import Reach, Selection, _check_d, _check_k, _selection


def _greedy_pairs(r: np.ndarray, c: np.ndarray, w: np.ndarray, n_f: int, n_c: int, k: int):
    """Algorithm 1 on covering pairs (factual r[t] covered by candidate c[t] at cost w[t]),
    given in increasing factual order; returns (picks, gains, cost sums).

    Each pick maximises the number of still-uncovered factuals covered; ties go to the smaller
    cost summed over those factuals, then to the smaller index. The gains are kept up to date
    by subtracting the pairs of newly covered factuals (exact integer counts); the cost sums
    are recomputed, only when gains tie, in factual order — the very sums a sparse
    matrix-vector product gives, so ties break identically."""
    picks, gains, sums = [], [], []
    if n_c == 0 or r.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    uncovered = np.ones(n_f, dtype=bool)
    live = np.ones(r.size, dtype=bool)              # pairs whose factual is still uncovered
    gain = np.bincount(c, minlength=n_c)
    for _ in range(k):
        g = int(gain.max())
        if g <= 0:
            break
        tied = np.flatnonzero(gain == g)
        if tied.size == 1:
            best = int(tied[0])
            m = live & (c == best)
            csum = float(np.bincount(c[m], weights=w[m], minlength=n_c)[best])
        else:
            is_tied = np.zeros(n_c, dtype=bool)
            is_tied[tied] = True
            m = live & is_tied[c]
            all_sums = np.bincount(c[m], weights=w[m], minlength=n_c)
            best = int(tied[np.lexsort((tied, all_sums[tied]))[0]])
            csum = float(all_sums[best])
        uncovered[r[live & (c == best)]] = False
        dead = live & ~uncovered[r]
        gain -= np.bincount(c[dead], minlength=n_c)
        live &= ~dead
        picks.append(best)
        gains.append(g)
        sums.append(csum)
    return (np.asarray(picks, dtype=np.int64), np.asarray(gains, dtype=np.int64),
            np.asarray(sums, dtype=np.float64))


def _greedy_core(cov: sp.csr_matrix, cst: sp.csr_matrix, k: int):
    """Algorithm 1 on covering matrices of one sparsity structure (as :meth:`Reach.covering`
    builds them); returns (picks, gains, cost sums)."""
    n_f, n_c = cov.shape
    cst = sp.csr_matrix(cst, dtype=np.float64)
    r = np.repeat(np.arange(n_f, dtype=np.int64), np.diff(cst.indptr))
    return _greedy_pairs(r, cst.indices.astype(np.int64), cst.data, n_f, n_c, k)


def greedy_coverage(reach: Reach, k: int, d: float = math.inf) -> tuple[np.ndarray, np.ndarray]:
    """The global greedy's picks and the factuals covered after each (``covered_after``) at
    budget d, without the per-factual assignment: what the curves need. One run serves every
    k' ≤ k (the picks for k' are a prefix). Same picks as :func:`greedy`."""
    k = _check_k(k)
    keep = reach.costs <= _check_d(d)
    picks, gains, _ = _greedy_pairs(reach.rows[keep], reach.cols[keep], reach.costs[keep],
                                    reach.n_factuals, reach.n_candidates, k)
    return picks, np.cumsum(gains)


def greedy(reach: Reach, k: int, d: float = math.inf) -> Selection:
    """Global greedy for Problem 1 (cost-constrained FGCE), FGCE Algorithm 1.

    Up to k picks, each maximising the number of still-uncovered factuals it covers at cost ≤ d
    (line 6 of Algorithm 1); ties go to the smaller summed cost over the newly covered
    factuals, then to the smaller candidate index. Stops early when no candidate adds coverage.
    Coverage ≥ (1 − 1/e) × optimum (submodular maximisation).
    """
    k = _check_k(k)
    cov, cst = reach.covering(d)
    picks, _, _ = _greedy_core(cov, cst, k)
    return _selection(cov, cst, picks, d)


def _labels(reach: Reach, component) -> tuple[np.ndarray, np.ndarray]:
    """(factual labels, candidate labels); candidates reached by nobody get label −1."""
    n_f, n_c = reach.shape
    if isinstance(component, tuple) and len(component) == 2:
        lf = np.asarray(component[0], dtype=np.int64).ravel()
        lc = np.asarray(component[1], dtype=np.int64).ravel()
        if lc.size != n_c:
            raise ValueError(f"candidate labels: expected {n_c}, got {lc.size}")
    else:
        lf = np.asarray(component, dtype=np.int64).ravel()
        lc = np.full(n_c, -1, dtype=np.int64)
        if reach.rows.size:
            lc[reach.cols] = lf[reach.rows] if lf.size == n_f else 0
    if lf.size != n_f:
        raise ValueError(f"factual labels: expected {n_f}, got {lf.size}")
    if reach.rows.size and np.any(lf[reach.rows] != lc[reach.cols]):
        raise ValueError("a reachable pair crosses components: labels are not weakly "
                         "connected components of the reachability structure")
    return lf, lc


def greedy_by_component(reach: Reach, k: int, d: float = math.inf, component=None) -> Selection:
    """Local (per-WCC) greedy merged into a global selection (FGCE Sec. III-A, last paragraph).

    Algorithm 1 runs in each weakly connected component independently; the next global pick is
    the head pick of the component with the largest marginal gain (ties: smaller summed cost,
    then smaller candidate index), i.e. exactly the global greedy's choice because components
    share no factuals. ``component`` is an int label per factual, or a pair (labels of
    factuals, labels of candidates); None means one component.
    """
    k = _check_k(k)
    if component is None:
        return greedy(reach, k, d)
    lf, lc = _labels(reach, component)
    heads = []  # per component: (global picks, gains, sums)
    for c in np.unique(np.concatenate([lf, lc[lc >= 0]])):
        f_idx, c_idx = np.flatnonzero(lf == c), np.flatnonzero(lc == c)
        if f_idx.size == 0 or c_idx.size == 0:
            continue
        cov, cst = reach.subset(f_idx, c_idx).covering(d)
        p, g, s = _greedy_core(cov, cst, k)
        if p.size:
            heads.append((c_idx[p], g, s))
    # merge: the next global pick is the best head over components (a heap of head keys)
    heap = [(-int(g[0]), float(s[0]), int(p[0]), h) for h, (p, g, s) in enumerate(heads)]
    heapq.heapify(heap)
    pos = [0] * len(heads)
    picks: list[int] = []
    while heap and len(picks) < k:
        _, _, j, h = heapq.heappop(heap)
        picks.append(j)
        pos[h] += 1
        p, g, s = heads[h]
        if pos[h] < p.size:
            t = pos[h]
            heapq.heappush(heap, (-int(g[t]), float(s[t]), int(p[t]), h))
    cov, cst = reach.covering(d)
    return _selection(cov, cst, picks, d)
