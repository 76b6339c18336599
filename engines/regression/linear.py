"""The least-squares fit of an outcome on a controlled design with its fixed effects absorbed
(the within cross products of ``[Z, y]``: Frisch–Waugh–Lovell; ``engines.regression.cells``
sums them, ``engines.regression.absorb`` partials the effects out): what the linear probability
model (``engines.regression.sensitivity.controlled_lpm``) reports from, where the logit on the
same design starts, and, for several outcomes on one design (the pricing fields), one pass of
sums for them all.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from aequum.engines.regression.cells import Cells
from aequum.engines.regression.design import Design, equilibrate


@dataclass
class LinearFit:
    """The least-squares fit of ``y`` on a design's columns with its fixed effects absorbed
    (:func:`linear_fit`): what the linear probability model reports from, and where the logit on
    the same design starts."""

    centred: np.ndarray | None     # y − ȳ over the kept rows, a row of ``cells``' (None once let go, with them)
    tss: float
    cells: Cells | None            # [Z − mean, y − ȳ] over their cells (None once let go)
    normal: object                 # their normal equations and the partitioned solver
    solver: object
    gram: np.ndarray               # the within cross products of Z, of Z and y, of y
    zy: np.ndarray
    yy: float
    scale: np.ndarray
    g: np.ndarray                  # ``gram`` equilibrated
    singular: str | None
    g_inv: np.ndarray | None = None
    coef: np.ndarray | None = None
    outcome: int = -1              # y's column among ``normal``'s (p, or p + j for the j-th of several)


def outcome_row(des: Design) -> np.ndarray:
    """The design's outcome over its kept rows less its mean, ``y - ȳ``: the last row of its
    columns, or a design of another outcome's centred values, or made here."""
    if des.columns is not None:
        return des.columns[-1]
    return des.centred if des.centred is not None else des.y - des.y_sum / des.n


def outcome_cells(designs: Sequence[Design]) -> Cells:
    """The cells (``engines.regression.cells.Cells``) of the first design's dense columns and
    each design's centred outcome after them, in the designs' order: the first design's own
    array as it is when it holds them all (its one outcome, or the others in its room:
    :func:`engines.regression.design.with_outcome`), else its dense columns copied with the
    outcomes' rows appended."""
    des = designs[0]
    ones = np.ones(des.p)
    if len(designs) == 1 and des.columns is not None:  # the design's own array: its outcome centred last
        return Cells(des, des.means, ones, take="outcome")
    if des.columns is not None and [d.spare_row for d in designs[1:]] == list(range(des.spare_used)):
        return Cells(des, des.means, ones, take="outcomes")  # the others' centred in the rows after it
    return Cells(des, des.means, ones, [outcome_row(d) for d in designs])


def linear_fit(des: Design) -> LinearFit:
    """One pass over the design's rows for the cross products of ``[Z, y]`` with the fixed
    effects partialled out (``engines.regression.cells``), and the slopes of y on Z (kept on
    ``des``: the linear model and the logit of one comparison share it)."""
    if des.within is None:
        linear_fits([des])
    return des.within


def linear_fits(designs: Sequence[Design]) -> list[LinearFit]:
    """:func:`linear_fit` of several outcomes on one design (``designs``: the first's rows and
    columns, each its own outcome: :func:`engines.regression.design.with_outcome`), from one
    pass over the rows for the cross products of ``[Z, y_1 … y_m]`` (each outcome's fit reads
    its own column; Z's do not depend on the outcomes), each kept on its design."""
    des = designs[0]
    p = des.p
    cells = outcome_cells(designs)
    centred = cells.zt[len(cells.zt) - len(designs):]  # (rows of the cells' array, not copies)
    normal = cells.normal(None)
    solver = normal.solver()
    within = solver.g
    gram = within[:p, :p]
    scale, g, singular = equilibrate(gram, des.blocks, des.effects.names, np.diag(normal.a)[:p])
    g_inv = None if singular else linalg.inv(g) * scale[:, None] * scale[None, :]
    out = []
    for j, (d, c) in enumerate(zip(designs, centred)):
        col = p + j
        fit = LinearFit(c, float(c @ c), cells, normal, solver, gram, within[:p, col], within[col, col], scale, g,
                        singular, outcome=col)
        if g_inv is not None:
            fit.g_inv = g_inv
            fit.coef = g_inv @ fit.zy
        d.within = fit
        out.append(fit)
    return out
