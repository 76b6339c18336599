"""FGCE's measures k0 and d0 (Fragkathoulas et al., seed 001, Sec. IV): the fewest
counterfactuals that cover every coverable factual (:func:`k0`, an exact set cover per weakly
connected component), the smallest cost budget for k of them (:func:`d0`) and the smallest at
which every coverable factual is reachable (:func:`d_min`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from aequum.engines.core.imports import load
from aequum.engines.feasibility.exact import _solve_mip, min_cost_mip
from aequum.engines.feasibility.greedy import _greedy_core, _labels, greedy
from aequum.engines.feasibility.reach import Reach, _undominated


@dataclass(frozen=True)
class K0Result:
    """Minimum k for full coverage of coverable factuals (d = ∞), FGCE Sec. IV (k0).

    ``k0`` exact (set-cover MIP), ``greedy_bound`` the greedy upper bound, ``chosen`` a
    minimum cover, ``per_component`` the exact minimum per component label (when given),
    ``n_components`` the number of components holding a coverable factual (k0 ≥ that).
    """

    k0: int
    greedy_bound: int
    chosen: np.ndarray
    per_component: dict
    n_components: int


def _bipartite_components(cov: sp.csr_matrix) -> tuple[int, np.ndarray, np.ndarray]:
    """Connected components of the factual–candidate bipartite coverage graph."""
    connected_components = load("scipy.sparse.csgraph").connected_components

    n_f, n_c = cov.shape
    B = sp.bmat([[None, cov], [cov.T, None]], format="csr") if n_f and n_c else \
        sp.csr_matrix((n_f + n_c, n_f + n_c))
    n, lab = connected_components(B, directed=False)
    return n, lab[:n_f], lab[n_f:]


def _set_cover(reach: Reach) -> np.ndarray:
    """Exact minimum set of candidates covering every coverable factual (d = ∞).

    Solved per connected component of the bipartite reachability graph, after removing
    dominated candidates, with the greedy cover as HiGHS's first incumbent.
    """
    cov, _ = reach.covering(math.inf)
    n_f, n_c = cov.shape
    if cov.nnz == 0:
        return np.zeros(0, dtype=np.int64)
    n, lf, lc = _bipartite_components(cov)
    out = []
    for comp in range(n):
        f_idx, c_idx = np.flatnonzero(lf == comp), np.flatnonzero(lc == comp)
        if f_idx.size == 0 or c_idx.size == 0:
            continue
        A = cov[f_idx][:, c_idx].astype(np.float64).tocsr()
        cand = _undominated(A)
        A = A[:, cand].tocsr()
        if cand.size == 1:
            out.append(c_idx[cand])
            continue
        g, _, _ = _greedy_core(A.astype(bool), A, cand.size)
        start = np.zeros(cand.size)
        start[g] = 1.0
        x = _solve_mip(np.ones(cand.size), np.zeros(cand.size), np.ones(cand.size),
                       [True] * cand.size, A, np.ones(f_idx.size),
                       np.full(f_idx.size, np.inf), start=start)
        out.append(c_idx[cand[x > 0.5]])
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def k0(reach: Reach, component=None) -> K0Result:
    """k0 = min{k | ∃ S, |S| ≤ k, S covers every coverable factual} (FGCE Sec. IV).

    Exact set-cover MIP on HiGHS; with ``component`` labels it is solved per component and
    summed (components share no pairs). k0 = 0 when nothing is coverable.
    """
    n_f, n_c = reach.shape
    g = greedy(reach, n_c, math.inf)
    per: dict = {}
    if component is None:
        chosen = _set_cover(reach)
        coverable = reach.coverable()
        n_comp = int(coverable.any())
    else:
        lf, lc = _labels(reach, component)
        parts = []
        coverable = reach.coverable()
        n_comp = int(np.unique(lf[coverable]).size)
        for c in np.unique(lf[coverable]):
            f_idx, c_idx = np.flatnonzero(lf == c), np.flatnonzero(lc == c)
            s = c_idx[_set_cover(reach.subset(f_idx, c_idx))]
            per[int(c)] = int(s.size)
            parts.append(s)
        chosen = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    return K0Result(int(chosen.size), int(g.chosen.size), np.sort(chosen), per, n_comp)


def d0(reach: Reach, k: int | None = None) -> float:
    """d0: the minimal max assigned cost for full coverage with k counterfactuals (Problem 2,
    c = 1); k defaults to k0. Raises :class:`Infeasible` when k < k0."""
    if k is None:
        k = k0(reach).k0
    return min_cost_mip(reach, k, 1.0).d


def d_min(reach: Reach) -> float:
    """Minimal full-coverage cost over any k: max over coverable factuals of their cheapest
    reachable candidate (closed form: with k unbounded every factual takes its cheapest).
    0.0 when nothing is coverable."""
    if reach.rows.size == 0:
        return 0.0
    order = np.lexsort((reach.costs, reach.rows))
    r, v = reach.rows[order], reach.costs[order]
    first = np.ones(r.size, dtype=bool)
    first[1:] = r[1:] != r[:-1]
    return float(v[first].max())
