"""FGCE feasibility graphs: ε-radius directed graphs of feasible moves, one per group.

Fragkathoulas et al., *Feasible group counterfactual explanations* (FGCE, §4), and
docs/engines.md (FGCE):

* nodes are *all* records of a group (the protected attribute is immutable, so groups never
  connect; here each group's graph is built from that group's rows only);
* a directed edge i → j exists iff ‖z_i − z_j‖₂ ≤ ε and the move respects every feature
  constraint (:meth:`FeatureSpace.feasible_pairs`); pairs come from the blocked KD-tree radius
  search :func:`engines.core.radius.radius_pairs`;
* optional edge weights by the KDE at the edge midpoint (:mod:`engines.feasibility.kde`);
* graph statistics (nodes, edges, SCCs, WCCs, density = edges / (n(n−1)), singletons);
* reachability A_x (nodes reachable from x) through the SCC condensation, and the three costs
  of a reachable pair: Euclidean distance (default), shortest-path weight, hop count.

Reproduction target (NOTES): Student data grouped by ``sex`` at ε = 3 gives group 0: 383
nodes, 319 SCCs, 1 WCC, density 4.2158 %; group 1: 266 nodes, 229 SCCs, 2 WCCs, 3.6856 %.

Node indices: every graph keeps ``nodes`` (global row numbers of the space, sorted); edges and
labels use local positions 0..n−1. The query functions take global row numbers unless
``local=True``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components, dijkstra, shortest_path
from scipy.spatial import cKDTree

from aequum.engines.core.radius import radius_pairs
from aequum.engines.feasibility.kde import GaussianKDE, edge_weights
from aequum.engines.feasibility.space import FeatureSpace

_BLOCK_FLOATS = 1 << 22


@dataclass
class FeasibilityGraph:
    """One group's feasibility graph. Edges (``src[t]`` → ``dst[t]``, local indices, sorted by
    (src, dst)) with Euclidean length ``dist[t]`` and, when requested, ``weight[t]``."""

    group: object
    nodes: np.ndarray                 # global row numbers, sorted
    Z: np.ndarray                     # the group's encoded rows (len(nodes) × width)
    eps: float
    src: np.ndarray
    dst: np.ndarray
    dist: np.ndarray
    weight: np.ndarray | None = None
    _stats: dict | None = field(default=None, repr=False, compare=False)

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def n_edges(self) -> int:
        return len(self.src)

    def _csr(self, data: np.ndarray) -> sp.csr_matrix:
        # built from sorted edges directly, so explicit zeros (zero-length edges) are kept
        indptr = np.zeros(self.n + 1, np.int64)
        np.cumsum(np.bincount(self.src, minlength=self.n), out=indptr[1:])
        return sp.csr_matrix((data, self.dst.astype(np.int64), indptr), shape=(self.n, self.n))

    @property
    def adjacency(self) -> sp.csr_matrix:
        """Bool CSR (n × n): feasible directed edges."""
        return self._csr(np.ones(self.n_edges, dtype=bool))

    @property
    def distances(self) -> sp.csr_matrix:
        """CSR of edge lengths (explicit zeros kept for duplicated points)."""
        return self._csr(self.dist.astype(np.float64))

    @property
    def weights(self) -> sp.csr_matrix:
        """CSR of edge weights; ValueError when the graph was built without weights."""
        if self.weight is None:
            raise ValueError("feasibility graph was built without edge weights (weights=None)")
        return self._csr(self.weight.astype(np.float64))

    def local(self, rows: Iterable[int]) -> np.ndarray:
        """Local positions of global row numbers; ValueError for rows not in this graph."""
        rows = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows), np.int64).ravel()
        if self.n == 0:
            bad = np.ones(len(rows), bool)
            pos = np.zeros(len(rows), np.int64)
        else:
            pos = np.minimum(np.searchsorted(self.nodes, rows), self.n - 1)
            bad = self.nodes[pos] != rows
        if np.any(bad):
            raise ValueError(f"rows {rows[bad][:10].tolist()} are not nodes of group {self.group!r}")
        return pos

    def restrict(self, eps: float) -> "FeasibilityGraph":
        """The same group's graph at a smaller radius (edges with length ≤ eps)."""
        if eps > self.eps:
            raise ValueError(f"restrict: eps {eps} exceeds the built radius {self.eps}")
        keep = self.dist <= eps
        return FeasibilityGraph(self.group, self.nodes, self.Z, eps, self.src[keep], self.dst[keep],
                                self.dist[keep], None if self.weight is None else self.weight[keep])

    def components(self) -> tuple[np.ndarray, np.ndarray]:
        """(SCC labels, WCC labels) per local node."""
        s = self.stats()
        return s["scc_labels"], s["wcc_labels"]

    def stats(self) -> dict:
        """nodes, edges, sccs, wccs, density (edges / (n(n−1)), 0 for n < 2), singletons
        (nodes with neither in- nor out-edges), scc_labels, wcc_labels. Empty graphs give zeros."""
        if self._stats is not None:
            return self._stats
        n, m = self.n, self.n_edges
        if n == 0:
            scc = wcc = np.zeros(0, np.int32)
            n_scc = n_wcc = 0
        else:
            A = self.adjacency
            n_scc, scc = connected_components(A, directed=True, connection="strong")
            n_wcc, wcc = connected_components(A, directed=True, connection="weak")
        deg = np.bincount(self.src, minlength=n) + np.bincount(self.dst, minlength=n)
        self._stats = {
            "nodes": n, "edges": m, "sccs": int(n_scc), "wccs": int(n_wcc),
            "density": m / (n * (n - 1)) if n > 1 else 0.0,
            "singletons": int((deg == 0).sum()),
            "scc_labels": scc, "wcc_labels": wcc,
        }
        return self._stats


