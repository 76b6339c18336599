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

A pass is cut into up to 16 parts of whole cells of about equal work (:meth:`Cells.parts`),
whose sums the driver adds in the parts' order; ``engines.regression.passes.Executor`` runs
the parts here or on the workers of a Dask cluster (local or external), so a fit's result is
the same bits with any number of workers (data parallelism with a fixed reduction order: the
sums do not depend on where the parts ran, only on the cut).
"""
from __future__ import annotations

from dataclasses import dataclass, field

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
    fb_key: np.ndarray         # level·L + dummy of each 1 of ``m`` (the absorbed effect's level)
    fs_keys: list              # (positions among the 1s, column·L + dummy) for each other effect
    combo: np.ndarray          # each cell's combination of dummies (0 … combos − 1)
    combos: int
    combo_nz: np.ndarray       # the combination and dummy of each 1 of a combination
    combo_col: np.ndarray
    combo_pair: np.ndarray     # the combination and k·L + l of each pair of its dummies k < l
    combo_pair_key: np.ndarray
    parts: dict = field(default_factory=dict, repr=False)  # the layouts of its parts, by cells (:meth:`Cells.parts`)
    summer: sp.csr_matrix | None = None  # cells × rows, a 1 at each row's cell (:meth:`Cells._cells`), once built


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
    combo, radix = np.zeros(g, np.int64), 1.0  # each cell's dummies as one code (its combination)
    for b in des.blocks:
        if b.levels is None:
            dense.append(b.start)
            continue
        lookup = np.full(int(b.values.max(initial=0)) + 1, -1, np.int64)
        lookup[b.levels] = np.arange(len(b.levels))
        col = lookup[b.values[starts]]
        if radix * (len(b.levels) + 1) < 2.0 ** 62:
            combo, radix = combo * (len(b.levels) + 1) + (col + 1), radix * (len(b.levels) + 1)
        else:  # too many combinations for one integer: renumbered first
            combo, radix = np.unique(combo, return_inverse=True)[1].reshape(-1) * (len(b.levels) + 1) + (col + 1), \
                float(g) * (len(b.levels) + 1)
        hit = np.flatnonzero(col >= 0)
        rows.append(hit.astype(np.int32) if g < 2 ** 31 else hit)  # (4 bytes a 1, not 8: the 1s and their order)
        cols.append((col[hit] + len(columns)).astype(np.int32))
        columns.extend(range(b.start, b.stop))
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    e = des.effects
    cell_effects = Effects(list(e.names), [code[starts] for code in e.codes], list(e.sizes), list(e.reference))
    n_cols = len(columns)
    order = np.argsort(r, kind="stable")  # the 1s by cell, then column (each block's 1s come in column order)
    r, c = r[order], c[order]
    m = sp.csr_matrix((np.ones(len(r)), c, np.r_[0, np.cumsum(np.bincount(r, minlength=g))]), shape=(g, n_cols))
    fs_keys = []
    for j in range(1, len(e.sizes)):
        col = cell_effects.small_columns(j, slice(0, g))[r].astype(np.int64)
        hit = np.flatnonzero(col >= 0)
        fs_keys.append((hit, col[hit] * n_cols + c[hit]))
    small = np.int32 if max(g, (e.sizes[0] + e.small + 1) * (n_cols + 1)) < 2 ** 31 else np.int64  # half the memory
    # the combinations of dummies present (a few thousand at HMDA's design, against a cell for
    # every two rows), and the 1s and the pairs of 1s of each (of its first cell)
    present, combo = np.unique(combo, return_inverse=True) if g else (np.zeros(0, np.int64), combo)
    combo = combo.reshape(-1)
    first = np.zeros(g, bool)
    first[np.unique(combo, return_index=True)[1]] = True
    one = first[r]
    r1, c1 = r[one], c[one]
    run = np.flatnonzero(np.r_[True, r1[1:] != r1[:-1]]) if len(r1) else np.zeros(0, np.int64)
    per = np.diff(np.r_[run, len(r1)])
    end = np.repeat(run + per, per)  # each 1's cell's end among the 1s
    at = np.arange(len(r1))
    pairs_a, pairs_b = [], []
    for shift in range(1, int(per.max(initial=0))):  # each pair once (k before l), the diagonal apart
        other = at + shift
        ok = other < end
        pairs_a.append(np.flatnonzero(ok))
        pairs_b.append(other[ok])
    pa_ = np.concatenate(pairs_a) if pairs_a else np.zeros(0, np.int64)
    pb_ = np.concatenate(pairs_b) if pairs_b else np.zeros(0, np.int64)
    des._layout = Layout(starts, counts, np.array(dense, np.int64), np.array(columns, np.int64), m,
                         cell_effects, r.astype(small), c.astype(small),
                         (cell_effects.codes[0][r].astype(np.int64) * n_cols + c).astype(small),
                         [(hit.astype(small), key.astype(small)) for hit, key in fs_keys],
                         combo.astype(small), len(present), combo[r1].astype(small), c1.astype(small),
                         combo[r1[pa_]].astype(small), (c1[pa_] * n_cols + c1[pb_]).astype(small))
    return des._layout


def _sub_layout(lay: Layout, c0: int, c1: int) -> Layout:
    """The layout of the cells ``c0:c1`` alone (their rows from the first one's)."""
    i0, i1 = np.searchsorted(lay.nz_cell, [c0, c1])
    e = lay.effects
    fs_keys = []
    for hit, key in lay.fs_keys:
        k0, k1 = np.searchsorted(hit, [i0, i1])
        fs_keys.append((hit[k0:k1] - i0, key[k0:k1]))
    m = lay.m  # its rows c0:c1 on the whole one's values and columns (a slice would copy them)
    part_m = _csr(m.data[i0:i1], m.indices[i0:i1], m.indptr[c0:c1 + 1] - m.indptr[c0], (c1 - c0, m.shape[1]))
    return Layout(lay.starts[c0:c1] - lay.starts[c0], lay.counts[c0:c1], lay.dense, lay.columns, part_m,
                  Effects(list(e.names), [c[c0:c1] for c in e.codes], list(e.sizes), list(e.reference)),
                  lay.nz_cell[i0:i1] - c0, lay.nz_col[i0:i1],
                  lay.fb_key[i0:i1], fs_keys, lay.combo[c0:c1], lay.combos, lay.combo_nz, lay.combo_col,
                  lay.combo_pair, lay.combo_pair_key)


def _csr(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """A CSR matrix over the given arrays as they are: scipy's constructor copies an array that
    is a view of less than half its base (``_prune_array``), which a part's rows of the whole
    layout's arrays, or of :func:`_unit`'s, always are: 12 bytes a 1 of every part again."""
    out = sp.csr_matrix(shape, dtype=data.dtype)
    out.data, out.indices, out.indptr = data, indices, indptr.astype(indices.dtype, copy=False)
    return out


_UNIT = [np.ones(0), np.zeros(0, np.int32)]


def _unit(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` ones and the positions ``0 … n − 1`` (int32), views of arrays every part's sums by
    cell share (:meth:`Cells._cells`: each part's indicator of its rows' cells has these for its
    values and columns): 12 bytes a row of the largest part once, not of every row of every
    design."""
    if len(_UNIT[0]) < n:
        size = max(n, 2 * len(_UNIT[0]))
        _UNIT[:] = [np.ones(size), np.arange(size, dtype=np.int32 if size < 2 ** 31 else np.int64)]
    return _UNIT[0][:n], _UNIT[1][:n]


SPREAD = 1 << 16        # the cells a time whose values :meth:`Cells._spread` puts on their rows
SPARSE_CROSS = 1 << 20   # entries of the absorbed effect × the others' C from which it is sparse (absorb.Solver)
PARTS = 16               # the parts of a pass: a fixed number, so its sums do not depend on the workers
PART_ROWS = 1 << 15      # ... of at least this many rows each


class Cells:
    """The design's columns centred at ``means`` (the design's, at which its dense columns are
    centred: :attr:`~engines.regression.design.Design.dense`) and multiplied by ``scale`` (each
    of length p), with ``extra`` dense columns appended (the LPM's centred outcomes: an
    n × m array or m rows), over the cells of :func:`layout`: the products with vectors and
    the weighted normal equations of the module docstring, over every kept row at once.

    The dense columns are a row each of ``zt`` (column-major: every product below reads
    contiguous rows): a copy of the design's, scaled, unless ``take`` says whose rows they are:
    ``"outcome"``, the design's own array of its centred dense columns and outcome
    (:attr:`Design.columns`, ``scale`` 1: the linear model's, no copy); ``"outcomes"``, that
    array and the other outcomes' centred rows after it (:attr:`Design.outcomes`, the linear
    models of several outcomes on one design, ``linear.linear_fits``); ``"scaled"``, the
    design's dense columns scaled in place (the logit's when it is the design's last model:
    the design is spent, no model can be fitted on it after)."""

    def __init__(self, des, means: np.ndarray, scale: np.ndarray, extra=None, take: str | None = None):
        self.lay = lay = layout(des)
        if des.dense is None:
            raise ValueError("the design's columns were scaled in place by the model fitted last on it: design it again")
        q = len(lay.dense)
        if take == "outcome":
            zt = des.columns
        elif take == "outcomes":
            zt = des.outcomes[:len(des.columns) + des.spare_used]
        elif take == "scaled":
            zt = des.dense
            zt *= scale[lay.dense][:, None]
            des.dense = des.columns = des.outcomes = None
        else:
            rows = [] if extra is None else list(extra) if isinstance(extra, list) else list(np.asarray(extra).T)
            zt = np.empty((q + len(rows), des.n))
            np.multiply(des.dense, scale[lay.dense][:, None], out=zt[:q])
            for j, row in enumerate(rows):
                zt[q + j] = row
        self.zt = zt
        self.p = len(means) + len(zt) - q
        self.n = des.n
        self.dense = np.concatenate([lay.dense, np.arange(len(means), self.p)])
        self.mk, self.sk = means[lay.columns], scale[lay.columns]
        self.cat = lay.columns

    def _cells(self, v: np.ndarray) -> np.ndarray:
        """Σ_c of ``v`` (a row vector, or k × rows) a cell at a time: cells (× k). By the cells'
        indicator (cells × rows, sparse: each cell's rows added in their order), about 2x faster
        than ``np.add.reduceat`` over a cell for every two rows (a call of its loop a cell)."""
        if not self.n:
            return np.zeros((0, *v.shape[:-1]))
        lay = self.lay
        if lay.summer is None:
            ones, at = _unit(self.n)
            lay.summer = _csr(ones, at, np.append(lay.starts, self.n), (len(lay.starts), self.n))
        return lay.summer @ (v if v.ndim == 1 else np.ascontiguousarray(v.T))

    def _spread(self, per_cell: np.ndarray, out: np.ndarray) -> None:
        """``out`` += each cell's value on each of its rows, ``SPREAD`` cells at a time (no
        array of every row beside ``out``)."""
        starts, counts = self.lay.starts, self.lay.counts
        for c0 in range(0, len(starts), SPREAD):
            c1 = min(c0 + SPREAD, len(starts))
            r0, r1 = int(starts[c0]), int(starts[c1]) if c1 < len(starts) else self.n
            out[r0:r1] += np.repeat(per_cell[c0:c1], counts[c0:c1])

    def eta(self, theta: np.ndarray, fe_s: np.ndarray | None = None, fe_b: np.ndarray | None = None) -> np.ndarray:
        """``Z θ`` (+ each row's fixed-effect part ``b[level] + Σ s[level]``) over the rows."""
        return self.part_eta(theta, self.offsets(theta, fe_s, fe_b))

    def part_eta(self, theta: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """``Z θ`` over the rows given each cell's part (:meth:`offsets`)."""
        out = theta[self.dense] @ self.zt
        self._spread(cell, out)
        return out

    def tdot(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(Z'r, F_s'r, F_b'r)``."""
        out = np.empty(self.p)
        out[self.dense] = self.zt @ r
        sr = self._cells(r)
        out[self.cat] = self.sk * (self.lay.m.T @ sr - self.mk * sr.sum())
        gs, gb = self.lay.effects.sums(slice(0, len(sr)), sr)
        return out, gs, gb

    def parts(self) -> list["Cells"]:
        """The rows cut into up to PARTS parts of whole cells (at least PART_ROWS rows each on
        average), of about equal work: a pass's work on a part grows about as its rows plus
        its cells (the dense columns' products a row, the sums by cell a cell: on HMDA's design
        40k rows take 7.5 ms with 12k cells, 10.9 ms with 35k), so the parts are cut at equal
        shares of rows + cells. Each a :class:`Cells` of its own (``bounds``: its rows and cells)."""
        if getattr(self, "_parts", None) is None:
            starts, n = self.lay.starts, self.n
            k = max(1, min(PARTS, n // PART_ROWS))
            work = starts + np.arange(len(starts))  # rows + cells before each cell
            cuts = np.unique(np.searchsorted(work, np.arange(1, k) * ((n + len(starts)) / k)))
            cells = [0, *(int(c) for c in cuts if 0 < c < len(starts)), len(starts)]
            self._parts = []
            for c0, c1 in zip(cells[:-1], cells[1:]):
                r0, r1 = int(starts[c0]), int(starts[c1]) if c1 < len(starts) else n
                part = object.__new__(Cells)
                part.__dict__.update(self.__dict__)
                if (c0, c1) not in self.lay.parts:  # (the linear model's and the logit's cells share them)
                    self.lay.parts[c0, c1] = _sub_layout(self.lay, c0, c1)
                part.lay, part.zt, part.n, part._parts = self.lay.parts[c0, c1], self.zt[:, r0:r1], r1 - r0, None
                part._local = None
                part.bounds = (r0, r1, c0, c1)
                if part.lay.effects.small:  # the other effects' indicator, built here once (not on each worker's first pass)
                    part.lay.effects._others(slice(0, c1 - c0))
                self._parts.append(part)
        return self._parts

    def offsets(self, theta: np.ndarray, fe_s: np.ndarray | None = None, fe_b: np.ndarray | None = None) -> np.ndarray:
        """Each cell's part of ``Z θ`` (the dummies' and the fixed effects')."""
        tk = theta[self.cat] * self.sk
        cell = self.lay.m @ tk - float(self.mk @ tk)
        if fe_b is not None:
            cell = cell + self.lay.effects.eta(slice(0, len(self.lay.starts)), fe_s, fe_b)
        return cell

    def normal(self, w: np.ndarray | None) -> Normal:
        """The normal equations of ``[Z, F_s, F_b]`` weighted by ``w`` (None = 1), as
        :class:`~engines.regression.absorb.Normal` sums them row by row (the module docstring):
        the parts' sums (:meth:`parts`, :meth:`part_normal`) added in their order."""
        sums = [part.part_normal(None if w is None else w[part.bounds[0]:part.bounds[1]]) for part in self.parts()]
        return self.added(sums)

    def _levels(self) -> slice:
        """The absorbed effect's levels this part's cells are in (a run: the cells are in their
        order), the rows of its sums by level it returns."""
        codes = self.lay.effects.codes[0]
        return slice(int(codes[0]), int(codes[-1]) + 1) if len(codes) else slice(0, 0)

    def added(self, sums: list) -> Normal:
        """The normal equations of the parts' sums (:meth:`part_normal`), added in their order."""
        e = self.lay.effects
        ne = Normal(self.p, e)
        a, bs, d, c, s_ = (np.zeros_like(ne.a), np.zeros_like(ne.bs), np.zeros(e.sizes[0]),
                           np.zeros((e.sizes[0], e.small)), np.zeros((e.small,) * 2))
        bb, total = ne.bb, 0.0
        for lv, pa_, pbb, pbs, pd, pc, ps, pt in sums:
            a += pa_
            bb[lv] += pbb
            bs += pbs
            d[lv] += pd
            c[lv] += pc
            s_ += ps
            total += float(pt)
        ne.a, ne.bs = a, bs
        if c.size >= SPARSE_CROSS:  # lenders × markets: each lender in a few markets
            c = sp.csr_matrix(c)
        ne.fixed = (d, c, s_)
        ne.weighted, ne.total = True, total
        return ne

    def added_grad(self, grads: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(Z'r, F_s'r, F_b'r)`` of the parts' (:meth:`part_tdot`), added in their order."""
        out, gs, gb = np.zeros(self.p), np.zeros(self.lay.effects.small), np.zeros(self.lay.effects.sizes[0])
        for lv, x, s_, b in grads:
            out += x
            gs += s_
            gb[lv] += b
        return out, gs, gb

    def part_tdot(self, r: np.ndarray) -> tuple:
        """A part's ``(levels, Z'r, F_s'r, F_b'r of those levels)``."""
        lv = self._levels()
        out, gs, gb = self.tdot(r)
        return lv, out, gs, gb[lv]

    def part_normal(self, w: np.ndarray | None) -> tuple:
        """A part's sums: ``(levels, a, bb, bs, D, C, S, Σw)`` (:meth:`_normal`), those by the
        absorbed effect's level for the part's ``levels`` only (the others are 0), computed for
        those levels only: with 5,000 lenders absorbed and 400 markets beside them, C alone is
        5,000 × 399 a part and a pass over the whole range."""
        ne = self._normal(w)
        small = self.lay.effects.small
        c, s_ = ne.cross() if ne.per_row and small else (
            np.zeros((len(ne.bb), small)), np.zeros((small, small)))
        return self._levels(), ne.a, ne.bb, ne.bs, ne.d, c, s_, np.array(ne.total)

    def _local_effects(self) -> Effects:
        """The fixed effects with the absorbed one's codes counted from this part's first level
        (:meth:`_levels`): its sums by level are of those levels only, each the same bits."""
        if self.__dict__.get("_local") is None:
            e, lv = self.lay.effects, self._levels()
            self._local = Effects(list(e.names), [e.codes[0] - lv.start, *e.codes[1:]],
                                  [lv.stop - lv.start, *e.sizes[1:]], list(e.reference),
                                  _columns=e._columns, _blocks=e._blocks)
        return self._local

    def _normal(self, w: np.ndarray | None) -> Normal:
        """The part's normal equations, its sums by the absorbed effect's level over its own
        levels (:meth:`_local_effects`)."""
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
        e = self._local_effects()
        by_runs = lay.effects.sizes[0] > 1  # (a part of one level sums it as the whole range did)
        ne = Normal(self.p, e)
        a = ne.a
        a[np.ix_(dense, dense)] = wz @ zt.T
        n_cols = len(cat)
        dlev = run_sum(e.codes[0], e.sizes[0], sw, by_runs)
        ne.bb[:, dense] = run_sum(e.codes[0], e.sizes[0], swz, by_runs)
        if e.small:
            ne.bs[:, dense] = np.asarray(e._others(slice(0, len(sw))) @ swz)
        if n_cols:
            w1 = sw[lay.nz_cell]                                    # each 1's cell's Σ w
            # the dummies' own sums and their pairs' from the sums by combination of dummies
            # (a few thousand at HMDA's design, against a cell for every two rows)
            wc = np.bincount(lay.combo, weights=sw, minlength=lay.combos)
            uw1 = np.bincount(lay.combo_col, weights=wc[lay.combo_nz], minlength=n_cols)
            uwz = lay.m.T @ swz
            kd = sk[:, None] * (uwz - mk[:, None] * tz[None, :])
            a[np.ix_(cat, dense)] = kd
            a[np.ix_(dense, cat)] = kd.T
            uwu = np.bincount(lay.combo_pair_key, weights=wc[lay.combo_pair], minlength=n_cols * n_cols).reshape(
                n_cols, n_cols).astype(np.float64)  # (an empty bincount is of integers)
            uwu += uwu.T
            uwu[np.diag_indices(n_cols)] = uw1
            a[np.ix_(cat, cat)] = (sk[:, None] * sk[None, :]) * (
                uwu - uw1[:, None] * mk[None, :] - mk[:, None] * uw1[None, :] + total * np.outer(mk, mk))
            # the fixed effects' sums: Σ over each level's cells
            fbu = np.bincount(lay.fb_key - self._levels().start * n_cols, weights=w1,
                              minlength=e.sizes[0] * n_cols).reshape(e.sizes[0], n_cols)
            fbu = fbu.astype(np.float64, copy=False)
            ne.bb[:, cat] = sk[None, :] * (fbu - dlev[:, None] * mk[None, :])
            if e.small:
                fsu = np.zeros(e.small * n_cols)
                for hit, key in lay.fs_keys:
                    fsu += np.bincount(key, weights=w1[hit], minlength=e.small * n_cols)
                slev = np.asarray(e._others(slice(0, len(sw))) @ sw)
                ne.bs[:, cat] = sk[None, :] * (fsu.reshape(e.small, n_cols) - slev[:, None] * mk[None, :])
        if ne.per_row or by_runs:  # (D by level: one bincount, as over the whole range)
            ne.weights = sw
        ne.weighted, ne.total = True, total
        return ne
