"""FGCE's input and result structures (Fragkathoulas et al., seed 001): :class:`Reach`, which
(factual, candidate) pairs are reachable and at what cost (cost 0.0 is a legitimate cost, so
reachability is stored apart from the cost matrix), and :class:`Selection`, a set of chosen
counterfactuals with each factual's cheapest chosen one."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


class Infeasible(ValueError):
    """The requested coverage cannot be reached with the given number of counterfactuals."""


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
