"""Exact k nearest neighbours under the Thanh et al. (2011) mixed distance.

CST (Alvarez & Ruggieri 2023, Eq. 6) compares records with

    d(x, x') = (Σ_continuous |x_i − x'_i| + Σ_ordinal |x_i − x'_i| + Σ_nominal [x_i ≠ x'_i]) / m

where continuous values are already normalised (z-score or range) and ordinal values are
normalised ranks r/(n−1), m being the number of attributes. The continuous and ordinal part is
an L1 distance, so a KD-tree with p = 1 answers it exactly; the nominal part is constant within
a group of points sharing the same nominal values, so the search runs per such group and the
candidates are merged. Ties are broken by (distance, point index): the result does not depend
on the order of the KD-tree's traversal. When more than ``max_partitions`` nominal groups
exist, blocked brute force (numpy, bounded memory) is used instead.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

_EXTRA = 8  # candidates beyond k fetched to settle ties at the k-th distance


@dataclass
class Points:
    """Points in the mixed space: ``metric`` (n, c) L1 part, ``nominal`` (n, m) integer codes."""

    metric: np.ndarray
    nominal: np.ndarray

    def __post_init__(self) -> None:
        self.metric = np.ascontiguousarray(self.metric, dtype=np.float64).reshape(len(self.metric), -1)
        self.nominal = np.ascontiguousarray(self.nominal, dtype=np.int64).reshape(len(self.metric), -1)
        if np.isnan(self.metric).any():
            raise ValueError("neighbour search: missing (NaN) values among the distance attributes")

    def __len__(self) -> int:
        return len(self.metric)

    @property
    def n_attributes(self) -> int:
        return self.metric.shape[1] + self.nominal.shape[1]

    def take(self, idx: np.ndarray) -> "Points":
        return Points(self.metric[idx], self.nominal[idx])


def brute_force(points: Points, queries: Points, k: int, exclude: np.ndarray | None = None,
                block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """All-pairs reference: (indices, distances) of the k nearest points to each query.

    ``exclude[q]`` (optional) is a point index that query q must not return (itself).
    """
    m = max(points.n_attributes, 1)
    n, nq = len(points), len(queries)
    kk = min(k, n - (0 if exclude is None else 1))
    idx = np.empty((nq, max(kk, 0)), dtype=np.int64)
    dist = np.empty((nq, max(kk, 0)), dtype=np.float64)
    order_tiebreak = np.arange(n)
    for s in range(0, nq, block):
        e = min(s + block, nq)
        d = np.abs(queries.metric[s:e, None, :] - points.metric[None, :, :]).sum(-1)
        if points.nominal.shape[1]:
            d += (queries.nominal[s:e, None, :] != points.nominal[None, :, :]).sum(-1)
        d /= m
        if exclude is not None:
            d[np.arange(e - s), exclude[s:e]] = np.inf
        for r in range(e - s):
            o = np.lexsort((order_tiebreak, d[r]))[:kk]
            idx[s + r], dist[s + r] = o, d[r, o]
    return idx, dist


def _tree_knn(tree: cKDTree, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if k == 0:
        return np.empty((len(queries), 0), np.int64), np.empty((len(queries), 0))
    d, i = tree.query(queries, k=k, p=1)
    return np.asarray(i, np.int64).reshape(len(queries), k), np.asarray(d, np.float64).reshape(len(queries), k)


def knn(points: Points, queries: Points, k: int, exclude: np.ndarray | None = None,
        max_partitions: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest points (indices into ``points``, distances) for every query.

    Results are sorted by (distance, index). ``exclude[q]`` removes one point per query (the
    query itself when searching its own group). Fewer than k points available: fewer columns.
    """
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    if points.metric.shape[1] != queries.metric.shape[1] or points.nominal.shape[1] != queries.nominal.shape[1]:
        raise ValueError("neighbour search: points and queries have different attributes")
    n = len(points)
    kk = min(k, n - (0 if exclude is None else 1))
    if kk <= 0 or len(queries) == 0:
        return np.empty((len(queries), max(kk, 0)), np.int64), np.empty((len(queries), max(kk, 0)))
    m = max(points.n_attributes, 1)
    if points.metric.shape[1] == 0:  # nominal attributes only: overlap counts, no tree needed
        return brute_force(points, queries, k, exclude)
    if points.nominal.shape[1]:
        keys, inverse = np.unique(points.nominal, axis=0, return_inverse=True)
        if len(keys) > max_partitions:
            return brute_force(points, queries, k, exclude)
        groups = [np.flatnonzero(inverse.ravel() == g) for g in range(len(keys))]
    else:
        keys, groups = np.empty((1, 0), np.int64), [np.arange(n)]

    want = kk + (0 if exclude is None else 1) + _EXTRA
    cand_i, cand_d = [], []
    for key, members in zip(keys, groups):
        kg = min(want, len(members))
        i, d = _tree_knn(cKDTree(points.metric[members]), queries.metric, kg)
        mismatch = (queries.nominal != key[None, :]).sum(1) if len(key) else 0
        d = d + np.asarray(mismatch, np.float64)[:, None] if len(key) else d
        cand_i.append(members[i])
        cand_d.append(d)
    ci = np.concatenate(cand_i, axis=1)
    cd = np.concatenate(cand_d, axis=1) / m
    if exclude is not None:
        cd[ci == exclude[:, None]] = np.inf
    order = np.lexsort((ci, cd), axis=1)[:, :kk]
    idx = np.take_along_axis(ci, order, 1)
    dist = np.take_along_axis(cd, order, 1)
    # Settle ties: if the k-th distance equals the largest distance fetched from a group that
    # had more members, an equal point with a smaller index may not have been fetched.
    boundary = dist[:, -1:]
    unsure = np.zeros(len(queries), bool)
    for d_g, members in zip(cand_d, groups):
        if d_g.shape[1] < len(members):
            unsure |= (d_g[:, -1] / m) <= boundary[:, 0]
    if unsure.any():
        q = np.flatnonzero(unsure)
        bi, bd = brute_force(points, queries.take(q), k, None if exclude is None else exclude[q])
        idx[q], dist[q] = bi, bd
    return idx, dist
