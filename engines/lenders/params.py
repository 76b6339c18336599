"""Parameters of the per-lender and per-market disparities engine (``lenders``), with defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LendersParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fields: list[str] | None = Field(
        None, description="The outcomes compared: 'denial' (applications with a decision) and pricing "
        "fields of the spec's pricing section (among originations, as the pricing engine). Default: "
        "denial and the rate spread (pricing.rate_spread) when the spec has one.")
    attributes: list[str] | None = Field(
        None, description="The comparisons tested (protected attributes and the per-value comparisons of "
        "protected[].compare, e.g. race=Black or African American). Default: every one.")
    intersections: list[list[str]] = Field(
        default_factory=list, description="Intersections tested beside them (race&sex: protected in both "
        "against reference in both). Default none: each adds a family of tests over every lender.")
    focus: list[str] | None = Field(
        None, description="LEIs (values of the geography's lender column) of the institutions under review: "
        "only their rows are reported and tested (the multiple-testing correction across their rows alone), "
        "against peers drawn from every lender of the records (a lender's own submission beside the public "
        "LAR of its markets). Default: every lender.")
    controls: list[str] | None = Field(
        None, description="Controls of the pooled fit. Default: for denial the regression engine's "
        "(engines.regression.controls, its log_controls as logs), for prices the pricing engine's.")
    products: list[str] | None = Field(
        None, description="Categorical features that, with the market, define the strata in which a "
        "lender is compared with its peers (an FHA loan against FHA loans). Default: the regression "
        "engine's segments (loan_type in the HMDA spec); [] for the market alone.")
    originated: list[str] = Field(
        default_factory=lambda: ["1"], description="Decision values meaning the loan was originated (HMDA "
        "action_taken 1): the records whose prices are compared.")
    borrower_favourable: list[str] = Field(
        default_factory=lambda: ["lender_credits"], description="Price fields of which more is better for "
        "the borrower: a lower value is the adverse difference.")
    min_protected: int = Field(
        20, ge=2, description="A lender is tested when it has at least this many protected applicants "
        "(originations, for a price) in markets where it has peers; fewer: 'not enough applications'.")
    min_reference: int = Field(
        20, ge=2, description="The same for the reference group.")
    min_market: int = Field(
        50, ge=2, description="A market is tested when it has at least this many protected and this many "
        "reference applicants compared within its lenders.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Level of the intervals; 1 − confidence is "
                              "the false discovery rate (bh) or family-wise error rate (holm) of the flags.")
    correction: Literal["bh", "holm", "none"] = Field(
        "bh", description="Multiple-testing correction across the lenders (and across the markets) of one "
        "comparison × field: bh, Benjamini-Hochberg 1995 (false discovery rate).")
    block_rows: int | None = Field(
        None, ge=1024, description="Rows a block in the pooled fit (default: about 4M numbers a block).")

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        if self.controls is not None:
            spec.check_features("engines.lenders.controls", self.controls)
        if self.products:
            spec.check_levels("engines.lenders.products", self.products)
        if self.intersections:
            spec.check_intersections("engines.lenders.intersections", *self.intersections)
        if self.attributes is not None:
            spec.check_attribute_names("engines.lenders.attributes", self.attributes)
        if not running:
            return
        if spec.geography is None:
            raise ValueError("engines.run includes 'lenders', which needs the spec's `geography` section "
                             "(its lender and market features)")
        if spec.decision is None:
            raise ValueError("engines.run includes 'lenders', which needs a decision column")
        prices = [f for f in (self.fields or []) if f != "denial"]
        known = spec.pricing.fields if spec.pricing is not None else []
        unknown = [f for f in prices if f not in known]
        if unknown:
            raise ValueError(f"engines.lenders.fields: {unknown} are neither 'denial' nor pricing.fields {known}")
