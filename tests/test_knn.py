"""Exact kNN under the mixed Thanh distance: the KD-tree path equals all-pairs brute force."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aequum.engines.core.knn import NeighbourIndex, Points, brute_force, knn, knn_in_blocks
from aequum.engines.core.lattice import decimal_lattice


def random_points(rng, n, c, m, levels=3, grid=None):
    metric = rng.normal(size=(n, c)) if grid is None else rng.integers(0, grid, size=(n, c)) / grid
    return Points(metric, rng.integers(0, levels, size=(n, m)))


@pytest.mark.parametrize("c, m, grid", [(2, 0, None), (3, 2, None), (2, 1, 4), (1, 0, 3), (0, 3, None)])
def test_tree_equals_brute_force_including_ties(c, m, grid):
    rng = np.random.default_rng(c * 10 + m)
    pts = random_points(rng, 300, c, m, grid=grid)
    qs = random_points(rng, 40, c, m, grid=grid)
    for k in (1, 5, 17):
        i1, d1 = knn(pts, qs, k)
        i2, d2 = brute_force(pts, qs, k)
        assert np.array_equal(i1, i2), (k, c, m, grid)
        assert np.allclose(d1, d2)


def test_exclusion_of_self_and_small_sets():
    rng = np.random.default_rng(7)
    pts = random_points(rng, 50, 2, 1, grid=3)
    own = np.arange(50)
    i1, d1 = knn(pts, pts, 10, exclude=own)
    i2, d2 = brute_force(pts, pts, 10, exclude=own)
    assert np.array_equal(i1, i2) and not np.any(i1 == own[:, None])
    i, d = knn(pts.take(np.arange(3)), pts, 10)
    assert i.shape == (50, 3)


def test_many_nominal_groups_fall_back_to_brute_force():
    rng = np.random.default_rng(3)
    pts = Points(rng.normal(size=(200, 1)), rng.integers(0, 50, size=(200, 2)))
    qs = Points(rng.normal(size=(10, 1)), rng.integers(0, 50, size=(10, 2)))
    assert np.array_equal(knn(pts, qs, 5)[0], brute_force(pts, qs, 5)[0])


def test_distance_is_the_averaged_mixed_sum():
    pts = Points(np.array([[0.0, 0.0], [1.0, 0.5]]), np.array([[0], [1]]))
    q = Points(np.array([[0.0, 0.0]]), np.array([[1]]))
    i, d = knn(pts, q, 2)
    # point 0: L1 0 + mismatch 1 -> 1/3; point 1: L1 1.5 + 0 -> 0.5
    assert i.tolist() == [[0, 1]] and np.allclose(d, [[1 / 3, 0.5]])


def test_missing_values_are_refused():
    with pytest.raises(ValueError, match="missing"):
        Points(np.array([[np.nan]]), np.zeros((1, 0)))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 60), st.integers(1, 8), st.integers(0, 2), st.integers(0, 10_000))
def test_property_tree_equals_brute(n, k, m, seed):
    rng = np.random.default_rng(seed)
    pts = random_points(rng, n, 2, m, levels=2, grid=5)
    qs = random_points(rng, 7, 2, m, levels=2, grid=5)
    assert np.array_equal(knn(pts, qs, k)[0], brute_force(pts, qs, k)[0])


# ---- ties on a decimal grid ---------------------------------------------------------------
def test_decimal_lattice_finds_the_recorded_grid():
    codes, step = decimal_lattice(np.array([3.1, 3.0, 2.9, 4.2, 0.0]))
    assert step == 0.1 and codes.tolist() == [31, 30, 29, 42, 0]
    assert decimal_lattice(np.array([11.0, 48.0, 36.0]))[1] == 1.0
    assert decimal_lattice(np.array([13.5, 15.7, 18.3]))[1] == 0.1
    assert decimal_lattice(np.array([2.019, 2.1]))[1] == 0.001
    assert decimal_lattice(np.random.default_rng(0).normal(size=50)) is None  # continuous
    assert decimal_lattice(np.array([7947.678089944852, 13852.05])) is None


def test_decimal_lattice_in_blocks_equals_the_whole_array_at_once(monkeypatch):
    """Blocks (for memory at 10M values) change nothing: the first block off a grid, a later
    block off it, a value too large for the test in the last block."""
    import aequum.engines.core.lattice as lattice_module

    rng = np.random.default_rng(5)
    grid = np.round(rng.uniform(0, 100, 40), 2)
    cases = [grid, np.r_[grid, 0.123], np.r_[0.1234567, grid], np.r_[np.round(grid), 2.5],
             np.r_[grid, 3e9 + 0.5], np.r_[grid, 2.0 ** 60], np.r_[grid[:3], 1e12]]
    whole = [decimal_lattice(c) for c in cases]
    monkeypatch.setattr(lattice_module, "_BLOCK", 7)
    for case, expected in zip(cases, whole):
        got = decimal_lattice(case)
        assert (got is None) == (expected is None)
        if got is not None:
            assert got[1] == expected[1] and np.array_equal(got[0], expected[0])
    assert whole[0][1] == 0.01 and whole[1][1] == 0.001 and whole[3][1] == 0.1 and whole[5] is None


def _grid_points(rng, n, d=1):
    """Two numeric columns recorded to d decimals (coarse: many equal differences), z-scored
    as CST does, with their lattice; plus the raw integer codes for an exact reference."""
    raw = rng.integers(0, 12, size=(n, 2)) + np.array([30, 20])  # e.g. 3.0 .. 4.1 and 2.0 .. 3.1
    values = np.round(raw / 10 ** d, d)
    centre, scale = values.mean(0), values.std(0, ddof=1)
    codes = np.column_stack([decimal_lattice(values[:, j])[0] for j in range(2)])
    pts = Points((values - centre) / scale, np.zeros((n, 0)), codes, 10.0 ** -d / scale)
    return pts, raw, scale


def _exact_ranking(raw, scale, q, exclude=None, d=1):
    """Neighbours of point q by exact rational distance, ties by point index."""
    from fractions import Fraction

    w = [Fraction(1, 10 ** d) / Fraction(float(s)) for s in scale]
    dist = [sum(abs(int(raw[i, j]) - int(raw[q, j])) * w[j] for j in range(2)) for i in range(len(raw))]
    return [i for _, i in sorted((dist[i], i) for i in range(len(raw)) if i != exclude)]


def test_equal_differences_tie_exactly_and_follow_point_order():
    rng = np.random.default_rng(11)
    pts, raw, scale = _grid_points(rng, 160)
    own = np.arange(len(pts))
    ranking = np.array([_exact_ranking(raw, scale, q, q)[:40] for q in range(len(pts))])
    for k in (5, 17, 40):
        assert np.array_equal(knn(pts, pts, k, exclude=own)[0], ranking[:, :k]), k
        assert np.array_equal(brute_force(pts, pts, k, exclude=own)[0], ranking[:, :k]), k
    # the same search on the floats alone (no lattice) breaks ties by rounding noise instead
    floats = Points(pts.metric, pts.nominal)
    assert not np.array_equal(brute_force(floats, floats, 17, exclude=own)[0], ranking[:, :17])


def test_lattice_is_used_only_where_points_and_queries_share_it():
    rng = np.random.default_rng(2)
    pts, raw, scale = _grid_points(rng, 100)
    off = Points(pts.metric[:10] + 0.013, pts.nominal[:10])  # e.g. counterfactual centres
    assert np.array_equal(knn(pts, off, 7)[0], brute_force(pts, off, 7)[0])
    with pytest.raises(ValueError, match="both codes and steps"):
        Points(pts.metric, pts.nominal, pts.codes, None)


@pytest.mark.parametrize("k", [1, 7, 40, 120])
def test_coarse_points_searched_as_distinct_points_equal_brute_force(k):
    """Most points repeat another (a few grid values): the search runs over the distinct
    points and fills the k places with their members in index order."""
    rng = np.random.default_rng(k)
    pts, raw, scale = _grid_points(rng, 400)
    pts = Points(pts.metric[:, :1] if k == 120 else pts.metric, rng.integers(0, 2, size=(400, 1)),
                 pts.codes[:, :1] if k == 120 else pts.codes, pts.steps[:1] if k == 120 else pts.steps)
    own = np.arange(len(pts))
    for exclude in (None, own):
        i1, d1 = knn(pts, pts, k, exclude=exclude)
        i2, d2 = brute_force(pts, pts, k, exclude=exclude)
        assert np.array_equal(i1, i2) and np.array_equal(d1, d2), (k, exclude is None)


# ---- blocked search (CST at 10M: one block's structures in memory, not the group's) --------
def _search_sets(rng):
    """Point sets for every path of the search: floats with nominal groups, coarse grid points
    (searched as distinct points), many nominal groups (brute force), nominal only."""
    grid, _, _ = _grid_points(rng, 300)
    return {
        "floats": random_points(rng, 300, 3, 1),
        "coarse": Points(grid.metric[:, :1], rng.integers(0, 2, size=(300, 1)), grid.codes[:, :1], grid.steps[:1]),
        "brute": Points(rng.normal(size=(300, 1)), rng.integers(0, 12, size=(300, 2))),
        "nominal": Points(np.empty((300, 0)), rng.integers(0, 3, size=(300, 3))),
    }


@pytest.mark.parametrize("block", [3, 7, 64, 299, 1000])
def test_search_in_blocks_equals_one_search_bit_for_bit(block):
    """knn_in_blocks merges each block's candidates by (distance, index): the same indices and
    the same distances as one search over all the rows, with and without excluding each
    query's own point, for any block size, rows in any order and k beyond the rows."""
    rng = np.random.default_rng(block)
    for name, pts in _search_sets(rng).items():
        rows = rng.permutation(len(pts))[:200]
        others = pts.take(rng.integers(0, len(pts), 30))
        own = rng.choice(len(rows), 25, replace=False)  # queries that are rows themselves
        members = pts.take(rows[own])
        for k in (1, 6, 30, 250):
            got = knn_in_blocks(pts, rows, [(others, None), (members, own)], k, block=block)
            for (gi, gd), (queries, exclude) in zip(got, [(others, None), (members, own)]):
                ei, ed = knn(pts.take(rows), queries, k, exclude=exclude)
                assert np.array_equal(gi, ei) and np.array_equal(gd, ed), (name, k, exclude is None)
                assert gi.shape == (len(queries), min(k, 200 - (exclude is not None)))


