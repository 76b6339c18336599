"""CEC scores: Δ_CEC per pair, CEC, PFR, regimes A–D, threshold sweep, feature decomposition.

Popoola & Sheppard, Definition 3: with g = IG_norm(x; b) and g̃ = IG_norm(x̃; b) (b = b_{y,a},
the factual's baseline for both), Δ_CEC = ‖g − g̃‖₂ / 2 ∈ [0, 1] (= sin(θ/2), θ the angle
between the attributions); CEC = mean Δ_CEC. PFR = P(ŷ(x) ≠ ŷ(x̃)). Regimes (Table 1):
A same prediction and same reasoning (Δ_CEC ≤ threshold), B same prediction, different
reasoning (hidden procedural bias), C different prediction, same reasoning, D both differ.
The feature-level decomposition (the paper's future work) splits ‖g − g̃‖² by feature.
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from aequum.engines.matching.cec.attributions import normalise

GROUPS = ("all", "protected", "reference")
REGIMES = np.array(["A", "B", "C", "D"])

PAIRS = pa.schema([
    ("attribute", pa.string()), ("record_id", pa.string()), ("group", pa.int8()),
    ("stratum", pa.int8()), ("counterpart_id", pa.string()), ("distance", pa.float64()),
    ("matched", pa.bool_()), ("decision", pa.int8()), ("counterpart_decision", pa.int8()),
    ("score", pa.float64()), ("counterpart_score", pa.float64()), ("baseline_score", pa.float64()),
    ("delta_cec", pa.float64()), ("regime", pa.string()), ("completeness_error", pa.float64()),
])
REGIME_SHARES = pa.schema([
    ("attribute", pa.string()), ("group", pa.string()), ("threshold", pa.float64()),
    ("pairs", pa.int64()), ("regime_a", pa.float64()), ("regime_b", pa.float64()),
    ("regime_c", pa.float64()), ("regime_d", pa.float64()),
])
FEATURES = pa.schema([
    ("attribute", pa.string()), ("group", pa.string()), ("feature", pa.string()), ("rank", pa.int32()),
    ("pairs", pa.int64()), ("attribution_protected", pa.float64()), ("attribution_reference", pa.float64()),
    ("gap", pa.float64()), ("abs_gap", pa.float64()), ("share_of_delta", pa.float64()),
    ("direction", pa.string()),
])
SUMMARY = pa.schema([
    ("attribute", pa.string()), ("group", pa.string()), ("partition_by", pa.string()),
    ("records", pa.int64()), ("matched", pa.int64()), ("coverage", pa.float64()),
    ("distance_mean", pa.float64()), ("distance_median", pa.float64()), ("distance_p90", pa.float64()),
    ("distance_max", pa.float64()), ("cec", pa.float64()), ("pfr", pa.float64()),
    ("threshold", pa.float64()), ("regime_a", pa.float64()), ("regime_b", pa.float64()),
    ("regime_c", pa.float64()), ("regime_d", pa.float64()),
    ("completeness_max_error", pa.float64()), ("completeness_mean_error", pa.float64()),
    ("integration", pa.string()), ("steps", pa.int32()), ("note", pa.string()),
    ("population", pa.int64()),
])


def delta_cec(ig: np.ndarray, ig_counterpart: np.ndarray) -> np.ndarray:
    """Δ_CEC = ‖IG_norm(x; b) − IG_norm(x̃; b)‖₂ / 2 per row (Definition 3)."""
    return np.linalg.norm(normalise(ig) - normalise(ig_counterpart), axis=1) / 2


def regimes(same_prediction: np.ndarray, delta: np.ndarray, threshold: float) -> np.ndarray:
    """Regime letter per pair (Table 1): A/B same prediction, C/D different; A/C same reasoning."""
    same_reasoning = delta <= threshold
    return REGIMES[2 * (~same_prediction).astype(int) + (~same_reasoning).astype(int)]


def regime_shares(same_prediction: np.ndarray, delta: np.ndarray, threshold: float) -> dict[str, float]:
    """Shares of regimes A–D among the pairs (NaN without pairs)."""
    r = regimes(same_prediction, delta, threshold)
    n = len(r)
    return {f"regime_{k.lower()}": (float((r == k).sum()) / n if n else float("nan")) for k in REGIMES}


def feature_sums(g: np.ndarray, g_counterpart: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Summable per-feature statistics, oriented protected member − reference member.

    Returns (2 factual groups [protected, reference], 6, d): count, Σ g_prot, Σ g_ref, Σ gap,
    Σ |gap|, Σ gap² over the pairs whose factual is in that group.
    """
    prot = group == 1
    g_p = np.where(prot[:, None], g, g_counterpart)
    g_r = np.where(prot[:, None], g_counterpart, g)
    gap = g_p - g_r
    out = np.zeros((2, 6, g.shape[1]))
    for k, rows in enumerate((prot, ~prot)):
        out[k, 0] = rows.sum()
        for j, v in enumerate((g_p, g_r, gap, np.abs(gap), gap ** 2), start=1):
            out[k, j] = v[rows].sum(axis=0)
    return out


