"""ε-radius pairs: the blocked KD-tree search equals all pairs."""
from __future__ import annotations

import numpy as np
import pytest

from aequum.engines.core.radius import brute_force_pairs, radius_pairs


@pytest.mark.parametrize("method", ["kdtree", "dense"])
@pytest.mark.parametrize("eps, block", [(0.2, 7), (0.5, 4096), (1e-9, 3)])
def test_equals_brute_force(eps, block, method):
    rng = np.random.default_rng(0)
    X = np.round(rng.random((300, 3)), 1)          # a grid: many exact-distance ties
    got = radius_pairs(X, eps, block, method=method)
    want = brute_force_pairs(X, eps)
    assert all(np.array_equal(a, b) for a, b in zip(got[:2], want[:2]))
    assert np.allclose(got[2], want[2])
    assert np.all(got[0] != got[1])


def test_bad_input():
    with pytest.raises(ValueError, match="positive"):
        radius_pairs(np.zeros((3, 2)), 0)
    with pytest.raises(ValueError, match="NaN"):
        radius_pairs(np.array([[np.nan, 0.0]]), 1)
    i, j, d = radius_pairs(np.array([[0.0], [5.0]]), 1)
    assert len(i) == len(j) == len(d) == 0
