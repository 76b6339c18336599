"""FGCE counterfactual selection on a precomputed reachability structure.

Fragkathoulas et al., "Feasible group counterfactual explanations" (FGCE, seed 001):

* Problem 1 (cost-constrained): given k and a cost budget d, choose S ⊆ X' with |S| ≤ k that
  maximises the number of factuals x with some x' ∈ S reachable at cost(x, x') ≤ d.
  Solved by Algorithm 1 (global greedy, (1 − 1/e)-approximation, :func:`greedy`), its local
  per-WCC variant (:func:`greedy_by_component`) and exactly by a MIP (:func:`max_coverage_mip`).
* Problem 2 (coverage-constrained): given k and a coverage degree c, minimise the maximum
  assigned cost d subject to constraints (1)–(6) (:func:`min_cost_mip`).
* Measures k0 / d0 (Sec. IV): :func:`k0`, :func:`d0`, :func:`d_min`.
* The allocation of k counterfactuals across weakly connected components (Sec. III-B DP):
  :func:`allocate_k`.

Nothing here builds graphs: the input is a :class:`Reach` — which (factual, candidate) pairs are
reachable and at what cost. Cost 0.0 is a legitimate cost, so reachability is stored apart
from the cost matrix. Coverage-constrained results are over *coverable* factuals (those with at
least one reachable candidate); a factual nothing can reach is never counted as coverable.

All functions are pure and deterministic (HiGHS runs single threaded with ``random_seed`` 0).
Empty inputs (no factuals, no candidates, nothing reachable) give empty results, never errors.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from aequum.engines.core.imports import load

__all__ = [
    "Reach", "Selection", "MinCostResult", "K0Result", "Allocation", "Infeasible",
    "greedy", "greedy_by_component", "max_coverage_mip", "min_cost_mip",
    "min_cost_bisect", "k0", "d0", "d_min", "allocate_k", "coverage_curve", "cost_curve",
    "greedy_coverage",
]


class Infeasible(ValueError):
    """The requested coverage cannot be reached with the given number of counterfactuals."""


# --------------------------------------------------------------------------------------------
# Input structure
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reach:
    """Reachability of candidates from factuals, with costs.

    ``reach`` (bool, shape (n_factuals, n_candidates)) says which pairs are reachable;
    ``cost`` (float64, same shape) gives the cost of reachable pairs (a missing stored entry
    for a reachable pair means cost 0.0). Entries of ``cost`` at unreachable pairs are ignored.
    Build with :meth:`from_pairs`.
    """

    cost: sp.csr_matrix
    reach: sp.csr_matrix
    # canonical coordinates of reachable pairs, sorted by (row, col)
    rows: np.ndarray = field(init=False, repr=False, compare=False)
    cols: np.ndarray = field(init=False, repr=False, compare=False)
    costs: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.cost.shape != self.reach.shape:
            raise ValueError(f"cost shape {self.cost.shape} != reach shape {self.reach.shape}")
        r = sp.csr_matrix(self.reach, dtype=bool)
        r.eliminate_zeros()
        r.sort_indices()
        coo = r.tocoo()
        rows = coo.row.astype(np.int64)
        cols = coo.col.astype(np.int64)
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
        c = sp.csr_matrix(self.cost, dtype=np.float64)
        costs = np.asarray(c[rows, cols]).ravel().astype(np.float64) if rows.size else \
            np.zeros(0, dtype=np.float64)
        if np.any(~np.isfinite(costs)) or np.any(costs < 0):
            raise ValueError("costs of reachable pairs must be finite and non-negative")
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "cols", cols)
        object.__setattr__(self, "costs", costs)

    @classmethod
    def from_pairs(cls, n_f: int, n_c: int, rows, cols, costs) -> "Reach":
        """Build from reachable pairs (rows[t], cols[t]) with cost costs[t].

        Duplicated pairs keep their smallest cost.
        """
        rows = np.asarray(rows, dtype=np.int64).ravel()
        cols = np.asarray(cols, dtype=np.int64).ravel()
        costs = np.asarray(costs, dtype=np.float64).ravel()
        if not (rows.size == cols.size == costs.size):
            raise ValueError("rows, cols and costs must have the same length")
        if n_f < 0 or n_c < 0:
            raise ValueError("n_f and n_c must be non-negative")
        if rows.size and (rows.min() < 0 or rows.max() >= n_f or cols.min() < 0
                          or cols.max() >= n_c):
            raise ValueError("pair index out of range")
        if np.any(~np.isfinite(costs)) or np.any(costs < 0):
            raise ValueError("costs must be finite and non-negative")
        order = np.lexsort((costs, cols, rows))
        rows, cols, costs = rows[order], cols[order], costs[order]
        if rows.size:
            first = np.ones(rows.size, dtype=bool)
            first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
            rows, cols, costs = rows[first], cols[first], costs[first]
        shape = (int(n_f), int(n_c))
        indptr = np.zeros(shape[0] + 1, dtype=np.int64)
        np.add.at(indptr, rows + 1, 1)
        indptr = np.cumsum(indptr)
        cost = sp.csr_matrix((costs, cols, indptr), shape=shape)
        reach = sp.csr_matrix((np.ones(rows.size, dtype=bool), cols.copy(), indptr.copy()),
                              shape=shape)
        return cls(cost=cost, reach=reach)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(int(s) for s in self.reach.shape)  # type: ignore[return-value]

    @property
    def n_factuals(self) -> int:
        return self.shape[0]

    @property
    def n_candidates(self) -> int:
        return self.shape[1]

    def coverable(self, d: float = math.inf) -> np.ndarray:
        """Bool mask of factuals with at least one candidate reachable at cost ≤ d."""
        keep = self.costs <= _check_d(d)
        out = np.zeros(self.n_factuals, dtype=bool)
        out[self.rows[keep]] = True
        return out

    def covering(self, d: float = math.inf) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        """(cov, cst): bool and cost CSR matrices of the pairs with reach and cost ≤ d."""
        keep = self.costs <= _check_d(d)
        return _csr(self.rows[keep], self.cols[keep], self.costs[keep], self.shape)

    def subset(self, f_idx: np.ndarray, c_idx: np.ndarray) -> "Reach":
        """Restriction to factuals ``f_idx`` and candidates ``c_idx`` (re-indexed 0..)."""
        fmap = np.full(self.n_factuals, -1, dtype=np.int64)
        fmap[f_idx] = np.arange(len(f_idx))
        cmap = np.full(self.n_candidates, -1, dtype=np.int64)
        cmap[c_idx] = np.arange(len(c_idx))
        r, c = fmap[self.rows], cmap[self.cols]
        keep = (r >= 0) & (c >= 0)
        return Reach.from_pairs(len(f_idx), len(c_idx), r[keep], c[keep], self.costs[keep])


def _csr(rows, cols, costs, shape) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Bool and cost CSR with identical structure; rows/cols sorted by (row, col)."""
    rows = np.asarray(rows, dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=shape[0]))]).astype(np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    cov = sp.csr_matrix((np.ones(cols.size, dtype=bool), cols, indptr), shape=shape)
    cst = sp.csr_matrix((np.asarray(costs, dtype=np.float64), cols.copy(), indptr.copy()),
                        shape=shape)
    return cov, cst


def _check_d(d: float) -> float:
    d = float(d)
    if math.isnan(d):
        raise ValueError("d must not be NaN")
    return d


def _check_k(k) -> int:
    if isinstance(k, (bool, np.bool_)) or int(k) != k or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    return int(k)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    """A selected set of counterfactuals and the resulting per-factual assignment.

    ``chosen``: candidate indices in pick order; ``covered_after[t]``: factuals covered by the
    first t+1 picks; ``assignment[i]``: the chosen candidate covering factual i at minimal cost
    (ties: smaller candidate index), −1 if none; ``cost[i]``: that cost, NaN if none.
    """

    chosen: np.ndarray
    covered_after: np.ndarray
    assignment: np.ndarray
    cost: np.ndarray
    d: float = math.inf

    @property
    def n_covered(self) -> int:
        return int(self.covered_after[-1]) if self.covered_after.size else 0

    @property
    def covered(self) -> np.ndarray:
        return self.assignment >= 0


def _assign(cst: sp.csr_matrix, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per factual: min-cost chosen candidate (ties → smaller index) and its cost."""
    n_f = cst.shape[0]
    assignment = np.full(n_f, -1, dtype=np.int64)
    cost = np.full(n_f, np.nan)
    if chosen.size == 0 or n_f == 0:
        return assignment, cost
    sub = cst[:, np.sort(chosen)].tocoo()
    if sub.nnz == 0:
        return assignment, cost
    cols_sorted = np.sort(chosen)
    r, c, v = sub.row, cols_sorted[sub.col], sub.data
    order = np.lexsort((c, v, r))
    r, c, v = r[order], c[order], v[order]
    first = np.ones(r.size, dtype=bool)
    first[1:] = r[1:] != r[:-1]
    assignment[r[first]] = c[first]
    cost[r[first]] = v[first]
    return assignment, cost


def _selection(cov: sp.csr_matrix, cst: sp.csr_matrix, chosen, d: float) -> Selection:
    chosen = np.asarray(chosen, dtype=np.int64)
    n_f = cov.shape[0]
    covered = np.zeros(n_f, dtype=bool)
    after = np.zeros(chosen.size, dtype=np.int64)
    csc = cov.tocsc()
    for t, j in enumerate(chosen):
        covered[csc.indices[csc.indptr[j]:csc.indptr[j + 1]]] = True
        after[t] = covered.sum()
    assignment, cost = _assign(cst, chosen)
    return Selection(chosen=chosen, covered_after=after, assignment=assignment, cost=cost,
                     d=float(d))


# --------------------------------------------------------------------------------------------
# Problem 1: greedy
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# HiGHS
# --------------------------------------------------------------------------------------------

def _solve_mip(c, lb, ub, integer, A: sp.csr_matrix, row_lb, row_ub, maximize=False,
               start=None):
    """Solve min/max c·x, row_lb ≤ A x ≤ row_ub, lb ≤ x ≤ ub; None if infeasible.

    ``start``: optional feasible point handed to HiGHS as the first incumbent.
    """
    highspy = load("highspy")

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("threads", 1)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)
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


# --------------------------------------------------------------------------------------------
# Problem 1 exactly
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Problem 2
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# k0, d0
# --------------------------------------------------------------------------------------------

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


def _undominated(A: sp.csr_matrix) -> np.ndarray:
    """Columns of a 0/1 matrix not contained in another column (ties: keep smaller index).

    Dropping them preserves the optimum of set cover and of unweighted maximum coverage.
    """
    Ac = sp.csc_matrix(A, dtype=np.float64)
    size = np.diff(Ac.indptr)
    inter = (Ac.T @ Ac).tocoo()
    i, j, v = inter.row, inter.col, inter.data
    # column i dominated by j != i if S_i ⊆ S_j and (|S_j| > |S_i| or (equal and j < i))
    dom = (i != j) & (v == size[i]) & ((size[j] > size[i]) | (j < i))
    keep = np.ones(A.shape[1], dtype=bool)
    keep[i[dom]] = False
    keep &= size > 0
    return np.flatnonzero(keep)


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


# --------------------------------------------------------------------------------------------
# Allocation across components (DP)
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Curves
# --------------------------------------------------------------------------------------------

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
