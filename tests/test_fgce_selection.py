"""FGCE selection (engines.feasibility.selection) checked against brute force on small instances."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from aequum.engines.feasibility.selection import (
    Infeasible, Reach, allocate_k, cost_curve, coverage_curve, d0, d_min, greedy,
    greedy_by_component, k0, max_coverage_mip, min_cost_mip,
)

INF = math.inf


# ------------------------------------------------------------------------------- helpers

def random_instance(seed, n_f=None, n_c=None, density=None, n_comp=None):
    """Random reachability; costs are multiples of 0.5 (exact sums), 0.0 included.

    With ``n_comp`` factuals and candidates get component labels and only same-label pairs
    are reachable. Returns (Reach, dense reach bool, dense cost, labels or None).
    """
    rng = np.random.default_rng(seed)
    n_f = int(rng.integers(6, 11)) if n_f is None else n_f
    n_c = int(rng.integers(5, 9)) if n_c is None else n_c
    density = float(rng.uniform(0.15, 0.5)) if density is None else density
    M = rng.random((n_f, n_c)) < density
    labels = None
    if n_comp:
        lf, lc = rng.integers(0, n_comp, n_f), rng.integers(0, n_comp, n_c)
        M &= lf[:, None] == lc[None, :]
        labels = (lf, lc)
    C = rng.integers(0, 7, (n_f, n_c)) * 0.5
    r, c = np.nonzero(M)
    R = Reach.from_pairs(n_f, n_c, r, c, C[r, c])
    return R, M, np.where(M, C, np.inf), labels


def covered_by(M, C, d, S):
    """Bool mask of factuals covered by set S at budget d (dense brute force)."""
    if len(S) == 0:
        return np.zeros(M.shape[0], dtype=bool)
    ok = M[:, list(S)] & (C[:, list(S)] <= d)
    return ok.any(axis=1)


def brute_max_cov(M, C, k, d):
    n_c = M.shape[1]
    return max(covered_by(M, C, d, S).sum()
               for S in itertools.combinations(range(n_c), min(k, n_c)))


def brute_min_cost(M, C, k, coverage=1.0):
    """min over |S| ≤ k of the need-th smallest cheapest-chosen cost; None if impossible."""
    coverable = M.any(axis=1)
    n_cov = int(coverable.sum())
    need = min(n_cov, math.ceil(coverage * n_cov - 1e-9))
    if need == 0:
        return 0.0
    best = None
    for size in range(1, min(k, M.shape[1]) + 1):
        for S in itertools.combinations(range(M.shape[1]), size):
            mins = C[:, list(S)].min(axis=1)
            vals = np.sort(mins[np.isfinite(mins)])
            if vals.size >= need:
                d = vals[need - 1]
                best = d if best is None else min(best, d)
    return best


def brute_k0(M):
    coverable = M.any(axis=1)
    if not coverable.any():
        return 0
    for size in range(1, M.shape[1] + 1):
        for S in itertools.combinations(range(M.shape[1]), size):
            if M[:, list(S)].any(axis=1)[coverable].all():
                return size
    raise AssertionError("unreachable")


SEEDS = range(40)
DS = [0.0, 1.0, 1.5, INF]


# ------------------------------------------------------------------------------- Reach

def test_reach_zero_cost_is_reachable_and_duplicates_keep_min():
    R = Reach.from_pairs(2, 3, [0, 0, 1, 1], [0, 0, 2, 2], [2.0, 0.0, 0.0, 1.0])
    assert R.rows.tolist() == [0, 1] and R.cols.tolist() == [0, 2]
    assert R.costs.tolist() == [0.0, 0.0]
    assert R.coverable(0.0).tolist() == [True, True]
    s = greedy(R, 2, 0.0)
    assert s.n_covered == 2 and s.cost.tolist() == [0.0, 0.0]


def test_reach_direct_construction_missing_cost_entry_means_zero():
    reach = sp.csr_matrix(np.array([[True, False], [False, True]]))
    cost = sp.csr_matrix(np.array([[0.0, 0.0], [0.0, 3.0]]))  # (0,0) not stored
    R = Reach(cost=cost, reach=reach)
    assert R.costs.tolist() == [0.0, 3.0]
    assert greedy(R, 2, 0.0).n_covered == 1


@pytest.mark.parametrize("bad", [dict(rows=[0], cols=[5], costs=[1.0]),
                                 dict(rows=[0], cols=[0], costs=[-1.0]),
                                 dict(rows=[0], cols=[0], costs=[np.nan]),
                                 dict(rows=[0, 1], cols=[0], costs=[1.0])])
def test_reach_validation(bad):
    with pytest.raises(ValueError):
        Reach.from_pairs(2, 2, **bad)


def test_bad_arguments():
    R, *_ = random_instance(0)
    with pytest.raises(ValueError):
        greedy(R, -1, 1.0)
    with pytest.raises(ValueError):
        greedy(R, 1, np.nan)
    with pytest.raises(ValueError):
        min_cost_mip(R, 2, 0.0)
    with pytest.raises(ValueError):
        min_cost_mip(R, 2, 1.5)


# ------------------------------------------------------------------------------- greedy

@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_each_pick_is_true_argmax(seed):
    R, M, C, _ = random_instance(seed)
    for d in DS:
        k = 4
        s = greedy(R, k, d)
        ok = M & (C <= d)
        uncovered = np.ones(M.shape[0], dtype=bool)
        assert len(s.chosen) <= k
        for t, j in enumerate(s.chosen):
            keys = []
            for cand in range(M.shape[1]):
                new = ok[:, cand] & uncovered
                keys.append((-int(new.sum()), float(C[new, cand].sum()), cand))
            assert min(keys)[2] == j and -min(keys)[0] > 0
            uncovered &= ~ok[:, j]
            assert s.covered_after[t] == (~uncovered).sum()
        if len(s.chosen) < k:  # stopped early: nothing adds coverage
            assert not (ok & uncovered[:, None]).any()
        # assignment: cheapest chosen covering candidate, ties → smaller index
        for i in range(M.shape[0]):
            opts = [(C[i, j], j) for j in s.chosen if ok[i, j]]
            if opts:
                c, j = min(opts)
                assert s.assignment[i] == j and s.cost[i] == c
            else:
                assert s.assignment[i] == -1 and np.isnan(s.cost[i])


def test_greedy_tie_break_by_summed_cost_then_index():
    # candidates 0 and 1 both cover factuals {0, 1}; 1 is cheaper -> picked first.
    R = Reach.from_pairs(2, 3, [0, 1, 0, 1, 0, 1], [0, 0, 1, 1, 2, 2],
                         [1.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    assert greedy(R, 1).chosen.tolist() == [1]      # 1 and 2 tie on cost: smaller index
    assert greedy(R, 3).chosen.tolist() == [1]      # stops: no more gain


@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_approximation_guarantee(seed):
    R, M, C, _ = random_instance(seed)
    for d in DS:
        for k in (1, 2, 3):
            g = greedy(R, k, d).n_covered
            opt = max_coverage_mip(R, k, d).n_covered
            assert g <= opt
            assert g >= (1 - 1 / math.e) * opt - 1e-12


@pytest.mark.parametrize("seed", range(20))
def test_greedy_by_component_equals_global(seed):
    R, M, C, labels = random_instance(100 + seed, n_comp=3, density=0.6)
    for d in DS:
        for k in (1, 2, 3, 5, 10):
            a, b = greedy(R, k, d), greedy_by_component(R, k, d, labels)
            assert a.chosen.tolist() == b.chosen.tolist()
            assert np.array_equal(a.assignment, b.assignment)
            # factual labels alone (candidate labels inferred from reachability)
            c = greedy_by_component(R, k, d, labels[0])
            assert c.chosen.tolist() == a.chosen.tolist()


def test_component_labels_crossing_pairs_rejected():
    R = Reach.from_pairs(2, 2, [0, 1], [0, 0], [1.0, 1.0])
    with pytest.raises(ValueError, match="crosses components"):
        greedy_by_component(R, 1, INF, (np.array([0, 1]), np.array([0, 1])))


# ------------------------------------------------------------------------------- MIPs

@pytest.mark.parametrize("seed", SEEDS)
def test_max_coverage_mip_equals_brute_force(seed):
    R, M, C, _ = random_instance(seed)
    for d in (1.0, INF):
        for k in (1, 2, 3):
            s = max_coverage_mip(R, k, d)
            assert s.n_covered == brute_max_cov(M, C, k, d)
            assert len(s.chosen) <= k
            assert covered_by(M, C, d, s.chosen).sum() == s.n_covered


@pytest.mark.parametrize("seed", SEEDS)
def test_min_cost_mip_full_coverage_equals_brute_force(seed):
    R, M, C, _ = random_instance(seed)
    for k in (1, 2, 3, 4):
        bf = brute_min_cost(M, C, k)
        if bf is None:
            with pytest.raises(Infeasible, match="cannot cover"):
                min_cost_mip(R, k)
            continue
        res = min_cost_mip(R, k)
        assert res.d == bf
        assert len(res.chosen) <= k
        coverable = M.any(axis=1)
        assert np.array_equal(res.assignment >= 0, coverable)
        assert np.nanmax(res.cost, initial=0.0) == res.d
        for i in np.flatnonzero(coverable):
            assert M[i, res.assignment[i]] and C[i, res.assignment[i]] == res.cost[i]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("coverage", [0.5, 0.75])
def test_min_cost_mip_partial_coverage_equals_brute_force(seed, coverage):
    R, M, C, _ = random_instance(seed)
    for k in (1, 2):
        bf = brute_min_cost(M, C, k, coverage)
        if bf is None:
            with pytest.raises(Infeasible):
                min_cost_mip(R, k, coverage)
            continue
        res = min_cost_mip(R, k, coverage)
        assert res.d == bf
        assert res.n_covered >= res.n_required == math.ceil(coverage * M.any(axis=1).sum())
        assert np.all(res.cost[res.assignment >= 0] <= res.d)


@pytest.mark.parametrize("seed", SEEDS)
def test_k0_d0_dmin(seed):
    R, M, C, _ = random_instance(seed)
    r = k0(R)
    assert r.k0 == brute_k0(M)
    assert r.greedy_bound >= r.k0
    assert M[:, r.chosen].any(axis=1).sum() == M.any(axis=1).sum()
    if r.k0 > 0:
        with pytest.raises(Infeasible):
            min_cost_mip(R, r.k0 - 1)
    assert d0(R) == brute_min_cost(M, C, r.k0) == d0(R, r.k0)
    # d_min: closed form equals the MIP with unlimited k, and d0 at k0 is never below it
    assert d_min(R) == min_cost_mip(R, M.shape[1]).d
    assert d0(R) >= d_min(R)


@pytest.mark.parametrize("seed", range(20))
def test_k0_per_component(seed):
    R, M, C, labels = random_instance(200 + seed, n_comp=3, density=0.5)
    r = k0(R, labels)
    assert r.k0 == brute_k0(M) == k0(R).k0
    m = np.unique(labels[0][M.any(axis=1)]).size
    assert r.n_components == m and r.k0 >= m
    assert sum(r.per_component.values()) == r.k0


# ------------------------------------------------------------------------------- DP

def brute_alloc(curves, k, require_all=False):
    best = -np.inf
    ext = [list(c) + [c[-1]] * (k + 1 - len(c)) for c in curves]
    for alloc in itertools.product(range(k + 1), repeat=len(curves)):
        if sum(alloc) > k:
            continue
        if require_all and any(a == 0 and max(c) > c[0] for a, c in zip(alloc, ext)):
            continue
        best = max(best, sum(c[a] for a, c in zip(alloc, ext)))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_allocate_k_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 4))
    curves = []
    for _ in range(m):
        steps = rng.integers(0, 4, int(rng.integers(1, 5)))
        curves.append(np.concatenate([[0], np.cumsum(steps)]).tolist())
    for k in range(0, 6):
        res = allocate_k(curves, k)
        assert res.total == brute_alloc(curves, k)
        assert res.alloc.sum() <= k and (res.alloc >= 0).all()
        ext = [c + [c[-1]] * (k + 1) for c in curves]
        assert sum(c[a] for a, c in zip(res.alloc, ext)) == res.total
        need = sum(1 for c in curves if max(c) > c[0])
        if need > k:
            with pytest.raises(Infeasible):
                allocate_k(curves, k, require_all=True)
        else:
            ra = allocate_k(curves, k, require_all=True)
            assert ra.total == brute_alloc(curves, k, require_all=True)
            assert ra.alloc.max(initial=0) <= k - need + 1 if need else True


def test_allocate_k_cap_is_k_minus_m_plus_1():
    # 2 components needing one each, k = 3: the best full allocation gives 2 = k − m + 1 to
    # the first component (the paper's k − m = 1 would miss it).
    curves = [[0, 1, 5], [0, 3]]
    res = allocate_k(curves, 3, require_all=True)
    assert res.max_per_component == 2
    assert res.alloc.tolist() == [2, 1] and res.total == 8


def test_allocate_k_matches_components_greedy_and_mip():
    R, M, C, labels = random_instance(7, n_f=10, n_c=8, density=0.7, n_comp=2)
    k = 3
    curves = []
    for c in np.unique(labels[0]):
        sub = R.subset(np.flatnonzero(labels[0] == c), np.flatnonzero(labels[1] == c))
        curves.append([max_coverage_mip(sub, t, 1.0).n_covered for t in range(k + 1)])
    assert allocate_k(curves, k).total == max_coverage_mip(R, k, 1.0).n_covered


# ------------------------------------------------------------------------------- curves

@pytest.mark.parametrize("seed", range(20))
def test_curves_monotone(seed):
    R, M, C, _ = random_instance(seed)
    ks = list(range(0, 9))
    cc = coverage_curve(R, ks, 1.0)
    assert np.all(np.diff(cc) >= 0)
    assert cc.tolist() == [greedy(R, k, 1.0).n_covered for k in ks]
    ds = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, INF]
    for k in (1, 2, 3):
        dc = cost_curve(R, ds, k)
        assert np.all(np.diff(dc) >= 0)
        for d, v in zip(ds, dc):
            assert greedy(R, k, d).n_covered <= v <= brute_max_cov(M, C, k, d)
    # unsorted ds keep their order
    assert cost_curve(R, ds[::-1], 2).tolist() == cost_curve(R, ds, 2).tolist()[::-1]


def test_cost_curve_repairs_non_monotone_greedy():
    # At d=1: A={0,1,2}, B={3,4,5} -> greedy covers 6. At d=2 candidate D grows to
    # {0,1,3,4} and greedy picks it first, then covers only 5.
    pairs = [(0, 0, 0), (1, 0, 0), (2, 0, 0), (3, 1, 0), (4, 1, 0), (5, 1, 0),
             (0, 2, 2), (1, 2, 2), (3, 2, 2), (4, 2, 2)]
    r, c, w = zip(*pairs)
    R = Reach.from_pairs(6, 3, r, c, w)
    assert greedy(R, 2, 1.0).n_covered == 6 and greedy(R, 2, 2.0).n_covered == 5
    assert cost_curve(R, [1.0, 2.0], 2).tolist() == [6, 6]


# ------------------------------------------------------------------------------- empty inputs

@pytest.mark.parametrize("shape", [(0, 0), (0, 4), (4, 0), (4, 3)])
def test_empty_inputs(shape):
    R = Reach.from_pairs(*shape, [], [], [])
    n_f = shape[0]
    for s in (greedy(R, 3), greedy_by_component(R, 3, INF, np.zeros(n_f, int)),
              max_coverage_mip(R, 3)):
        assert s.n_covered == 0 and s.chosen.size == 0 and s.covered_after.size == 0
        assert s.assignment.tolist() == [-1] * n_f
    r = k0(R)
    assert r.k0 == 0 and r.greedy_bound == 0 and r.n_components == 0
    assert k0(R, np.zeros(n_f, int)).k0 == 0
    m = min_cost_mip(R, 2)
    assert m.d == 0.0 and m.chosen.size == 0 and m.n_coverable == 0
    assert min_cost_mip(R, 0).n_covered == 0
    assert d_min(R) == 0.0 and d0(R) == 0.0
    assert coverage_curve(R, [0, 1, 5]).tolist() == [0, 0, 0]
    assert cost_curve(R, [0.0, INF], 2).tolist() == [0, 0]
    assert coverage_curve(R, []).size == 0
    assert allocate_k([], 3).total == 0.0


def test_k_zero_and_infeasible_message():
    R, M, C, _ = random_instance(3)
    assert greedy(R, 0).n_covered == 0 and max_coverage_mip(R, 0).n_covered == 0
    with pytest.raises(Infeasible, match="k=0"):
        min_cost_mip(R, 0)
    assert issubclass(Infeasible, ValueError)


def test_deterministic():
    R, *_ = random_instance(11, n_f=10, n_c=8, density=0.5)
    a, b = min_cost_mip(R, 3, 0.75), min_cost_mip(R, 3, 0.75)
    assert a.d == b.d and a.chosen.tolist() == b.chosen.tolist()
    assert max_coverage_mip(R, 2).chosen.tolist() == max_coverage_mip(R, 2).chosen.tolist()


def test_larger_instance_components():
    rng = np.random.default_rng(42)
    n_f, n_c, m = 600, 400, 25
    lf, lc = rng.integers(0, m, n_f), rng.integers(0, m, n_c)
    M = (rng.random((n_f, n_c)) < 0.3) & (lf[:, None] == lc[None, :])
    r, c = np.nonzero(M)
    R = Reach.from_pairs(n_f, n_c, r, c, rng.integers(0, 40, r.size) * 0.25)
    for d in (2.0, INF):
        a = greedy(R, 60, d)
        b = greedy_by_component(R, 60, d, (lf, lc))
        assert a.chosen.tolist() == b.chosen.tolist()
        assert np.all(np.diff(a.covered_after) > 0)
    kk = k0(R, (lf, lc))
    assert kk.k0 == k0(R).k0 and kk.greedy_bound >= kk.k0 >= kk.n_components


@pytest.mark.parametrize("seed", range(40))
def test_min_cost_bisection_equals_the_mip(seed):
    """Problem 2 by bisection over costs (the engine's solver) = the one-shot MIP (1)–(6)."""
    from aequum.engines.feasibility.selection import min_cost_bisect
    rng = np.random.default_rng(5000 + seed)
    n_f, n_c = int(rng.integers(3, 9)), int(rng.integers(2, 7))
    mask = rng.random((n_f, n_c)) < 0.4
    r, c = np.nonzero(mask)
    reach = Reach.from_pairs(n_f, n_c, r, c, np.round(rng.uniform(0, 2, r.size), 2))
    for k in (1, 2, 3):
        for cov in (0.5, 1.0):
            try:
                want = min_cost_mip(reach, k, cov).d
            except Infeasible:
                with pytest.raises(Infeasible):
                    min_cost_bisect(reach, k, cov)
                continue
            assert min_cost_bisect(reach, k, cov).d == want


# ------------------------------------------------------------- shared work across curve points

def per_point_greedy(reach, k, d):
    """Algorithm 1 as sparse matrix-vector products, one full pass per pick (the former
    implementation, kept here as the reference): (picks, gains, summed costs)."""
    cov, cst = reach.covering(d)
    n_f, n_c = cov.shape
    covT, cstT = cov.T.tocsr().astype(np.float64), cst.T.tocsr()
    uncovered = np.ones(n_f)
    picks, gains, sums = [], [], []
    for _ in range(k):
        if n_c == 0:
            break
        gain = covT @ uncovered
        if gain.max() <= 0:
            break
        csum = cstT @ uncovered
        cand = np.flatnonzero(gain == gain.max())
        best = cand[np.lexsort((cand, csum[cand]))[0]]
        picks.append(int(best))
        gains.append(int(round(gain.max())))
        sums.append(float(csum[best]))
        uncovered[covT.indices[covT.indptr[best]:covT.indptr[best + 1]]] = 0.0
    return picks, gains, sums


@pytest.mark.parametrize("seed", range(40))
def test_incremental_greedy_equals_the_per_point_greedy(seed):
    """The incremental greedy (gains updated from newly covered factuals, cost sums only on
    ties) picks exactly what the per-point greedy picks, at every budget, ties included."""
    from aequum.engines.feasibility.greedy import _greedy_core, greedy_coverage
    rng = np.random.default_rng(seed)
    R, _, _, _ = random_instance(seed, n_f=int(rng.integers(5, 60)), n_c=int(rng.integers(3, 40)))
    if seed % 2:        # inexact costs from a small pool: float sums whose order matters
        pool = rng.random(7) * 3
        R = Reach.from_pairs(*R.shape, R.rows, R.cols, pool[(R.costs * 2).astype(int)])
    for d in list(np.unique(R.costs)) + [INF]:
        k = int(rng.integers(1, 12))
        picks, gains, sums = per_point_greedy(R, k, d)
        p2, g2, s2 = _greedy_core(*R.covering(d), k)
        assert (p2.tolist(), g2.tolist(), s2.tolist()) == (picks, gains, sums)
        chosen, after = greedy_coverage(R, k, d)
        assert chosen.tolist() == picks and after.tolist() == np.cumsum(gains).tolist()
        assert greedy(R, k, d).chosen.tolist() == picks


@pytest.mark.parametrize("seed", range(10))
def test_greedy_cost_curve_equals_per_point_bisection(seed):
    """cAUC's greedy cost curve (one greedy run per probed budget, shared by every k and every
    coverage level) equals a bisection that runs the per-point greedy at each probe."""
    from aequum.engines.feasibility.engine import GreedyCosts
    rng = np.random.default_rng(1000 + seed)
    R, _, _, _ = random_instance(seed, n_f=int(rng.integers(10, 60)), n_c=int(rng.integers(5, 40)))
    values = np.unique(R.costs)
    k_max = 6
    shared = GreedyCosts(R, k_max)
    n_cov = int(R.coverable().sum())
    for k in range(1, k_max + 1):
        for c in (0.5, 0.7, 0.9, 1.0):
            need = min(n_cov, math.ceil(c * n_cov - 1e-9))

            def covered(i):
                return sum(per_point_greedy(R, k_max, float(values[i]))[1][:k])
            if need == 0:
                want = 0.0
            elif covered(len(values) - 1) < need:
                want = None
            else:
                lo, hi = 0, len(values) - 1
                while lo < hi:
                    mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if covered(mid) >= need else (mid + 1, hi)
                want = float(values[lo])
            assert shared.cost(k, need) == want
