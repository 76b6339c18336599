"""Per-lender and per-market group gaps of the adjusted outcome, from one pass of sufficient
statistics (counts, sums and sums of squares by lender × stratum × group: ``np.bincount``).

Notation: a *stratum* s is a market × product (loan type) cell; a *cell* c is one lender's
records in one stratum; r is the adjusted outcome of :mod:`engines.lenders.fit`; per cell and
group g ∈ {1 protected, 0 reference}: n_cg records, mean r̄_cg.

* The cell's gap ĝ_c = r̄_c1 − r̄_c0 and its weight w_c = n_c1 n_c0 / (n_c1 + n_c0) (0 unless both
  groups are present). Σ_c w_c ĝ_c / Σ_c w_c over a lender's cells is exactly the OLS
  coefficient of the group in ``r ~ group + stratum`` over the lender's records (the
  within-stratum estimator is the weighted mean of the strata's differences with weights
  n p (1 − p) = w_c: Angrist & Pischke 2009, *Mostly Harmless Econometrics*, Sec. 3.3.1).
* The peers' benchmark of cell c, leaving its lender out: b_c = Σ_{c'∈s, c'≠c} w_c' ĝ_c' /
  Σ_{c'∈s, c'≠c} w_c' — the gap the stratum's *other* lenders show within their own books
  (the OLS coefficient of ``r ~ group + lender`` over the stratum's other lenders' records).
  Leaving the lender out keeps it from setting its own benchmark. A peer's own excess would
  still move its neighbours' benchmarks by its weight's share (a dominant discriminating lender
  makes its neighbours look good): the engine computes the benchmarks again without the
  lenders flagged (``excluded``) until the flagged set no longer changes
  (:func:`engines.lenders.engine.lender_family`).
* The lender's excess θ_L = Σ_{c∈L} w_c (ĝ_c − b_c) / Σ_{c∈L} w_c over its cells with peers; its
  own gap and the benchmark are reported beside it (``lender_gap``, ``peer_benchmark``).
  A group gap of an unrecorded input (the credit score the public LAR lacks) that is the same
  at every lender of a stratum cancels in ĝ_c − b_c; one the lender's applicants alone show
  does not.
* Variances, heteroskedasticity-robust, given β̂ (the pooled fit's β has the sampling error of
  millions of rows; a lender's of its hundreds): Var ĝ_c = σ²_{L1}/n_c1 + σ²_{L0}/n_c0 with
  σ²_{Lg} the lender's within-cell variance of r in group g pooled over its cells (the
  difference-of-means variance, HC2 of the saturated model: MacKinnon & White 1985; pooled
  over the lender's strata so a stratum of two records does not give a variance of zero; the
  family's pooled within-cell variance where the lender has no degrees of freedom);
  Var b_c = Σ_{c'≠c} w_c'² Var ĝ_c' / (Σ_{c'≠c} w_c')²; Var θ_L = Σ_c w_c² (Var ĝ_c + Var b_c) /
  (Σ_c w_c)², the lender's records and its peers' being independent.
* A market's gap θ_M = Σ_{c∈M} w_c ĝ_c / Σ_{c∈M} w_c (within its lenders and products: the OLS
  coefficient of ``r ~ group + lender × product``), Var = Σ w_c² Var ĝ_c / (Σ w_c)²; its
  benchmark the same over every other market.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Layout:
    """The cells of the records: per record its cell (−1: outside any market, or no lender), per
    cell its lender, stratum and market codes."""

    cell: np.ndarray
    cell_lender: np.ndarray
    cell_stratum: np.ndarray
    cell_market: np.ndarray
    n_lenders: int
    n_strata: int
    n_markets: int


def layout(lender: np.ndarray, market: np.ndarray, products: list[np.ndarray], in_market: np.ndarray) -> Layout:
    """Cells of ``lender`` × (``market`` × ``products``) over the records ``in_market`` (codes ≥ 0;
    a null product is a level of its own)."""
    ok = in_market & (lender >= 0) & (market >= 0)
    rows = np.flatnonzero(ok)
    del ok
    stratum = market[rows].astype(np.int64)  # over the records in a market alone
    for p in products:
        radix = max(int(p.max(initial=-1)), -1) + 2  # the codes + 1 (a null 0) of every record
        p = p[rows].astype(np.int64)
        stratum = stratum * radix + np.where(p >= 0, p, -1) + 1
    strata, s_inv = ranks(stratum)
    del stratum
    s_market = np.zeros(len(strata), np.int64)
    s_market[s_inv] = market[rows]
    cells, c_inv = ranks(lender[rows].astype(np.int64) * len(strata) + s_inv)
    del s_inv
    cell = np.full(len(lender), -1, np.int64)
    cell[rows] = c_inv
    lenders, markets = int(lender.max(initial=-1)) + 1, int(market.max(initial=-1)) + 1
    return Layout(cell, cells // len(strata), cells % len(strata), s_market[cells % len(strata)],
                  lenders, len(strata), markets)


def ranks(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of non-negative integer keys: their distinct
    values in order and each key's rank among them, by marking the values present when they
    span no more than the keys' number (the memory of two arrays of the keys' length, where
    ``np.unique`` sorts a copy and keeps its order and inverse: at 10M HMDA records the
    layout's two of them peaked 0.5 GB above the records), else by ``np.unique``."""
    top = int(keys.max(initial=-1)) + 1
    if top > max(len(keys), 1 << 16):
        values, inverse = np.unique(keys, return_inverse=True)
        return values, inverse.reshape(-1)
    present = np.zeros(top, bool)
    present[keys] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present).astype(keys.dtype, copy=False), rank[keys]


