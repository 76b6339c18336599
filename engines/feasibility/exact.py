"""FGCE's exact selections by mixed-integer programming (HiGHS, single threaded, random_seed 0;
Fragkathoulas et al., seed 001): Problem 1, the most factuals covered by k candidates within
cost d (:func:`max_coverage_mip`); Problem 2, the smallest maximum cost at which k candidates
cover a share c of the coverable factuals, constraints (1)–(6) (:func:`min_cost_mip`), and by
bisection over the distinct costs (:func:`min_cost_bisect`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from aequum.engines.core.highs import quiet_highs
from aequum.engines.core.imports import load
from aequum.engines.feasibility.greedy import _greedy_core, greedy_coverage
from aequum.engines.feasibility.reach import (Infeasible, Reach, Selection, _assign, _check_k, _selection,
                                             _undominated)


def _solve_mip(c, lb, ub, integer, A: sp.csr_matrix, row_lb, row_ub, maximize=False,
               start=None):
    """Solve min/max c·x, row_lb ≤ A x ≤ row_ub, lb ≤ x ≤ ub; None if infeasible.

    ``start``: optional feasible point handed to HiGHS as the first incumbent.
    """
    highspy = load("highspy")
    h = quiet_highs(mip_abs_gap=0.0)
    n = len(c)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = A.shape[0]
    lp.col_cost_ = np.asarray(c, dtype=np.float64)
    lp.col_lower_ = np.asarray(lb, dtype=np.float64)
    lp.col_upper_ = np.asarray(ub, dtype=np.float64)
    lp.row_lower_ = np.asarray(row_lb, dtype=np.float64)
    lp.row_upper_ = np.asarray(row_ub, dtype=np.float64)
    lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
    Ac = sp.csc_matrix(A, dtype=np.float64)
    Ac.sort_indices()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = Ac.indptr.astype(np.int32)
    lp.a_matrix_.index_ = Ac.indices.astype(np.int32)
    lp.a_matrix_.value_ = Ac.data
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = A.shape[0]
    lp.integrality_ = [highspy.HighsVarType.kInteger if b else highspy.HighsVarType.kContinuous
                       for b in integer]
    h.passModel(lp)
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = np.asarray(start, dtype=np.float64)
        sol.value_valid = True
        h.setSolution(sol)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS did not solve the model: {h.modelStatusToString(status)}")
    return np.asarray(h.getSolution().col_value, dtype=np.float64)


def max_coverage_mip(reach: Reach, k: int, d: float = math.inf) -> Selection:
    """Exact maximum coverage (Problem 1) as a MIP on HiGHS.

    max Σ_i y_i − ε Σ_j u_j  s.t. y_i ≤ Σ_{j covers i} u_j, Σ_j u_j ≤ k, u binary,
    0 ≤ y ≤ 1, with ε = 1/(k+1) so that coverage comes first and, among optimal sets, the
    fewest counterfactuals are used. Only candidates covering some factual and not dominated
    by another candidate (covered set contained in its set) get a variable; the greedy
    selection is the first incumbent.
    ``chosen`` is returned in increasing index order.
    """
    k = _check_k(k)
    cov, cst = reach.covering(d)
    rows_f = np.flatnonzero(np.diff(cov.indptr) > 0)        # coverable at d
    cand = np.flatnonzero(np.diff(cov.tocsc().indptr) > 0)  # useful candidates
    if k == 0 or rows_f.size == 0:
        return _selection(cov, cst, [], d)
    sub = cov[rows_f][:, cand].astype(np.float64).tocsr()   # (nf', nc')
    keep = _undominated(sub)                                 # optimum-preserving reduction
    cand, sub = cand[keep], sub[:, keep].tocsr()
    nf, nc = sub.shape
    g, _, _ = _greedy_core(sub.astype(bool), sub, k)         # greedy = first incumbent
    start = np.zeros(nc + nf)
    start[g] = 1.0
    if g.size:
        start[nc + np.flatnonzero(np.diff(sub[:, g].tocsr().indptr) > 0)] = 1.0
    # variables: u (nc), y (nf)
    # rows: y_i - sum u_j <= 0 (nf rows), sum u <= k (1 row)
    A = sp.vstack([sp.hstack([-sub, sp.identity(nf)]),
                   sp.hstack([sp.csr_matrix(np.ones((1, nc))), sp.csr_matrix((1, nf))])]).tocsr()
    eps = 1.0 / (k + 1)
    c = np.concatenate([np.full(nc, -eps), np.ones(nf)])
    x = _solve_mip(c, np.zeros(nc + nf), np.ones(nc + nf),
                   [True] * nc + [False] * nf, A,
                   np.full(nf + 1, -np.inf), np.concatenate([np.zeros(nf), [k]]),
                   maximize=True, start=start)
    chosen = cand[x[:nc] > 0.5]
    return _selection(cov, cst, np.sort(chosen), d)


@dataclass(frozen=True)
class MinCostResult:
    """Result of Problem 2: minimal max assigned cost ``d`` and the selection achieving it.

    ``assignment``/``cost``: every factual whose cheapest chosen candidate costs ≤ d is
    assigned to it (at least ``n_required`` of the ``n_coverable`` coverable factuals).
    """

    d: float
    chosen: np.ndarray
    assignment: np.ndarray
    cost: np.ndarray
    n_covered: int
    n_required: int
    n_coverable: int


def _required(n_coverable: int, coverage: float) -> int:
    coverage = float(coverage)
    if not (0.0 < coverage <= 1.0):
        raise ValueError(f"coverage must be in (0, 1], got {coverage!r}")
    return min(n_coverable, int(math.ceil(coverage * n_coverable - 1e-9)))


def min_cost_mip(reach: Reach, k: int, coverage: float = 1.0) -> MinCostResult:
    """Problem 2 (coverage-constrained FGCE): minimise d s.t. constraints (1)–(6) on HiGHS.

    Variables r_ij (binary, only for reachable pairs), u_j (binary), d ≥ 0:
    (1) Σ_j cost_ij r_ij ≤ d ∀i; (2) Σ_j r_ij ≤ 1 (= 1 for full coverage, over coverable
    factuals); (3) Σ_j u_j ≤ k; (4) r_ij ≤ u_j; (5) Σ r ≥ ⌈c · n_coverable⌉;
    (6) binaries. Coverage is over coverable factuals (at least one reachable candidate).
    The returned d is recomputed exactly from the chosen set (max of the required cheapest
    assignments), so it is one of the input costs, not a solver-tolerance value.

    Raises :class:`Infeasible` when k counterfactuals cannot reach the required coverage.
    """
    k = _check_k(k)
    n_f, n_c = reach.shape
    coverable = reach.coverable()
    n_cov = int(coverable.sum())
    need = _required(n_cov, coverage)
    empty_a, empty_c = np.full(n_f, -1, dtype=np.int64), np.full(n_f, np.nan)
    if need == 0:
        return MinCostResult(0.0, np.zeros(0, dtype=np.int64), empty_a, empty_c, 0, 0, n_cov)
    if k == 0:
        raise Infeasible(f"k=0 counterfactuals cannot cover {need} of {n_cov} coverable "
                         f"factuals")
    rows, cols, costs = reach.rows, reach.cols, reach.costs
    cand = np.unique(cols)
    cmap = np.full(n_c, -1, dtype=np.int64)
    cmap[cand] = np.arange(cand.size)
    fidx = np.flatnonzero(coverable)
    fmap = np.full(n_f, -1, dtype=np.int64)
    fmap[fidx] = np.arange(fidx.size)
    P, nc, nf = rows.size, cand.size, fidx.size
    # variables: r (P), u (nc), d (1)
    iu, idd = P, P + nc
    pr = np.arange(P)
    blocks_r, blocks_c, blocks_v, lo, hi = [], [], [], [], []
    row0 = 0
    # (1) Σ cost r - d <= 0, per coverable factual
    blocks_r += [fmap[rows] + row0, np.arange(nf) + row0]
    blocks_c += [pr, np.full(nf, idd)]
    blocks_v += [costs, -np.ones(nf)]
    lo.append(np.full(nf, -np.inf)); hi.append(np.zeros(nf))
    row0 += nf
    # (2) Σ_j r_ij <= 1 (== 1 for full coverage)
    full = need == n_cov
    blocks_r.append(fmap[rows] + row0); blocks_c.append(pr); blocks_v.append(np.ones(P))
    lo.append(np.ones(nf) if full else np.full(nf, -np.inf)); hi.append(np.ones(nf))
    row0 += nf
    # (3) Σ u <= k
    blocks_r.append(np.full(nc, row0)); blocks_c.append(iu + np.arange(nc))
    blocks_v.append(np.ones(nc)); lo.append([-np.inf]); hi.append([k])
    row0 += 1
    # (4) r_ij - u_j <= 0
    blocks_r += [row0 + pr, row0 + pr]; blocks_c += [pr, iu + cmap[cols]]
    blocks_v += [np.ones(P), -np.ones(P)]
    lo.append(np.full(P, -np.inf)); hi.append(np.zeros(P))
    row0 += P
    # (5) Σ r >= need (redundant for full coverage)
    if not full:
        blocks_r.append(np.full(P, row0)); blocks_c.append(pr); blocks_v.append(np.ones(P))
        lo.append([need]); hi.append([np.inf])
        row0 += 1
    A = sp.csr_matrix((np.concatenate(blocks_v),
                       (np.concatenate(blocks_r), np.concatenate(blocks_c))),
                      shape=(row0, P + nc + 1))
    c = np.zeros(P + nc + 1)
    c[idd] = 1.0
    ub = np.ones(P + nc + 1)
    ub[idd] = np.inf
    lb = np.zeros(P + nc + 1)
    # valid bound: at least `need` factuals pay at least their cheapest reachable cost
    order = np.lexsort((costs, rows))
    first = np.ones(P, dtype=bool)
    first[1:] = rows[order][1:] != rows[order][:-1]
    lb[idd] = np.sort(costs[order][first])[need - 1]
    x = _solve_mip(c, lb, ub, [True] * (P + nc) + [False], A,
                   np.concatenate([np.asarray(v, float) for v in lo]),
                   np.concatenate([np.asarray(v, float) for v in hi]))
    if x is None:
        raise Infeasible(f"k={k} counterfactuals cannot cover {need} of {n_cov} coverable "
                         f"factuals (coverage={coverage}); increase k")
    chosen = cand[x[iu:iu + nc] > 0.5]
    return _finish_min_cost(reach, chosen, need, n_cov)


def _finish_min_cost(reach: Reach, chosen: np.ndarray, need: int, n_cov: int) -> MinCostResult:
    """Exact d for a chosen set: the need-th smallest cheapest-chosen cost over factuals."""
    _, cst = reach.covering(math.inf)
    assignment, cost = _assign(cst, np.asarray(chosen, dtype=np.int64))
    vals = np.sort(cost[assignment >= 0])
    if vals.size < need:  # solver returned a set that does not cover (should not happen)
        raise RuntimeError("MIP solution does not reach the required coverage")
    d = float(vals[need - 1])
    drop = ~(cost <= d)
    assignment[drop] = -1
    cost[drop] = np.nan
    used = np.unique(assignment[assignment >= 0])
    return MinCostResult(d, used, assignment, cost, int((assignment >= 0).sum()), need, n_cov)


def _bisect(values: np.ndarray, lo: int, hi: int, ok) -> int:
    """Smallest index in [lo, hi] with ok(values[i]) (ok monotone, ok(values[hi]) assumed)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(float(values[mid])):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _coverage_lp_bound(reach: Reach, k: int, d: float) -> float:
    """LP relaxation of maximum coverage (u, y ∈ [0, 1]): an upper bound on what k can cover."""
    cov, _ = reach.covering(d)
    rows_f = np.flatnonzero(np.diff(cov.indptr) > 0)
    cand = np.flatnonzero(np.diff(cov.tocsc().indptr) > 0)
    if k == 0 or rows_f.size == 0:
        return 0.0
    sub = cov[rows_f][:, cand].astype(np.float64).tocsr()
    nf, nc = sub.shape
    A = sp.vstack([sp.hstack([-sub, sp.identity(nf)]),
                   sp.hstack([sp.csr_matrix(np.ones((1, nc))), sp.csr_matrix((1, nf))])]).tocsr()
    x = _solve_mip(np.concatenate([np.zeros(nc), np.ones(nf)]), np.zeros(nc + nf), np.ones(nc + nf),
                   [False] * (nc + nf), A, np.full(nf + 1, -np.inf),
                   np.concatenate([np.zeros(nf), [k]]), maximize=True)
    return float(x[nc:].sum())


