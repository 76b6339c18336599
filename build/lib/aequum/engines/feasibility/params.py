"""Parameters of the FGCE engine (feasible group counterfactual explanations, seed 001)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class FGCEParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    attributes: list[str] | None = Field(
        None, description="Protected attributes whose groups are compared (default: all); each "
        "attribute's protected and reference groups get their own graph.")
    features: list[str] | None = Field(None, description="Feature space (default: every spec feature).")
    epsilon: float = Field(0.3, gt=0, description="ε: edge iff ‖x_i − x_j‖₂ ≤ ε in the [0, 1] space.")
    epsilon_sweep: list[float] = Field(
        default_factory=list, description="Extra ε values for the graph-statistics sweep.")
    discretise: list[str] = Field(
        default_factory=list, description="Numeric features binned into min(6, ⌊log2 #unique⌋+1, "
        "range) uniform bins first (the reference's option).")
    factuals: Literal["negatives", "false_negatives"] = Field(
        "negatives", description="negatives: every unfavourable decision (demographic parity); "
        "false_negatives: unfavourable decisions with a positive label (error-based fairness).")
    classifier: Literal["spec", "logistic"] = Field(
        "spec", description="Whose decisions are audited: spec — the audit's decisions (decision "
        "column or model); logistic — the FGCE reference's setup: a logistic regression on the FGCE "
        "space (protected attributes included) fitted to the label on the training part of the "
        "`test_fraction` split.")
    logistic_c: float = Field(1.0, gt=0, description="classifier 'logistic': inverse L2 strength C "
                              "(the reference tunes it by a randomised search; 1 is the library default).")
    test_fraction: float | None = Field(
        None, gt=0, lt=1, description="Split the records with a seeded permutation (the reference "
        "splitter's convention, seed `split_seed`): factuals come from the test part only (the "
        "reference audits the false negatives of its 30% test split); candidates from every record.")
    split_seed: int = Field(482, description="Seed of the `test_fraction` split (the reference's).")
    cost: Literal["distance", "path", "hops"] = Field(
        "distance", description="Cost of a reachable pair: L2 distance, shortest-path weight, hops.")
    weights: Literal["face", "reference"] = Field(
        "face", description="Edge weight: d / KDE(mid) (FACE) or d² / (KDE(mid) + 1e−8) (reference).")
    bandwidth: Literal["scott", "cv"] = Field("scott", description="KDE bandwidth selection.")
    kde_sample: int = Field(5000, gt=0, description="KDE sums over at most this many records "
                            "(a fixed seeded subsample beyond; exact below).")
    k: int = Field(5, ge=1, description="Counterfactuals per group for the chosen set (greedy).")
    d: float | None = Field(None, gt=0, description="Cost budget for the chosen set (None = no limit).")
    k_max: int = Field(10, ge=1, description="Curves: k = 1..k_max.")
    d_points: int = Field(10, ge=2, description="Curves: cost grid points up to √(#features).")
    coverage_levels: list[float] = Field(
        default_factory=lambda: [0.5, 0.7, 0.9, 1.0], description="cAUC coverage levels c.")
    cost_curve_solver: Literal["greedy", "exact"] = Field(
        "greedy", description="cAUC's cost(k, c): greedy — the smallest cost at which the greedy's "
        "k picks reach coverage c (an upper bound, consistent with kAUC/dAUC); exact — Problem 2 "
        "solved exactly for every (k, c) (bisection over costs with the max-coverage MIP on HiGHS).")
    cost_grid_points: int = Field(64, ge=2, description="Above mip_max_pairs, greedy cost "
                                  "searches probe this many cost quantiles (an upper bound on d).")
    mip_max_pairs: int = Field(200_000, gt=0, description="Coverage-constrained MIP only when the "
                               "reachable (factual, candidate) pairs are at most this many.")
    max_pairs: int = Field(20_000_000, gt=0, description="Refuse (clear error) beyond this many "
                           "reachable pairs per group rather than exhaust memory.")
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> "FGCEParams":
        if any(not 0 < c <= 1 for c in self.coverage_levels):
            raise ValueError("fgce.coverage_levels must lie in (0, 1]")
        if any(e <= 0 for e in self.epsilon_sweep):
            raise ValueError("fgce.epsilon_sweep values must be positive")
        if self.classifier == "logistic" and self.test_fraction is None:
            raise ValueError("fgce.classifier 'logistic' is fitted on the training part: give "
                             "fgce.test_fraction (the reference uses 0.3)")
        return self