@dataclass
class Sums:
    """Per cell and group (index 2c + g): records, Σr, Σr², Σy, Σy²."""

    n: np.ndarray
    s: np.ndarray
    q: np.ndarray
    y: np.ndarray
    yq: np.ndarray


def sums(lay: Layout, r: np.ndarray, y: np.ndarray, group: np.ndarray, rows: np.ndarray) -> Sums:
    """The cells' sufficient statistics over ``rows`` (r not NaN, group 0 or 1, in a cell)."""
    rows = rows[(lay.cell[rows] >= 0) & ((group[rows] == 0) | (group[rows] == 1)) & ~np.isnan(r[rows])]
    idx = lay.cell[rows] * 2 + group[rows].astype(np.int64)
    m = 2 * len(lay.cell_lender)
    rv, yv = r[rows], y[rows]
    return Sums(np.bincount(idx, minlength=m).astype(np.float64), np.bincount(idx, rv, m),
                np.bincount(idx, rv * rv, m), np.bincount(idx, yv, m), np.bincount(idx, yv * yv, m))


@dataclass
class Gaps:
    """Per-unit results as arrays (lenders or markets), ready for the table."""

    n1: np.ndarray
    n0: np.ndarray
    y_sum: np.ndarray
    y_constant: np.ndarray     # the compared records' outcome takes one value
    gap: np.ndarray            # own gap (lenders) / the market's gap
    benchmark: np.ndarray
    estimate: np.ndarray
    se: np.ndarray
    dof: np.ndarray
    cells: np.ndarray          # strata compared
    units: np.ndarray          # distinct lenders compared (markets) / 1 (lenders)


def cell_gaps(lay: Layout, st: Sums) -> dict:
    """Per cell: the gap ĝ_c, its weight w_c and variance v_c (module docstring)."""
    n1, n0 = st.n[1::2], st.n[0::2]
    s1, s0, q1, q0 = st.s[1::2], st.s[0::2], st.q[1::2], st.q[0::2]
    with np.errstate(invalid="ignore", divide="ignore"):
        m1, m0 = np.where(n1 > 0, s1 / n1, 0.0), np.where(n0 > 0, s0 / n0, 0.0)
        ss1, ss0 = np.maximum(q1 - n1 * m1 * m1, 0.0), np.maximum(q0 - n0 * m0 * m0, 0.0)
        both = (n1 > 0) & (n0 > 0)
        w = np.where(both, n1 * n0 / np.where(both, n1 + n0, 1.0), 0.0)
        L = lay.n_lenders
        var = []
        for n, ss in ((n1, ss1), (n0, ss0)):
            used = both & (n > 0)
            nn = np.bincount(lay.cell_lender, np.where(used, n, 0.0), L)
            k = np.bincount(lay.cell_lender, used.astype(np.float64), L)
            sl = np.bincount(lay.cell_lender, np.where(used, ss, 0.0), L)
            dof = nn - k
            overall = sl.sum() / dof.sum() if dof.sum() > 0 else 0.0
            var.append(np.where(dof > 0, sl / np.where(dof > 0, dof, 1.0), overall))
        v = np.where(both, var[0][lay.cell_lender] / np.where(n1 > 0, n1, 1.0)
                     + var[1][lay.cell_lender] / np.where(n0 > 0, n0, 1.0), 0.0)
    return {"g": np.where(both, m1 - m0, 0.0), "w": w, "v": v, "n1": n1, "n0": n0,
            "y": st.y[1::2] + st.y[0::2], "yq": st.yq[1::2] + st.yq[0::2], "dof": np.where(both, n1 + n0 - 2, 0.0)}


