"""RAGUEL building blocks: recourse costs (Example 1) and exactly normalised rKL/rND/rRD."""
from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

from aequum.engines.reranking.metrics import MEASURES, normaliser, ranked_fairness, raw_score
from aequum.engines.reranking.recourse import (Actionability, LinearRecourse, NotRepairable, counterfactual_points,
                                        recourse_cost)

# Example 1 (Table 2): LA = loan amount ($'000), LD = loan duration (years); boundary LD = 2·LA,
# applicants below it; recourse weights LA 0.5, LD 1.
A, B = np.array([-2.0, 1.0]), 0.0
W, MUT = np.array([0.5, 1.0]), np.array([True, True])
PEOPLE = {"Abdul": (3.5, 6), "Bogdan": (2, 1), "Chiara": (4, 4), "Diana": (5, 4)}


def test_example_1_costs_and_counterfactuals():
    X = np.array(list(PEOPLE.values()), float)
    # every applicant is below the boundary: LD - 2 LA < 0
    cost = recourse_cost(X, A, B, W, MUT)
    assert np.round(cost, 2).tolist() == [0.33, 1.00, 1.33, 2.00]
    cf = counterfactual_points(X, A, B, W, MUT)
    assert np.round(cf, 2).tolist() == [[3.06, 6.11], [0.67, 1.33], [2.22, 4.44], [2.33, 4.67]]
    assert np.allclose(cf @ A, 0)


def test_example_1_chiara_moves_in_50_dollar_steps():
    chiara, bogdan = np.array([4.0, 4.0]), np.array([[2.0, 1.0]])
    target = recourse_cost(bogdan, A, B, W, MUT)[0]

    def model(low_la):
        return LinearRecourse(A, B, Actionability(W, MUT, [0, 0], [0.05, 1], [low_la, 0], [10, 10],
                                                  max_combination=1))
    action = model(0).modify(chiara, target)
    assert action.attributes == (0,) and action.steps == (11,)        # 4.00 -> 3.45
    assert action.after[0] == pytest.approx(3.45)
    assert recourse_cost(np.array([action.after[0], 4.0])[None], A, B, W, MUT)[0] == pytest.approx(0.967, abs=5e-4)
    assert action.cost_after == pytest.approx(0.967, abs=5e-4)
    # a loan amount that may not go below 3.6 cannot get there; the duration (+1 year) cannot
    # either (cost 1.00 is not strictly below Bogdan's): not repairable with single attributes
    # until two years are added
    moved = model(3.6).modify(chiara, target)
    assert moved.attributes == (1,) and moved.steps == (2,)


def test_closed_form_equals_a_brute_force_minimum():
    rng = np.random.default_rng(0)
    a, w = np.array([1.0, 2.0, -0.5]), np.array([0.5, 2.0, 1.0])
    mut = np.array([True, True, False])
    x = np.array([-3.0, -1.0, 2.0])
    c = recourse_cost(x[None], a, 1.0, w, mut)[0]
    # sample boundary points reachable without moving the immutable attribute
    t = rng.normal(size=(200_000, 1)) * 5
    d = np.array([2.0, -1.0, 0.0])                          # direction inside the boundary plane
    base = counterfactual_points(x[None], a, 1.0, w, mut)[0]
    pts = base + t * d
    assert np.allclose(pts @ a + 1.0, 0)
    sampled = np.sqrt(((pts - x) ** 2 * w).sum(1)).min()
    assert c == pytest.approx(sampled, rel=1e-6) and c <= sampled + 1e-12


def test_unreachable_boundary_is_not_repairable():
    with pytest.raises(NotRepairable):
        recourse_cost(np.zeros((1, 2)), np.array([1.0, 0.0]), -1.0, np.ones(2), np.array([False, True]))
    with pytest.raises(ValueError, match="positive"):
        recourse_cost(np.zeros((1, 2)), np.array([1.0, 1.0]), -1.0, np.array([0.0, 1.0]), np.ones(2, bool))


