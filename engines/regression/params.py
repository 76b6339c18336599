"""Parameters of the controlled-disparity engine (``regression``), with defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aequum.engines.core.intersections import MIN_CELL
from aequum.engines.regression.wild import Bootstrap


class RegressionParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    controls: list[str] | None = Field(
        None, description="Features controlled for. Default: engines.cst.features when set, else "
        "every feature that is neither immutable nor a protected attribute. Numeric features enter "
        "as their values; ordinal and categorical features as dummies of their levels (HMDA's "
        "published DTI bins are levels, never parsed to numbers).")
    other_groups: bool = Field(
        True, description="The logit (the group-level test) also holds the groups of the other "
        "protected attributes (those of other columns, protected / reference / neither in each, as "
        "one categorical of their joint cells: Black and Hispanic is a cell of its own; cells under "
        "min_group_size pooled), so a penalty on one group is not read as another's that overlaps "
        "it: race and the tract's minority share, ethnicity and race. The linear model holds them "
        "too, so its sensitivity analysis judges the comparison the logit tests; its benchmarks are "
        "the recorded inputs alone.")
    intersections: list[list[str]] | Literal["auto"] = Field(
        "auto", description="Intersections tested beside the attributes: those protected in every "
        "attribute of one (Black women) against those in the reference group of every one (White "
        "men), the comparison CST's intersections make. auto: the pairs of attributes on different "
        "columns whose four cells each hold max(min_group_size, CST's minimum) records "
        "(engines.core.intersections) — the same pairs CST tests, so its intersection findings have "
        "their group-level test; [] for none.")
    log_controls: list[str] = Field(
        default_factory=list, description="Numeric controls entered as their natural log (income, loan "
        "amount, property value: docs/fair-lending.md's controls); a value at or below 0 is a null (the row "
        "is dropped and counted).")
    fixed_effects: list[str] = Field(
        default_factory=list, description="Categorical features entered as fixed effects, absorbed "
        "rather than expanded (engines.regression.absorb): thousands of levels cost a few numbers a "
        "level, so lenders (lei) and markets (derived_msa_md) pooled in one file are compared within "
        "the same lender and market. Levels whose applicants all have one outcome are dropped with a "
        "note (their effect has no finite estimate).")
    cluster: str | None = Field(
        None, description="A categorical feature whose levels are clusters (e.g. lei): the logit's "
        "interval, z and p, and its marginal effect's interval, and the linear model's interval and p, are "
        "then cluster-robust (CR1, Cameron & Miller 2015; below min_clusters clusters the p a wild cluster "
        "bootstrap's; with one cluster, HC1), the classical errors kept beside them (the linear model's "
        "sensitivity analysis is defined on its classical error). Null: classical errors.")
    min_clusters: int = Field(
        40, ge=2, description="With fewer clusters (and at least 2) the test of the group's coefficient is the wild "
        "cluster bootstrap's (the linear model's WCR bootstrap, the logit's score bootstrap of Kline & Santos "
        "2012), the interval CR1 with t(clusters − 1) critical values: CR1 errors over-reject with few clusters "
        "(Cameron, Gelbach & Miller 2008; MacKinnon & Webb 2017). One cluster: HC1 errors.")
    bootstrap_draws: int = Field(
        9999, ge=99, description="Draws of the wild cluster bootstrap (every weight vector when there are no "
        "more: 2^G Rademacher, 6^G Webb).")
    bootstrap_seed: int = Field(0, ge=0, description="Seed of the wild cluster bootstrap's draws.")
    segments: list[str] = Field(
        default_factory=list, description="Categorical features whose levels are product segments "
        "(loan type, purpose, lien, occupancy): each unit is also tested within each segment "
        "(regression_segments), each segment's feature then out of the controls. The pooled test "
        "holds the segments' dummies among its controls, never pooling them without.")
    segment_units: Literal["attributes", "all"] = Field(
        "attributes", description="Which units are tested within the segments: the protected attributes "
        "(race, ethnicity, sex: one fit per attribute and segment), or every unit (the per-value "
        "comparisons and intersections too: a fit each, per segment).")
    min_segment_size: int = Field(
        1000, ge=1, description="A segment with fewer applicants with a decision (across the unit's "
        "two groups) is not tested within.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Level of the intervals; 1 − confidence "
                              "is the significance level of the (adjusted) tests and of RV_{1,α}.")
    correction: Literal["holm", "bh", "none"] = Field(
        "holm", description="Multiple-testing correction across the run's attributes.")
    min_group_size: int = Field(
        30, ge=1, description="Fewer applicants with a decision in the protected or the reference "
        "group (after dropping nulls): reported with a note, not tested.")
    benchmark_multipliers: list[float] = Field(
        default_factory=lambda: [1.0, 2.0, 3.0], description="Multipliers k of the benchmark bounds: a "
        "confounder k times as strong as each control (kd = ky = k; Cinelli & Hazlett 2020, Sec. 6.1) "
        "in regression_benchmarks.")
    robust_multiplier: float = Field(
        2.0, gt=0, description="A controlled disparity is robust when it survives (keeps its sign, "
        "and its adjusted interval excludes 0) a confounder this many times as strong as each "
        "control and as all of them together. Default 2: records without the credit history and "
        "score (the public LAR) lack the strongest predictor of denial, which is itself tied to "
        "race and ethnicity; on the generated lender worlds a confounder as strong as the recorded "
        "inputs together (1) still called the fair lender's pooled race disparity robust, while 2 "
        "called no fair lender's disparity robust and kept the penalty's (aequum bench validity).")

    @field_validator("benchmark_multipliers")
    @classmethod
    def _multipliers(cls, v: list[float]) -> list[float]:
        if not v or any(k <= 0 for k in v) or len(set(v)) != len(v):
            raise ValueError(f"benchmark_multipliers must be distinct positive numbers, got {v}")
        return v

    def bootstrap(self) -> Bootstrap:
        return Bootstrap(min_clusters=self.min_clusters, draws=self.bootstrap_draws, seed=self.bootstrap_seed)

    def min_cell(self, spec) -> int:
        """The fewest records of each cell of an intersection tested by auto: CST's minimum when
        CST runs (so both engines test the same pairs), and at least ``min_group_size``."""
        cst = spec.engines.cst if "cst" in spec.engines.run else None
        return max(self.min_group_size, cst.min_cell() if cst is not None else MIN_CELL)

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        if self.intersections != "auto":
            spec.check_intersections("engines.regression.intersections", *self.intersections)
        if self.controls is not None:
            spec.check_features("engines.regression.controls", self.controls)
        kinds = {f.name: f.type for f in spec.features}
        for name in self.log_controls:
            if kinds.get(name) != "numeric":
                raise ValueError(f"engines.regression.log_controls: {name!r} is not a numeric feature")
        for field, names in (("fixed_effects", self.fixed_effects), ("segments", self.segments),
                             ("cluster", [self.cluster] if self.cluster else [])):
            spec.check_levels(f"engines.regression.{field}", names)
        if self.controls is not None:
            both = [c for c in self.controls if c in self.fixed_effects]
            if both:
                raise ValueError(f"engines.regression: {both} both a control and a fixed effect; list it once")
        if running and spec.decision is None and (spec.model is None or not spec.model.use_for_decisions):
            raise ValueError("engines.run includes 'regression', which needs decisions (a decision "
                             "column, or model.use_for_decisions)")
