"""The regression's passes over cells: the design's categorical dummies and fixed effects never
expanded into dense columns, their cross products formed from sums over cells of rows.

A row of the design ``Z = [d, numeric controls, dummies of the categorical controls]`` (with
the fixed effects ``F_s``, ``F_b`` of ``engines.regression.absorb`` beside it) is dense in its
q numeric columns (d, the numeric controls: about 5) and sparse in the rest: one 1 a
categorical control, one level a fixed effect. The rows are ordered by their *cell* — the
levels of every fixed effect, then of every categorical control (``engines.regression.design``
sorts the kept rows so) — within which every sparse column is constant. Then, for any row
weights ``w`` (1 for OLS, ``p(1 − p)`` at a Newton step of the logit), with ``Σ_c`` the sums
over a cell's rows (``np.add.reduceat`` over the runs of rows):

    Z_d'WZ_d                       dense, q × q, over the rows (the only n·q² term)
    Z_k'WZ_d = s_k (Σ_c∋k Σ_c w z_d − m_k Σ w z_d)          (k a dummy, m its mean, s its scale)
    Z_k'WZ_l = s_k s_l (Σ_c∋k,l Σ_c w − m_l Σ_c∋k Σ_c w − m_k Σ_c∋l Σ_c w + m_k m_l Σ w)
    F'WZ     = the same sums by the cells' fixed-effect levels (a cell is in one level of each)

(the centring of a column ``(x − m)·s`` applied to the sums of the uncentred 0/1 dummy, which
loses nothing for a 0/1 column; the numeric columns are centred row by row, as before). This is
the block algebra of the partitioned normal equations (Greene, *Econometric Analysis*, 8th ed.,
A.5.3) with the dummy × dummy blocks diagonal within a control and ``bincount`` sums between:
a pass costs O(n·q² + cells·categoricals²) instead of O(n·p²) with p ≈ 56 at HMDA's design,
and gives the same matrices (to rounding) as the dense rows did, so every coefficient and
standard error the models report is computed as before from them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from aequum.engines.regression.absorb import Effects, Normal, run_sum


@dataclass
class Layout:
    """The cells of a design's kept rows (``starts``: the first row of each; ``counts``), the
    dummies' columns of each cell (``m``: cells × L indicator, ``columns``: their positions in
    the design), the dense columns' positions, and the fixed effects at the cells' level."""

    starts: np.ndarray
    counts: np.ndarray
    dense: np.ndarray          # positions of d and the numeric controls in the design's columns
    columns: np.ndarray        # positions of the dummies (L)
    m: sp.csr_matrix           # cells × L, a 1 at each cell's dummies
    effects: Effects           # the fixed effects, one code a cell
    nz_cell: np.ndarray        # the cell and dummy of each 1 of ``m``
    nz_col: np.ndarray
    pair_cell: np.ndarray      # the cell and k·L + l of each pair of dummies k < l of one cell
    pair_key: np.ndarray
    fb_key: np.ndarray         # level·L + dummy of each 1 of ``m`` (the absorbed effect's level)
    fs_keys: list              # (positions among the 1s, column·L + dummy) for each other effect


def layout(des) -> Layout:
    """The cells of ``des`` (:class:`engines.regression.design.Design`, its rows in cell order),
    computed once and kept on it."""
    if getattr(des, "_layout", None) is not None:
        return des._layout
    n = des.n
    starts = des.cell_starts if des.cell_starts is not None else np.zeros(1 if n else 0, np.int64)
    counts = np.diff(np.append(starts, n))
    g = len(starts)
    dense = [0]
    columns, rows, cols = [], [], []
    for b in des.blocks:
        if b.levels is None:
            dense.append(b.start)
            continue
        lookup = np.full(int(b.values.max(initial=0)) + 1, -1, np.int64)
        lookup[b.levels] = np.arange(len(b.levels))
        col = lookup[b.values[starts]]
        hit = np.flatnonzero(col >= 0)
        rows.append(hit)
        cols.append(col[hit] + len(columns))
        columns.extend(range(b.start, b.stop))
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    m = sp.csr_matrix((np.ones(len(r)), (r, c)), shape=(g, len(columns)))
    e = des.effects
    cell_effects = Effects(list(e.names), [code[starts] for code in e.codes], list(e.sizes), list(e.reference))
    n_cols = len(columns)
    order = np.lexsort((c, r))  # the 1s by cell
    r, c = r[order], c[order]
    per = np.bincount(r, minlength=g)
    first = np.repeat(np.cumsum(per) - per, per)  # each 1's cell's first 1
    pairs_a, pairs_b = [], []
    for shift in range(1, int(per.max(initial=0))):  # each pair once (k before l), the diagonal apart
        other = first + shift
        ok = other < first + per[r]
        pairs_a.append(np.flatnonzero(ok))
        pairs_b.append(other[ok])
    pa_ = np.concatenate(pairs_a) if pairs_a else np.zeros(0, np.int64)
    pb_ = np.concatenate(pairs_b) if pairs_b else np.zeros(0, np.int64)
    fs_keys = []
    for j in range(1, len(e.sizes)):
        col = cell_effects.small_columns(j, slice(0, g))[r]
        hit = np.flatnonzero(col >= 0)
        fs_keys.append((hit, col[hit] * n_cols + c[hit]))
    des._layout = Layout(starts, counts, np.array(dense, np.int64), np.array(columns, np.int64), m,
                         cell_effects, r, c, r[pa_], c[pa_] * n_cols + c[pb_],
                         cell_effects.codes[0][r] * n_cols + c, fs_keys)
    return des._layout


class Cells:
    """The design's columns centred at ``means`` and multiplied by ``scale`` (each of length p),
    with ``extra`` dense columns appended (the LPM's centred outcome), over the cells of
    :func:`layout`: the products with vectors and the weighted normal equations of the
    module docstring, over every kept row at once."""

    def __init__(self, des, means: np.ndarray, scale: np.ndarray, extra: np.ndarray | None = None):
        self.lay = lay = layout(des)
        self.p = len(means) + (0 if extra is None else extra.shape[1])
        self.n = des.n
        # the dense columns, a row each (column-major: every product below reads contiguous rows)
        zt = np.empty((len(lay.dense) + (0 if extra is None else extra.shape[1]), des.n))
        zt[0] = des.d
        at = 1
        for b in des.blocks:
            if b.levels is None:
                zt[at] = b.values
                at += 1
        q = len(lay.dense)
        zt[:q] -= means[lay.dense][:, None]
        zt[:q] *= scale[lay.dense][:, None]
        if extra is not None:
            zt[q:] = extra.T
        self.zt = zt
        self.dense = np.concatenate([lay.dense, np.arange(len(means), self.p)])
        self.mk, self.sk = means[lay.columns], scale[lay.columns]
        self.cat = lay.columns

    def _cells(self, v: np.ndarray) -> np.ndarray:
        """Σ_c of ``v`` (a row vector, or k × rows) a cell at a time: cells (× k)."""
        if not self.n:
            return np.zeros((0, *v.shape[:-1]))
        return np.add.reduceat(v, self.lay.starts, axis=-1).T

    def _spread(self, per_cell: np.ndarray) -> np.ndarray:
        return np.repeat(per_cell, self.lay.counts)

    def eta(self, theta: np.ndarray, fe_s: np.ndarray | None = None, fe_b: np.ndarray | None = None) -> np.ndarray:
        """``Z θ`` (+ each row's fixed-effect part ``b[level] + Σ s[level]``) over the rows."""
        out = theta[self.dense] @ self.zt
        tk = theta[self.cat] * self.sk
        cell = self.lay.m @ tk - float(self.mk @ tk)
        if fe_b is not None:
            cell = cell + self.lay.effects.eta(slice(0, len(self.lay.starts)), fe_s, fe_b)
        return out + self._spread(cell)

    def tdot(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(Z'r, F_s'r, F_b'r)``."""
        out = np.empty(self.p)
        out[self.dense] = self.zt @ r
        sr = self._cells(r)
        out[self.cat] = self.sk * (self.lay.m.T @ sr - self.mk * sr.sum())
        gs, gb = self.lay.effects.sums(slice(0, len(sr)), sr)
        return out, gs, gb

    def normal(self, w: np.ndarray | None) -> Normal:
        """The normal equations of ``[Z, F_s, F_b]`` weighted by ``w`` (None = 1), as
        :class:`~engines.regression.absorb.Normal` sums them row by row (the module docstring)."""
        lay, zt = self.lay, self.zt
        both = np.empty((zt.shape[0] + 1, self.n))
        both[0] = 1.0 if w is None else w
        wz = both[1:]
        if w is None:
            wz[:] = zt
        else:
            np.multiply(zt, w, out=wz)
        sums = self._cells(both)
        sw, swz = sums[:, 0], sums[:, 1:]
        total, tz = float(sw.sum()), swz.sum(axis=0)
        dense, cat, mk, sk = self.dense, self.cat, self.mk, self.sk
        ne = Normal(self.p, lay.effects)
        a = ne.a
        a[np.ix_(dense, dense)] = wz @ zt.T
        n_cols = len(cat)
        e = lay.effects
        dlev = run_sum(e.codes[0], e.sizes[0], sw)
        ne.bb[:, dense] = run_sum(e.codes[0], e.sizes[0], swz)
        if e.small:
            ne.bs[:, dense] = np.asarray(e._others(slice(0, len(sw))) @ swz)
        if n_cols:
            w1 = sw[lay.nz_cell]                                    # each 1's cell's Σ w
            uw1 = np.bincount(lay.nz_col, weights=w1, minlength=n_cols)
            uwz = lay.m.T @ swz
            kd = sk[:, None] * (uwz - mk[:, None] * tz[None, :])
            a[np.ix_(cat, dense)] = kd
            a[np.ix_(dense, cat)] = kd.T
            uwu = np.bincount(lay.pair_key, weights=sw[lay.pair_cell], minlength=n_cols * n_cols).reshape(n_cols, n_cols)
            uwu += uwu.T
            uwu[np.diag_indices(n_cols)] = uw1
            a[np.ix_(cat, cat)] = (sk[:, None] * sk[None, :]) * (
                uwu - uw1[:, None] * mk[None, :] - mk[:, None] * uw1[None, :] + total * np.outer(mk, mk))
            # the fixed effects' sums: Σ over each level's cells
            fbu = np.bincount(lay.fb_key, weights=w1, minlength=e.sizes[0] * n_cols).reshape(e.sizes[0], n_cols)
            ne.bb[:, cat] = sk[None, :] * (fbu - dlev[:, None] * mk[None, :])
            if e.small:
                fsu = np.zeros(e.small * n_cols)
                for hit, key in lay.fs_keys:
                    fsu += np.bincount(key, weights=w1[hit], minlength=e.small * n_cols)
                slev = np.asarray(e._others(slice(0, len(sw))) @ sw)
                ne.bs[:, cat] = sk[None, :] * (fsu.reshape(e.small, n_cols) - slev[:, None] * mk[None, :])
        if ne.weights is not None:
            ne.weights = sw
        ne.weighted, ne.total = True, total
        return ne
