"""The pooled fit of the lenders engine: the outcome's dependence on the recorded inputs, estimated
once over every application (or origination) with the market, the lender and the applicant's
groups absorbed as fixed effects, and each record's outcome net of it.

    y_i = x_iᵀβ + α_market(i) + α_lender(i) + α_cell(i) + ε_i

(``cell``: the joint groups of the protected columns — race × ethnicity × sex × tract, each
protected / reference / neither — so that β is estimated within groups and no group's
disparity leaks into the controls' coefficients.) β is the within estimator (Frisch–Waugh–Lovell;
the absorbed normal equations of ``engines.regression.absorb``: blocked sums, the effect of most
levels through its diagonal). The *adjusted outcome* of a record is

    r_i = y_i − x_iᵀβ̂,

its outcome with the recorded inputs' part removed and every fixed effect left in: two applicants
of one lender and one market are compared on r as on y once their inputs are made equal. Numeric
controls enter as values (with ``log``: natural logs, a value at or below 0 a null), categorical
and ordinal ones as dummies of their levels present but the most frequent. The design never
exists beyond a block of rows.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aequum.engines.regression.absorb import Normal, absorb_rows
from aequum.engines.regression.design import Categorical, spans


@dataclass
class Column:
    """A control's columns in the design: a numeric one's values, or a categorical's dummies."""

    name: str
    values: np.ndarray             # float64 values, or integer codes (−1: null)
    levels: np.ndarray | None      # a categorical's dummy levels (its reference left out)
    start: int = 0
    lookup: np.ndarray | None = None

    @property
    def width(self) -> int:
        return 1 if self.levels is None else len(self.levels)


@dataclass
class Adjusted:
    """The pooled fit: ``r`` (the adjusted outcome; NaN where the outcome or a control is null),
    ``beta`` by ``columns``, the rows that fitted β (``n_fit``) and a note (rows dropped)."""

    r: np.ndarray
    beta: np.ndarray
    columns: list[str]
    n_fit: int
    note: str | None


def _columns(blocks: Sequence[np.ndarray | Categorical], names: Sequence[str]) -> list[Column]:
    out = []
    for name, b in zip(names, blocks):
        if isinstance(b, Categorical):
            codes = np.asarray(b.codes)
            if np.issubdtype(codes.dtype, np.floating):
                codes = np.where(np.isnan(codes), -1, codes).astype(np.int64)
            out.append(Column(name, codes, np.arange(len(b.levels))))  # integer codes as they are: no copy
        else:
            out.append(Column(name, np.asarray(b, np.float64), None))
    return out


def _valid(columns: list[Column], y: np.ndarray, fixed: Sequence[np.ndarray]) -> np.ndarray:
    ok = ~np.isnan(y)
    for c in columns:
        ok &= (c.values >= 0) if c.levels is not None else ~np.isnan(c.values)
    for f in fixed:
        ok &= np.asarray(f) >= 0
    return ok


def _x(columns: list[Column], rows: np.ndarray, p: int) -> np.ndarray:
    """The design's columns of ``rows`` (dummies as 0/1; a reference level all zeros)."""
    x = np.zeros((len(rows), p))
    at = np.arange(len(rows))
    for c in columns:
        if c.levels is None:
            x[:, c.start] = c.values[rows]
        else:
            col = c.lookup[c.values[rows]]
            hit = col >= 0
            x[at[hit], c.start + col[hit]] = 1.0
    return x


def adjust(y: np.ndarray, blocks: Sequence[np.ndarray | Categorical], names: Sequence[str],
           fixed: Sequence[np.ndarray], fixed_names: Sequence[str], rows: np.ndarray,
           block_rows: int | None = None) -> Adjusted:
    """The adjusted outcome ``r = y − Xβ̂`` over ``rows`` (module docstring); ``fixed``: integer
    codes (−1 null) of the absorbed effects over all records."""
    columns = _columns(blocks, names)
    rows = np.asarray(rows)
    if not np.issubdtype(rows.dtype, np.integer):
        rows = rows.astype(np.int64)
    keep = rows[_valid(columns, y, fixed)[rows]]  # (4 bytes a row when the records' rows are: run_piece's)
    r = np.full(len(y), np.nan)
    # OLS: only singleton levels are dropped (they fit their record exactly and leave β as it is);
    # a level whose outcomes are all 0 or all 1 still tells β how the inputs move within it
    # the effects' codes as they are (absorb_rows gathers the kept rows as int64 itself): not an
    # int64 copy of each over every record (0.24 GB for the three at 10M records)
    fit_rows, effects, note, *_ = absorb_rows(y, keep, [np.asarray(f) for f in fixed], list(fixed_names), False)
    dropped = len(rows) - len(keep)
    notes = [f"{dropped:,} records with a null outcome, control or fixed effect left out"] if dropped else []
    if note:
        notes.append(f"{len(keep) - len(fit_rows):,} records alone in a level of a fixed effect: they leave β "
                     "as it is (their adjusted outcome is kept)")
    # dummies: every level present among the fitted rows but the most frequent
    p = 0
    for c in columns:
        if c.levels is not None:
            counts = np.bincount(c.values[fit_rows], minlength=int(c.values.max(initial=0)) + 1)
            present = np.flatnonzero(counts)
            c.levels = present[present != present[np.argmax(counts[present])]] if len(present) else present
            c.lookup = np.full(len(counts), -1, np.int64)
            c.lookup[c.levels] = np.arange(len(c.levels))
        c.start = p
        p += c.width
    labels = [c.name if c.levels is None else f"{c.name}[{lv}]" for c in columns
              for lv in ([None] if c.levels is None else c.levels)]
    beta = np.zeros(p)
    if p and len(fit_rows) > p:
        size = block_rows or max(1024, (1 << 22) // (p + 2))
        ne = Normal(p, effects)
        gx = np.zeros(p)
        gs = np.zeros(effects.small)
        gb = np.zeros(effects.sizes[0])
        for pos, _ in spans(len(fit_rows), size):
            x = _x(columns, fit_rows[pos], p)
            ne.add(x, None, pos)
            yb = y[fit_rows[pos]]  # the block's outcomes, gathered a block at a time
            gx += x.T @ yb
            s, b = effects.sums(pos, yb)
            gs += s
            gb += b
        solver = ne.solver()
        if solver is not None:
            solved = solver.solve(gx, gs, gb, _least_squares)
            if solved is not None:
                beta = solved[0]
    elif p:
        notes.append(f"{len(fit_rows):,} rows for {p} control columns: the controls are not fitted")
    size = block_rows or max(1024, (1 << 22) // (p + 2))
    for pos, _ in spans(len(keep), size):
        part = keep[pos]
        r[part] = y[part] - (_x(columns, part, p) @ beta if p else 0.0)
    return Adjusted(r, beta, labels, len(fit_rows), "; ".join(notes) or None)


def _least_squares(g: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """The minimum-norm solution of the within normal equations, equilibrated (a control constant
    within the fixed effects, or collinear with others, gets no coefficient of its own: the
    adjusted outcome differs then by a constant within the effects' levels, which every
    comparison of the engine — within a lender and a market — cancels)."""
    d = np.diag(g)
    scale = np.where(d > 1e-12 * max(d.max(initial=0.0), 1e-300), 1 / np.sqrt(np.maximum(d, 1e-300)), 0.0)
    ge = g * scale[:, None] * scale[None, :]
    z = np.linalg.lstsq(ge, rhs * scale, rcond=1e-10)[0]
    return z * scale
