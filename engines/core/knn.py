"""Exact k nearest neighbours under the Thanh et al. (2011) mixed distance.

CST (Alvarez & Ruggieri 2023, Eq. 6) compares records with

    d(x, x') = (Σ_continuous |x_i − x'_i| + Σ_ordinal |x_i − x'_i| + Σ_nominal [x_i ≠ x'_i]) / m

where continuous values are already normalised (z-score or range) and ordinal values are
normalised ranks r/(n−1), m being the number of attributes. The continuous and ordinal part is
an L1 distance, so a KD-tree with p = 1 answers it exactly; the nominal part is constant within
a group of points sharing the same nominal values, so the search runs per such group and the
candidates are merged. When more than ``max_partitions`` nominal groups exist, blocked brute
force (numpy, bounded memory) is used instead.

Ties. Neighbours are ranked by (distance, point index): among points at the same distance the
one earlier in ``points`` comes first, so callers put their points in record order (the CST
engine sorts records by id). For this rule to mean anything, mathematically equal distances
must compare equal, which floating point does not give by itself: on coarse data (integer
LSAT, one-decimal UGPA) |3.3 − 3.2| and |3.1 − 3.0| differ in the last bits, and so do
normalised values (v − c)/s. Points may therefore carry a *lattice*: for metric column j,
integer ``codes[:, j]`` and a normalised ``steps[j]`` with value ≈ offset_j + codes·steps[j]
(see :func:`~aequum.engines.core.lattice.decimal_lattice`: data recorded to d decimals lie on
the grid 10^−d). Where points and queries share a column's lattice (same step), the
per-attribute difference is the exact integer |Δcode|, and columns with equal steps are summed
as integers before one multiplication by the step; the remaining terms (columns without a
shared lattice, e.g. a continuous counterfactual centre) are added in a fixed column order.
The distance is thus a fixed function of the per-attribute differences: equal differences give
bit-identical distances whatever the records' positions, signs or order. (Two *different*
difference vectors whose weighted sums coincide, possible only when two columns' steps are in
rational ratio other than 1, still compare by their rounded values.) Exact ties make every
point at the k-th distance a candidate; on coarse data, where most points repeat another
exactly, the search therefore runs over the distinct points and fills the k places with their
members in index order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from aequum.engines.core.lattice import fits_int32

_EXTRA = 2  # candidates beyond k fetched to settle ties at the k-th distance
_RTOL = 1e-9  # tree distances vs exact distances: a margin far above rounding, far below any step
_QUERIES = 2048  # queries searched together (their candidates' memory: _Trees.search)


@dataclass
class Points:
    """Points in the mixed space: ``metric`` (n, c) L1 part, ``nominal`` (n, m) integer codes.

    Optional lattice of the metric columns: ``codes`` (n, c) integers and ``steps`` (c,) with
    metric[:, j] = offset_j + codes[:, j] · steps[j] up to rounding; steps[j] = NaN marks a
    column off the lattice. Distances use the exact integer differences where points and
    queries share a column's step (module docstring, "Ties"). Codes are kept as int32 when
    they fit (half the memory of CST's records at 10M), and differenced in int64.
    """

    metric: np.ndarray
    nominal: np.ndarray
    codes: np.ndarray | None = None
    steps: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.metric = np.ascontiguousarray(self.metric, dtype=np.float64).reshape(len(self.metric), -1)
        self.nominal = np.ascontiguousarray(self.nominal, dtype=np.int64).reshape(len(self.metric), -1)
        if np.isnan(self.metric).any():
            raise ValueError("neighbour search: missing (NaN) values among the distance attributes")
        if (self.codes is None) != (self.steps is None):
            raise ValueError("neighbour search: a lattice needs both codes and steps")
        if self.codes is not None:
            codes = np.asarray(self.codes).reshape(self.metric.shape)
            self.codes = np.ascontiguousarray(codes, dtype=np.int32 if fits_int32(codes) else np.int64)
            self.steps = np.asarray(self.steps, np.float64).reshape(self.metric.shape[1])

    def __len__(self) -> int:
        return len(self.metric)

    @property
    def n_attributes(self) -> int:
        return self.metric.shape[1] + self.nominal.shape[1]

    def take(self, idx: np.ndarray) -> "Points":
        out = object.__new__(Points)  # rows already checked: not checked again (5 % of CST's search)
        out.metric, out.nominal, out.steps = self.metric[idx], self.nominal[idx], self.steps
        out.codes = None if self.codes is None else self.codes[idx]
        return out

    def with_nominal(self, extra: np.ndarray) -> "Points":
        """The same points with more nominal attributes (columns of ``extra``) appended."""
        extra = np.asarray(extra, np.int64).reshape(len(self), -1)
        return Points(self.metric, np.hstack([self.nominal, extra]), self.codes, self.steps)


@dataclass
class _Plan:
    """How distances between two point sets are summed (module docstring, "Ties")."""

    groups: list[tuple[np.ndarray, float]]  # lattice columns sharing one step
    free: np.ndarray                         # metric columns compared as floats


def _plan(points: Points, queries: Points) -> _Plan:
    c = points.metric.shape[1]
    by_step: dict[float, list[int]] = {}
    if points.steps is not None and queries.steps is not None:
        for j in range(c):
            s = points.steps[j]
            if np.isfinite(s) and s > 0 and s == queries.steps[j]:
                by_step.setdefault(float(s), []).append(j)
    shared = {j for cols in by_step.values() for j in cols}
    return _Plan([(np.array(cols), s) for s, cols in sorted(by_step.items())],
                 np.array([j for j in range(c) if j not in shared], dtype=np.int64))


def _distances(points: Points, queries: Points, plan: _Plan, idx: np.ndarray | None = None) -> np.ndarray:
    """Unaveraged distances (sum over attributes) of queries to points: to all points (q, n),
    or to the candidates ``idx`` (q, kc) of each query."""
    def gathered(a: np.ndarray) -> np.ndarray:  # the points' rows: (q, kc, ·) or (1, n, ·)
        return a[idx] if idx is not None else a[None, :, :]

    def gap(a: np.ndarray, b: np.ndarray, cols: np.ndarray) -> np.ndarray:
        if len(cols) < a.shape[-1]:
            a, b = a[..., cols], b[:, cols]
        return np.abs(a - b[:, None, :]).sum(-1)

    d = np.zeros((len(queries), len(points) if idx is None else idx.shape[1]))
    if points.nominal.shape[1]:
        d += (gathered(points.nominal) != queries.nominal[:, None, :]).sum(-1)
    if plan.groups and idx is not None:  # the candidates' exact integer differences, taken once
        diff = np.abs(points.codes[idx] - queries.codes.astype(np.int64)[:, None, :])
        for cols, step in plan.groups:  # one multiplication per step
            d += (diff[..., cols[0]] if len(cols) == 1 else diff[..., cols].sum(-1)) * step
    elif plan.groups:
        codes = gathered(points.codes)
        for cols, step in plan.groups:  # exact integer differences, one multiplication per step
            d += gap(codes, queries.codes.astype(np.int64), cols) * step
    if len(plan.free):
        d += gap(gathered(points.metric), queries.metric, plan.free)
    return d


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
    plan = _plan(points, queries)
    order_tiebreak = np.arange(n)
    for s in range(0, nq, block):
        e = min(s + block, nq)
        d = _distances(points, queries.take(np.arange(s, e)), plan)
        if exclude is not None:
            d[np.arange(e - s), exclude[s:e]] = np.inf
        o = np.lexsort((np.broadcast_to(order_tiebreak, d.shape), d), axis=1)[:, :kk]
        idx[s:e], dist[s:e] = o, np.take_along_axis(d, o, 1) / m
    return idx, dist


def _tree_knn(tree: cKDTree, queries: np.ndarray, k: int,
              bound: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The tree's k nearest (L1) to each query; with ``bound`` (per query), those within it
    only, the missing places given index ``tree.n`` and distance inf. The tree takes one bound
    per call: queries go in groups of similar bounds, each with its group's largest."""
    nq = len(queries)
    if k == 0:
        return np.empty((nq, 0), np.int64), np.empty((nq, 0))
    if bound is None:
        d, i = tree.query(queries, k=k, p=1)
        return np.asarray(i, np.int64).reshape(nq, k), np.asarray(d, np.float64).reshape(nq, k)
    idx, dist = np.empty((nq, k), np.int64), np.empty((nq, k))
    for group in np.array_split(np.argsort(bound, kind="stable"), min(16, nq)):
        if len(group):
            d, i = tree.query(queries[group], k=k, p=1, distance_upper_bound=float(bound[group].max()))
            idx[group], dist[group] = np.reshape(i, (len(group), k)), np.reshape(d, (len(group), k))
    return idx, dist


def knn(points: Points, queries: Points, k: int, exclude: np.ndarray | None = None,
        max_partitions: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest points (indices into ``points``, distances) for every query.

    Results are sorted by (distance, index). ``exclude[q]`` removes one point per query (the
    query itself when searching its own group). Fewer than k points available: fewer columns.
    Coarse data (at least half of the points repeat another point exactly) are searched over
    the distinct points, whose members then fill the k places in index order.
    """
    return NeighbourIndex(points, max_partitions).query(queries, k, exclude)


class NeighbourIndex:
    """The search structures over ``points`` (their distinct points when coarse, KD-trees per
    nominal group), built once for any number of query sets: ``query`` is :func:`knn`."""

    def __init__(self, points: Points, max_partitions: int = 64):
        self.points = points
        self._distinct = _distinct(points) if points.metric.shape[1] else None
        if not points.metric.shape[1]:  # nominal attributes only: overlap counts, no tree needed
            self._trees = None
        elif self._distinct is None:
            self._trees = _Trees(points, max_partitions)
        else:
            first, inverse, _ = self._distinct
            self._by_point = np.lexsort((np.arange(len(points)), inverse))  # by distinct point, then index
            self._trees = _Trees(points.take(first), max_partitions)

    def query(self, queries: Points, k: int, exclude: np.ndarray | None = None,
              bound: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """knn's result; with ``bound`` (per query), points at or beyond it may be left out,
        their places given index −1 and distance inf (a blocked search needs only the points
        nearer than the k-th it already has: :func:`knn_in_blocks`)."""
        points = self.points
        if k < 0:
            raise ValueError(f"k must be non-negative, got {k}")
        if points.metric.shape[1] != queries.metric.shape[1] or points.nominal.shape[1] != queries.nominal.shape[1]:
            raise ValueError("neighbour search: points and queries have different attributes")
        kk = min(k, len(points) - (0 if exclude is None else 1))
        if kk <= 0 or len(queries) == 0:
            return np.empty((len(queries), max(kk, 0)), np.int64), np.empty((len(queries), max(kk, 0)))
        if self._trees is None:
            return brute_force(points, queries, kk, exclude)
        if self._distinct is None:
            return self._trees.search(queries, kk, exclude, bound)
        return self._via_distinct(queries, kk, exclude)

    def _via_distinct(self, queries: Points, kk: int, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """kNN over the distinct points, expanded to their members (ties: by member index)."""
        first, inverse, counts = self._distinct
        n, n_distinct = len(self.points), len(first)
        extra = 0 if exclude is None else 1
        width = int(min(kk + extra, counts.max()))  # later members of a point can never be chosen
        order = self._by_point
        owner = inverse[order]
        rank = np.arange(n) - np.searchsorted(owner, np.arange(n_distinct))[owner]
        keep = rank < width
        members = np.full((n_distinct, width), -1, np.int64)
        members[owner[keep], rank[keep]] = order[keep]
        usable = np.minimum(counts, width)
        idx = np.empty((len(queries), kk), np.int64)
        dist = np.empty((len(queries), kk), np.float64)
        todo, kd = np.arange(len(queries)), min(kk + extra, n_distinct)
        while len(todo):
            di, dd = self._trees.search(queries.take(todo), kd, None)
            own = None if exclude is None else inverse[exclude[todo]]
            i_s, d_s = _expand(members, usable, di, dd, kk, None if exclude is None else exclude[todo], own)
            # settled when the farthest distinct point fetched lies beyond the k-th member's
            # distance: any point not fetched is farther still
            sure = (dd[:, -1] > d_s[:, -1]) | (kd >= n_distinct)
            idx[todo[sure]], dist[todo[sure]] = i_s[sure], d_s[sure]
            todo, kd = todo[~sure], min(4 * kd, n_distinct)
        return idx, dist


def knn_in_blocks(points: Points, rows: np.ndarray, searches: list[tuple[Points, np.ndarray | None]], k: int,
                  block: int = 1 << 20, max_partitions: int = 64) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each ``(queries, exclude)`` of ``searches``: ``knn(points.take(rows), queries, k,
    exclude)``, the same indices (positions in ``rows``) and distances, searched ``block`` rows
    at a time, so that memory holds one block's points and trees, not the whole set's. (Blocks
    of 2^19 took a CST piece at 10M HMDA records from 0.63 to 0.47 GB above its state alone,
    but the 10M audit's pieces phase peaked at 3.72 GB either way, and its pieces took 1.38x
    the time: 2^20 it is.)
    ``points`` may also be a :class:`~engines.core.points_file.PointsFile`: each block is then
    read from its files.

    Each block is indexed once for every search. Its k (k + 1 with an exclusion, which is then
    dropped) nearest by (distance, index) contain every point of the whole set's k nearest that
    lies in it, and a point's distance does not depend on the set it is searched in
    (:func:`_distances`), so merging the blocks' candidates by (distance, index) gives knn's
    result exactly. Blocks come in index order, so a later block's point enters a query's k
    nearest only if it is strictly nearer than the k-th found so far: later blocks are searched
    within that bound, which prunes most of their trees.
    """
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    rows = np.asarray(rows, np.int64)
    n = len(rows)
    best = [(np.empty((len(queries), 0), np.int64), np.empty((len(queries), 0))) for queries, _ in searches]
    for s in range(0, n, block):
        index = NeighbourIndex(points.take(rows[s:s + block]), max_partitions)
        for j, (queries, exclude) in enumerate(searches):
            extra = 0 if exclude is None else 1
            kk = max(min(k, n - extra), 0)
            full = best[j][1].shape[1] == kk > 0
            i, d = index.query(queries, k + extra, bound=best[j][1][:, -1] if full else None)
            if s == 0 and i.shape[1] - extra >= kk and np.isfinite(d).all():  # the first block's, already
                # by (distance, index), with a place to spare for the excluded point
                best[j] = _first_block(i, d, exclude, kk)
                continue
            i, d = np.hstack([best[j][0], np.where(i >= 0, i + s, -1)]), np.hstack([best[j][1], d])
            if exclude is not None:
                d = np.where(i == np.asarray(exclude)[:, None], np.inf, d)  # sorts last, then cut
            order = first_by_distance(i, d, kk)
            best[j] = np.take_along_axis(i, order, 1), np.take_along_axis(d, order, 1)
    return best


def _first_block(i: np.ndarray, d: np.ndarray, exclude: np.ndarray | None, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """The first kk of one block's candidates (each row sorted by distance, then index, every
    place filled), the excluded point (at most once a row) taken out: the merge's result, by
    (distance, index) with the excluded point last, without sorting again."""
    keep = np.ones(i.shape, bool)
    if exclude is not None:
        keep = i != np.asarray(exclude)[:, None]
        keep[keep.all(1), -1] = False  # rows without it: the last candidate goes
    rows = len(i)
    i, d = i[keep].reshape(rows, -1), d[keep].reshape(rows, -1)
    return np.ascontiguousarray(i[:, :kk]), np.ascontiguousarray(d[:, :kk])


def _distinct(points: Points) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(first member, inverse, counts) of the distinct points, when at most half are distinct."""
    parts = [points.metric, points.nominal]
    if points.codes is not None:
        parts.append(points.codes)

    def key(rows=slice(None)) -> np.ndarray:
        return np.hstack([p[rows].astype(np.float64) for p in parts])

    if len(points) > 8192:  # skip the full sort when evenly spaced rows are nearly all distinct
        probe = key(np.linspace(0, len(points) - 1, 2048).astype(np.int64))
        if len(np.unique(probe, axis=0)) > 0.9 * len(probe):
            return None
    key = key()
    _, first, inverse, counts = np.unique(key, axis=0, return_index=True, return_inverse=True,
                                          return_counts=True)
    if 2 * len(first) > len(points):
        return None
    return first, inverse.ravel(), counts


def _expand(members: np.ndarray, usable: np.ndarray, di: np.ndarray, dd: np.ndarray, kk: int,
            exclude: np.ndarray | None, own: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The kk best members of each query's distinct candidates ``di`` (sorted by distance
    ``dd``), by (distance, index). Only candidates up to the distance at which kk members are
    reached take part; missing places (too few members) get index −1 and distance inf."""
    nq = len(di)
    cum = np.cumsum(usable[di], axis=1)
    if own is not None:  # the excluded point is one member fewer of its own distinct point
        cum -= np.cumsum(di == own[:, None], axis=1)
    enough = cum >= kk
    reach = np.where(enough.any(1), dd[np.arange(nq), enough.argmax(1)], np.inf)
    q, j = np.nonzero(dd <= reach[:, None])               # (query, candidate) pairs that count
    point, d = di[q, j], dd[q, j]
    count = usable[point]
    pair = np.repeat(np.arange(len(q)), count)             # one row per member of each pair
    member = members[point[pair], np.arange(len(pair)) - np.repeat(np.cumsum(count) - count, count)]
    q, d = q[pair], d[pair]
    if exclude is not None:
        keep = member != exclude[q]
        q, d, member = q[keep], d[keep], member[keep]
    o = np.lexsort((member, d, q))
    q, d, member = q[o], d[o], member[o]
    rank = np.arange(len(q)) - np.searchsorted(q, np.arange(nq))[q]
    first = rank < kk
    out_i = np.full((nq, kk), -1, np.int64)
    out_d = np.full((nq, kk), np.inf)
    out_i[q[first], rank[first]] = member[first]
    out_d[q[first], rank[first]] = d[first]
    return out_i, out_d


class _Trees:
    """KD-trees over ``points``, one per group of equal nominal values (none beyond
    ``max_partitions`` groups: blocked brute force instead)."""

    def __init__(self, points: Points, max_partitions: int):
        self.points = points
        groups = [np.arange(len(points))]
        if points.nominal.shape[1]:
            keys, inverse = np.unique(points.nominal, axis=0, return_inverse=True)
            groups = [np.flatnonzero(inverse.ravel() == g) for g in range(len(keys))] \
                if len(keys) <= max_partitions else None
        self.groups = groups
        # unbalanced trees, midpoint splits, leaves of 32: built in half the time, queried a little faster
        # (the search is exact whatever the tree's shape: candidates are settled on exact distances)
        self.trees = None if groups is None else [cKDTree(points.metric[members], leafsize=32, balanced_tree=False,
                                                          compact_nodes=False) for members in groups]
        self.scale = float(np.abs(points.metric).max(initial=0.0))

    def search(self, queries: Points, kk: int, exclude: np.ndarray | None,
               bound: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The kk nearest points (1 ≤ kk ≤ available); within ``bound`` only, when given
        (:meth:`NeighbourIndex.query`)."""
        points = self.points
        if self.trees is None:
            return brute_force(points, queries, kk, exclude)
        n = len(points)
        m = max(points.n_attributes, 1)
        plan = _plan(points, queries)
        # the tree's own float distances may differ from the exact ones by rounding: a candidate
        # list is settled only when its farthest member is beyond the k-th distance by this margin
        slack = 64 * np.finfo(np.float64).eps * points.metric.shape[1] * max(
            self.scale, float(np.abs(queries.metric).max(initial=0.0)), 1.0)
        idx = np.empty((len(queries), kk), np.int64)
        dist = np.empty((len(queries), kk), np.float64)
        # queries go _QUERIES at a time: on coarse data, ties at the k-th distance refetch up to
        # 16x the candidates, and the candidates' distances of 20,000 queries took 0.5 GB
        # in a space-filling curve's order: each batch's queries are near each other, so the tree's
        # nodes they visit stay in the cache (a third of the search's time at 1M HMDA records);
        # every query's result is its own, whatever the order
        order = _spatial_order(queries.metric)
        for start in range(0, len(queries), _QUERIES):
            todo = order[start:start + _QUERIES]
            want = kk + (0 if exclude is None else 1) + _EXTRA
            while len(todo):
                # Fetch `want` candidates per nominal group. If a group's farthest fetched candidate
                # is not beyond the k-th distance, it may hold more points at exactly that distance
                # (with smaller indices): fetch again with more candidates until every query is settled.
                sub = queries.take(todo)
                ex = None if exclude is None else exclude[todo]
                # the tree's distances (metric part, unaveraged) of points within the bound are
                # below it, up to the margin for rounding
                reach = None if bound is None else bound[todo] * m * (1 + _RTOL) + slack
                i_s, d_s, unsure = _fetch(points, sub, self.groups, self.trees, want, kk, ex, plan, slack, reach)
                done = ~unsure
                idx[todo[done]], dist[todo[done]] = i_s[done], d_s[done]
                if want >= n:
                    idx[todo[unsure]], dist[todo[unsure]] = i_s[unsure], d_s[unsure]
                    break
                todo, want = todo[unsure], min(4 * want, n)
        idx[np.isinf(dist)] = -1  # places left empty by the bound
        return idx, dist / m


def _spatial_order(x: np.ndarray, bits: int = 4) -> np.ndarray:
    """The rows of ``x`` in Morton (Z-curve) order of their ranks per column, each cut into
    2^bits bins: rows close in every column come close together. Deterministic (stable sorts)."""
    n, c = x.shape
    codes = np.zeros(n, np.int64)
    if n < 2 or c == 0:
        return np.arange(n)
    for j in range(c):
        rank = np.empty(n, np.int64)
        rank[np.argsort(x[:, j], kind="stable")] = np.arange(n)
        b = rank * (1 << bits) // n
        for t in range(bits):
            codes |= ((b >> t) & 1) << (t * c + j) % 62
    return np.argsort(codes, kind="stable")


def _fetch(points: Points, queries: Points, groups, trees, want: int, kk: int,
           exclude: np.ndarray | None, plan: _Plan, slack: float,
           reach: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cand_i, cand_d, short = [], [], []
    for members, tree in zip(groups, trees):
        kg = min(want, len(members))
        i, _ = _tree_knn(tree, queries.metric, kg, reach)
        found = i < len(members)  # beyond the bound: an empty place, distance inf
        i = members[np.where(found, i, 0)]
        cand_i.append(i)
        cand_d.append(np.where(found, _distances(points, queries, plan, i), np.inf))  # exact: ties compare equal
        short.append(kg < len(members))
    idx, dist = _select(np.concatenate(cand_i, axis=1), np.concatenate(cand_d, axis=1), kk, exclude)
    unsure = np.zeros(len(queries), bool)
    for d_g, cut in zip(cand_d, short):
        if cut:  # (a group that left places empty gave every point within the bound)
            unsure |= np.isfinite(d_g[:, -1]) & (d_g[:, -1] <= dist[:, -1] * (1 + _RTOL) + slack)
    return idx, dist, unsure


def tie_order(ci: np.ndarray, cd: np.ndarray, kk: int, rtol: float = _RTOL) -> np.ndarray:
    """Per row, the positions of the kk best candidates by (distance, index), distances within a
    relative ``rtol`` of each other counting as equal (``_RTOL``, the margin CST's search allows
    between a tree's distances and the exact ones): the rule "ties go to the smaller index"
    then holds for mathematically equal distances that rounding left a few ulps apart (a record
    261 DM above one neighbour and 261 DM below another, after standardisation: CEC's Euclidean
    matching; CST's mixed distances are exact on their lattice and need no tolerance). Distances are
    sorted, and each one within ``rtol`` of the previous joins its tie class; the classes keep
    their order and the index orders each class. Vectorised over the rows."""
    o = np.argsort(cd, axis=1, kind="stable")
    d = np.take_along_axis(cd, o, 1)
    with np.errstate(invalid="ignore"):
        step = d[:, 1:] > d[:, :-1] * (1 + rtol) + np.finfo(np.float64).tiny
    tie_class = np.concatenate([np.zeros((len(d), 1), np.int64), np.cumsum(step, axis=1)], axis=1)
    within = np.lexsort((np.take_along_axis(ci, o, 1), tie_class), axis=1)[:, :kk]
    return np.take_along_axis(o, within, 1)


def _select(ci: np.ndarray, cd: np.ndarray, kk: int, exclude: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The kk best candidates per row by (distance, index), dropping the excluded point."""
    if exclude is not None:
        cd = np.where(ci == exclude[:, None], np.inf, cd)
    order = first_by_distance(ci, cd, kk)
    return np.take_along_axis(ci, order, 1), np.take_along_axis(cd, order, 1)


def first_by_distance(ci: np.ndarray, cd: np.ndarray, kk: int) -> np.ndarray:
    """``np.lexsort((ci, cd), axis=1)[:, :kk]``: by distance alone (one stable sort, a tenth of
    the time) where no two of a row's kk + 1 nearest distances are equal, by both keys elsewhere."""
    order = np.argsort(cd, axis=1, kind="stable")
    head = np.take_along_axis(cd, order[:, :kk + 1], 1)
    tied = np.flatnonzero((head[:, 1:] == head[:, :-1]).any(1))
    if len(tied):
        order[tied] = np.lexsort((ci[tied], cd[tied]), axis=1)
    return order[:, :kk]


def euclidean_knn(points: np.ndarray | cKDTree, queries: np.ndarray, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest ``points`` (rows, or a cKDTree of them) to every query, Euclidean distance.

    CEC's Algorithm 1 (Popoola & Sheppard, Definition 2) matches on the L2 distance between
    standardised financial features. Backed by a KD-tree (p = 2); distances are recomputed
    with one numpy formula, and ties — distances equal within the relative tolerance ``_RTOL``
    (:func:`tie_order`, CST's search margin) — go to the smaller point index, refetching more
    candidates while a tie at the k-th distance may hide a point
    with a smaller index. Fewer than k points: fewer columns. Returns (indices, distances)."""
    tree = points if isinstance(points, cKDTree) else None  # a tree built once for several searches
    points = tree.data if tree is not None else np.ascontiguousarray(points, dtype=np.float64).reshape(len(points), -1)
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
    tree = cKDTree(points) if tree is None else tree
    idx = np.empty((len(queries), kk), np.int64)
    dist = np.empty((len(queries), kk), np.float64)
    # one candidate beyond k settles a query unless it ties the k-th (then fetch 4x more); queries
    # in a space-filling curve's order keep the tree's nodes in the cache (20,000 into 5M: -38 %)
    todo, want = _spatial_order(queries), min(kk + 1, n)
    while len(todo):
        _, ci = tree.query(queries[todo], k=want, p=2)
        ci = np.asarray(ci, np.int64).reshape(len(todo), want)
        cd = np.sqrt(((points[ci] - queries[todo][:, None, :]) ** 2).sum(-1))
        order = tie_order(ci, cd, kk)
        i_s, d_s = np.take_along_axis(ci, order, 1), np.take_along_axis(cd, order, 1)
        # the farthest fetched candidate not beyond the k-th distance (up to the tie tolerance):
        # more may tie there
        unsure = (want < n) & (cd.max(axis=1) <= d_s.max(axis=1) * (1 + _RTOL))
        done = ~unsure
        idx[todo[done]], dist[todo[done]] = i_s[done], d_s[done]
        todo, want = todo[unsure], min(4 * want, n)
    return idx, dist
