"""ε-radius neighbour pairs: every (i, j), i ≠ j, with ‖x_i − x_j‖₂ ≤ ε (FGCE's graph, §4).

A KD-tree answers the radius query for blocks of query points at a time, so memory grows with
the number of pairs found, never with n². Pairs come back sorted by (i, j) with their
Euclidean distances, independent of the block size.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree


def radius_pairs(X: np.ndarray, eps: float, block: int = 4096) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance) for all ordered pairs i ≠ j within ``eps``; sorted by (i, j)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"radius search needs a (rows, features) matrix, got shape {X.shape}")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if np.isnan(X).any():
        raise ValueError("radius search: missing (NaN) values in the points")
    tree = cKDTree(X)
    rows, cols = [], []
    for s in range(0, len(X), block):
        # a hair wider than eps, then the exact test below decides ties at the boundary
        hits = tree.query_ball_point(X[s:s + block], eps * (1 + 1e-9), return_sorted=True)
        counts = np.fromiter((len(h) for h in hits), np.int64, len(hits))
        if counts.sum():
            rows.append(np.repeat(np.arange(s, s + len(hits)), counts))
            cols.append(np.concatenate([np.asarray(h, np.int64) for h in hits if len(h)]))
    if not rows:
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty(0)
    i, j = np.concatenate(rows), np.concatenate(cols)
    d = np.sqrt(((X[i] - X[j]) ** 2).sum(1))
    keep = (i != j) & (d <= eps)
    return i[keep], j[keep], d[keep]


def brute_force_pairs(X: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All-pairs reference for :func:`radius_pairs` (tests, tiny inputs)."""
    X = np.asarray(X, np.float64)
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    i, j = np.nonzero((D <= eps) & ~np.eye(len(X), dtype=bool))
    return i, j, D[i, j]
