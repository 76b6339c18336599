"""Parameters of the CST engine (counterfactual situation testing, seed 003), with defaults."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aequum.engines.core.intersections import MIN_CELL


class CSTParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    k: list[int] = Field(default_factory=lambda: [15, 30, 50, 100],
                         description="Neighbourhood sizes k (the paper's Table 1 uses 15, 30, 50, 100).")
    alpha: float = Field(0.05, gt=0, lt=0.5, description="Significance level α: significant iff "
                         "Δp − z_{1−α}·SE > τ (one-sided, as the paper's Tables 2–3); the two-sided "
                         "(1−α) Wald interval is reported too; fdr_significant iff the claim's "
                         "Benjamini–Hochberg q-value across the complainants is at most α (false "
                         "discovery rate α).")
    tau: float = Field(0.0, ge=0, lt=1, description="Minimum deviation τ: discriminated iff Δp > τ (Def. 3.4).")
    normalization: Literal["zscore", "range"] = Field(
        "zscore", description="Continuous attributes: z-score (the reference) or range (max − min, "
        "the paper's 'normalized Manhattan').")
    counterfactual_normalization: Literal["own", "factual"] = Field(
        "own", description="own: counterfactual centres are normalised with the counterfactual "
        "table's own statistics, as the reference implementation does (reproduces Table 1); "
        "factual: with the factual data's statistics.")
    complainants: Literal["all", "negative"] = Field(
        "all", description="all protected records (the paper), or only those with a negative decision.")
    features: list[str] | None = Field(
        None, description="Attributes of the distance; default: every feature of the spec.")
    max_distance: float | None = Field(
        None, gt=0, description="Drop neighbours farther than this (groups may then be smaller than k).")
    intersections: list[list[str]] | Literal["auto"] = Field(
        "auto", description="Groups of protected attributes tested jointly (intersectional "
        "discrimination: complainants protected in all, do(all := reference)). auto: every pair of "
        "attributes on different columns whose four cells each hold max(30, k + 1) records "
        "(engines.core.intersections; the pairs skipped are named in cst_summary's run notes); [] "
        "for none.")
    protected_in_distance: list[str] = Field(
        default_factory=list, description="Protected attributes that enter the distance as nominal "
        "attributes (their group) when another attribute is tested — the CST paper's law-school "
        "setup puts sex into the race distance. Never part of their own test's distance.")
    evidence: Literal["all", "significant", "discriminated", "none"] = Field(
        "significant", description="What cst_evidence records: significant — for each "
        "complainant found significantly discriminated by ST or CST (every case a finding counts, so "
        "every case the matched-pair exhibit can show), the groups those methods compared, up to the "
        "largest k at which they found it; discriminated — the same for every complainant found "
        "discriminated (Δp > τ; at 1M HMDA records nearly every complainant: 15.7M rows); all — every "
        "complainant's control and both test groups up to the largest k; none. cst_counterfactuals "
        "keeps the counterfactual points of the same complainants, and of those CF finds "
        "discriminated (none with none).")
    mediators: list[str] = Field(
        default_factory=list, description="Features whose dependence on the protected attribute is "
        "legitimate (e.g. income): the counterfactual world holds them at their factual values and "
        "their descendants follow from those — a path-specific effect instead of the total effect; "
        "cst_summary.effect names what was measured.")
    bias_correction: Literal["none", "logistic"] = Field(
        "none", description="none: the paper's shares of refusals among the neighbours. logistic: "
        "each neighbour's refusal moved to the complainant's inputs (CST's test group: to its "
        "counterfactual's) by one logistic surface fitted on both groups — the one standard the test's "
        "null hypothesis says both are held to (Abadie & Imbens 2011's bias-corrected matching, the "
        "surface fitted under the null; engines.matching.cst.bias_correction) — so a group sparse "
        "around the complainant, its nearest members drawn from where it is dense with other inputs, "
        "does not read as a different standard. For ST and CST; CF has no neighbours.")
    overlap: float | None = Field(
        None, gt=1, description="Test a complainant's ST and CST claims only where the reference "
        "group has members like it: the local odds of the protected over the reference group around "
        "it (k-nearest-neighbour density estimate: (r_t / r_c)^d, the groups' k-th distances, d the "
        "distance's numeric attributes) at most this (9: Crump et al. 2009's trimming at a "
        "propensity of 0.9). Other claims keep Δp and are not counted as tested "
        "(cst_claims.comparable false, cst_summary.comparable). null: every claim is tested (the paper).")
    chunk_size: int = Field(20_000, gt=0, description="Complainants per parallel piece.")
    sample: int | None = Field(
        None, gt=0, description="Test a stratified random sample of this many complainants per tested "
        "attribute (strata: the attribute's recorded value(s) × the decision; proportional allocation, "
        "largest remainders), reported per stratum in cst_sampling; null: every complainant.")
    sample_seed: int = Field(0, description="Seed of the complainant sample (records are drawn in record "
                             "order, so the sample does not depend on the order of the rows).")

    @field_validator("k")
    @classmethod
    def _k(cls, v: list[int]) -> list[int]:
        if not v or any(k < 1 for k in v):
            raise ValueError(f"k must be a non-empty list of positive sizes, got {v}")
        return sorted(set(v))

    group_size_field: ClassVar[str] = "k"  # the parameter min_group_sizes follows from

    def min_group_sizes(self, spec) -> dict[str, tuple[int, int]]:
        """Members each tested unit needs (protected, reference): the complainant and its k
        nearest others in the protected group, k in the reference group (the largest k)."""
        kmax = max(self.k)
        units = [[p.name] for p in spec.protected] + [list(g) for g in self.declared_intersections]
        return {"&".join(u): (kmax + 1, kmax) for u in units}

    @property
    def declared_intersections(self) -> list[list[str]]:
        """The intersections the spec names (none for auto, which tests those the data allow)."""
        return [] if self.intersections == "auto" else self.intersections

    def min_cell(self) -> int:
        """The fewest records of each cell of an intersection tested by auto."""
        return max(MIN_CELL, max(self.k) + 1)

    def reads_model(self, spec) -> bool:
        """The engine reads the run's model (re-decides the counterfactuals with the audited model): it is built for a run of it."""
        return True

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        spec.check_intersections("engines.cst.intersections", *self.declared_intersections)
        spec.check_attribute_names("engines.cst.protected_in_distance", self.protected_in_distance)
        unknown = [f for f in self.mediators if f not in spec.feature_names]
        if unknown:
            raise ValueError(f"engines.cst.mediators: {unknown} are not declared features")
        if self.features is not None:
            unknown = [f for f in self.features if f not in spec.feature_names]
            if unknown:
                raise ValueError(f"engines.cst.features: {unknown} are not declared features")
        if running and spec.scm is None:
            raise ValueError("engines.run includes 'cst', which needs an `scm` section")
        targets = {eq.target for eq in spec.scm.equations} if spec.scm is not None else set()
        if running and self.mediators and spec.scm.equations and not set(self.mediators) <= targets:
            raise ValueError(f"engines.cst.mediators: {sorted(set(self.mediators) - targets)} are not "
                             "targets of scm.equations (nothing the protected attribute moves)")
        if running and isinstance(spec.scm.counterfactuals, dict) and not spec.scm.equations:
            given = {frozenset(key.split("&")) for key in spec.scm.counterfactuals}
            units = [[p.name] for p in spec.protected] + self.declared_intersections
            lacking = ["&".join(u) for u in units if frozenset(u) not in given]
            if lacking:
                raise ValueError(f"engines.cst tests {lacking}, which have no table in scm.counterfactuals "
                                 "and no scm.equations to compute one")

    def effect(self, targets: set[str] | None = None) -> str:
        """What CF and CST measure with these parameters (cst_summary.effect), given the SCM's
        ``targets`` (the variables the protected attribute can move): the total effect; the
        direct effect when every one of them is held (only the attribute's own input to the
        model changes); a path-specific effect otherwise."""
        if not self.mediators:
            return "total"
        held = ", ".join(self.mediators)
        if targets and targets <= set(self.mediators):
            return f"direct: every mediator ({held}) held at factual values"
        return f"path-specific: {held} held at factual values"
