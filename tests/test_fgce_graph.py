"""FGCE feature space, KDE and feasibility graphs (engines.feasibility.{space,kde,graph})."""
from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from aequum.engines.core.radius import brute_force_pairs
from aequum.engines.feasibility.graph import (FeasibilityGraph, build_graphs, eps_sweep,
                                       nearest_feasible_distances, reachability, shortest_costs,
                                       smallest_eps_without_singletons)
from aequum.engines.feasibility.kde import GaussianKDE, cv_bandwidth, edge_weights, scott_bandwidth
from aequum.engines.feasibility.space import FeatureSpace, n_bins

STUDENT = Path(__file__).resolve().parents[2] / "shared/data/FGCE/student.csv"


# ------------------------------------------------------------------ helpers

def random_space(seed: int, n: int = 100):
    """Random raw data with every feature kind and random constraints."""
    rng = np.random.default_rng(seed)
    names, kinds, levels, cols = [], [], [], []
    spec = [("num", "numeric", None), ("numi", "numeric", None), ("ord", "ordinal", 4),
            ("bin", "categorical", 2), ("cat", "categorical", 4), ("cat3", "categorical", 3)]
    for name, kind, L in spec:
        names.append(name)
        kinds.append(kind)
        if kind == "numeric":
            levels.append(None)
            cols.append(rng.normal(size=n) if name == "num" else rng.integers(0, 3, n).astype(float))
        else:
            levels.append([f"{name}{v}" for v in range(L)])
            cols.append(rng.integers(0, L, n).astype(float))
    X = np.column_stack(cols)
    choices = ["free", "increase", "decrease", "immutable"]
    mut = {nm: choices[rng.choice(4, p=[0.4, 0.25, 0.25, 0.1])] for nm in names}
    mut["cat"] = "free"
    if mut["num"] == "immutable":            # continuous values never tie: keep some edges
        mut["num"] = "increase"
    allowed = {(int(a), int(b)) for a, b in rng.integers(0, 4, (8, 2)) if a != b}
    return X, names, kinds, levels, mut, {"cat": allowed}


def brute_feasible(X, names, mut, trans, i, j) -> bool:
    """Feasibility straight from the raw values (independent of the encoding)."""
    for f, nm in enumerate(names):
        a, b = X[i, f], X[j, f]
        m = mut.get(nm, "free")
        if m == "immutable" and a != b or m == "increase" and b < a or m == "decrease" and b > a:
            return False
        if nm in trans and a != b and (int(a), int(b)) not in trans[nm]:
            return False
    return True


def student_space():
    pl = pytest.importorskip("polars")
    if not STUDENT.exists():
        pytest.skip(f"FGCE Student data not found at {STUDENT} (shared data absent)")
    df = pl.read_csv(STUDENT).drop("target")
    sex = df["sex"].to_numpy()
    df = df.drop("sex")
    ordinal = {"famsize": ["GT3", "LE3"], "nursery": ["no", "yes"]}
    names, kinds, levels, cols = [], [], [], []
    for c in df.columns:
        s = df[c]
        names.append(c)
        if c in ordinal or s.dtype == pl.String:
            lv = ordinal.get(c) or sorted(s.unique().to_list())
            kinds.append("ordinal" if c in ordinal else "categorical")
            levels.append(lv)
            cols.append(np.array([lv.index(v) for v in s.to_list()], float))
        else:
            kinds.append("numeric")
            levels.append(None)
            cols.append(s.cast(pl.Float64).to_numpy())
    mut = {c: "increase" for c in ["age", "famsize", "Medu", "Fedu", "nursery", "health"]}
    return FeatureSpace.build(np.column_stack(cols), names, kinds, levels, mut), sex


def to_nx(G: FeasibilityGraph) -> nx.DiGraph:
    D = nx.DiGraph()
    D.add_nodes_from(range(G.n))
    D.add_edges_from(zip(G.src.tolist(), G.dst.tolist()))
    return D