def _group_rows(group_labels, n: int, groups: Sequence | None) -> list[tuple[object, np.ndarray]]:
    labels = np.asarray(group_labels)
    if labels.ndim != 1 or len(labels) != n:
        raise ValueError(f"group labels: expected {n} labels, got shape {labels.shape}")
    if groups is None:
        groups = np.unique(labels).tolist()
    return [(g, np.flatnonzero(labels == g)) for g in groups]


def _build_one(space: FeatureSpace, group, nodes: np.ndarray, eps: float) -> FeasibilityGraph:
    Zg = space.Z[nodes]
    empty = np.empty(0, np.int64)
    if len(nodes) < 2:
        return FeasibilityGraph(group, nodes, Zg, float(eps), empty, empty, np.empty(0))
    if Zg.shape[1] == 0:                      # no features: every pair is at distance 0
        i, j = np.nonzero(~np.eye(len(nodes), dtype=bool))
        d = np.zeros(len(i))
    else:
        # constraints filter each block of pairs as the KD-tree finds them
        i, j, d = radius_pairs(Zg, eps, keep=lambda a, b: space.feasible_pairs(nodes[a], nodes[b]))
        return FeasibilityGraph(group, nodes, Zg, float(eps), i, j, d)
    ok = space.feasible_pairs(nodes[i], nodes[j])
    return FeasibilityGraph(group, nodes, Zg, float(eps), i[ok], j[ok], d[ok])


def build_graphs(space: FeatureSpace, group_labels, eps: float, weights: str | None = None,
                 groups: Sequence | None = None, kde: GaussianKDE | None = None,
                 bandwidth: str | float = "scott", sample: int | None = None,
                 seed: int = 0) -> dict[object, FeasibilityGraph]:
    """One :class:`FeasibilityGraph` per group (FGCE §4), keyed by group label.

    ``group_labels``: one label per row of ``space.Z`` (e.g. the protected attribute);
    ``groups``: the groups to build (default: every distinct label; a listed group with no rows
    gives an empty graph). ``weights``: None, "face" (d / KDE(mid)) or "reference"
    (d² / (KDE(mid) + 1e−8)); the KDE (``kde``, else fitted on *all* rows of the space with
    ``bandwidth`` / ``sample`` / ``seed``) describes the whole data set's density.
    """
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if weights not in (None, "face", "reference"):
        raise ValueError(f"unknown edge weights {weights!r} (None | face | reference)")
    graphs = {g: _build_one(space, g, rows, eps) for g, rows in _group_rows(group_labels, space.n, groups)}
    if weights is not None:
        if kde is None and space.n:
            kde = GaussianKDE.fit(space.Z, bandwidth, sample, seed)
        for G in graphs.values():
            G.weight = edge_weights(space.Z, G.nodes[G.src], G.nodes[G.dst], G.dist, weights, kde=kde)
    return graphs


STAT_KEYS = ("nodes", "edges", "sccs", "wccs", "density", "singletons")


