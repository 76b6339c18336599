"""FGCE counterfactual selection on a precomputed reachability structure.

Fragkathoulas et al., "Feasible group counterfactual explanations" (FGCE, seed 001):

* Problem 1 (cost-constrained): given k and a cost budget d, choose S ⊆ X' with |S| ≤ k that
  maximises the number of factuals x with some x' ∈ S reachable at cost(x, x') ≤ d.
  Solved by Algorithm 1 (global greedy, (1 − 1/e)-approximation, :func:`greedy`), its local
  per-WCC variant (:func:`greedy_by_component`) and exactly by a MIP (:func:`max_coverage_mip`).
* Problem 2 (coverage-constrained): given k and a coverage degree c, minimise the maximum
  assigned cost d subject to constraints (1)–(6) (:func:`min_cost_mip`).
* Measures k0 / d0 (Sec. IV): :func:`k0`, :func:`d0`, :func:`d_min`.
* The allocation of k counterfactuals across weakly connected components (Sec. III-B DP):
  :func:`allocate_k`.

Nothing here builds graphs: the input is a :class:`Reach` — which (factual, candidate) pairs are
reachable and at what cost. Cost 0.0 is a legitimate cost, so reachability is stored apart
from the cost matrix. Coverage-constrained results are over *coverable* factuals (those with at
least one reachable candidate); a factual nothing can reach is never counted as coverable.

All functions are pure and deterministic (HiGHS runs single threaded with ``random_seed`` 0).
Empty inputs (no factuals, no candidates, nothing reachable) give empty results, never errors.

This module is the selection's public interface; the work is in :mod:`.reach` (the input and
result structures), :mod:`.greedy` (Algorithm 1), :mod:`.exact` (the MIPs and the bisection),
:mod:`.minimal` (k0, d0, d_min) and :mod:`.allocation` (the DP across components, the curves).
"""
from __future__ import annotations

from aequum.engines.feasibility.allocation import Allocation, allocate_k, cost_curve, coverage_curve
from aequum.engines.feasibility.exact import MinCostResult, max_coverage_mip, min_cost_bisect, min_cost_mip
from aequum.engines.feasibility.greedy import greedy, greedy_by_component, greedy_coverage
from aequum.engines.feasibility.minimal import K0Result, d0, d_min, k0
from aequum.engines.feasibility.reach import Infeasible, Reach, Selection

__all__ = [
    "Reach", "Selection", "MinCostResult", "K0Result", "Allocation", "Infeasible",
    "greedy", "greedy_by_component", "max_coverage_mip", "min_cost_mip",
    "min_cost_bisect", "k0", "d0", "d_min", "allocate_k", "coverage_curve", "cost_curve",
    "greedy_coverage",
]
