"""Every coefficient of the regression engine's two models, per comparison: the table
``regression_coefficients`` and the logit's fit statistics for ``regression_estimates``.

One row per term of each model (``logit``, ``lpm``) of each comparison (an attribute, pooled or
within a segment): the intercept (``const``), the group (``term`` the attribute, ``kind``
``group``: protected 1 against reference 0), each control's columns as the engines name them
(a numeric control by its name, a dummy as ``name=level``, against the level the design leaves
out), and
the other attributes' groups held as cells. ``estimate`` is the coefficient in the outcome's
units (log-odds of denial for the logit, the probability of denial for the LPM), ``se`` its
standard error (the logit's as the logit reports it; the LPM's classical, s²(Z'Z)⁻¹, and for
the intercept s²/n + m'(s²(Z'Z)⁻¹)m in the centred design), ``odds_ratio`` exp(estimate) for
the logit. Fixed effects absorbed (within transformation) have no coefficient each: one row
names them and counts their levels, with a null estimate.

McFadden's pseudo R² (McFadden 1974): 1 − ℓ/ℓ₀, ℓ₀ the intercept-only log-likelihood over the
same rows, n(r log r + (1 − r) log(1 − r)) with r the share of denials.
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

COEFFICIENTS = pa.schema([
    ("attribute", pa.string()), ("segment", pa.string()), ("model", pa.string()), ("term", pa.string()),
    ("kind", pa.string()), ("estimate", pa.float64()), ("se", pa.float64()), ("odds_ratio", pa.float64()),
])


def null_log_likelihood(n: int, events: int) -> float | None:
    """ℓ₀ = n(r log r + (1 − r) log(1 − r)), r = events / n (0 log 0 = 0); None without rows."""
    if n <= 0:
        return None
    r = events / n
    return float(sum(c * math.log(c / n) for c in (events, n - events) if c > 0)) if 0 < r < 1 else 0.0


def fit_statistics(logit) -> dict:
    """The logit's ``logit_log_likelihood`` and McFadden's ``logit_pseudo_r2`` (None where the
    logit has no fit, or every outcome is one)."""
    ll = logit.log_likelihood
    ll0 = null_log_likelihood(logit.n, logit.events)
    pseudo = None if ll is None or ll0 is None or ll0 == 0 else 1.0 - ll / ll0
    return {"logit_log_likelihood": ll, "logit_pseudo_r2": pseudo}


def _kind(column: str, held: set[str]) -> str:
    if column == "const":
        return "intercept"
    if column == "d":
        return "group"
    return "held groups" if any(column == h or column.startswith(h + "[") for h in held) else "control"


def term_name(column: str, levels: dict[str, list]) -> str:
    """A dummy's column ``name[code]`` as ``name=level`` (``dti[5]`` → ``dti=45``)."""
    name, _, code = column[:-1].partition("[") if column.endswith("]") else (column, "", "")
    if code.isdigit() and name in levels and int(code) < len(levels[name]):
        return f"{name}={levels[name][int(code)]}"
    return column


def _rows(attribute: str, segment: str | None, model: str, columns, estimates, errors, held: set[str],
          absorbed: tuple[str, int] | None, levels: dict[str, list]) -> list[dict]:
    out = []
    for column, b, s in zip(columns, estimates, errors):
        kind = _kind(str(column), held)
        b = None if b is None or not np.isfinite(b) else float(b)
        out.append({"attribute": attribute, "segment": segment, "model": model,
                    "term": attribute if kind == "group" else term_name(str(column), levels), "kind": kind, "estimate": b,
                    "se": None if s is None or not np.isfinite(s) else float(s),
                    "odds_ratio": float(np.exp(b)) if model == "logit" and b is not None else None})
    if absorbed is not None and out:
        names, levels = absorbed
        out.append({"attribute": attribute, "segment": segment, "model": model, "kind": "fixed effects",
                    "term": f"fixed effects: {names} (absorbed, {levels:,} levels)", "estimate": None,
                    "se": None, "odds_ratio": None})
    return out


def coefficient_rows(attribute: str, segment: str | None, fit, logit, held: list[str],
                     levels: dict[str, list]) -> pa.Table:
    """The rows of ``regression_coefficients`` for one comparison: the logit's terms, then the
    LPM's (a model without estimates — separation, a singular design — has none). ``held``: the
    blocks of the other groups' cells; ``levels``: each categorical block's levels, by name."""
    held_names = set(held)
    absorbed = (", ".join(fit.fixed_effects), int(fit.absorbed)) if fit.fixed_effects else None
    rows = []
    c = logit.coefficients
    if c and logit.coefficient is not None:
        rows += _rows(attribute, segment, "logit", c["columns"], c["coef"], c["se"], held_names, absorbed, levels)
    c = fit.coefficients
    if c and fit.estimate is not None:
        columns, coef, se = list(c["columns"]), list(c["y"]), list(c["se"])
        if fit.intercept is not None:
            columns, coef, se = ["const", *columns], [fit.intercept, *coef], [c.get("intercept_se"), *se]
        rows += _rows(attribute, segment, "lpm", columns, coef, se, held_names, absorbed, levels)
    return pa.Table.from_pylist(rows, schema=COEFFICIENTS)