def min_cost_bisect(reach: Reach, k: int, coverage: float = 1.0, exact: bool = True,
                    lower: float | None = None, upper: float | None = None) -> MinCostResult:
    """Problem 2 by bisection over the distinct pair costs: d* is the smallest cost d at which
    k counterfactuals can cover the required factuals (coverage at d is non-decreasing in d, so
    the bisection is exact). Each probe first tries the greedy (a success proves feasibility);
    only when it falls short does the exact maximum-coverage MIP decide (``exact=False`` trusts
    the greedy: an upper bound on d*, for very large inputs). ``lower``/``upper``: known bounds
    on d* (d* is non-increasing in k, so a curve over k passes its neighbours'). Same optimum as
    :func:`min_cost_mip`, which formulates constraints (1)–(6) at once but is much harder for
    HiGHS on large single-component instances.
    """
    k = _check_k(k)
    n_f, _ = reach.shape
    n_cov = int(reach.coverable().sum())
    need = _required(n_cov, coverage)
    if need == 0:
        return MinCostResult(0.0, np.zeros(0, dtype=np.int64), np.full(n_f, -1, dtype=np.int64),
                             np.full(n_f, np.nan), 0, 0, n_cov)
    values = np.unique(reach.costs)

    def covered(d: float) -> tuple[np.ndarray, int]:
        picks, after = greedy_coverage(reach, k, d)
        return picks, int(after[-1]) if after.size else 0

    def probe(d: float):
        picks, n = covered(d)
        if n >= need:
            return picks
        if not exact or _coverage_lp_bound(reach, k, d) < need - 1e-7:
            return None          # the LP relaxation already proves k cannot reach ``need``
        m = max_coverage_mip(reach, k, d)
        return m.chosen if m.n_covered >= need else None

    # bracket d* cheaply: the greedy-only bisection gives a feasible d (an upper bound); the
    # exact probes then run only below it
    if upper is None:
        top = probe(float(values[-1]))
        if top is None:
            raise Infeasible(f"{k} counterfactual(s) cannot cover {need} of the {n_cov} coverable factuals")
        hi = len(values) - 1
    else:                        # a known feasible d (e.g. the cost with fewer counterfactuals)
        hi = int(np.searchsorted(values, upper, side="left"))
        top = None
    lo = 0 if lower is None else min(int(np.searchsorted(values, lower, side="left")), hi)
    hi = _bisect(values, lo, hi, lambda d: covered(d)[1] >= need)
    best, n_hi = covered(float(values[hi]))
    if n_hi < need:
        best = top if top is not None else probe(float(values[hi]))
    while lo < hi:
        mid = (lo + hi) // 2
        got = probe(float(values[mid]))
        if got is not None:
            hi, best = mid, got
        else:
            lo = mid + 1
    return _finish_min_cost(reach, best, need, n_cov)
