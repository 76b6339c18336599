"""Decimal lattices of data columns: values recorded to d decimals lie on the grid 10^−d, and
their integer codes make equal differences exactly equal (:mod:`engines.core.knn`, "Ties")."""
from __future__ import annotations

import numpy as np

_MAX_DECIMALS = 9


def decimal_lattice(values: np.ndarray, max_decimals: int = _MAX_DECIMALS) -> tuple[np.ndarray, float] | None:
    """(codes, step) with values = codes · step, step = 10^−d for the smallest d ≤ ``max_decimals``
    that fits every value (data recorded to d decimals), or None (continuous values): see
    :func:`lattice_decimals` and :func:`lattice_codes`."""
    v = np.asarray(values, np.float64).ravel()
    d = lattice_decimals(v, max_decimals)
    return None if d is None else (lattice_codes(v, d, np.empty(len(v), np.int64)), 10.0 ** -d)


_BLOCK = 1 << 20
_PROBE = 4096  # values of a column checked before the whole (lattice_decimals)


def lattice_decimals(values: np.ndarray, max_decimals: int = _MAX_DECIMALS) -> int | None:
    """The smallest d ≤ ``max_decimals`` such that every value (a 1-D array, possibly strided)
    lies on the grid 10^−d, or None (continuous values, or a value that is not finite).

    d = 0 needs exact integers (below 2^53); d ≥ 1 allows the rounding of the decimal-to-binary
    conversion (a few ulps) and needs |values| · 10^d ≤ 2^40, where a value off the grid misses
    by far more than that tolerance. Checked in blocks of ``_BLOCK`` values (the temporaries of
    10M values would take ~0.5 GB), the first block off the grid ending the check of a d.
    """
    if len(values) == 0 or not all(np.isfinite(values[s:s + _BLOCK]).all() for s in range(0, len(values), _BLOCK)):
        return None
    # every value fits a d only if an evenly spaced probe of them does: a d the probe rules out
    # needs no pass over the whole column (a continuous column, e.g. a counterfactual world's,
    # was ten passes over its million values), and one the probe finds too large for the grid
    # is too large for the column too. The result is the smallest d every value fits, as before
    probe = values[::-(-len(values) // _PROBE)] if len(values) > _PROBE else None
    for d in range(0, max_decimals + 1):
        fits = _on_grid(probe, d) if probe is not None else True
        if fits:
            fits = _on_grid(values, d)
        if fits is None:
            return None
        if fits:
            return d
    return None


def lattice_codes(values: np.ndarray, d: int, out: np.ndarray) -> np.ndarray:
    """The integer codes rint(values · 10^d) of values on the grid 10^−d (:func:`lattice_decimals`),
    written into ``out`` (an integer array, or a column of one, wide enough for them) a block at
    a time. × 1.0 at d = 0: exact."""
    for s in range(0, len(values), _BLOCK):
        out[s:s + _BLOCK] = np.rint(values[s:s + _BLOCK] * 10.0 ** d)
    return out


def _on_grid(v: np.ndarray, d: int) -> bool | None:
    """Whether every value lies on the grid 10^−d (:func:`lattice_decimals`); None when some
    value is too large for the grid's test at this d (and so at every larger d)."""
    for s in range(0, len(v), _BLOCK):
        block = v[s:s + _BLOCK]
        if d == 0:
            if not (np.abs(block).max() < 2.0 ** 53 and np.array_equal(block, np.rint(block))):
                return False
            continue
        x = block * 10.0 ** d
        if np.abs(x).max() > 2.0 ** 40:
            return None
        if not np.all(np.abs(x - np.rint(x)) <= 4 * np.spacing(np.abs(x))):
            return False
    return True


def fits_int32(codes: np.ndarray) -> bool:
    """Whether integer lattice codes fit int32 (:class:`Points` keeps them so: half the memory)."""
    return codes.size == 0 or (codes.min() >= -2 ** 31 and codes.max() < 2 ** 31)
