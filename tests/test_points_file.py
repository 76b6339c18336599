"""Points kept in files (engines.core.points_file): the same points as in memory, read a range at a time."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import aequum.engines.core.points_file as points_file
from aequum.engines.core.knn import Points, knn, knn_in_blocks
from aequum.engines.core.points_file import PointsFile


def _points(rng, n, codes=True, nominal=2):
    return Points(rng.normal(size=(n, 3)), rng.integers(0, 4, size=(n, nominal)),
                  rng.integers(-5, 5, size=(n, 3)) if codes else None,
                  np.array([0.1, 0.2, np.nan]) if codes else None)


@pytest.mark.parametrize("codes, nominal", [(True, 2), (False, 0), (True, 0)])
def test_take_equals_the_points_in_memory(tmp_path, monkeypatch, codes, nominal):
    monkeypatch.setattr(points_file, "_CHUNK", 97)  # many chunks, records across their edges
    rng = np.random.default_rng(3)
    pts = _points(rng, 1000, codes, nominal)
    stored = PointsFile.write(pts, tmp_path / "p")
    assert len(stored) == 1000 and len(pickle.dumps(stored)) < 2000  # where they are, not the points
    for idx in [np.arange(1000), rng.integers(0, 1000, 300), np.sort(rng.choice(1000, 400, replace=False)),
                np.array([999, 0, 999, 96, 97]), np.arange(1000)[::-1]]:
        got, want = stored.take(idx), pts.take(idx)
        assert np.array_equal(got.metric, want.metric) and np.array_equal(got.nominal, want.nominal)
        assert (got.codes is None) == (want.codes is None)
        if want.codes is not None:
            assert got.codes.dtype == want.codes.dtype and np.array_equal(got.codes, want.codes)
            assert np.array_equal(got.steps, want.steps, equal_nan=True)
    with pytest.raises(IndexError, match="out of range"):
        stored.take(np.array([1000]))


def test_a_blocked_search_over_points_in_files_equals_the_search_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(points_file, "_CHUNK", 128)
    rng = np.random.default_rng(5)
    pts = Points(rng.integers(0, 8, size=(3000, 3)) / 8, rng.integers(0, 2, size=(3000, 1)))
    stored = PointsFile.write(pts, tmp_path / "p")
    rows = np.sort(rng.choice(3000, 1800, replace=False))
    queries = pts.take(rng.integers(0, 3000, 50))
    got = knn_in_blocks(stored, rows, [(queries, None)], 12, block=500)
    want = knn_in_blocks(pts, rows, [(queries, None)], 12, block=500)
    assert np.array_equal(got[0][0], want[0][0]) and np.array_equal(got[0][1], want[0][1])
    assert np.array_equal(got[0][0], knn(pts.take(rows), queries, 12)[0])
