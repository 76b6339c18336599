"""Parameters of the CEC engine (counterfactual explanation consistency, seed 000), with defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_SWEEP = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75]


class CECTrainingParams(BaseModel):
    """``aequum train``'s choices for this spec (the command line's flags override them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_f1_loss: float | None = Field(
        None, ge=0, lt=1, description="Choose λ_CEC per fold by validation: the lowest-CEC λ of "
        "`lambdas` whose validation F1 is at most this below the plain model's (--max-f1-loss); "
        "null: the fixed --lambda-cec.")
    lambdas: list[float] = Field(default_factory=lambda: [0.01, 0.03, 0.1, 0.3, 1.0],
                                 description="The λ_CEC grid searched, in increasing order.")
    validation: float = Field(0.2, gt=0, lt=1, description="Share of each fold's training records "
                              "held out to choose λ (stratified by label and group).")
    records: int | None = Field(None, gt=1, description="Train on a sample of this many records, "
                                "stratified by label and group (seeded); null: every record.")

    @field_validator("lambdas")
    @classmethod
    def _lambdas(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < x < float("inf") for x in v):
            raise ValueError(f"lambdas must list positive finite values, got {v}")
        return sorted(set(v))


class CECParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    features: list[str] | None = Field(
        None, description="The merit set F matched on (Algorithm 1); default: every feature the "
        "spec marks `financial: true`.")
    partition: Literal["auto", "label", "decision"] = Field(
        "auto", description="Stratify the matching on the label (the paper) or on the decision; "
        "auto: the label when the spec has one, else the decision (said in cec_summary).")
    max_distance: float = Field(
        0.0, ge=0, description="Algorithm 1's τ: reject matches farther than this (in standardised "
        "units of F); 0 keeps every nearest neighbour.")
    integration: Literal["exact", "riemann"] = Field(
        "exact", description="How the integrated gradients' path integral is taken: exact (the model "
        "is piecewise linear, so the integral is a finite sum over the path's linear segments; "
        "completeness holds to rounding error) or riemann (the paper's midpoint rule over `steps`).")
    steps: int = Field(32, ge=2, le=1024, description="Integrated-gradient steps T of integration "
                       "riemann (the paper: 32; its completeness error is 1.5-2.3% on ReLU MLPs).")
    threshold: float = Field(
        0.25, gt=0, lt=1, description="Same reasoning iff Δ_CEC ≤ threshold (regimes A–D). The paper "
        "leaves it unstated; 0.25 is an angle of about 29° between the attributions.")
    sweep: list[float] = Field(
        default_factory=lambda: list(DEFAULT_SWEEP),
        description="Reasoning thresholds at which cec_regimes also reports the regime shares.")
    intersections: list[list[str]] = Field(
        default_factory=list, description="Groups of protected attributes audited jointly (protected "
        "in all vs reference in all; others are not matched).")
    features_top: int = Field(0, ge=0, description="Keep only the top features per group in "
                              "cec_features (0: all model inputs).")
    sample: int | None = Field(
        None, gt=0, description="Explain a stratified random sample of this many factual records per "
        "attribute or intersection (strata: group × the matching stratum, label or decision; "
        "proportional allocation, largest remainders). Only the queries are sampled: each is matched "
        "against the whole other-group pool of its stratum, so its pair is the full run's. Reported "
        "in cec_summary (records: sampled, population: before sampling); null: every record.")
    sample_seed: int = Field(0, description="Seed of the factual sample (drawn in record-id order, so "
                             "the sample does not depend on the order of the rows).")
    training: CECTrainingParams = Field(default_factory=CECTrainingParams,
                                        description="aequum train: λ search and training sample.")
    chunk_size: int = Field(50_000, gt=0, description="Factual records per parallel piece.")
    batch_pairs: int = Field(512, gt=0, description="Pairs per torch batch inside a piece "
                             "(memory: 2 x batch_pairs paths x their segments or steps; the exact "
                             "integral of two hidden layers pads its paths as these batches would).")

    @field_validator("sweep")
    @classmethod
    def _sweep(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < t < 1 for t in v):
            raise ValueError(f"sweep must be a non-empty list of thresholds in (0, 1), got {v}")
        return sorted(set(v))

    def thresholds(self) -> list[float]:
        """The sweep with the reasoning threshold itself included."""
        return sorted(set(self.sweep) | {self.threshold})

    def merit_features(self, spec) -> list[str]:
        """F: the configured features, else the spec's financial ones."""
        return list(self.features) if self.features is not None else [
            f.name for f in spec.features if f.financial]

    def reads_model(self, spec) -> bool:
        """The engine reads the run's model (explains the audited model's decisions): it is built for a run of it."""
        return True

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        spec.check_intersections("engines.cec.intersections", *self.intersections)
        if self.features is not None:
            unknown = [f for f in self.features if f not in spec.feature_names]
            if unknown:
                raise ValueError(f"engines.cec.features: {unknown} are not declared features")
            if not self.features:
                raise ValueError("engines.cec.features: empty; CEC matches on at least one feature")
        if not running:
            return
        if not self.merit_features(spec):
            raise ValueError("engines.run includes 'cec', which matches on financial features: mark "
                             "some `features` with `financial: true` or set engines.cec.features")
        if spec.model is None:
            raise ValueError("engines.run includes 'cec', which explains a model: the spec needs a `model`")
        if self.partition == "label" and spec.label is None:
            raise ValueError("engines.cec.partition 'label' needs a `label` section")
