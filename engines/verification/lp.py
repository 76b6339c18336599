"""The twin-network LP of PBA (seed 004, Eqs. 1–8 with the relaxation of §A.2), on HiGHS.

Variables: the moving inputs z (box bounds), and per copy and hidden layer the
post-activations y of the neurons that are not provably inactive. Per neuron with
pre-activation bounds [l, u] (from ``bounds.symbolic_bounds``):

* stable active (l ≥ 0): y = x̂ exactly (one equality row), l ≤ y ≤ u;
* stable inactive (u ≤ 0): y = 0 (no variable);
* unstable: x̂ = W y_prev + b (a variable with l ≤ x̂ ≤ u) and the triangle
  y ≥ 0, y ≥ x̂, y ≤ u(x̂ − l)/(u − l) (Ehlers 2017) — or, with ``exact``, the big-M MILP
  y ≤ x̂ − l(1 − d), y ≤ u d, d ∈ {0, 1}, which is the network itself.

Both copies read the same z (Eqs. 4–6); neurons that cannot depend on the sensitive inputs
(``network.shared_neurons``) are one variable for both. The objective is Σ_c coef_c · score_c
(min). One copy with coefficient ±1 is the robustness query (min ±score over the box).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from aequum.engines.core.highs import quiet_highs
from aequum.engines.core.imports import load
from aequum.engines.verification.network import Network

# HiGHS solves to feasibility/optimality tolerances of 1e-7; a bound is reported this much
# lower than the solver's optimum so that "bound > 0" stays a proof.
TOLERANCE = 1e-6


@dataclass
class Copy:
    """One copy of the network: its input centre (sensitive values used), bounds, objective weight."""

    x: np.ndarray                       # (d,) raw inputs; fixed columns taken from here
    bounds: list[tuple[np.ndarray, np.ndarray]]   # per hidden layer: pre-activation (l, u)
    coef: float


@dataclass
class LPResult:
    bound: float                  # a proven lower bound of the objective (−inf if unsolved)
    point: np.ndarray | None      # the optimum's input (d,), a candidate counterexample
    status: str


class _Builder:
    def __init__(self):
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.integer: list[bool] = []
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []

    def add_cols(self, lower, upper, integer=False) -> np.ndarray:
        start = len(self.lower)
        self.lower += list(np.asarray(lower, float))
        self.upper += list(np.asarray(upper, float))
        self.integer += [integer] * len(np.atleast_1d(lower))
        return np.arange(start, len(self.lower))

    def add_rows(self, r: np.ndarray, c: np.ndarray, v: np.ndarray, lower, upper) -> None:
        base = len(self.row_lower)
        self.rows.append(np.asarray(r) + base)
        self.cols.append(np.asarray(c))
        self.vals.append(np.asarray(v, float))
        self.row_lower += list(np.asarray(lower, float))
        self.row_upper += list(np.asarray(upper, float))


def _affine_rows(b: _Builder, W: np.ndarray, bias: np.ndarray, prev_cols: np.ndarray,
                 prev_const: np.ndarray, out_cols: np.ndarray, keep: np.ndarray) -> None:
    """Rows  out − W[keep] · prev = bias + W · const  (prev: variables where col ≥ 0)."""
    var = prev_cols >= 0
    rhs = bias[keep] + W[keep][:, ~var] @ prev_const[~var]
    block = W[keep][:, var]
    r, c = np.nonzero(block)
    n = len(out_cols)
    rows = np.concatenate([np.arange(n), r])
    cols = np.concatenate([out_cols, prev_cols[var][c]])
    vals = np.concatenate([np.ones(n), -block[r, c]])
    b.add_rows(rows, cols, vals, rhs, rhs)


def solve(net: Network, copies: list[Copy], lo: np.ndarray, hi: np.ndarray, sensitive: list[int],
          shared: list[np.ndarray] | None = None, exact: bool = False, time_limit: float | None = 10.0,
          highs=None) -> LPResult:
    """min Σ_c coef_c · score(x_c) over the shared box of z, relaxed (LP) or exact (MILP).

    ``lo``/``hi``: the box (d,) of the non-sensitive inputs (lo = hi: fixed); sensitive inputs
    take each copy's own value. ``shared``: per hidden layer, neurons common to all copies.
    ``time_limit``: seconds for HiGHS (None: none; the tests use none, so that a loaded machine
    cannot change their bounds).
    """
    highspy = load("highspy")

    b = _Builder()
    moving = np.flatnonzero(hi > lo)
    moving = moving[~np.isin(moving, sensitive)]
    z_cols = b.add_cols(lo[moving], hi[moving])
    cost: dict[int, float] = {}
    offset = 0.0
    hidden = net.depth - 1
    first_cols: list[np.ndarray] = []       # copy 0's columns per hidden layer (for sharing)
    for ci, cp in enumerate(copies):
        prev_cols = -np.ones(len(cp.x), np.int64)
        prev_cols[moving] = z_cols
        prev_const = np.where(prev_cols >= 0, 0.0, cp.x)
        prev_const[list(sensitive)] = cp.x[list(sensitive)]
        for j in range(hidden):
            W, bias = net.weights[j], net.biases[j]
            l, u = cp.bounds[j]
            if ci > 0 and shared is not None:
                l0, u0 = copies[0].bounds[j]
                same = shared[j]
                l, u = np.where(same, np.maximum(l, l0), l), np.where(same, np.minimum(u, u0), u)
            else:
                same = np.zeros(len(l), bool)
            cols = -np.ones(len(l), np.int64)
            if ci > 0:
                cols[same] = first_cols[j][same]
            own = ~same
            active = own & (l >= 0)
            unstable = own & (l < 0) & (u > 0)
            ia, iu = np.flatnonzero(active), np.flatnonzero(unstable)
            cols[ia] = b.add_cols(l[ia], u[ia])
            _affine_rows(b, W, bias, prev_cols, prev_const, cols[ia], ia)
            if len(iu):
                lu, uu = l[iu], u[iu]
                h_cols = b.add_cols(lu, uu)
                _affine_rows(b, W, bias, prev_cols, prev_const, h_cols, iu)
                y_cols = b.add_cols(np.zeros(len(iu)), uu)
                cols[iu] = y_cols
                n = len(iu)
                idx = np.arange(n)
                s = uu / (uu - lu)
                # y − x̂ ≥ 0 ;  y − s x̂ ≤ −s l
                b.add_rows(np.r_[idx, idx], np.r_[y_cols, h_cols], np.r_[np.ones(n), -np.ones(n)],
                           np.zeros(n), np.full(n, np.inf))
                b.add_rows(np.r_[idx, idx], np.r_[y_cols, h_cols], np.r_[np.ones(n), -s],
                           np.full(n, -np.inf), -s * lu)
                if exact:
                    d_cols = b.add_cols(np.zeros(n), np.ones(n), integer=True)
                    # y − x̂ − l d ≤ −l ;  y − u d ≤ 0
                    b.add_rows(np.r_[idx, idx, idx], np.r_[y_cols, h_cols, d_cols],
                               np.r_[np.ones(n), -np.ones(n), -lu], np.full(n, -np.inf), -lu)
                    b.add_rows(np.r_[idx, idx], np.r_[y_cols, d_cols], np.r_[np.ones(n), -uu],
                               np.full(n, -np.inf), np.zeros(n))
            if ci == 0:
                first_cols.append(cols)
            prev_cols, prev_const = cols, np.zeros(len(l))
        W, bias = net.weights[-1], net.biases[-1]
        w = cp.coef * W[0]
        var = prev_cols >= 0
        for col, val in zip(prev_cols[var], w[var]):
            cost[int(col)] = cost.get(int(col), 0.0) + float(val)
        offset += cp.coef * (bias[0] + W[0][~var] @ prev_const[~var])

    n_col, n_row = len(b.lower), len(b.row_lower)
    c = np.zeros(n_col)
    for col, val in cost.items():
        c[col] += val
    if n_row:
        A = sp.csc_matrix((np.concatenate(b.vals), (np.concatenate(b.rows), np.concatenate(b.cols))),
                          shape=(n_row, n_col))
    else:
        A = sp.csc_matrix((0, n_col))
    A.sum_duplicates()
    A.sort_indices()
    h = highs if highs is not None else new_highs()
    h.clearModel()
    h.setOptionValue("time_limit", float("inf") if time_limit is None else float(time_limit))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_col, n_row
    lp.col_cost_ = c
    lp.col_lower_ = np.asarray(b.lower)
    lp.col_upper_ = np.asarray(b.upper)
    lp.row_lower_ = np.asarray(b.row_lower)
    lp.row_upper_ = np.asarray(b.row_upper)
    lp.offset_ = float(offset)
    lp.sense_ = highspy.ObjSense.kMinimize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(np.float64)
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n_col, n_row
    if exact and any(b.integer):
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                           for i in b.integer]
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    point = np.array(copies[0].x, dtype=np.float64, copy=True)
    if status != highspy.HighsModelStatus.kOptimal:
        if exact and h.getInfo().mip_dual_bound > -np.inf:
            return LPResult(float(h.getInfo().mip_dual_bound) - TOLERANCE, None, h.modelStatusToString(status))
        return LPResult(-np.inf, None, h.modelStatusToString(status))
    point[moving] = np.asarray(h.getSolution().col_value)[z_cols]
    value = float(h.getInfo().objective_function_value)
    return LPResult(value - TOLERANCE * (1 + abs(value)), point, "optimal")


def new_highs():
    """A quiet, single-threaded, seeded HiGHS instance (reused across the LPs of a piece)."""
    return quiet_highs(mip_abs_gap=1e-9)