def eps_sweep(space: FeatureSpace, group_labels, eps_grid: Sequence[float],
              groups: Sequence | None = None) -> list[dict]:
    """Graph statistics per (ε, group): one radius search at max(ε), then restriction.

    Returns rows {eps, group, nodes, edges, sccs, wccs, density, singletons}, ε ascending.
    """
    grid = sorted(float(e) for e in eps_grid)
    if not grid:
        return []
    big = build_graphs(space, group_labels, grid[-1], groups=groups)
    out = []
    for e in grid:
        for g, G in big.items():
            s = G.restrict(e).stats()
            out.append({"eps": e, "group": g, **{k: s[k] for k in STAT_KEYS}})
    return out


def nearest_feasible_distances(space: FeatureSpace, nodes: np.ndarray) -> np.ndarray:
    """Per node of a group, the smallest distance to another node of the group joined to it by
    a feasible edge in either direction (inf when there is none).

    Exact: k nearest neighbours by KD-tree, k doubled for nodes whose k nearest hold no
    feasible partner (any unseen neighbour is at least as far as the k-th). Distances are
    recomputed with :func:`radius_pairs`' formula, so ε = the returned value includes the edge.
    """
    nodes = np.asarray(nodes, np.int64)
    n = len(nodes)
    out = np.full(n, np.inf)
    if n < 2:
        return out
    Zg = space.Z[nodes]
    tree = cKDTree(Zg)
    todo = np.arange(n)
    k = min(16, n - 1)
    while len(todo):
        _, nb = tree.query(Zg[todo], k=k + 1)
        nb = np.asarray(nb).reshape(len(todo), k + 1)
        src = np.repeat(todo, k + 1)
        dst = nb.ravel()
        keep = (dst != src) & (dst < n)
        src, dst = src[keep], dst[keep]
        ok = space.feasible_pairs(nodes[src], nodes[dst]) | space.feasible_pairs(nodes[dst], nodes[src])
        d = np.sqrt(((Zg[src[ok]] - Zg[dst[ok]]) ** 2).sum(1))
        np.minimum.at(out, src[ok], d)
        found = np.zeros(n, bool)
        found[src[ok]] = True
        if k >= n - 1:
            break
        todo = todo[~found[todo]]
        k = min(2 * k, n - 1)
    return out


def smallest_eps_without_singletons(space: FeatureSpace, group_labels,
                                    groups: Sequence | None = None) -> dict[object, float]:
    """Per group, the smallest ε at which the feasibility graph has no singleton node.

    A node stops being a singleton exactly when ε reaches its nearest feasible-neighbour
    distance (:func:`nearest_feasible_distances`), so a bisection over the sorted distinct
    nearest-feasible distances ends at their maximum; that maximum is returned directly.
    inf when some node has no feasible partner at any ε (e.g. a one-node group); 0.0 for an
    empty group. The overall answer for all groups is the max of the values.
    """
    out = {}
    for g, rows in _group_rows(group_labels, space.n, groups):
        d = nearest_feasible_distances(space, rows)
        out[g] = float(d.max()) if len(d) else 0.0
    return out


# ------------------------------------------------------------------ reachability and costs

def _positions(graph: FeasibilityGraph, idx, local: bool) -> np.ndarray:
    idx = np.asarray(idx, np.int64).ravel()
    if local:
        if len(idx) and (idx.min() < 0 or idx.max() >= graph.n):
            raise ValueError(f"local node index out of range 0..{graph.n - 1}")
        return idx
    return graph.local(idx)


def _topological_layers(k: int, cs: np.ndarray, cd: np.ndarray) -> list[np.ndarray]:
    """Kahn's layers of a DAG on 0..k−1 with edges cs → cd."""
    indeg = np.bincount(cd, minlength=k)
    order = np.argsort(cs, kind="stable")
    cs, cd = cs[order], cd[order]
    start = np.searchsorted(cs, np.arange(k + 1))
    layers, frontier = [], np.flatnonzero(indeg == 0)
    while len(frontier):
        layers.append(frontier)
        lo, hi = start[frontier], start[frontier + 1]
        succ = cd[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])] if len(frontier) else cd[:0]
        np.subtract.at(indeg, succ, 1)
        frontier = np.unique(succ[indeg[succ] == 0])
    return layers