def random_graph(seed: int, n: int = 25, p: float = 0.08) -> FeasibilityGraph:
    rng = np.random.default_rng(seed)
    A = rng.random((n, n)) < p
    np.fill_diagonal(A, False)
    src, dst = np.nonzero(A)
    Z = rng.random((n, 3))
    d = np.sqrt(((Z[src] - Z[dst]) ** 2).sum(1))
    return FeasibilityGraph("g", np.arange(n) * 2 + 5, Z, 9.0, src, dst, d, rng.random(len(src)))


# ------------------------------------------------------------------ reproduction

def test_student_exact_statistics():
    space, sex = student_space()
    G = build_graphs(space, sex, 3.0)
    s0, s1 = G[0].stats(), G[1].stats()
    assert (s0["nodes"], s0["sccs"], s0["wccs"]) == (383, 319, 1)
    assert (s1["nodes"], s1["sccs"], s1["wccs"]) == (266, 229, 2)
    assert round(100 * s0["density"], 4) == 4.2158
    assert round(100 * s1["density"], 4) == 3.6856
    assert "Mjob=teacher" in space.columns and "famsize" in space.columns and "sex" not in space.names


# ------------------------------------------------------------------ feature space

def test_encoding_kinds():
    X = np.array([[1.0, 0, 0, 2], [3.0, 2, 1, 0], [5.0, 1, 1, 1]])
    sp_ = FeatureSpace.build(X, ["a", "o", "b", "c"], ["numeric", "ordinal", "categorical", "categorical"],
                             [None, ["lo", "mid", "hi"], ["n", "y"], ["x", "y", "z"]],
                             {"a": "increase", "c": "immutable"})
    assert sp_.columns == ["a", "o", "b", "c=x", "c=y", "c=z"]
    np.testing.assert_allclose(sp_.Z[:, 0], [0, 0.5, 1])
    np.testing.assert_allclose(sp_.Z[:, 1], [0, 1, 0.5])
    np.testing.assert_allclose(sp_.Z[:, 2], [0, 1, 1])
    np.testing.assert_allclose(sp_.Z[:, 3:], [[0, 0, 1], [1, 0, 0], [0, 1, 0]])
    assert sp_.direction.tolist() == [1, 0, 0, 0, 0, 0]
    assert sp_.immutable.tolist() == [False, False, False, True, True, True]
    assert sp_.slices["c"] == slice(3, 6)
    np.testing.assert_allclose(sp_.encoder.inverse(sp_.Z), X)          # the shared Encoder's inverse
    with pytest.raises(ValueError, match="'o'"):
        FeatureSpace.build(np.where(X == 2, np.nan, X), ["a", "o", "b", "c"],
                           ["numeric", "ordinal", "categorical", "categorical"],
                           [None, ["lo", "mid", "hi"], ["n", "y"], ["x", "y", "z"]])
    const = FeatureSpace.build(np.ones((3, 1)), ["k"], ["numeric"], [None])
    assert (const.Z == 0).all()


def test_discretisation():
    x = np.arange(100, dtype=float)
    assert n_bins(x) == 6
    sp_ = FeatureSpace.build(x[:, None], ["x"], ["numeric"], [None], discretise=["x"])
    assert sp_.bins["x"] == 6
    np.testing.assert_allclose(np.unique(sp_.Z[:, 0]), np.arange(6) / 5)
    assert n_bins(np.array([0.0, 1.0, 2.0, 3.0])) == 3        # range 3 < log2(4)+1 = 3, 6
    assert n_bins(np.array([0.0, 0.5, 0.7, 1.0])) == 1        # range 1


def test_unknown_names_raise():
    X = np.array([[0.0, 1], [1.0, 0]])
    args = (X, ["a", "c"], ["numeric", "categorical"], [None, ["u", "v"]])
    with pytest.raises(ValueError, match="'zz'"):
        FeatureSpace.build(*args, mutability={"zz": "free"})
    with pytest.raises(ValueError, match="'sideways'"):
        FeatureSpace.build(*args, mutability={"a": "sideways"})
    with pytest.raises(ValueError, match="'yy'"):
        FeatureSpace.build(*args, transitions={"yy": [("u", "v")]})
    with pytest.raises(ValueError, match="'w'"):
        FeatureSpace.build(*args, transitions={"c": [("u", "w")]})
    with pytest.raises(ValueError, match="numeric"):
        FeatureSpace.build(*args, transitions={"a": [(0, 1)]})


