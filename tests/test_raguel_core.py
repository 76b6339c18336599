"""RAGUEL building blocks: recourse costs (Example 1) and exactly normalised rKL/rND/rRD."""
from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from engines.reranking.metrics import MEASURES, normaliser, ranked_fairness, raw_score
from engines.reranking.recourse import (Actionability, LinearRecourse, NotRepairable, counterfactual_points,
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


@pytest.mark.parametrize("n, n_pos", [(12, 4), (14, 7), (21, 5)])
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
