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
        if exclude is not None:
            d[np.arange(e - s), exclude[s:e]] = np.inf
        o = np.lexsort((np.broadcast_to(order_tiebreak, d.shape), d), axis=1)[:, :kk]
        idx[s:e], dist[s:e] = o, np.take_along_axis(d, o, 1) / m
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

    trees = [cKDTree(points.metric[members]) for members in groups]
    want = kk + (0 if exclude is None else 1) + _EXTRA
    idx = np.empty((len(queries), kk), np.int64)
    dist = np.empty((len(queries), kk), np.float64)
    todo = np.arange(len(queries))
    while len(todo):
        # Fetch `want` candidates per nominal group. If a group's farthest fetched candidate is
        # not beyond the k-th distance, it may hold more points at exactly that distance (with
        # smaller indices): fetch again with more candidates until every query is settled.
        sub = queries.take(todo)
        ex = None if exclude is None else exclude[todo]
        i_s, d_s, unsure = _fetch(points, sub, keys, groups, trees, want, kk, ex)
        done = ~unsure
        idx[todo[done]], dist[todo[done]] = i_s[done], d_s[done]
        if want >= n:
            idx[todo[unsure]], dist[todo[unsure]] = i_s[unsure], d_s[unsure]
            break
        todo, want = todo[unsure], min(4 * want, n)
    return idx, dist / m


def _fetch(points: Points, queries: Points, keys, groups, trees, want: int, kk: int,
           exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cand_i, cand_d, short = [], [], []
    for key, members, tree in zip(keys, groups, trees):
        kg = min(want, len(members))
        i, _ = _tree_knn(tree, queries.metric, kg)
        i = members[i]
        # recompute distances exactly as the reference sum does, so ties compare equal
        d = np.abs(points.metric[i] - queries.metric[:, None, :]).sum(-1)
        if len(key):
            d = d + (queries.nominal != key[None, :]).sum(1).astype(np.float64)[:, None]
        cand_i.append(i)
        cand_d.append(d)
        short.append(kg < len(members))
    idx, dist = _select(np.concatenate(cand_i, axis=1), np.concatenate(cand_d, axis=1), kk, exclude)
    unsure = np.zeros(len(queries), bool)
    for d_g, cut in zip(cand_d, short):
        if cut:
            unsure |= d_g[:, -1] <= dist[:, -1]
    return idx, dist, unsure


def _select(ci: np.ndarray, cd: np.ndarray, kk: int, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The kk best candidates per row by (distance, index), dropping the excluded point."""
    cd = cd.copy()
    if exclude is not None:
        cd[ci == exclude[:, None]] = np.inf
    order = np.lexsort((ci, cd), axis=1)[:, :kk]
    return np.take_along_axis(ci, order, 1), np.take_along_axis(cd, order, 1)


def euclidean_knn(points: np.ndarray, queries: np.ndarray, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest ``points`` (rows) to every query under the Euclidean distance.

    CEC's Algorithm 1 (Popoola & Sheppard, Definition 2) matches on the L2 distance between
    standardised financial features. Backed by a KD-tree (p = 2); distances are recomputed
    with one numpy formula so equal distances compare equal, and ties are broken by (distance,
    point index), refetching more candidates while a tie at the k-th distance may hide a point
    with a smaller index. Fewer than k points: fewer columns. Returns (indices, distances).
    """
    points = np.ascontiguousarray(points, dtype=np.float64).reshape(len(points), -1)
    queries = np.ascontiguousarray(queries, dtype=np.float64).reshape(len(queries), -1)
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    if points.shape[1] != queries.shape[1]:
        raise ValueError(f"neighbour search: points have {points.shape[1]} attributes, queries {queries.shape[1]}")
    if np.isnan(points).any() or np.isnan(queries).any():
        raise ValueError("neighbour search: missing (NaN) values among the distance attributes")
    n, kk = len(points), min(k, len(points))
    if kk == 0 or len(queries) == 0:
        return np.empty((len(queries), kk), np.int64), np.empty((len(queries), kk))
    tree = cKDTree(points)
    idx = np.empty((len(queries), kk), np.int64)
    dist = np.empty((len(queries), kk), np.float64)
    # one candidate beyond k settles a query unless it ties the k-th (then fetch 4x more)
    todo, want = np.arange(len(queries)), min(kk + 1, n)
    while len(todo):
        _, ci = tree.query(queries[todo], k=want, p=2)
        ci = np.asarray(ci, np.int64).reshape(len(todo), want)
        cd = np.sqrt(((points[ci] - queries[todo][:, None, :]) ** 2).sum(-1))
        order = np.lexsort((ci, cd), axis=1)[:, :kk]
        i_s, d_s = np.take_along_axis(ci, order, 1), np.take_along_axis(cd, order, 1)
        # the farthest fetched candidate not beyond the k-th distance: more may tie there
        unsure = (want < n) & (cd.max(axis=1) <= d_s[:, -1])
        done = ~unsure
        idx[todo[done]], dist[todo[done]] = i_s[done], d_s[done]
        todo, want = todo[unsure], min(4 * want, n)
    return idx, dist
