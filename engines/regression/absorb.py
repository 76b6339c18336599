"""Fixed effects absorbed: the regression engine's models with thousands of lender (LEI) and
market (MSA/MD) levels, never expanded into dummy columns.

A model ``y ~ X β + Σ_j F_j α_j`` (``F_j`` the indicator matrix of fixed effect j) is fitted
through its normal equations — weighted by ``W`` (1 for OLS; ``p(1 − p)`` at each Newton step
of the logit) — in the block form of the partitioned inverse (Frisch–Waugh–Lovell; Greene,
*Econometric Analysis*, 8th ed., Sec. 3.3 and A.5.3; for the logit, the Newton step of the
same partitioned information, as fixest's ``feglm`` and Stata's ``clogit``-free FE logit use):

    [ A  Bsᵀ Bbᵀ ] [x]   [gx]      A  = XᵀWX            Bs = F_sᵀWX    Bb = F_bᵀWX
    [ Bs S   Cᵀ  ] [s] = [gs]      S  = F_sᵀWF_s        C  = F_bᵀWF_s
    [ Bb C   D   ] [b]   [gb]      D  = F_bᵀWF_b (diagonal: each row is in one level)

with ``F_b`` the effect of most levels (absorbed through its diagonal ``D``) and ``F_s`` the
others (their most frequent level each left out, so the system is not singular by
construction). Eliminating ``b`` then ``s`` leaves the p × p within-matrix

    G = A − BbᵀD⁻¹Bb − B̃sᵀ T⁻¹ B̃s,    T = S − CᵀD⁻¹C,   B̃s = Bs − CᵀD⁻¹Bb,

the cross products of X with every fixed effect partialled out: for OLS exactly the Gram
matrix of the within-transformed columns. Every sum is accumulated over blocks of rows from
the level codes (sparse products and ``bincount``), so the cost a block is that of the dense
columns plus O(rows) per effect, and memory holds |levels| × p numbers, not n × |levels|.

No fixed effect is the one-level case: ``b`` is the intercept, ``G`` the centred Gram
matrix, and every model here is the plain one.

Rows whose level of some effect has one outcome only (every y = 1, or every y = 0, or a
single record for a continuous y) are fitted exactly by their fixed effect and say nothing
about β; they are dropped, repeatedly until none is left (fixest's ``fixef.rm``; for the logit
the maximum-likelihood estimate of such a level's effect does not exist), with a note.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy import linalg


@dataclass
class Effects:
    """The fixed effects over the design's kept rows: ``codes[j]`` (0 … sizes[j] − 1) per
    effect aligned with the kept rows, the effect of most levels first (the absorbed one).
    ``reference[j]``: the level of effect j ≥ 1 left out (its most frequent). No fixed effect:
    one effect of one level, ``names == []``."""

    names: list[str]
    codes: list[np.ndarray]
    sizes: list[int]
    reference: list[int]
    _columns: dict = field(default_factory=dict, repr=False, compare=False)
    _blocks: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def small(self) -> int:
        """The columns of the other effects (each without its reference level)."""
        return sum(s - 1 for s in self.sizes[1:])

    @property
    def parameters(self) -> int:
        """The fixed effects' parameters: the absorbed effect's levels (the intercept's role)
        and the others' levels but their references."""
        return self.sizes[0] + self.small

    def offsets(self) -> list[int]:
        out, at = [], 0
        for s in self.sizes[1:]:
            out.append(at)
            at += s - 1
        return out

    def small_columns(self, j: int, pos: slice) -> np.ndarray:
        """Effect j's (j ≥ 1) column in the joint index of the other effects, −1 at its reference
        (computed once over every kept row)."""
        if j not in self._columns:
            code = self.codes[j]
            ref = self.reference[j]
            col = np.where(code < ref, code, code - 1) + self.offsets()[j - 1]
            self._columns[j] = np.where(code == ref, -1, col)
        return self._columns[j][pos]

    def _others(self, pos: slice):
        """The other effects' indicator matrix of the rows ``pos``, transposed (small × rows),
        built once a block and kept for the fit's later passes."""
        key = (pos.start, pos.stop)
        if key not in self._blocks:
            rows, cols = [], []
            for j in range(1, len(self.sizes)):
                col = self.small_columns(j, pos)
                hit = np.flatnonzero(col >= 0)
                rows.append(hit)
                cols.append(col[hit])
            r, c = np.concatenate(rows), np.concatenate(cols)
            self._blocks[key] = sp.csr_matrix((np.ones(len(r)), (c, r)), shape=(self.small, pos.stop - pos.start))
        return self._blocks[key]

    def eta(self, pos: slice, s: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Each row's fixed-effect part ``b[level] + Σ_j s[level_j]`` (0 at a reference)."""
        out = b[self.codes[0][pos]]
        if self.small:
            out = out + self._others(pos).T @ s
        return out

    def sums(self, pos: slice, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(F_sᵀv, F_bᵀv)`` over the rows ``pos`` (v a vector or a rows × m matrix); the rows
        are in the absorbed effect's order (:func:`absorb_rows`), so its sums are runs."""
        b = run_sum(self.codes[0][pos], self.sizes[0], v)
        if not self.small:
            return np.zeros((0, *v.shape[1:])), b
        return np.asarray(self._others(pos) @ v), b


def dense_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(present, inverse)``: the codes present (ascending) and each code's rank among them —
    ``np.unique(codes, return_inverse=True)`` for non-negative integer codes, by one ``bincount``
    instead of a sort."""
    seen = np.bincount(codes) > 0 if len(codes) else np.zeros(0, bool)
    return np.flatnonzero(seen), (np.cumsum(seen) - 1)[codes].astype(np.int64)


def no_effects(n: int) -> Effects:
    return Effects([], [np.zeros(n, np.int32)], [1], [0])


def run_sum(codes: np.ndarray, size: int, v: np.ndarray, by_runs: bool = False) -> np.ndarray:
    """Σ of ``v``'s rows by level (``size`` levels; ``codes`` ascending, so one sum a run of
    equal codes): a vector or a size × m matrix; one level (unless ``by_runs``) as one sum."""
    if size == 1 and not by_runs:
        return v.sum(axis=0, keepdims=True) if v.ndim > 1 else np.array([v.sum()])
    out = np.zeros((size, *v.shape[1:]))
    if len(codes):
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        out[codes[starts]] = np.add.reduceat(v, starts, axis=0)
    return out


def one_outcome_levels(y: np.ndarray, codes: Sequence[np.ndarray], binary: bool, singletons: int
                       ) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """The rows left once every level whose rows have one outcome is dropped, repeated until none
    is left (dropping a level's rows can leave another level with one outcome). ``codes``: each
    grouping's codes over the rows; with a binary ``y`` a level of the first ``singletons``
    groupings (the fixed effects) is dropped when its outcomes are all 0 or all 1, or it has
    one record; of the others (categorical controls) when its outcomes are all 0 or all 1
    (quasi-complete separation by the level's dummy: Albert & Anderson 1984; Stata's logit
    "X != 0 predicts failure perfectly; X dropped and N obs not used", fixest's ``fixef.rm``);
    with another y only a fixed-effect level of one record. One ``bincount`` a grouping a round.
    Returns the mask of rows alive, each grouping's dropped levels (over its codes: 0 kept, 1
    dropped with every y = 0, 2 with every y = 1, 3 a record alone with another y) and the rows each
    grouping dropped (a row counted once, by the first that dropped it)."""
    alive = np.ones(len(y), bool)
    dropped = [np.zeros(int(c.max(initial=-1)) + 1, np.int8) for c in codes]
    rows = [0] * len(codes)
    every = True  # no row dropped yet: the sums over every row, no gather
    for _ in range(100):
        changed = False
        for j, c in enumerate(codes):
            if not binary and j >= singletons:
                continue
            live = c if every else c[alive]
            cnt = np.bincount(live, minlength=len(dropped[j]))
            if binary:
                tot = np.bincount(live, weights=y if every else y[alive], minlength=len(cnt))
                bad = (cnt > 0) & ((tot == 0) | (tot == cnt))
                dropped[j][bad] = np.where(tot[bad] == 0, 1, 2)
            else:
                bad = cnt == 1
                dropped[j][bad] = 3
            if bad.any():
                hit = alive & bad[c]
                rows[j] += int(hit.sum())
                alive &= ~hit
                changed, every = True, False
        if not changed:
            break
    return alive, dropped, rows


def absorb_rows(y: np.ndarray, keep: np.ndarray, fixed: Sequence[np.ndarray], names: Sequence[str],
                binary: bool, controls: Sequence[np.ndarray] = (), ordered: bool = True
                ) -> tuple[np.ndarray, Effects, str | None, list[np.ndarray], list[int]]:
    """The kept rows once the levels that fit their rows exactly are dropped (with a binary y: a
    level whose outcomes are all 0 or all 1; else a level of one record), repeated until none
    is left (:func:`one_outcome_levels`), and the effects recoded to their levels present, the
    largest first. ``fixed``: the effects' codes over all rows (nulls already dropped from
    ``keep``); ``controls``: the categorical controls' codes, whose levels of one outcome are
    dropped in the same rounds with a binary y (returned: each effect's then each control's
    dropped levels and rows, :func:`one_outcome_levels`, for the caller's note). The rows returned are ordered by the level of the effect of most
    levels (its sums are then runs; with ``ordered`` False the caller orders them)."""
    codes = [np.asarray(f)[keep] for f in fixed]  # integer codes of any width
    control_codes = [np.asarray(c)[keep] for c in controls] if binary else []
    note = None
    dropped_levels = [np.zeros(0, np.int8) for _ in range(len(codes) + len(control_codes))]
    dropped_rows = [0] * len(dropped_levels)
    if codes or control_codes:
        alive, levels, rows = one_outcome_levels(y[keep].astype(np.float64), [*codes, *control_codes], binary,
                                                 len(codes))
        dropped_levels, dropped_rows = levels, rows
        gone = sum(rows[:len(codes)])
        if gone:
            what = "one outcome" if binary else "one record"
            counts = ", ".join(f"{int((lv > 0).sum()):,} of {nm}" for lv, nm in zip(levels, names) if lv.any())
            note = (f"{gone:,} rows in levels with {what} only ({counts}) dropped: their fixed effect fits "
                    f"them exactly and says nothing of the group")
        keep = keep[alive]
        codes = [c[alive] for c in codes]
    if not codes or not len(keep):  # no effect, or no row left once the one-outcome levels went
        return keep, no_effects(len(keep)), note, dropped_levels, dropped_rows
    recoded = []
    for c in codes:  # four bytes a row each (levels < 2³¹), not eight
        inverse = dense_codes(c)[1]
        recoded.append(inverse.astype(np.int32) if len(c) < 2 ** 31 else inverse)
    sizes = [int(c.max(initial=-1)) + 1 for c in recoded]
    order = sorted(range(len(recoded)), key=lambda j: (-sizes[j], j))
    recoded = [recoded[j] for j in order]
    sizes = [sizes[j] for j in order]
    if ordered:  # the rows in the absorbed effect's order (stable: the given order within a level)
        by_level = np.argsort(recoded[0], kind="stable")
        keep = keep[by_level]
        recoded = [c[by_level] for c in recoded]
    reference = [0] + [int(np.argmax(np.bincount(c, minlength=s))) for c, s in zip(recoded[1:], sizes[1:])]
    return (keep, Effects([names[j] for j in order], recoded, sizes, reference), note, dropped_levels,
            dropped_rows)


class Normal:
    """The weighted normal equations of ``[X, F_s, F_b]`` summed a block of rows at a time
    (:meth:`add`), then solved by the partitioned inverse (:meth:`solver`). The dense blocks are
    summed as the rows come; the effects' own cross products (D, C, S) from every row's weight
    in one ``bincount`` each at the end."""

    def __init__(self, p: int, effects: Effects):
        self.effects = effects
        nb, ns = effects.sizes[0], effects.small
        self.a = np.zeros((p, p))
        self.bb = np.zeros((nb, p))
        self.bs = np.zeros((ns, p))
        self.rows = len(effects.codes[0])
        self.per_row = not (nb == 1 and not ns)  # every row's weight kept (:attr:`weights`), when levels need them
        self._weights = None
        self.weighted = False
        self.total = 0.0                                        # their sum, when one level does not
        self.fixed = None                                       # (D, C, S) when summed elsewhere

    @property
    def weights(self) -> np.ndarray | None:
        """Every row's weight (1 until :meth:`add` gives one) when the levels need them, else
        None; made when first read (a pass whose sums come from elsewhere never reads them)."""
        if self._weights is None and self.per_row:
            self._weights = np.ones(self.rows)
        return self._weights

    @weights.setter
    def weights(self, w: np.ndarray | None) -> None:
        self._weights, self.per_row = w, w is not None

    def add(self, x: np.ndarray, w: np.ndarray | None, pos: slice) -> None:
        """Add the rows ``pos`` (their dense columns ``x``, weights ``w``; None = 1)."""
        e = self.effects
        wx = x if w is None else x * w[:, None]
        self.a += x.T @ wx
        bs, bb = e.sums(pos, wx)
        self.bb += bb
        self.bs += bs
        if w is not None:
            self.weighted = True
            if not self.per_row:
                self.total += float(w.sum())
            else:
                self.weights[pos] = w

    @property
    def d(self) -> np.ndarray:
        e = self.effects
        if self.fixed is not None:
            return self.fixed[0]
        if not self.per_row:
            return np.array([self.total if self.weighted else float(len(e.codes[0]))])
        return np.bincount(e.codes[0], weights=self.weights, minlength=e.sizes[0])

    def cross(self) -> tuple[np.ndarray, np.ndarray]:
        """``(C, S)``: the absorbed effect against the others, and the others among themselves."""
        if self.fixed is not None:
            return self.fixed[1], self.fixed[2]
        e = self.effects
        ns, nb = e.small, e.sizes[0]
        whole = slice(0, len(e.codes[0]))
        cols = [e.small_columns(j, whole) for j in range(1, len(e.sizes))]
        c = np.zeros((nb, ns))
        s = np.zeros((ns, ns))
        for j, col in enumerate(cols):
            hit = col >= 0
            w = self.weights[hit]
            c += np.bincount(e.codes[0][hit] * ns + col[hit], weights=w, minlength=nb * ns).reshape(nb, ns)
            s += np.diag(np.bincount(col[hit], weights=w, minlength=ns))
            for k in range(j + 1, len(cols)):
                both = hit & (cols[k] >= 0)
                t = np.bincount(col[both] * ns + cols[k][both], weights=self.weights[both],
                                minlength=ns * ns).reshape(ns, ns)
                s += t + t.T
        return c, s

    def solver(self) -> "Solver | None":
        """The partitioned solver, or None when a level carries no weight (D has a zero)."""
        d = self.d
        if np.any(d <= 0) or not np.all(np.isfinite(d)):
            return None
        return Solver(self, d, *self.cross())


class Solver:
    """The within-matrix ``G`` of the module docstring and solves of the full system."""

    def __init__(self, ne: Normal, d: np.ndarray, c: np.ndarray | sp.csr_matrix, s: np.ndarray):
        self.dinv = 1 / d
        self.bb, self.c = ne.bb, c
        db = self.dinv[:, None] * ne.bb
        a1 = ne.a - ne.bb.T @ db
        self.collinear_effects = False
        if c.shape[1]:
            # C sparse (``engines.regression.cells.Cells.added`` at 5,000 lenders and 400 markets, a
            # lender in a few): CᵀD⁻¹C over its entries, not a dense product of 5,000 × 399 twice
            dc = sp.csr_matrix(c.multiply(self.dinv[:, None])) if sp.issparse(c) else self.dinv[:, None] * c
            t = s - (c.T @ dc).toarray() if sp.issparse(c) else s - c.T @ dc
            self.bs1 = ne.bs - c.T @ db
            self.tinv, self.collinear_effects = _symmetric_inverse(t)
            self.g = a1 - self.bs1.T @ self.tinv @ self.bs1
        else:
            self.bs1 = ne.bs
            self.tinv = np.zeros((0, 0))
            self.g = a1
        self.g = (self.g + self.g.T) / 2

    def sub(self, p: int) -> "Solver":
        """The solver of the first ``p`` dense columns alone (the elimination is column by column)."""
        out = object.__new__(Solver)
        out.dinv, out.c, out.tinv, out.collinear_effects = self.dinv, self.c, self.tinv, self.collinear_effects
        out.bb, out.bs1, out.g = self.bb[:, :p], self.bs1[:, :p], self.g[:p, :p]
        return out

    def reduce(self, gx: np.ndarray, gs: np.ndarray, gb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The right-hand side of the dense part once ``b`` and ``s`` are eliminated, and the
        eliminated ``gs``."""
        gs1 = gs - self.c.T @ (self.dinv * gb) if len(gs) else gs
        gx1 = gx - self.bb.T @ (self.dinv * gb)
        if len(gs):
            gx1 = gx1 - self.bs1.T @ (self.tinv @ gs1)
        return gx1, gs1

    def back(self, x: np.ndarray, gs1: np.ndarray, gb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(s, b)`` given the dense part ``x`` of the solution."""
        s = self.tinv @ (gs1 - self.bs1 @ x) if len(gs1) else gs1
        b = self.dinv * (gb - self.bb @ x - (self.c @ s if len(s) else 0.0))
        return s, b

    def solve(self, gx, gs, gb, g_solve) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The full solution ``(x, s, b)``; ``g_solve(G, r)`` solves the dense part (None when
        G is singular)."""
        gx1, gs1 = self.reduce(gx, gs, gb)
        x = g_solve(self.g, gx1)
        if x is None:
            return None
        s, b = self.back(x, gs1, gb)
        return x, s, b


def _symmetric_inverse(t: np.ndarray) -> tuple[np.ndarray, bool]:
    """The inverse of the symmetric ``t`` (by its Cholesky factor, equilibrated), or its
    pseudo-inverse (eigenvalues below 1e-10 of the largest left out) when the effects are
    nested: a level of one effect the sum of levels of another (a market served by lenders found
    nowhere else). The group's estimate stays identified; the nested levels' own effects are not."""
    t = (t + t.T) / 2
    scale = 1 / np.sqrt(np.maximum(np.diag(t), 1e-300))
    te = t * scale[:, None] * scale[None, :]
    try:
        factor = linalg.cho_factor(te)
        if np.min(np.abs(np.diag(factor[0]))) ** 2 > 1e-10:
            inv = linalg.cho_solve(factor, np.eye(len(te)))
            return inv * scale[:, None] * scale[None, :], False
    except linalg.LinAlgError:
        pass
    eig, vec = np.linalg.eigh(te)
    keep = eig > 1e-10 * eig[-1]
    inv = (vec[:, keep] / eig[keep]) @ vec[:, keep].T
    return inv * scale[:, None] * scale[None, :], bool((~keep).any())


def cluster_variance(u_sum_by_cluster: np.ndarray, n: int, k: int) -> float:
    """Σ_g (Σ_{i∈g} uᵢ)² with the small-sample factor G/(G − 1)·(n − 1)/(n − k) (CR1: Cameron &
    Miller 2015, "A practitioner's guide to cluster-robust inference", J. Human Resources 50(2),
    Sec. IIC; statsmodels' ``cov_type="cluster"`` default)."""
    g = len(u_sum_by_cluster)
    if g < 2 or n <= k:
        return float("nan")
    return float(u_sum_by_cluster @ u_sum_by_cluster) * g / (g - 1) * (n - 1) / (n - k)
