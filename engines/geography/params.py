"""Parameters of the geography and peers engine (``geography``), with defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class GeographyParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    majority: list[float] = Field(
        [50.0, 80.0], description="Tract minority population shares (percent) above which a tract is "
        "counted: 50 (majority-minority) and 80. A tract's Black or Hispanic share, where the spec's "
        "geography section names such columns, is counted above the first of them.")
    low_income_below: float = Field(
        80.0, gt=0, description="A low-to-moderate income tract: tract median family income under this "
        "percent of the MSA's (geography.income_ratio).")
    peer_volume: tuple[float, float] = Field(
        (0.5, 2.0), description="A lender's peers in a market: the market's other lenders whose "
        "applications there number between these multiples of its own (50 % to 200 %).")
    min_applications: int = Field(
        30, ge=1, description="The redlining screen tests a lender in a market when it has at least this "
        "many applications with the tract field reported, against the market's other lenders that have "
        "as many (and the between-lender spread estimated from them); fewer, or no such other lender: a "
        "row with a note, not tested.")
    min_cell: int = Field(
        5, ge=1, description="Denial disparities: a market counts for a lender when each of its four "
        "cells (protected / reference × denied / approved) and each of its pooled peers' holds at "
        "least this many applications.")
    attributes: list[str] | None = Field(
        None, description="Protected attributes whose per-lender denial disparities are tested "
        "(default: every one).")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Level of the intervals; 1 − confidence "
                              "is the significance level of the adjusted tests.")
    correction: Literal["holm", "bh"] = Field(
        "bh", description="Multiple-testing correction across lenders (one family per measure and "
        "basis, and per attribute): bh (Benjamini-Hochberg 1995, the false discovery rate) or holm "
        "(Holm 1979, the family-wise error rate).")

    @field_validator("majority")
    @classmethod
    def _majority(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 <= t < 100 for t in v):
            raise ValueError(f"majority must be a non-empty list of percents in [0, 100), got {v}")
        return sorted(set(v))

    @field_validator("peer_volume")
    @classmethod
    def _peers(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0 < v[0] <= 1 <= v[1]:
            raise ValueError(f"peer_volume must be (low, high) with 0 < low <= 1 <= high, got {v}")
        return v

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        if running and spec.geography is None:
            raise ValueError("engines.geography needs the spec's `geography` section (the lender and "
                             "market features, the tract columns)")
        if running and spec.decision is None:
            raise ValueError("engines.geography needs a decision column")
        if self.attributes is not None:
            spec.check_attribute_names("engines.geography.attributes", self.attributes)