def test_transitions_and_onehot_direction():
    X = np.array([[0.0], [1.0], [2.0]])
    sp_ = FeatureSpace.build(X, ["c"], ["categorical"], [["x", "y", "z"]],
                             transitions={"c": [("x", "y"), (1, 2)]})
    i, j = np.meshgrid(np.arange(3), np.arange(3), indexing="ij")
    ok = sp_.feasible_pairs(i.ravel(), j.ravel()).reshape(3, 3)
    assert ok.tolist() == [[True, True, False], [False, True, True], [False, False, True]]
    dec = FeatureSpace.build(X, ["c"], ["categorical"], [["x", "y", "z"]], {"c": "decrease"})
    ok = dec.feasible_pairs(i.ravel(), j.ravel()).reshape(3, 3)
    assert ok.tolist() == [[True, False, False], [True, True, False], [True, True, True]]


# ------------------------------------------------------------------ graphs

@pytest.mark.parametrize("seed", range(6))
def test_edges_respect_constraints_and_match_brute_force(seed):
    X, names, kinds, levels, mut, trans = random_space(seed)
    space = FeatureSpace.build(X, names, kinds, levels, mut, trans)
    labels = np.random.default_rng(seed + 100).integers(0, 2, len(X))
    eps = 1.0 + 0.1 * seed
    graphs = build_graphs(space, labels, eps)
    counts = []
    for g, G in graphs.items():
        rows = np.flatnonzero(labels == g)
        np.testing.assert_array_equal(G.nodes, rows)
        bi, bj, bd = brute_force_pairs(space.Z[rows], eps)
        keep = np.array([brute_feasible(X, names, mut, trans, rows[a], rows[b]) for a, b in zip(bi, bj)],
                        bool)
        got = set(zip(G.nodes[G.src].tolist(), G.nodes[G.dst].tolist()))
        want = set(zip(rows[bi[keep]].tolist(), rows[bj[keep]].tolist()))
        assert got == want
        counts.append((len(got), len(bi)))
        for a, b in got:
            assert labels[a] == labels[b] == g
            assert brute_feasible(X, names, mut, trans, a, b)
        np.testing.assert_allclose(G.dist, np.linalg.norm(G.Z[G.src] - G.Z[G.dst], axis=1))
    edges, pairs = np.sum(counts, axis=0)
    assert 0 < edges < pairs        # not vacuous: there are edges, and constraints removed some


def test_empty_single_and_tiny_eps():
    X, names, kinds, levels, mut, trans = random_space(0, n=10)
    space = FeatureSpace.build(X, names, kinds, levels)
    labels = np.array([0] * 9 + [1])
    G = build_graphs(space, labels, 1e-9, groups=[0, 1, 7], weights="face")
    empty = G[7].stats()
    assert {k: empty[k] for k in ("nodes", "edges", "sccs", "wccs", "density", "singletons")} == \
        dict(nodes=0, edges=0, sccs=0, wccs=0, density=0.0, singletons=0)
    one = G[1].stats()
    assert (one["nodes"], one["edges"], one["sccs"], one["wccs"], one["density"], one["singletons"]) == \
        (1, 0, 1, 1, 0.0, 1)
    tiny = G[0].stats()
    assert (tiny["nodes"], tiny["edges"], tiny["sccs"], tiny["singletons"], tiny["density"]) == (9, 0, 9, 9, 0.0)
    assert reachability(G[7], [], []).shape == (0, 0)
    assert len(shortest_costs(G[7], [], [], "path")[0]) == 0
    eps = smallest_eps_without_singletons(space, labels, groups=[0, 1, 7])
    assert eps[1] == np.inf and eps[7] == 0.0 and np.isfinite(eps[0])
    rows = eps_sweep(space, labels, [1e-9, 0.5], groups=[7])
    assert [r["nodes"] for r in rows] == [0, 0]