@pytest.mark.parametrize("n, n_pos", [(12, 4), (14, 7), (21, 5), (22, 4), (8, 3), (10, 4)])
def test_normaliser_is_the_exact_maximum(n, n_pos):
    for m in MEASURES:
        best = max(raw_score(m, np.isin(np.arange(n), pos)) for pos in combinations(range(n), n_pos))
        assert normaliser(m, n, n_pos) == pytest.approx(best, rel=1e-12), m


def test_proportional_ranking_scores_zero_and_extremes_one():
    alternating = np.tile([True, False], 50)
    assert all(v == pytest.approx(0, abs=1e-12) for v in ranked_fairness(alternating).values())
    worst = max((ranked_fairness(np.r_[np.ones(30, bool), np.zeros(70, bool)]),
                 ranked_fairness(np.r_[np.zeros(70, bool), np.ones(30, bool)])),
                key=lambda r: r["rND"])
    assert worst["rND"] == pytest.approx(1.0)
    r = ranked_fairness(np.random.default_rng(1).random(100) < 0.3)
    assert all(0 <= v <= 1 for v in r.values())
    assert ranked_fairness(np.zeros(20, bool)) == {m: None for m in MEASURES}


def straightforward(measure: str, ranking: list[bool]) -> float:
    """The unnormalised measures written out as the authors' measures.py computes them, one
    cut-off at a time (10, 20, … ≤ N; 1, 2, … ≤ N for lists of at most 10)."""
    N, P = len(ranking), sum(ranking)
    step = 10 if N > 10 else 1
    total = 0.0
    for i in range(step, N + 1, step):
        c = sum(ranking[:i])
        if measure == "rND":
            v = abs(c / i - P / N)
        elif measure == "rRD":
            R = P / (N - P)
            cur = 0 if i - c == 0 else c / (i - c)
            v = abs(min(R, cur) - R)
        else:
            px, qx = c / i, P / N
            if px in (0, 1):
                px = 0.001
            v = px * math.log(px / qx, 2) + (1 - px) * math.log((1 - px) / (1 - qx), 2)
        total += v / math.log(i + 1, 2)
    return total


@pytest.mark.parametrize("seed", range(30))
def test_unnormalised_measures_match_a_straightforward_implementation(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 120))
    ranking = rng.permutation(np.arange(n) < rng.integers(1, n))        # both groups present
    for m in MEASURES:
        assert raw_score(m, ranking) == pytest.approx(straightforward(m, ranking.tolist()), rel=1e-12, abs=1e-15)


def test_all_protected_on_top_n100():
    """N = 100, |S+| = 50, every protected item first. The authors' one-sided rRD counts an
    over-represented prefix only while it has no unprotected item (their ratio is then 0)."""
    top = np.r_[np.ones(50, bool), np.zeros(50, bool)]
    got = ranked_fairness(top)
    assert got["rND"] == pytest.approx(1.0) and got["rKL"] == pytest.approx(1.0)
    cuts = np.arange(10, 101, 10)
    disc = 1 / np.log2(cuts + 1)
    # the maximum puts the unprotected items first: deviation 1 up to 50, then 1 − (i − 50)/50
    want = disc[:5].sum() / (disc[:5].sum() + ((1 - (cuts[5:] - 50) / 50) * disc[5:]).sum())
    assert got["rRD"] == pytest.approx(want, rel=1e-12)
    assert round(got["rRD"], 4) == 0.7682
    assert ranked_fairness(top[::-1])["rRD"] == pytest.approx(1.0)


@pytest.mark.parametrize("n", [3, 4, 7, 10])
def test_short_lists_use_the_cutoffs_that_fit(n):
    """A list of at most 10 items has no cut-off of 10 inside it: the measures use 1..n, so
    order matters (the worst order scores 1, a proportional-as-possible order less)."""
    k = n // 2
    worst = np.r_[np.zeros(n - k, bool), np.ones(k, bool)]
    got = ranked_fairness(worst)
    assert max(got.values()) == pytest.approx(1.0)
    assert all(v > 0 for v in got.values())
    alternating = np.arange(n) % 2 == 1
    assert ranked_fairness(alternating)["rND"] < got["rND"]