def test_search_in_blocks_of_no_rows_and_a_negative_k():
    rng = np.random.default_rng(1)
    pts = random_points(rng, 20, 2, 0)
    (i, d), = knn_in_blocks(pts, np.array([], np.int64), [(pts, None)], 5)
    assert i.shape == d.shape == (20, 0)
    with pytest.raises(ValueError, match="non-negative"):
        knn_in_blocks(pts, np.arange(20), [(pts, None)], -1)


def test_one_index_answers_several_query_sets_as_separate_searches():
    rng = np.random.default_rng(4)
    for name, pts in _search_sets(rng).items():
        index = NeighbourIndex(pts)
        assert (index._distinct is not None) == (name == "coarse")  # every path is taken
        assert (index._trees is None) == (name == "nominal")
        assert (index._trees is not None and index._trees.trees is None) == (name == "brute")
        for seed in range(3):
            qs = pts.take(np.random.default_rng(seed).integers(0, len(pts), 20))
            for a, b in zip(index.query(qs, 9), knn(pts, qs, 9)):
                assert np.array_equal(a, b)


def test_a_bounded_query_keeps_every_neighbour_nearer_than_its_bound():
    """With a bound per query, the neighbours strictly nearer than it are knn's, in knn's order;
    any other place holds a point at or beyond the bound, or is empty (index −1, inf)."""
    rng = np.random.default_rng(9)
    for name, pts in _search_sets(rng).items():
        qs = pts.take(rng.integers(0, len(pts), 40))
        ei, ed = knn(pts, qs, 12)
        bound = np.where(rng.random(40) < 0.2, np.inf, ed[np.arange(40), rng.integers(0, 12, 40)])
        bound[0] = 0.0
        gi, gd = NeighbourIndex(pts).query(qs, 12, bound=bound)
        near = ed < bound[:, None]
        assert np.array_equal(np.where(near, gi, -2), np.where(near, ei, -2)), name
        assert np.all((gd[~near] >= bound[:, None].repeat(12, 1)[~near]) | ((gi[~near] == -1) & np.isinf(gd[~near])))
        assert not np.isinf(gd[near]).any()


