"""Lender-market units, their volume-matched peers, and the disparities' test against the peers.

A *unit* is one lender in one market (the applications of lender l in MSA m). Its peers
(docs/fair-lending.md, "Geography and peers") are the other lenders of the same market whose
application volume there lies between ``low`` and ``high`` times its own (50 % to 200 %). With
the units sorted by (market, volume), each unit's peers are one contiguous run of that order
(itself included), found by binary search; any per-unit count is then summed over the peers
from a prefix sum, minus the unit's own: O(U log U) for U units, no loop over lenders.

The per-lender disparities' test:

* difference of two log odds ratios (Woolf 1955): log OR = log(a d / (b c)) with variance
  1/a + 1/b + 1/c + 1/d; the lender's and its peers' are independent (disjoint records), so
  their difference has the sum of the variances; across a lender's markets the differences are
  combined with inverse-variance weights (the fixed-effect meta-analytic mean, Woolf's test).
"""
from __future__ import annotations

import numpy as np

from aequum.engines.core.imports import load


def units(lender: np.ndarray, market: np.ndarray, n_markets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit of each record, the units' lender codes, the units' market codes): units in
    (lender, market) code order, each record's index into them."""
    key = lender.astype(np.int64) * max(n_markets, 1) + market.astype(np.int64)
    span = int(key.max(initial=-1)) + 1
    if span <= 4 * len(key):  # the keys present marked in a table of every key: np.unique's sort
        seen = np.zeros(span, bool)  # of 10M records took 0.3 GB more and most of the time
        seen[key] = True
        found = np.flatnonzero(seen)
        inverse = (np.cumsum(seen) - 1)[key]
    else:
        found, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1), found // max(n_markets, 1), found % max(n_markets, 1)


def peer_runs(market: np.ndarray, volume: np.ndarray, low: float, high: float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, start, stop): the units sorted by (market, volume); unit i's peers, itself
    included, are ``order[start[i]:stop[i]]`` (volume in [ceil(low·v), floor(high·v)])."""
    volume = volume.astype(np.int64)
    order = np.lexsort((volume, market))
    step = 2 * (int(high * volume.max()) + 2) if len(volume) else 1
    key = market[order].astype(np.int64) * step + volume[order]
    lo = np.ceil(low * volume - 1e-9).astype(np.int64)
    hi = np.floor(high * volume + 1e-9).astype(np.int64)
    start = np.searchsorted(key, market.astype(np.int64) * step + lo, side="left")
    stop = np.searchsorted(key, market.astype(np.int64) * step + hi, side="right")
    return order, start, stop


def peer_sums(counts: np.ndarray, order: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Per unit, ``counts`` (units × k, or units) summed over its peers (itself excluded)."""
    c = np.asarray(counts, np.float64)
    flat = c.ndim == 1
    c = c[:, None] if flat else c
    prefix = np.vstack([np.zeros((1, c.shape[1])), np.cumsum(c[order], axis=0)])
    out = prefix[stop] - prefix[start] - c
    return out[:, 0] if flat else out


def normal_p(z: np.ndarray) -> np.ndarray:
    """Two-sided p of standard-normal statistics (NaN stays NaN)."""
    ndtr = load("scipy.special").ndtr
    return 2.0 * ndtr(-np.abs(z))


def log_odds_ratio(d_p: np.ndarray, n_p: np.ndarray, d_r: np.ndarray, n_r: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(log odds ratio of denial, protected against reference; its Woolf variance) from the
    denied and total counts of each group; NaN where a cell is empty."""
    a, b, c, d = d_p, n_p - d_p, d_r, n_r - d_r
    ok = (a > 0) & (b > 0) & (c > 0) & (d > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        lor = np.where(ok, np.log(a) + np.log(d) - np.log(b) - np.log(c), np.nan)
        var = np.where(ok, 1 / a + 1 / b + 1 / c + 1 / d, np.nan)
    return lor, var
