"""Recourse costs to a linear decision boundary and stepped minimal modifications (RAGUEL, §3.5).

Boundary: a·x + b = 0 (favourable side a·x + b ≥ 0). Recourse weights w_j > 0 price a unit
change of attribute j; immutable attributes cannot change. The cost of x is the weighted
Euclidean distance to the boundary (Eq. 2, as NOTES rebuilds it):

    c(x) = min_{x'} sqrt(Σ_j w_j (x_j − x'_j)²)  s.t.  a·x' + b = 0
         = |a·x + b| / sqrt(Σ_{j mutable} a_j² / w_j)

with the counterfactual x' = x − (a·x + b) / Σ_k(a_k²/w_k) · (a_j / w_j)_j (the weighted
projection). Applicants already on the favourable side cost 0.
"""
from __future__ import annotations

import numpy as np


class NotRepairable(ValueError):
    """No feasible action reaches the boundary (every attribute it depends on is immutable)."""


def _norm(a: np.ndarray, w: np.ndarray, mutable: np.ndarray) -> float:
    if np.any(w[mutable] <= 0):
        raise ValueError("recourse weights of mutable attributes must be positive")
    s = float(np.sum(np.where(mutable, a ** 2 / np.where(mutable, w, 1.0), 0.0)))
    if s == 0:
        raise NotRepairable("no mutable attribute moves the decision boundary: recourse is impossible")
    return np.sqrt(s)


def recourse_cost(X: np.ndarray, a: np.ndarray, b: float, w: np.ndarray, mutable: np.ndarray) -> np.ndarray:
    """c(x) per row (0 on the favourable side)."""
    X, a, w, mutable = (np.asarray(v, np.float64) for v in (X, a, w, mutable))
    margin = X @ a + b
    return np.maximum(-margin, 0.0) / _norm(a, w, mutable.astype(bool))


def counterfactual_points(X: np.ndarray, a: np.ndarray, b: float, w: np.ndarray, mutable: np.ndarray) -> np.ndarray:
    """The cheapest boundary points x' (rows already favourable are returned unchanged)."""
    X, a, w = (np.asarray(v, np.float64) for v in (X, a, w))
    mutable = np.asarray(mutable, bool)
    norm2 = _norm(a, w, mutable) ** 2
    margin = np.minimum(X @ a + b, 0.0)
    direction = np.where(mutable, a / np.where(mutable, w, 1.0), 0.0)
    return X - (margin / norm2)[:, None] * direction[None, :]


def minimal_steps(x: np.ndarray, j: int, step: float, target: float, a: np.ndarray, b: float,
                  w: np.ndarray, mutable: np.ndarray, bounds: tuple[float, float] | None = None) -> int | None:
    """Fewest whole steps of attribute j (towards the boundary) that make c(x) < target.

    Returns None when no number of steps within ``bounds`` achieves it (the cost can fall no
    lower than 0, reached when x crosses the boundary).
    """
    a = np.asarray(a, np.float64)
    if not mutable[j] or a[j] == 0:
        return None
    norm = _norm(a, np.asarray(w, np.float64), np.asarray(mutable, bool))
    margin = float(np.dot(x, a) + b)
    if max(-margin, 0.0) / norm < target:
        return 0
    if target <= 0:
        return None
    # c = (−margin − s·|a_j|·step)/norm < target  ⇔  s > (−margin − target·norm)/(|a_j|·step)
    need = (-margin - target * norm) / (abs(a[j]) * step)
    s = int(np.floor(need)) + 1
    while s > 0 and (-(margin + (s - 1) * abs(a[j]) * step)) / norm < target:  # float guard
        s -= 1
    while (-(margin + s * abs(a[j]) * step)) / norm >= target:
        s += 1
    if bounds is not None:
        moved = x[j] + np.sign(a[j]) * s * step
        if not bounds[0] <= moved <= bounds[1]:
            return None
    return s
