"""Parameters of the RAGUEL engine (recourse-aware re-ranking, seed 002), with defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class RaguelParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    attributes: list[str] | None = Field(
        None, description="Protected attributes to re-rank for, one re-ranking each (default: all). "
        "Groups: protected, reference, and 'other' when some records are in neither.")
    boundary: Literal["model", "linear", "target"] = Field(
        "model", description="model: the spec's linear model is the decision boundary; linear: the "
        "`coefficients`/`intercept` given here; target: plain ranking towards one `target` point.")
    coefficients: dict[str, float] | None = None
    intercept: float | None = None
    target: dict[str, float] | None = Field(None, description="boundary 'target': the counterfactual point.")
    population: Literal["unfavourable", "all"] = Field(
        "unfavourable", description="Who is ranked: the rejected records (the waiting list of "
        "Example 1) or everyone (favourable records cost 0).")
    algorithms: list[Literal["full", "block"]] = Field(
        default_factory=lambda: ["full", "block"], description="Algorithm 1 (full) and/or 2 (block).")
    full_max_rows: int = Field(
        200_000, gt=0, description="Algorithm 1 walks record by record; above this many ranked "
        "records it is skipped (noted in the summary) and only the block variant runs.")
    tolerance: float = Field(1 / 3, gt=0, le=1, description="t: ε = t·p (Def. 3.1).")
    recourse_tolerance: float = Field(0.1, ge=0, lt=1, description="ε_r of Defs 3.3/3.4.")
    recourse: Literal["improve", "strict"] = Field(
        "improve", description="improve: a move may not lower recourse fairness below "
        "min(1 − ε_r, r before) — the reading that reproduces Example 1; strict: r ≥ 1 − ε_r.")
    eq3: Literal["outside_tolerance", "always", "no_worse"] = Field(
        "outside_tolerance", description="Algorithm 2's Eq. 3 (Theorem 3.5's bound on the cost of "
        "the point pulled into a block): outside_tolerance — only in blocks that fail Def. 3.3 "
        "(r < 1 − ε_r), elsewhere the block must stay recourse-fair (the reading that repairs "
        "blocks as the paper reports); always — on every swap; no_worse — the block's r "
        "(min/max over all groups) may not fall (strictest).")
    rounding: Literal["nearest", "strict"] = Field(
        "nearest", description="Def. 3.1 in counts when no integer count is within tolerance "
        "(short prefixes/blocks): accept the counts nearest to k·p, or fail (strict).")
    block_size: int = Field(100, ge=2, description="Records per block (Algorithm 2).")
    brackets: list[float] | None = Field(
        None, description="Instead of fixed-size blocks: recourse-cost cut points (e.g. "
        "interest-rate tiers); block b holds costs in [cut_b, cut_{b+1}).")
    max_combination: int = Field(3, ge=1, le=3, description="Largest attribute combination tried.")
    max_candidates: int = Field(50, ge=1, description="Later records tried per group (Algorithm 1).")
    sweep_tolerances: list[float] = Field(
        default_factory=lambda: [1 / 2, 1 / 3, 1 / 5, 1 / 8],
        description="Tolerance × block-size sweep (the paper's Table 6); empty to skip.")
    sweep_block_sizes: list[int] = Field(default_factory=lambda: [10, 50, 100])
    write_ranking: bool = Field(True, description="Write the re-ranked list (one row per record).")

    @field_validator("brackets")
    @classmethod
    def _brackets(cls, v):
        if v is not None and sorted(set(v)) != list(v):
            raise ValueError("brackets must be strictly increasing cost cut points")
        return v

    @model_validator(mode="after")
    def _boundary(self) -> "RaguelParams":
        if self.boundary == "linear" and (self.coefficients is None or self.intercept is None):
            raise ValueError("raguel.boundary 'linear' needs `coefficients` and `intercept`")
        if self.boundary == "target" and not self.target:
            raise ValueError("raguel.boundary 'target' needs a `target` point")
        if any(not 0 < t <= 1 for t in self.sweep_tolerances):
            raise ValueError("raguel.sweep_tolerances must lie in (0, 1]")
        if any(b < 2 for b in self.sweep_block_sizes):
            raise ValueError("raguel.sweep_block_sizes must be at least 2")
        return self
