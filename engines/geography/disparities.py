"""Per-lender denial disparities against peers (docs/fair-lending.md, "Geography and peers": per-lender
odds ratios adjusted across lenders with a minimum count per cell).

For a lender l, an attribute and each market m where l operates: the odds ratio of denial,
protected against reference, among l's applications there, OR_lm, and the same statistic of its
volume-matched peers' applications pooled, OR_peers,m (their four cells summed). The tested
quantity is their ratio on the log scale, Δ_lm = log OR_lm − log OR_peers,m (Woolf variances
summed: the two samples are disjoint), combined over the lender's markets with inverse-variance
weights, Δ_l = Σ w Δ / Σ w, se = (Σ w)^(-1/2) (:mod:`engines.geography.peers`). A market
counts when each of the lender's four cells and each of its peers' holds ``min_cell``
applications. exp(Δ_l) > 1: the protected group's odds of denial, relative to the reference's,
are higher at this lender than at its peers. p adjusted across lenders per attribute.

A raw comparison: no underwriting controls (the controlled comparison is the regression
engine's, which absorbs lender and market); the peers' cells are pooled across peer lenders,
so a peer mix of high- and low-denial lenders is one crude odds ratio.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from aequum.engines.geography.peers import log_odds_ratio, normal_p, peer_sums
from aequum.engines.outcome.stats import adjust_p_values, z_value

DISPARITIES = pa.schema([
    ("attribute", pa.string()), ("lender", pa.string()), ("markets", pa.int64()),
    ("n_protected", pa.int64()), ("n_reference", pa.int64()),
    ("denial_rate_protected", pa.float64()), ("denial_rate_reference", pa.float64()),
    ("peer_denial_rate_protected", pa.float64()), ("peer_denial_rate_reference", pa.float64()),
    ("odds_ratio", pa.float64()), ("peer_odds_ratio", pa.float64()), ("ratio", pa.float64()),
    ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("confidence", pa.float64()),
    ("z", pa.float64()), ("p_value", pa.float64()), ("p_adjusted", pa.float64()),
    ("correction", pa.string()), ("significant", pa.bool_()), ("flagged", pa.bool_()), ("note", pa.string()),
])


def disparities(state, params) -> pa.Table:
    """The geography_disparities table: one row per attribute × lender (module docstring)."""
    parts = [_attribute(state, params, a) for a in state.attributes]
    return pa.concat_tables(parts) if parts else DISPARITIES.empty_table()


def _cells(state, g: np.ndarray) -> np.ndarray:
    """Per unit: [n protected, denied protected, n reference, denied reference]."""
    u, k = state.unit, len(state.unit_lender)
    denied = ~state.approved
    return np.column_stack([np.bincount(u[g == 1], minlength=k), np.bincount(u[(g == 1) & denied], minlength=k),
                            np.bincount(u[g == 0], minlength=k), np.bincount(u[(g == 0) & denied], minlength=k)]
                           ).astype(np.float64)


def _attribute(state, params, attribute: str) -> pa.Table:
    own = _cells(state, state.groups[attribute])
    peer = peer_sums(own, state.order, state.start, state.stop)
    m = params.min_cell
    eligible = ((np.column_stack([own[:, 1], own[:, 0] - own[:, 1], own[:, 3], own[:, 2] - own[:, 3]]) >= m).all(1)
                & (np.column_stack([peer[:, 1], peer[:, 0] - peer[:, 1], peer[:, 3], peer[:, 2] - peer[:, 3]]) >= m).all(1)
                & (state.peers > 0))
    lor, var = log_odds_ratio(own[:, 1], own[:, 0], own[:, 3], own[:, 2])
    plor, pvar = log_odds_ratio(peer[:, 1], peer[:, 0], peer[:, 3], peer[:, 2])
    w = np.where(eligible, 1.0 / (var + pvar), 0.0)
    delta = np.where(eligible, lor - plor, 0.0)
    lenders = len(state.lender_levels)
    ul = state.unit_lender
    present = np.bincount(ul, minlength=lenders) > 0

    def per_lender(v, where=None):
        return np.bincount(ul, weights=v if where is None else np.where(where, v, 0.0), minlength=lenders)

    sum_w = per_lender(w)
    markets = per_lender(eligible.astype(float)).astype(np.int64)
    tested = sum_w > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = per_lender(w * delta) / sum_w
        se = 1.0 / np.sqrt(sum_w)
        z = np.where(tested, mean / se, np.nan)
        all_cells = np.column_stack([per_lender(own[:, j]) for j in range(4)])
        used = np.column_stack([per_lender(own[:, j], eligible) for j in range(4)])
        peer_used = np.column_stack([per_lender(peer[:, j], eligible) for j in range(4)])
        odds = np.exp(log_odds_ratio(used[:, 1], used[:, 0], used[:, 3], used[:, 2])[0])
        peer_odds = np.exp(log_odds_ratio(peer_used[:, 1], peer_used[:, 0], peer_used[:, 3], peer_used[:, 2])[0])
        zc = z_value(params.confidence)
        ratio, low, high = np.exp(mean), np.exp(mean - zc * se), np.exp(mean + zc * se)
        rate = all_cells[:, [1, 3]] / all_cells[:, [0, 2]]
        peer_rate = peer_used[:, [1, 3]] / peer_used[:, [0, 2]]
    p = np.where(tested, normal_p(z), np.nan)
    adjusted = adjust_p_values(np.where(present, p, np.nan), params.correction)
    significant = tested & (np.nan_to_num(adjusted, nan=1.0) < 1 - params.confidence)
    flagged = significant & (mean > 0)
    any_peers = per_lender((state.peers > 0).astype(float)) > 0
    notes = np.select([~any_peers, ~tested],
                      ["no peers in any of its markets (alone in them, or no other lender of comparable "
                       "volume): not tested",
                       f"no market where it and its peers each hold at least {m} applications in every cell "
                       "(protected / reference × denied / approved): not tested"], "")
    keep = np.flatnonzero(present)

    def col(v, kind=pa.float64()):
        v = np.asarray(v)[keep]
        return pa.array(v, kind, mask=~np.isfinite(v.astype(float)) if kind == pa.float64() else None)

    n = len(keep)
    return pa.table({
        "attribute": pa.array([attribute] * n, pa.string()),
        "lender": pa.array(state.lender_levels, pa.string()).take(pa.array(keep)),
        "markets": col(markets, pa.int64()), "n_protected": col(all_cells[:, 0].astype(np.int64), pa.int64()),
        "n_reference": col(all_cells[:, 2].astype(np.int64), pa.int64()),
        "denial_rate_protected": col(rate[:, 0]), "denial_rate_reference": col(rate[:, 1]),
        "peer_denial_rate_protected": col(np.where(tested, peer_rate[:, 0], np.nan)),
        "peer_denial_rate_reference": col(np.where(tested, peer_rate[:, 1], np.nan)),
        "odds_ratio": col(np.where(tested, odds, np.nan)), "peer_odds_ratio": col(np.where(tested, peer_odds, np.nan)),
        "ratio": col(np.where(tested, ratio, np.nan)), "ci_low": col(np.where(tested, low, np.nan)),
        "ci_high": col(np.where(tested, high, np.nan)),
        "confidence": pa.array([params.confidence] * n, pa.float64()),
        "z": col(z), "p_value": col(p), "p_adjusted": col(adjusted),
        "correction": pa.array([params.correction if t else None for t in tested[keep]], pa.string()),
        "significant": pa.array(significant[keep], pa.bool_(), mask=~tested[keep]),
        "flagged": pa.array(flagged[keep], pa.bool_()),
        "note": pa.array(notes[keep], pa.string(), mask=notes[keep] == ""),
    }, schema=DISPARITIES)