def features_table(attribute: str, names: list[str], sums: np.ndarray, top: int = 0) -> pa.Table:
    """cec_features rows from summed statistics: per group the features ranked by their share of
    the mean squared attribution gap (Σ_j share = 1), with the gap's direction."""
    rows = []
    for group, s in zip(GROUPS, (sums.sum(axis=0), sums[0], sums[1])):
        n = s[0, 0] if s.shape[1] else 0
        if n == 0:
            continue
        mean = s[1:] / n
        sq = mean[4]
        total = sq.sum()
        order = np.lexsort((np.arange(len(names)), -sq))
        for rank, j in enumerate(order[:top or None], start=1):
            gap = mean[2, j]
            rows.append({"attribute": attribute, "group": group, "feature": names[j], "rank": rank,
                         "pairs": int(n), "attribution_protected": mean[0, j],
                         "attribution_reference": mean[1, j], "gap": gap, "abs_gap": mean[3, j],
                         "share_of_delta": sq[j] / total if total > 0 else 0.0,
                         "direction": "protected higher" if gap > 0 else
                         ("reference higher" if gap < 0 else "equal")})
    return pa.Table.from_pylist(rows, schema=FEATURES)


def _group_frames(pairs: pl.DataFrame):
    yield "all", pairs
    yield "protected", pairs.filter(pl.col("group") == 1)
    yield "reference", pairs.filter(pl.col("group") == 0)


def summaries(pairs: pa.Table, attributes: list[str], thresholds: list[float], threshold: float,
              partition_by: str, integration: str, steps: int | None,
              notes: dict[str, str], population: dict[str, dict[str, int]] | None = None
              ) -> tuple[pa.Table, pa.Table]:
    """cec_summary (coverage, match distances, CEC, PFR, regimes at the threshold, completeness
    with the integration method; steps only for riemann) and cec_regimes (shares over the threshold
    sweep), per attribute or intersection and group. ``records`` counts the factuals explained,
    ``population`` the unit's records before sampling (per attribute and group; default: records)."""
    df = pl.from_arrow(pairs)
    summary, sweep = [], []
    for attribute in attributes:
        unit = df.filter(pl.col("attribute") == attribute)
        for group, part in _group_frames(unit):
            m = part.filter(pl.col("matched"))
            delta = m["delta_cec"].to_numpy()
            same = (m["decision"] == m["counterpart_decision"]).to_numpy()
            dist = m["distance"].to_numpy()
            comp = m["completeness_error"].to_numpy()
            n = len(m)
            shares = regime_shares(same, delta, threshold)
            summary.append({
                "attribute": attribute, "group": group, "partition_by": partition_by,
                "records": part.height, "matched": n,
                "coverage": n / part.height if part.height else float("nan"),
                "distance_mean": float(dist.mean()) if n else None,
                "distance_median": float(np.median(dist)) if n else None,
                "distance_p90": float(np.quantile(dist, 0.9)) if n else None,
                "distance_max": float(dist.max()) if n else None,
                "cec": float(delta.mean()) if n else None,
                "pfr": float((~same).mean()) if n else None,
                "threshold": threshold, **{k: (v if n else None) for k, v in shares.items()},
                "completeness_max_error": float(comp.max()) if n else None,
                "completeness_mean_error": float(comp.mean()) if n else None,
                "integration": integration, "steps": steps, "note": notes.get(attribute, "") or None,
                "population": (population or {}).get(attribute, {}).get(group, part.height)})
            for t in thresholds:
                sweep.append({"attribute": attribute, "group": group, "threshold": t, "pairs": n,
                              **regime_shares(same, delta, t)})
    return (pa.Table.from_pylist(summary, schema=SUMMARY), pa.Table.from_pylist(sweep, schema=REGIME_SHARES))