def lender_gaps(lay: Layout, c: dict, excluded: np.ndarray | None = None) -> Gaps:
    """Each lender's excess over its peers (leave-one-out benchmark per stratum); the cells of the
    ``excluded`` lenders (per lender: True) count in nobody's benchmark."""
    S, L = lay.n_strata, lay.n_lenders
    w, g, v = c["w"], c["g"], c["v"]
    active = w > 0
    inc = active if excluded is None else active & ~excluded[lay.cell_lender]
    wi = np.where(inc, w, 0.0)
    ws = np.bincount(lay.cell_stratum, wi, S)
    gs = np.bincount(lay.cell_stratum, wi * g, S)
    vs = np.bincount(lay.cell_stratum, wi * wi * v, S)
    ks = np.bincount(lay.cell_stratum, inc.astype(np.float64), S)
    s = lay.cell_stratum
    peers = active & (ks[s] - inc >= 1)
    wp = np.where(peers, ws[s] - wi, 1.0)
    b = np.where(peers, (gs[s] - wi * g) / wp, 0.0)
    vb = np.where(peers, np.maximum(vs[s] - wi * wi * v, 0.0) / (wp * wp), 0.0)
    wu = np.where(peers, w, 0.0)
    by = lay.cell_lender
    W = np.bincount(by, wu, L)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.bincount(by, wu * g, L) / W
        bench = np.bincount(by, wu * b, L) / W
        var = np.bincount(by, wu * wu * (v + vb), L) / (W * W)
    return _gaps(c, peers, by, L, gap, bench, gap - bench, np.sqrt(var), np.ones(L))


def market_gaps(lay: Layout, c: dict) -> Gaps:
    """Each market's gap within its lenders and products; its benchmark: every other market's."""
    M = lay.n_markets
    w, g, v = c["w"], c["g"], c["v"]
    active = w > 0
    by = lay.cell_market
    W = np.bincount(by, w, M)
    G = np.bincount(by, w * g, M)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = G / W
        var = np.bincount(by, w * w * v, M) / (W * W)
        bench = (G.sum() - G) / (W.sum() - W)
    pairs = np.unique(by[active] * (lay.n_lenders + 1) + lay.cell_lender[active])
    lenders = np.bincount(pairs // (lay.n_lenders + 1), minlength=M).astype(np.float64)
    return _gaps(c, active, by, M, gap, bench, gap, np.sqrt(var), lenders)


def _gaps(c: dict, used: np.ndarray, by: np.ndarray, k: int, gap, bench, estimate, se, units) -> Gaps:
    u = used.astype(np.float64)
    n1 = np.bincount(by, c["n1"] * u, k)
    n0 = np.bincount(by, c["n0"] * u, k)
    y_sum = np.bincount(by, c["y"] * u, k)
    yq = np.bincount(by, c["yq"] * u, k)
    n = np.maximum(n1 + n0, 1.0)
    y_constant = yq - y_sum * y_sum / n <= 1e-12 * np.maximum(yq, 1.0)  # one outcome value
    cells = np.bincount(by, u, k)
    dof = np.bincount(by, c["dof"] * u, k)
    return Gaps(n1, n0, y_sum, y_constant, gap, bench, estimate, se, dof, cells, units)
