"""engines.core.sampling.stratified_sample against the plain definition it implements."""
import numpy as np
import pytest

from aequum.engines.core.sampling import stratified_sample


def _by_definition(candidates, strata, size, seed):
    """Each stratum (ascending key) gets its largest-remainder share, drawn by a seeded
    permutation of its members in candidate order: one pass over the candidates per stratum."""
    if size >= len(candidates):
        return candidates
    keys, inverse, counts = np.unique(strata, return_inverse=True, return_counts=True)
    quota = counts * size / len(candidates)
    alloc = np.floor(quota).astype(np.int64)
    order = np.lexsort((np.arange(len(keys)), -counts, -(quota - alloc)))
    alloc[order[:size - int(alloc.sum())]] += 1
    rng = np.random.default_rng(seed)
    picked = [np.flatnonzero(inverse == s)[rng.permutation(counts[s])[:alloc[s]]] for s in range(len(keys))]
    return candidates[np.sort(np.concatenate(picked))]


@pytest.mark.parametrize("kind", ["small ints", "int8", "bool", "uint16", "negative", "huge", "float", "text"])
def test_the_sample_is_the_definitions_whatever_the_keys(kind):
    rng = np.random.default_rng(11)
    n = 3_000
    strata = {"small ints": rng.integers(0, 300, n) * 7, "int8": rng.integers(0, 5, n).astype(np.int8),
              "bool": rng.random(n) < 0.2, "uint16": rng.integers(0, 40, n).astype(np.uint16),
              "negative": rng.integers(-3, 4, n), "huge": rng.integers(0, 10 ** 12, n) % 9 * 10 ** 11,
              "float": rng.integers(0, 6, n) / 4, "text": np.array(list("abcde"))[rng.integers(0, 5, n)]}[kind]
    candidates = np.sort(rng.choice(10 * n, n, replace=False))
    for size in (1, 17, n // 3, n - 1, n):
        for seed in (0, 5):
            assert np.array_equal(stratified_sample(candidates, strata, size, seed),
                                  _by_definition(candidates, strata, size, seed)), (kind, size, seed)


def test_one_stratum_is_a_uniform_draw_in_candidate_order():
    candidates = np.arange(0, 2_000, 2)
    picked = stratified_sample(candidates, np.zeros(len(candidates), np.int8), 100, seed=3)
    assert len(picked) == 100 and len(set(picked.tolist())) == 100 and np.all(np.diff(picked) > 0)
    assert np.array_equal(picked, _by_definition(candidates, np.zeros(len(candidates)), 100, 3))
