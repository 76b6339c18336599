"""Parameters of the pricing engine (``pricing``), with defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from aequum.engines.core.spec import Scalar, value_key
from aequum.engines.regression.wild import Bootstrap


class PricingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    originated: list[Scalar] = Field(
        default_factory=lambda: ["1"], description="Values of the decision column meaning the loan was "
        "originated (HMDA action_taken 1; not 2, approved but not accepted, whose loan was never priced "
        "in full): the records compared. Among decision.favourable.")
    fields: list[str] | None = Field(
        None, description="The pricing fields compared (default: every one of the spec's pricing.fields).")
    borrower_favourable: list[str] = Field(
        default_factory=lambda: ["lender_credits"], description="Fields of which more is better for the "
        "borrower (lender credits): a lower value is the adverse difference; for the others a higher one.")
    controls: list[str] | None = Field(
        None, description="Features controlled for. Default: the regression engine's controls "
        "(engines.regression.controls, else its default), so both compare applicants alike; for the "
        "LAR add loan_type (docs/fair-lending.md, Pricing).")
    fixed_effects: list[str] | None = Field(
        None, description="Categorical features held as fixed effects (absorbed: engines.regression.absorb). "
        "Default: the regression engine's (engines.regression.fixed_effects: market and lender in the HMDA "
        "spec), so prices are compared within the same market and lender, as the denials are; [] for none.")
    cluster: str | None = Field(
        None, description="A categorical feature whose levels are clusters; the interval and p of each "
        "difference are then cluster-robust (CR1, t with clusters − 1 degrees of freedom: Cameron & Miller "
        "2015; below min_clusters the p a wild cluster bootstrap's, with one cluster HC1), the robustness "
        "value still from the classical fit it is defined for. Default: the regression engine's cluster "
        "when the fixed effects are its too.")
    min_clusters: int = Field(
        40, ge=2, description="With fewer clusters (and at least 2) the p of each difference is the wild cluster "
        "restricted bootstrap's (Cameron, Gelbach & Miller 2008), the interval CR1 with t(clusters − 1); one "
        "cluster: HC1 errors.")
    bootstrap_draws: int = Field(9999, ge=99, description="Draws of the wild cluster bootstrap (every weight "
                                 "vector when there are no more).")
    bootstrap_seed: int = Field(0, ge=0, description="Seed of the wild cluster bootstrap's draws.")
    other_groups: bool = Field(
        True, description="Hold the groups of the other protected columns, as one categorical of their "
        "joint cells (engines.regression.engine.held_cells), as the regression engine does.")
    intersections: list[list[str]] | Literal["auto"] = Field(
        "auto", description="Intersections compared beside the attributes (engines.core.intersections), "
        "auto: the pairs the regression engine tests by default.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Level of the intervals; 1 − confidence is the "
                              "significance level of the adjusted tests.")
    correction: Literal["holm", "bh", "none"] = Field(
        "holm", description="Multiple-testing correction across the run's tests (every unit x field "
        "difference and every higher-priced share ratio, one family).")
    min_group_size: int = Field(
        30, ge=1, description="Fewer originations reporting the field in the protected or the reference "
        "group: reported with a note, not tested.")
    hpml_first_lien: float = Field(1.5, description="Rate spread (points) from which a first-lien loan is "
                                   "higher-priced (Reg Z 12 CFR 1026.35(a)(1)(i)).")
    hpml_subordinate_lien: float = Field(3.5, description="The same for a subordinate lien "
                                         "(1026.35(a)(1)(iii)).")
    robust_multiplier: float = Field(
        2.0, gt=0, description="A controlled difference is robust when it keeps its sign and its interval "
        "excludes 0 under an omitted factor this many times as strong as each control and as all of them "
        "together (Cinelli & Hazlett 2020; engines.regression.sensitivity.controlled_lpm). Default 2, the "
        "regression engine's: the public LAR lacks the credit score a pricer reads; on the generated LAR "
        "(40,000 rows) the null world's significant race differences were not robust at 1 or 2, the "
        "pricing world's 0.25-point add-on was at both (tests/test_pricing_worlds.py).")

    def bootstrap(self) -> Bootstrap:
        return Bootstrap(min_clusters=self.min_clusters, draws=self.bootstrap_draws, seed=self.bootstrap_seed)

    def grouping(self, spec) -> tuple[list[str], str | None]:
        """The fixed effects and the cluster in force (the regression engine's by default)."""
        if self.fixed_effects is None:
            reg = spec.engines.regression
            return list(reg.fixed_effects), self.cluster if self.cluster is not None else reg.cluster
        return list(self.fixed_effects), self.cluster

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        if self.intersections != "auto":
            spec.check_intersections("engines.pricing.intersections", *self.intersections)
        if self.controls is not None:
            spec.check_features("engines.pricing.controls", self.controls)
        for field, names in (("fixed_effects", self.fixed_effects or []), ("cluster", [self.cluster] if self.cluster else [])):
            spec.check_levels(f"engines.pricing.{field}", names)
        if not running:
            return
        if spec.pricing is None:
            raise ValueError("engines.run includes 'pricing', which needs a `pricing` section (the price columns)")
        if self.fields is not None:
            unknown = [f for f in self.fields if f not in spec.pricing.fields]
            if unknown:
                raise ValueError(f"engines.pricing.fields: {unknown} are not pricing.fields {spec.pricing.fields}")
        favourable = {value_key(v) for v in spec.decision.favourable}
        stray = [v for v in self.originated if value_key(v) not in favourable]
        if stray:
            raise ValueError(f"engines.pricing.originated: {stray} are not favourable decisions "
                             f"{list(spec.decision.favourable)}")
