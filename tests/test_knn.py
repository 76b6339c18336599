"""Exact kNN under the mixed Thanh distance: the KD-tree path equals all-pairs brute force."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.core.knn import Points, brute_force, knn


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
