"""FGCE's fairness measures (Fragkathoulas et al., seed 001, §IV; NOTES "FGCE").

* coverage(X, S_{k,d}): share of factuals with a chosen counterfactual reachable at cost ≤ d,
  reported over all factuals and over the coverable ones (some reachable candidate at all).
* kAUC(k) = ∫ coverage(X, S_{k,d}) dd over the cost grid, dAUC(d) = ∫ coverage dk over
  k = k_min..k_max, cAUC(c) = ∫ cost(X, S_{k,c}) dk; each with its saturation point (the
  smallest d / k from which the curve no longer changes) and the curve's extreme value.
  kAUC and dAUC are normalised by the area of full coverage over the same axis range (so 1 =
  full coverage everywhere); cAUC by the smallest cAUC among the compared groups (the
  "optimal" of the paper's appendix), done where all groups are known.
* ACF(X, S, A) = 1/|X| Σ_x [x_A ≠ x'_A] with x' the cheapest chosen counterfactual of x.
"""
from __future__ import annotations

import numpy as np


def trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    y, x = np.asarray(y, np.float64), np.asarray(x, np.float64)
    if len(x) < 2:
        return 0.0
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2)


def saturation(values: np.ndarray, axis_values: np.ndarray, best: str = "max") -> tuple[float, float]:
    """(saturation point, extreme value): the first axis value from which the curve stays at
    its extreme (max coverage, or min cost)."""
    v = np.asarray(values, np.float64)
    finite = np.isfinite(v)
    if not finite.any():
        return float("nan"), float("nan")
    ext = np.nanmax(v[finite]) if best == "max" else np.nanmin(v[finite])
    at = np.isclose(v, ext, rtol=0, atol=1e-12)
    # from the last position that is off the extreme, the curve is saturated
    off = np.flatnonzero(~at)
    start = 0 if len(off) == 0 else off[-1] + 1
    start = min(start, len(v) - 1)
    return float(axis_values[start]), float(ext)


def auc_rows(grid_cov: np.ndarray, ks: np.ndarray, ds: np.ndarray) -> list[dict]:
    """kAUC per k and dAUC per d from the coverage grid ``grid_cov[k_index, d_index]``
    (shares in [0, 1])."""
    rows = []
    d_span = ds[-1] - ds[0]
    k_span = ks[-1] - ks[0]
    for a, k in enumerate(ks):
        auc = trapezoid(grid_cov[a], ds)
        sp, mx = saturation(grid_cov[a], ds)
        rows.append({"measure": "kAUC", "at": float(k), "auc": auc,
                     "auc_normalised": auc / d_span if d_span > 0 else None,
                     "saturation_point": sp, "extreme": mx})
    for b, d in enumerate(ds):
        auc = trapezoid(grid_cov[:, b], ks)
        sp, mx = saturation(grid_cov[:, b], ks)
        rows.append({"measure": "dAUC", "at": float(d), "auc": auc,
                     "auc_normalised": auc / k_span if k_span > 0 else None,
                     "saturation_point": sp, "extreme": mx})
    return rows


def cauc_rows(cost: np.ndarray, ks: np.ndarray, levels: list[float]) -> list[dict]:
    """cAUC per coverage level from ``cost[level_index, k_index]`` (NaN where infeasible: the
    integral runs over the k at which the level is reachable)."""
    rows = []
    for a, c in enumerate(levels):
        v = cost[a]
        ok = np.isfinite(v)
        auc = trapezoid(v[ok], ks[ok]) if ok.sum() >= 2 else (0.0 if ok.any() else None)
        sp, mn = saturation(np.where(ok, v, np.inf), ks, best="min") if ok.any() else (None, None)
        rows.append({"measure": "cAUC", "at": float(c), "auc": auc, "auc_normalised": None,
                     "saturation_point": sp, "extreme": mn})
    return rows


def acf(X_raw: np.ndarray, factual_rows: np.ndarray, cf_rows: np.ndarray, n_factuals: int) -> np.ndarray:
    """Per original feature, ACF = (1/|X|) Σ over assigned factuals of [x_A ≠ x'_A]."""
    if n_factuals == 0:
        return np.full(X_raw.shape[1], np.nan)
    if len(factual_rows) == 0:
        return np.zeros(X_raw.shape[1])
    changed = X_raw[factual_rows] != X_raw[cf_rows]
    return changed.sum(axis=0) / n_factuals


def rules(X_raw: np.ndarray, factual_rows: np.ndarray, cf_row: int, names: list[str], kinds: list[str],
          levels: list, max_terms: int = 6) -> str:
    """The recourse rule of one chosen counterfactual: which attributes change how, over the
    factuals it covers (e.g. ``studytime: increase (80%); Mjob: at_home -> teacher (40%)``)."""
    if len(factual_rows) == 0:
        return ""
    cf = X_raw[cf_row]
    F = X_raw[factual_rows]
    terms = []
    for j, name in enumerate(names):
        moved = F[:, j] != cf[j]
        share = moved.mean()
        if share == 0:
            continue
        if kinds[j] == "categorical":
            to = levels[j][int(cf[j])]
            src = F[moved, j].astype(np.int64)
            common = levels[j][int(np.bincount(src).argmax())]
            desc = f"{name}: {common} -> {to}"
        else:
            up = (F[moved, j] < cf[j]).mean()
            if kinds[j] == "ordinal":
                desc = f"{name}: -> {levels[j][int(cf[j])]}"
            else:
                desc = f"{name}: -> {cf[j]:g}"
            desc += " (increase)" if up == 1 else " (decrease)" if up == 0 else ""
        terms.append((share, f"{desc} [{share:.0%}]"))
    terms.sort(key=lambda t: -t[0])
    return "; ".join(t for _, t in terms[:max_terms])
