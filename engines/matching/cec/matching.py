"""CEC's label-stratified nearest-neighbour counterfactuals (Popoola & Sheppard, Algorithm 1).

Each record's counterfactual x̃ is the nearest real record of the other group within the same
stratum (the label y, or the decision when there is no label), under the L2 distance between
the financial features F standardised with the audited records' mean and standard deviation
(Definition 2). One exact, tie-stable index per (stratum, group) partition
(``engines.core.knn.euclidean_knn``); matches farther than τ are rejected when τ > 0.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from aequum.engines.core.knn import euclidean_knn


@dataclass
class Matches:
    """One audited unit's factuals (positions into the records) and their counterparts.

    ``counterpart`` is -1 where the opposite partition is empty; ``matched`` is False there and
    where the nearest counterpart lies beyond τ (its distance is still reported).
    """

    factual: np.ndarray
    group: np.ndarray
    stratum: np.ndarray
    counterpart: np.ndarray
    distance: np.ndarray
    matched: np.ndarray
    empty: list[tuple[int, int, int]]   # (stratum, group, factuals) with no opposite partition

    def __len__(self) -> int:
        return len(self.factual)


def standardise(X: np.ndarray, reference: np.ndarray | None = None, overwrite: bool = False) -> np.ndarray:
    """z-scores with the records' own mean and standard deviation (σ = 0 -> 1), or with those of
    ``reference`` (Algorithm 1: training statistics for held-out records). ``overwrite``: in
    ``X``'s own memory (a float64 matrix the caller no longer needs: 10M records × F)."""
    X = np.asarray(X, dtype=np.float64)
    R = X if reference is None else np.asarray(reference, dtype=np.float64)
    mean, scale = _z_statistics(R)
    return _z(np.subtract(X, mean, out=X if overwrite else None), scale)