@pytest.mark.parametrize("seed", range(4))
def test_reachability_matches_networkx(seed):
    G = random_graph(seed)
    D = to_nx(G)
    rng = np.random.default_rng(seed)
    S, T = rng.choice(G.n, 10, replace=False), rng.choice(G.n, 12, replace=False)
    for reflexive in (True, False):
        R = reachability(G, S, T, local=True, reflexive=reflexive).toarray()
        for a, s in enumerate(S):
            desc = nx.descendants(D, s) | ({s} if reflexive else set())
            if any(u in desc for u in D.predecessors(s)):     # s lies on a cycle
                desc |= {s}
            assert R[a].tolist() == [t in desc for t in T]
    # global row numbers address the same nodes
    R_glob = reachability(G, G.nodes[S], G.nodes[T]).toarray()
    np.testing.assert_array_equal(R_glob, reachability(G, S, T, local=True).toarray())
    with pytest.raises(ValueError):
        reachability(G, [0], [5])          # row 0 is not a node (nodes are 5, 7, ...)


@pytest.mark.parametrize("seed", range(3))
def test_shortest_costs_match_networkx(seed):
    G = random_graph(seed, p=0.12)
    D = to_nx(G)
    for (a, b), w in zip(zip(G.src.tolist(), G.dst.tolist()), G.weight):
        D[a][b]["w"] = w
    S, T = np.arange(0, G.n, 3), np.arange(1, G.n, 2)
    hop = dict(nx.all_pairs_shortest_path_length(D))
    wt = dict(nx.all_pairs_dijkstra_path_length(D, weight="w"))
    for cost, ref in (("hops", hop), ("path", wt)):
        r, c, v = shortest_costs(G, S, T, cost, local=True)
        got = {(S[a], T[b]): x for a, b, x in zip(r, c, v)}
        want = {(s, t): ref[s][t] for s in S for t in T if t in ref[s]}
        assert got.keys() == want.keys()
        for k in got:
            assert got[k] == pytest.approx(want[k])
    r, c, v = shortest_costs(G, S, T, "distance", local=True)
    np.testing.assert_allclose(v, np.linalg.norm(G.Z[S[r]] - G.Z[T[c]], axis=1))
    assert set(zip(S[r], T[c])) == set(want)


def test_eps_sweep_and_smallest_eps():
    X, names, kinds, levels, mut, trans = random_space(3, n=50)
    space = FeatureSpace.build(X, names, kinds, levels, mut, trans)
    labels = np.random.default_rng(1).integers(0, 2, len(X))
    grid = [0.2, 0.5, 0.8, 1.1, 1.5, 2.0, 3.0]
    rows = eps_sweep(space, labels, grid)
    for g in (0, 1):
        edges = [r["edges"] for r in rows if r["group"] == g]
        assert edges == sorted(edges)
        for e, r in zip(grid, [r for r in rows if r["group"] == g]):
            assert r["edges"] == build_graphs(space, labels, e)[g].stats()["edges"]
    best = smallest_eps_without_singletons(space, labels)
    for g in (0, 1):
        rows_g = np.flatnonzero(labels == g)
        bi, bj, bd = brute_force_pairs(space.Z[rows_g], 10.0)
        ok = space.feasible_pairs(rows_g[bi], rows_g[bj])
        near = np.full(len(rows_g), np.inf)
        np.minimum.at(near, bi[ok], bd[ok])
        np.minimum.at(near, bj[ok], bd[ok])
        assert best[g] == pytest.approx(near.max())
        np.testing.assert_allclose(nearest_feasible_distances(space, rows_g), near)
        if np.isfinite(best[g]):
            assert build_graphs(space, labels, best[g])[g].stats()["singletons"] == 0
            assert build_graphs(space, labels, best[g] * (1 - 1e-6))[g].stats()["singletons"] > 0


def test_weights_attached():
    X, names, kinds, levels, mut, trans = random_space(2, n=40)
    space = FeatureSpace.build(X, names, kinds, levels, mut)
    labels = np.zeros(len(X), int)
    G = build_graphs(space, labels, 1.5, weights="reference")[0]
    kde = GaussianKDE.fit(space.Z)
    mid = 0.5 * (space.Z[G.src] + space.Z[G.dst])
    np.testing.assert_allclose(G.weight, G.dist ** 2 / (kde.density(mid) + 1e-8))
    with pytest.raises(ValueError, match="without edge weights"):
        build_graphs(space, labels, 1.5)[0].weights