def reachability(graph: FeasibilityGraph, sources, targets, local: bool = False,
                 reflexive: bool = True) -> sp.csr_matrix:
    """Bool CSR (len(sources) × len(targets)): is ``targets[c]`` reachable from ``sources[r]``
    by a directed path of feasible edges (A_x of FGCE §4)?

    Computed on the SCC condensation: all nodes of one SCC reach the same set, so the target
    sets are propagated as bit sets over the condensation DAG in reverse topological order.
    ``reflexive``: a node reaches itself (empty path); otherwise only through a cycle.
    """
    S = _positions(graph, sources, local)
    T = _positions(graph, targets, local)
    if len(S) == 0 or len(T) == 0 or graph.n == 0:
        return sp.csr_matrix((len(S), len(T)), dtype=bool)
    k, lab = connected_components(graph.adjacency, directed=True, connection="strong")
    size = np.bincount(lab, minlength=k)
    cs, cd = lab[graph.src], lab[graph.dst]
    cross = cs != cd
    pairs = np.unique(np.stack([cs[cross], cd[cross]], 1), axis=0) if cross.any() else np.zeros((0, 2), np.int64)
    cs, cd = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
    # own[c]: targets inside SCC c, packed bits
    tb = (len(T) + 7) // 8
    own = np.zeros((k, len(T)), bool)
    own[lab[T], np.arange(len(T))] = True
    own = np.packbits(own, axis=1)
    strict = np.zeros((k, tb), np.uint8)      # reachable by a path of ≥ 1 edge
    big = size > 1
    strict[big] = own[big]                    # inside a cycle every member is reachable
    full = own.copy()                         # reachable by a path of ≥ 0 edges
    order = np.argsort(cs, kind="stable")
    cs, cd = cs[order], cd[order]
    start = np.searchsorted(cs, np.arange(k + 1))
    for layer in reversed(_topological_layers(k, cs, cd)):
        has = start[layer + 1] > start[layer]
        lay = layer[has]
        if len(lay):
            idx = np.concatenate([np.arange(start[c], start[c + 1]) for c in lay])
            seg = np.concatenate([[0], np.cumsum(start[lay + 1] - start[lay])[:-1]])
            acc = np.bitwise_or.reduceat(full[cd[idx]], seg, axis=0)
            strict[lay] |= acc
            full[lay] |= acc
    bits = full if reflexive else strict
    out = []
    step = max(1, _BLOCK_FLOATS // max(len(T), 1))
    for s in range(0, len(S), step):
        rows = np.unpackbits(bits[lab[S[s:s + step]]], axis=1, count=len(T)).astype(bool)
        out.append(sp.csr_matrix(rows))
    return sp.vstack(out, format="csr") if len(out) > 1 else out[0]


def shortest_costs(graph: FeasibilityGraph, sources, targets, cost: str = "distance",
                   local: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Costs of reachable (source, target) pairs as (rows, cols, costs), rows/cols indexing
    ``sources`` / ``targets`` (FGCE §4 cost options; reflexive: a node reaches itself at 0).

    ``cost="distance"``: Euclidean ‖z_s − z_t‖ if reachable (default); ``"path"``: shortest
    path weight over the edge weights (graph built with ``weights``); ``"hops"``: BFS hop count.
    Pairs are sorted by (row, col); feed them to ``selection.Reach.from_pairs``.
    """
    if cost not in ("distance", "path", "hops"):
        raise ValueError(f"unknown cost {cost!r} (distance | path | hops)")
    S = _positions(graph, sources, local)
    T = _positions(graph, targets, local)
    empty = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    if len(S) == 0 or len(T) == 0 or graph.n == 0:
        if cost == "path":
            graph.weights   # still report a missing weight
        return empty
    if cost == "distance":
        R = reachability(graph, S, T, local=True).tocoo()
        r, c = R.row.astype(np.int64), R.col.astype(np.int64)
        o = np.lexsort((c, r))
        r, c = r[o], c[o]
        return r, c, np.sqrt(((graph.Z[S[r]] - graph.Z[T[c]]) ** 2).sum(1))
    M = graph.weights if cost == "path" else graph.adjacency.astype(np.float64)
    rows, cols, vals = [], [], []
    step = max(1, _BLOCK_FLOATS // max(graph.n, 1))
    for s in range(0, len(S), step):
        if cost == "path":
            D = dijkstra(M, directed=True, indices=S[s:s + step])
        else:
            D = shortest_path(M, directed=True, unweighted=True, indices=S[s:s + step])
        D = np.atleast_2d(D)[:, T]
        r, c = np.nonzero(np.isfinite(D))
        rows.append(r + s)
        cols.append(c)
        vals.append(D[r, c])
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
