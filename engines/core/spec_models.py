"""The audit spec's causal and model parts (DESIGN.md, "The audit spec"): the structural
equations and supplied counterfactuals of the SCM, and the model audited. Re-exported by
``engines.core.spec``."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from aequum.engines.core.spec_fields import Source, _Model


class StructuralEquation(_Model):
    """An additive-noise structural equation target = f(parents) + U (CST, seed 003 §3)."""

    target: str
    parents: list[str] = Field(default_factory=list)
    fit: Literal["ols", "explicit"] = Field("ols", description="ols: fitted with intercept on the data.")
    link: Literal["identity", "log"] = Field("identity", description="log: the equation models log(target).")
    intercept: float | None = None
    coefficients: dict[str, float] | None = None

    @model_validator(mode="after")
    def _explicit(self) -> "StructuralEquation":
        if self.fit == "explicit":
            if self.coefficients is None or self.intercept is None:
                raise ValueError(f"scm equation for {self.target!r}: fit 'explicit' needs "
                                 "`intercept` and `coefficients`")
            extra = set(self.coefficients) - set(self.parents)
            if extra:
                raise ValueError(f"scm equation for {self.target!r}: coefficients {sorted(extra)} "
                                 "are not parents")
        if self.target in self.parents:
            raise ValueError(f"scm equation for {self.target!r} lists itself as a parent")
        return self


class CounterfactualTable(Source):
    """A user-supplied counterfactual table: every record's features under do(A := reference)
    for one protected attribute or intersection (read by ``flows/store/counterfactuals.py``)."""

    id_column: str | None = Field(
        None, description="Column holding the records' ids; null: rows align with the source by "
        "position (R row names, when present, are the 1-based source rows).")
    columns: dict[str, str] | None = Field(
        None, description="Feature name -> the column holding its counterfactual value (e.g. "
        "{LSAT: scf_LSAT}); unmapped features are read under their own names.")


class SCM(_Model):
    """The causal graph over protected attributes (by their `name`) and features."""

    equations: list[StructuralEquation] = Field(default_factory=list)
    counterfactuals: Annotated[
        Annotated[CounterfactualTable, Tag("table")] | Annotated[dict[str, CounterfactualTable], Tag("by_attribute")],
        Discriminator(lambda v: "table" if isinstance(v, CounterfactualTable) or (
            isinstance(v, dict) and "kind" in v and not isinstance(v["kind"], (dict, CounterfactualTable)))
            else "by_attribute"),
    ] | None = Field(
        None, description="User-supplied counterfactual tables instead of fitted equations: one "
        "table when a single attribute is protected, else a mapping from attribute name (or "
        "intersection 'a&b') to its table, since do(A := a') differs per A. Attributes without a "
        "table use the equations.")


class ModelSpec(_Model):
    """The audited model, when decisions must be (re)computed (engines.core.models)."""

    kind: Literal["linear", "mlp", "surrogate"]
    features: list[str] = Field(min_length=1, description="Input features, in order: declared "
                                "`features`, and protected attribute names (by `name`) when the model "
                                "takes the attribute as an input (the model sees 1 for the protected "
                                "group and 0 otherwise; counterfactual engines set it under do(A := a')).")
    coefficients: dict[str, float] | None = None
    intercept: float | None = None
    path: str | None = Field(None, description="mlp: state-dict file, relative to the spec's directory.")
    hidden: list[int] = Field(default_factory=lambda: [64, 32])
    outputs: Literal[1, 2] = 1
    input_mean: list[float] | None = None
    input_scale: list[float] | None = None
    target: Literal["decision", "label"] = Field("decision", description="surrogate: what to fit.")
    epochs: int = Field(200, gt=0, description="surrogate: passes over the training rows (capped by max_steps).")
    batch_size: int = Field(4096, gt=0, description="surrogate: rows per minibatch.")
    max_steps: int = Field(3000, gt=0, description="surrogate: at most this many optimiser steps "
                           "(keeps a million-row fit to seconds); a fit they cut short anneals its "
                           "learning rate to 0 over them.")
    fit_rows: int | None = Field(
        1_000_000, gt=1, description="surrogate: fitted (and held out) on at most this many staged records, a "
        "sample stratified by the target and the protected groups, the same for the same records and "
        "seed whatever their order; its quality is then measured on every record (above 1,000,000, "
        "a uniform sample of that many: audit.model_quality's split 'sample'). null: all records.")
    min_balanced_accuracy: float = Field(
        0.6, ge=0, le=1, description="surrogate: below this balanced accuracy on held-out rows the "
        "model cannot stand in for the lender's; the engines that need a model stop with a message.")
    operating_point: Literal["balanced", "matched_rate"] | None = Field(
        None, description="surrogate: where its decision threshold sits. balanced: highest balanced "
        "accuracy against the targets (the default; denials are rare, and the boundary that separates "
        "them best is where a counterfactual's change of decision means something); matched_rate: "
        "approves the targets' share of rows (the default with use_for_decisions, so the decisions keep "
        "the recorded approval rate).")
    seed: int = 0
    use_for_decisions: bool = Field(
        False, description="Take ŷ from the model rather than the decision column.")

    @model_validator(mode="after")
    def _kind(self) -> "ModelSpec":
        if self.kind == "linear":
            if self.coefficients is None or self.intercept is None:
                raise ValueError("model.kind 'linear' needs `coefficients` and `intercept`")
            unknown = set(self.coefficients) - set(self.features)
            if unknown:
                raise ValueError(f"model.coefficients name(s) {sorted(unknown)} not in model.features")
        if self.kind == "mlp" and self.path is None:
            raise ValueError("model.kind 'mlp' needs `path`")
        if self.kind != "surrogate" and self.operating_point is not None:
            raise ValueError(f"model.operating_point is the threshold a surrogate is fitted to; a model of "
                             f"kind {self.kind!r} decides by its own")
        for name in ("input_mean", "input_scale"):
            v = getattr(self, name)
            if v is not None and len(v) != len(self.features):
                raise ValueError(f"model.{name} has {len(v)} values for {len(self.features)} features")
        return self
