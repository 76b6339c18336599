"""ε-radius neighbour pairs: every (i, j), i ≠ j, with ‖x_i − x_j‖₂ ≤ ε (FGCE's graph, §4).

A KD-tree answers the radius query for blocks of query points at a time (small inputs: exact
distances of a block against all points), so memory grows with the number of pairs found and
the block, never with n². Pairs come back sorted by (i, j) with their
Euclidean distances, independent of the block size.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree


DENSE_PAIRS = 4_000_000


def radius_pairs(X: np.ndarray, eps: float, block: int = 4096, keep=None,
                 method: str = "auto") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance) for all ordered pairs i ≠ j within ``eps``; sorted by (i, j).

    ``keep(i, j) -> bool mask``, when given, filters each block's pairs as they are found (e.g.
    FGCE's feasibility constraints), so pairs that would be dropped never accumulate.
    ``method``: "kdtree", "dense" (block × n exact distances) or "auto" (dense while n² ≤
    DENSE_PAIRS); both give the same pairs.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"radius search needs a (rows, features) matrix, got shape {X.shape}")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if np.isnan(X).any():
        raise ValueError("radius search: missing (NaN) values in the points")
    n = len(X)
    if method not in ("auto", "kdtree", "dense"):
        raise ValueError(f"radius search: unknown method {method!r}")
    # small inputs: blocks of exact distances beat a KD-tree (high-dimensional one-hot spaces)
    dense = method == "dense" or (method == "auto" and n * n <= DENSE_PAIRS)
    tree = None if dense else cKDTree(X)
    sq = (X ** 2).sum(1)
    out_i, out_j, out_d = [], [], []
    for s in range(0, n, block):
        if dense:
            blk = X[s:s + block]
            d2 = sq[s:s + block, None] + sq[None, :] - 2 * blk @ X.T   # block × n, never n × n
            i, j = np.nonzero(d2 <= (eps * (1 + 1e-9)) ** 2 + 1e-12)
            i = i.astype(np.int64) + s
            j = j.astype(np.int64)
        else:
            # a hair wider than eps (C-level pair search of this block against all points)
            found = cKDTree(X[s:s + block]).sparse_distance_matrix(tree, eps * (1 + 1e-9), output_type="ndarray")
            i = found["i"].astype(np.int64) + s
            j = found["j"].astype(np.int64)
        ok = i != j
        i, j = i[ok], j[ok]
        if keep is not None and len(i):        # cheap constraints first: fewer exact distances
            ok = keep(i, j)
            i, j = i[ok], j[ok]
        if not len(i):
            continue
        # the exact test decides ties at the boundary
        d = np.sqrt(((X[i] - X[j]) ** 2).sum(1))
        ok = d <= eps
        i, j, d = i[ok], j[ok], d[ok]
        order = np.lexsort((j, i))
        out_i.append(i[order])
        out_j.append(j[order])
        out_d.append(d[order])
    if not out_i:
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty(0)
    return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_d)


def brute_force_pairs(X: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All-pairs reference for :func:`radius_pairs` (tests, tiny inputs)."""
    X = np.asarray(X, np.float64)
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    i, j = np.nonzero((D <= eps) & ~np.eye(len(X), dtype=bool))
    return i, j, D[i, j]