def _z_statistics(R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The columns' mean and standard deviation (σ = 0 -> 1) of a records × features matrix."""
    mean, sd = R.mean(axis=0), R.std(axis=0)
    return mean, np.where(sd > 0, sd, 1.0)


def _row_sum(rows, width: int) -> np.ndarray:
    """Σ over the rows of the blocks ``rows`` yields, added in row order: numpy's sum over
    axis 0 of a C-ordered matrix adds its rows one after another, so the blocks' sum is the
    whole matrix's bit for bit (``_blocked_statistics`` is tested against ``_z_statistics``)."""
    total = None
    for block in rows:
        total = block.sum(axis=0) if total is None else np.add.reduce(np.vstack([total[None], block]), axis=0)
    return np.zeros(width) if total is None else total


def _blocked_statistics(R: np.ndarray, block: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_z_statistics` a block of rows at a time: numpy's ``std`` squares the deviations
    of the whole matrix at once (at 10M HMDA records, 0.34 GB beside the merit values)."""
    n, width = R.shape
    mean = _row_sum((R[s:s + block] for s in range(0, n, block)), width) / n
    squares = _row_sum((np.square(R[s:s + block] - mean) for s in range(0, n, block)), width)
    sd = np.sqrt(squares / n)
    return mean, np.where(sd > 0, sd, 1.0)


def _z(centred: np.ndarray, scale: np.ndarray) -> np.ndarray:
    centred /= scale  # in place: one matrix of temporaries fewer
    return centred


class Standardised:
    """:func:`standardise` of ``X`` (the records' raw merit values), computed for the rows asked
    for: ``Z[rows]`` equals ``standardise(X)[rows]`` bit for bit (the same statistics, the same
    elementwise steps), while the records' raw values are all that is held. At 10M HMDA records
    matching then holds one matrix of merit values instead of the z-scores beside the raw
    columns the model inputs are later built from."""

    def __init__(self, X: np.ndarray):
        self.raw = np.ascontiguousarray(X, dtype=np.float64)
        self.mean, self.scale = _blocked_statistics(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        """The z-scores of the records at positions ``rows`` (integers or a mask)."""
        rows = np.asarray(rows)
        picked = self.raw.take(np.flatnonzero(rows) if rows.dtype == bool else rows, axis=0)  # a copy
        return _z(np.subtract(picked, self.mean, out=picked), self.scale)


def records_digest(mask: np.ndarray) -> bytes:
    """A name for the set of records ``mask`` selects (SHA-256 of the packed mask): equal names,
    the same records."""
    return hashlib.sha256(np.packbits(mask)).digest()


def pool_jobs(groups: list[np.ndarray], factuals: list[np.ndarray],
              stratum: np.ndarray) -> tuple[list[tuple[int, tuple[tuple[int, int], ...]]], list[list]]:
    """The searches of Algorithm 1 for several units (``groups``: per unit 1 protected, 0
    reference, -1 not in it; ``factuals``: its queried positions, ascending), by pool: one entry
    ``(stratum, ((unit, side), ...))`` per pool of records searched — the factuals of ``side`` of
    each of those units in that stratum search the records of the other side, the same records
    for all of them (the race comparisons all search the White applicants of a stratum), so the
    pool's tree is built once — largest pool first; and per unit, as :func:`match` lists them,
    the (stratum, side, factuals) whose pool is empty."""
    by_pool: dict[tuple[int, bytes], list[tuple[int, int]]] = {}
    size: dict[tuple[int, bytes], int] = {}
    empty = []
    for u, (group, factual) in enumerate(zip(groups, factuals)):
        none, f_group, f_stratum = [], group[factual], stratum[factual]
        for s in np.unique(f_stratum):
            for a in (1, 0):
                n = int(np.count_nonzero((f_group == a) & (f_stratum == s)))
                if n == 0:
                    continue
                pool = (group == 1 - a) & (stratum == s)
                if not pool.any():
                    none.append((int(s), a, n))
                    continue
                key = (int(s), records_digest(pool))
                by_pool.setdefault(key, []).append((u, a))
                size[key] = int(np.count_nonzero(pool))
        empty.append(none)
    keys = sorted(by_pool, key=lambda k: -size[k])  # stable: ties keep their first search's order
    return [(k[0], tuple(by_pool[k])) for k in keys], empty


def _queries(group: np.ndarray, stratum: np.ndarray, factual: np.ndarray, s: int, a: int) -> np.ndarray:
    """The places among ``factual`` of its records of side ``a`` in stratum ``s``."""
    return np.flatnonzero((group[factual] == a) & (stratum[factual] == s))


def pool_matches(Z, groups: list[np.ndarray], factuals: list[np.ndarray], stratum: np.ndarray,
                 job: tuple[int, tuple[tuple[int, int], ...]]) -> list[tuple[int, int, int, np.ndarray, np.ndarray]]:
    """One pool's searches (an entry of :func:`pool_jobs`): per (unit, side), the nearest pool
    record (position) and its distance for each of its queries, in the factuals' order — as
    :func:`match` finds them. The pool's tree: sliding-midpoint splits, boxes not shrunk (half
    the build's time for a little more of the search's; the search is exact either way)."""
    s, searches = job
    u, a = searches[0]
    pool = np.flatnonzero((groups[u] == 1 - a) & (stratum == s))
    tree = cKDTree(Z[pool], balanced_tree=False, compact_nodes=False)
    out = []
    for u, a in searches:
        queries = factuals[u][_queries(groups[u], stratum, factuals[u], s, a)]
        i, d = euclidean_knn(tree, Z[queries], 1)
        out.append((u, s, a, pool[i[:, 0]], d[:, 0]))
    return out


def unit_matches(u: int, group: np.ndarray, stratum: np.ndarray, factual: np.ndarray,
                 empty: list[tuple[int, int, int]], found, max_distance: float = 0.0) -> Matches:
    """Unit ``u``'s :class:`Matches` from the pools' searches ``found`` (:func:`pool_matches`'
    entries of every pool) and its searches without a pool (``empty``): :func:`match`'s."""
    counterpart = np.full(len(factual), -1, np.int64)
    distance = np.full(len(factual), np.nan)
    for v, s, a, cp, d in found:
        if v == u:
            at = _queries(group, stratum, factual, s, a)
            counterpart[at], distance[at] = cp, d
    matched = counterpart >= 0
    if max_distance > 0:
        matched &= distance <= max_distance
    return Matches(factual, group[factual].astype(np.int8), stratum[factual].astype(np.int8),
                   counterpart, distance, matched, list(empty))


def match(Z: np.ndarray, group: np.ndarray, stratum: np.ndarray, max_distance: float = 0.0,
          factual: np.ndarray | None = None) -> Matches:
    """Algorithm 1 on standardised merit features ``Z`` (a matrix, or :class:`Standardised`).

    ``group``: 1 protected, 0 reference, -1 not in the unit (never matched nor a counterpart).
    ``stratum``: the label (or decision) per record. Queries of partition (s, a) search the
    index of (s, 1 − a); ties go to the smaller position (records come in a canonical order).
    ``factual``: the positions queried (ascending, all in the unit; default every record of the
    unit) — a sample still searches the whole other-group pool, so its matches are the full run's.
    (The engine runs the same searches a pool at a time: :func:`pool_jobs`.)
    """
    if factual is None:
        factual = np.flatnonzero(group >= 0)
    queried = np.zeros(len(group), bool)
    queried[factual] = True
    counterpart = np.full(len(factual), -1, np.int64)
    distance = np.full(len(factual), np.nan)
    empty = []
    for s in np.unique(stratum[factual]):
        for a in (1, 0):
            queries = np.flatnonzero(queried & (group == a) & (stratum == s))
            pool = np.flatnonzero((group == 1 - a) & (stratum == s))
            if len(queries) == 0:
                continue
            if len(pool) == 0:
                empty.append((int(s), a, len(queries)))
                continue
            i, d = euclidean_knn(Z[pool], Z[queries], 1)
            at = np.searchsorted(factual, queries)  # the queries' places among the factuals
            counterpart[at] = pool[i[:, 0]]
            distance[at] = d[:, 0]
    matched = counterpart >= 0
    if max_distance > 0:
        matched &= distance <= max_distance
    return Matches(factual, group[factual].astype(np.int8), stratum[factual].astype(np.int8),
                   counterpart, distance, matched, empty)


def match_to(Zq: np.ndarray, group_q: np.ndarray, stratum_q: np.ndarray, Zp: np.ndarray,
             group_p: np.ndarray, stratum_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1's query against another set's indices: each query record's nearest record of
    the other group in the same stratum among the pool records (Popoola & Sheppard build the
    indices on the training data; held-out records query them). Returns the pool position (−1
    when that partition is empty) and the distance per query; ties go to the smaller position."""
    counterpart = np.full(len(Zq), -1, np.int64)
    distance = np.full(len(Zq), np.nan)
    for s in np.unique(stratum_q):
        for a in (0, 1):
            queries = np.flatnonzero((group_q == a) & (stratum_q == s))
            pool = np.flatnonzero((group_p == 1 - a) & (stratum_p == s))
            if len(queries) and len(pool):
                i, d = euclidean_knn(Zp[pool], Zq[queries], 1)
                counterpart[queries], distance[queries] = pool[i[:, 0]], d[:, 0]
    return counterpart, distance


def baselines(M: np.ndarray, group: np.ndarray, stratum: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """b_{y,a}: the mean model input of the records in stratum y and group a (Principle 1)."""
    return gathered_baselines(lambda rows: M[rows], group, stratum)


def gathered_baselines(gather, group: np.ndarray, stratum: np.ndarray,
                       known: dict | None = None) -> dict[tuple[int, int], np.ndarray]:
    """:func:`baselines` of the model inputs that ``gather(rows)`` gives for the records at
    positions ``rows`` (a C-ordered matrix, the rows of ``M``), so that the inputs of every
    record are never one matrix: each partition's rows are gathered and averaged as ``M[rows]``
    would be (bit for bit). ``known``: the means already taken for other units, by stratum and
    records (:func:`records_digest`): a partition of the same records is not gathered again."""
    out = {}
    known = {} if known is None else known
    for s in np.unique(stratum[group >= 0]):
        for a in (0, 1):
            key = (int(s), records_digest(group == a))
            if key not in known:
                rows = np.flatnonzero((group == a) & (stratum == s))
                known[key] = gather(rows).mean(axis=0) if len(rows) else None
            if known[key] is not None:
                out[(int(s), a)] = known[key]
    return out