# ------------------------------------------------------------------ KDE

def direct_kde(P, x, h):
    d = P.shape[1]
    return np.mean([np.exp(-np.sum((x - p) ** 2) / (2 * h * h)) for p in P]) / (2 * np.pi * h * h) ** (d / 2)


def test_kde_direct_formula():
    rng = np.random.default_rng(0)
    P, Q = rng.random((7, 3)), rng.random((4, 3))
    h = np.mean(P.std(0, ddof=1)) * 7 ** (-1 / 7)
    assert scott_bandwidth(P) == pytest.approx(h)
    kde = GaussianKDE.fit(P)
    np.testing.assert_allclose(kde.density(Q), [direct_kde(P, q, h) for q in Q], rtol=1e-10)
    i, j = np.array([0, 1, 2]), np.array([3, 4, 5])
    dist = np.linalg.norm(P[i] - P[j], axis=1)
    dens = np.array([direct_kde(P, (P[a] + P[b]) / 2, h) for a, b in zip(i, j)])
    np.testing.assert_allclose(edge_weights(P, i, j, dist, "face"), dist / dens, rtol=1e-10)
    np.testing.assert_allclose(edge_weights(P, i, j, dist, "reference"), dist ** 2 / (dens + 1e-8), rtol=1e-10)


def test_kde_cv_and_sample():
    rng = np.random.default_rng(1)
    P = rng.random((12, 2))
    grid = np.array([0.05, 0.1, 0.2, 0.4, 0.8])

    def loo(h):
        return sum(np.log(direct_kde(np.delete(P, k, 0), P[k], h)) for k in range(len(P)))
    assert cv_bandwidth(P, grid) == grid[int(np.argmax([loo(h) for h in grid]))]
    big = rng.random((500, 2))
    sub = GaussianKDE.fit(big, sample=100, seed=3)
    assert len(sub.points) == 100 and sub.bandwidth == pytest.approx(scott_bandwidth(big))
    again = GaussianKDE.fit(big, sample=100, seed=3)
    np.testing.assert_array_equal(sub.points, again.points)
    full = GaussianKDE.fit(big)
    q = rng.random((20, 2)) * 0.6 + 0.2
    # an unbiased Monte Carlo estimate of the same KDE: averaging over seeds converges to it
    mc = np.mean([GaussianKDE.fit(big, sample=100, seed=s).density(q) for s in range(40)], axis=0)
    np.testing.assert_allclose(mc, full.density(q), rtol=0.08)
    assert GaussianKDE.fit(big, sample=1000).points.shape == big.shape


def test_duplicate_points_zero_length_edges():
    X = np.array([[0.0, 1], [0.0, 1], [1.0, 0], [0.5, 1]])
    space = FeatureSpace.build(X, ["a", "b"], ["numeric", "categorical"], [None, ["n", "y"]],
                               {"a": "increase"})
    G = build_graphs(space, np.zeros(4, int), 2.0, weights="face")[0]
    assert G.distances.nnz == G.n_edges                       # zero lengths kept explicitly
    s = G.stats()
    assert s["scc_labels"][0] == s["scc_labels"][1] != s["scc_labels"][3]
    r, c, v = shortest_costs(G, [0], [1, 3], "path")
    assert r.tolist() == [0, 0] and c.tolist() == [0, 1] and v[0] == 0.0 and v[1] > 0
    r, c, v = shortest_costs(G, [0], [0, 1], "hops")
    assert v.tolist() == [0.0, 1.0]
    assert not reachability(G, [2], [0, 1, 3]).toarray().any()   # a may only increase


def test_no_rows():
    space = FeatureSpace.build(np.zeros((0, 2)), ["a", "c"], ["numeric", "categorical"], [None, ["u", "v", "w"]])
    assert space.Z.shape == (0, 4)
    G = build_graphs(space, np.zeros(0, int), 1.0, groups=[0], weights="face")
    assert G[0].stats()["nodes"] == 0
    assert eps_sweep(space, np.zeros(0, int), [0.5, 1.0]) == []