def test_lattice_codes_are_narrowed_only_where_they_fit_and_distances_do_not_change():
    """Codes within int32 are stored as int32 (CST's records at 10M: half the memory) and
    differenced in int64: a large-valued column (beyond 2^31) keeps int64, and queries with
    narrow codes against points with wide ones give the exact integer distances."""
    rng = np.random.default_rng(12)
    small = rng.integers(0, 1000, size=(200, 2)).astype(np.float64)
    large = small + np.array([3e9, 0.0])
    for values, dtype in ((small, np.int32), (large, np.int64)):
        lattice = [decimal_lattice(values[:, j]) for j in range(2)]
        pts = Points(values / 100.0, np.zeros((200, 0)), np.column_stack([c for c, _ in lattice]),
                     np.array([st_ / 100.0 for _, st_ in lattice]))
        assert pts.codes.dtype == dtype
    qs = Points(small[:20] / 100.0, np.zeros((20, 0)), small[:20].astype(np.int64), np.array([0.01, 0.01]))
    far = Points((small + 2.0 ** 40) / 100.0, np.zeros((200, 0)), (small + 2.0 ** 40).astype(np.int64),
                 np.array([0.01, 0.01]))
    assert qs.codes.dtype == np.int32 and far.codes.dtype == np.int64
    i, d = knn(far, qs, 5)
    exact = np.abs((small + 2.0 ** 40)[None, :, :] - small[:20, None, :]).sum(-1)  # integers, exact in float
    assert np.array_equal(d, np.sort(exact, axis=1)[:, :5] * 0.01 / 2)


