"""Parameters of the PBA verification engine (seed 004), with defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class PBAParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    deltas: list[float] = Field(default_factory=lambda: [1.0, 2.0, 3.0],
                                description="Perturbation bounds δ (the paper uses 1, 2, 3): each "
                                "numeric model input moves by ±δ × its feature's `perturbation` unit.")
    attributes: list[str] | None = Field(
        None, description="Protected attributes whose model input the twin flips, one at a time "
        "(default: every protected attribute that is a model input).")
    intersections: list[list[str]] = Field(
        default_factory=list, description="Groups of protected attributes flipped together "
        "(the twin flips every listed indicator); groups are their combinations.")
    truth: Literal["label", "decision"] = Field(
        "label", description="The class c_i inputs must be predicted as, in both copies, to be "
        "considered (Eq. 3): the label (the paper), or the recorded decision (no label, e.g. HMDA).")
    inputs: Literal["all", "holdout"] = Field(
        "all", description="The records verified: all, or holdout — only those the surrogate was not "
        "fitted on (its seeded 20 % held-out share: the paper's 80/20 split, Table 3 scored on the test "
        "20 %); needs model.kind surrogate.")
    sample: int | None = Field(
        None, gt=0, description="Verify a reproducible random sample of this many inputs per "
        "attribute (drawn by record id, reported in pba_summary); default: every input.")
    sample_seed: int = Field(0, description="Seed of the input sample.")
    batch_size: int = Field(256, gt=0, description="Inputs per parallel piece.")
    lp: bool = Field(True, description="Solve the twin LP (HiGHS) for inputs the symbolic bound "
                     "and the counterexample search leave open.")
    milp: bool = Field(False, description="Resolve inputs the LP leaves inconclusive exactly with "
                       "the big-M MILP (small networks; see milp_max_unstable).")
    milp_max_unstable: int = Field(60, ge=0, description="MILP only when at most this many ReLUs "
                                   "(both copies) are unstable.")
    time_limit: float | None = Field(10.0, gt=0, description="Seconds per LP / MILP (null: no limit).")
    attack_steps: int = Field(40, ge=0, description="Projected-gradient steps of the counterexample search.")
    attack_restarts: int = Field(8, ge=1, description="Starting points per input (box centre first).")
    robustness: bool = Field(True, description="Also verify robustness bias: the decision constant "
                             "over the δ box, per copy (Nanda et al. 2021, by verification).")

    @field_validator("deltas")
    @classmethod
    def _deltas(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("deltas must list at least one δ")
        bad = [d for d in v if not (d >= 0 and d < float("inf"))]
        if bad:
            raise ValueError(f"deltas must be finite and ≥ 0, got {bad}")
        return sorted(set(float(d) for d in v))

    def flipped_units(self, spec) -> list[list[str]]:
        """The attribute groups the twin flips: one per attribute, then the intersections."""
        names = [p.name for p in spec.protected]
        single = (self.attributes if self.attributes is not None
                  else [n for n in names if spec.model_input(n) is not None])
        return [[a] for a in single] + [list(g) for g in self.intersections]

    def reads_model(self, spec) -> bool:
        """The engine reads the run's model (verifies the audited network): it is built for a run of it."""
        return True

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        spec.check_attribute_names("engines.pba.attributes", self.attributes or [])
        spec.check_intersections("engines.pba.intersections", *self.intersections)
        for f in spec.features:
            if f.perturbation is not None and f.type != "numeric":
                raise ValueError(f"features: {f.name!r} is {f.type}; a `perturbation` unit applies to "
                                 "numeric features only (categorical and ordinal inputs stay fixed)")
        if not running:
            return
        if spec.model is None:
            raise ValueError("engines.run includes 'pba', which needs a `model` (a ReLU network)")
        for group in self.flipped_units(spec):
            missing = [a for a in group if spec.model_input(a) is None]
            if missing:
                raise ValueError(f"engines.pba: protected attribute(s) {missing} are not model inputs; "
                                 "PBA flips the attribute the model sees (add it to model.features)")
        if not self.flipped_units(spec):
            raise ValueError(f"engines.pba: no protected attribute {[p.name for p in spec.protected]} is a model input; "
                             "PBA flips the attribute the model sees (add it to model.features)")
        moving = [f for f in spec.model.features if f in spec.feature_names
                  and spec.feature(f).perturbation]
        if not moving:
            raise ValueError("engines.pba: no model input has a `perturbation` unit; give the numeric "
                             "features that may move within δ a unit (features[].perturbation)")
        if self.truth == "label" and spec.label is None:
            raise ValueError("engines.pba.truth 'label' needs a `label` section (or set truth: decision)")
        if self.truth == "decision" and spec.decision is None:
            raise ValueError("engines.pba.truth 'decision' needs a `decision` section")