def test_queries_searched_in_groups_equal_one_group_bit_for_bit(monkeypatch):
    """The tree search takes its queries a group at a time (memory of one group's candidates):
    the same indices and distances as every query at once, on coarse points where ties at the
    k-th distance make queries fetch more candidates, with exclusion and with a bound."""
    import aequum.engines.core.knn as knn_module

    rng = np.random.default_rng(11)
    pts = Points(rng.integers(0, 6, size=(2000, 3)) / 5, np.empty((2000, 0)))
    qs = Points(rng.integers(0, 6, size=(700, 3)) / 5 + rng.normal(0, 0.01, size=(700, 3)), np.empty((700, 0)))
    own = rng.integers(0, 2000, 700)
    bound = rng.uniform(0.05, 0.5, 700)
    index = NeighbourIndex(pts)
    own = own % len(index._trees.points)
    whole = [index._trees.search(qs, 20, None), index._trees.search(qs, 20, own), index._trees.search(qs, 20, None, bound)]
    monkeypatch.setattr(knn_module, "_QUERIES", 64)
    grouped = [index._trees.search(qs, 20, None), index._trees.search(qs, 20, own), index._trees.search(qs, 20, None, bound)]
    for (wi, wd), (gi, gd) in zip(whole[:2], grouped[:2]):
        assert np.array_equal(wi, gi) and np.array_equal(wd, gd)
    # bounded: every neighbour nearer than the bound is found, the same (places beyond it may be
    # filled by other points: the tree is asked with the largest bound of a group of queries)
    (wi, wd), (gi, gd) = whole[2], grouped[2]
    near = wd < bound[:, None]
    assert np.array_equal(near, gd < bound[:, None]) and near.any() and not near.all()
    assert np.array_equal(wi[near], gi[near]) and np.array_equal(wd[near], gd[near])
    searched = index._trees.points  # the distinct points when most repeat another (these do)
    assert len(searched) < len(pts) and np.array_equal(whole[0][0], brute_force(searched, qs, 20)[0])
