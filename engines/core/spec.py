"""The audit spec: one YAML file per audited decision system (DESIGN.md, "The audit spec").

Validated with pydantic before any work starts. Every error names the field path and the
offending value (:class:`SpecError`). The spec says where the records come from, which
attributes are protected and how they map to protected / reference groups, the decision and
model, the label, the features (type, order, range, financial flag, mutability, recourse
weight, actionable step, perturbation unit), the SCM, and per-engine parameters.

The record contract's parts are in ``engines.core.spec_fields`` (source, protected attributes,
decision, pricing, label, features), the SCM and model in ``engines.core.spec_models``, the
geography section in ``engines.core.geography_spec``; this module assembles them
(:class:`AuditSpec`), holds the engines' sections, and re-exports the names used elsewhere.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from collections.abc import Callable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ValidationError as CoreValidationError

from aequum.engines.core.geography_spec import Geography
from aequum.engines.core.spec_fields import (  # noqa: F401  (the spec's names, importable from here)
    Scalar,
    SpecError,
    _Model,
    Source,
    value_key,
    Range,
    ProtectedAttribute,
    _expand_comparisons,
    Decision,
    InputBound,
    Pricing,
    Label,
    Feature,
)
from aequum.engines.core.spec_models import (  # noqa: F401
    CounterfactualTable,
    SCM,
    ModelSpec,
)


# Engines own their parameters: each registers its params model here (``engines/registry.py``
# does it for every engine when the ``engines`` package is imported), so the core never
# imports an engine and a new engine never edits the core.
_ENGINE_PARAMS: dict[str, Callable[[], type[BaseModel]]] = {}


def register_engine_params(name: str, params_model: Callable[[], type[BaseModel]]) -> None:
    """Make ``engines.<name>`` a spec section validated by ``params_model()`` (loaded lazily).

    A params model may define ``check_spec(self, spec, running)``, raising ``ValueError`` when
    the parameters do not fit the rest of the spec (unknown features, a missing section ...);
    ``running`` says whether ``engines.run`` names the engine."""
    _ENGINE_PARAMS[name] = params_model


def engine_names() -> list[str]:
    return sorted(_ENGINE_PARAMS)


class EnginesSpec(BaseModel):
    """Which engines run (``run``) and one section of parameters per engine (``engines.<name>``),
    each validated by the params model its engine registered, with documented defaults."""

    model_config = ConfigDict(extra="allow", frozen=True)

    run: list[str] = Field(default_factory=lambda: ["outcome"], min_length=1,
                           description="Engines to run, in any order (at least one).")

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        out = dict(raw)
        run = out.get("run", ["outcome"])
        if isinstance(run, list):
            unknown = [n for n in run if n not in _ENGINE_PARAMS]
            if unknown:
                raise ValueError(f"engines.run: unknown engine(s) {unknown}; known: {engine_names()}")
            dup = sorted({str(n) for n in run if run.count(n) > 1})
            if dup:
                raise ValueError(f"engines.run: engine(s) {dup} listed more than once")
        unknown = [k for k in out if k != "run" and k not in _ENGINE_PARAMS]
        if unknown:
            raise ValueError(f"engines: unknown section(s) {unknown}; known: {engine_names()}")
        for name, load in _ENGINE_PARAMS.items():
            model = load()
            section = out.get(name)
            if isinstance(section, model):
                continue
            try:
                out[name] = model.model_validate({} if section is None else section)
            except ValidationError as exc:
                raise CoreValidationError.from_exception_data(exc.title, [
                    {"type": e["type"], "loc": (name, *e["loc"]), "input": e["input"],
                     **({"ctx": e["ctx"]} if "ctx" in e else {})} for e in exc.errors()]) from None
        return out

    def params(self, name: str) -> BaseModel:
        """The parameters of engine ``name`` (its defaults when the spec has no section)."""
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(f"no engine named {name!r}; known: {engine_names()}") from None


class Ingest(_Model):
    """Validation policy at ingest."""

    max_bad_fraction: float = Field(
        0.05, ge=0, le=1, description="Fail the ingest if more than this share of rows is quarantined.")
    reuse_unchanged_files: bool = Field(
        True, description="Reuse a staged dataset version without reading the source again when "
        "its files have the same paths, sizes and modification times (or a generator the same "
        "name, rows, seed and code) as when it was staged; false: read and fingerprint every time.")


class AuditSpec(_Model):
    """One audited decision system."""

    name: str = Field(description="Spec name (letters, digits, _ and -).")
    description: str = ""
    source: Source
    protected: list[ProtectedAttribute] = Field(min_length=1)
    decision: Decision | None = None
    model: ModelSpec | None = None
    label: Label | None = None
    features: list[Feature] = Field(min_length=1)
    pricing: Pricing | None = Field(None, description="The prices of originated loans (Pricing), for "
                                    "the pricing engine.")
    scm: SCM | None = None
    geography: Geography | None = Field(None, description="The lender, market and tract columns "
                                        "(the geography engine).")
    ingest: Ingest = Field(default_factory=Ingest)
    engines: EnginesSpec = Field(default_factory=EnginesSpec)
    question: Literal["disparate_treatment", "disparate_impact", "counterfactual_fairness"] = Field(
        "disparate_treatment", description="The audit's question, which decides what a finding is "
        "evidence of (audit.findings.evidence). disparate_treatment (default): were applicants "
        "treated differently because of the attribute? Evidence only from a direct-effect or "
        "controlled finding that is significant and robust to an unobserved confounder; raw "
        "disparities are reported as disparate-impact screening. disparate_impact: does a neutral "
        "process fall harder on a group? Evidence from a significant adverse-impact disparity (which "
        "the lender may justify by business necessity). counterfactual_fairness: would the decision "
        "change in the world where the applicant belonged to the reference group (the total effect "
        "through the SCM, group differences in the inputs included)? Evidence from CF and CST.")

    @model_validator(mode="before")
    @classmethod
    def _comparisons(cls, raw: Any) -> Any:
        return _expand_comparisons(raw)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", v):
            raise ValueError(f"name {v!r} must be 1-64 letters, digits, '_' or '-'")
        return v

    @model_validator(mode="after")
    def _cross(self) -> "AuditSpec":
        if self.decision is None and self.model is None:
            raise ValueError("the spec needs a `decision` column, a `model`, or both")
        feats = [f.name for f in self.features]
        dup = sorted({n for n in feats if feats.count(n) > 1})
        if dup:
            raise ValueError(f"features: duplicate feature name(s) {dup}")
        pnames = [p.name for p in self.protected]
        if len(set(pnames)) != len(pnames):
            raise ValueError(f"protected: duplicate attribute name(s) in {pnames}")
        reserved = [c for c in self.columns() if c.startswith("_")]
        if reserved:
            raise ValueError(f"column name(s) {reserved} start with '_', which aequum reserves")
        pcols = {p.column for p in self.protected}
        if len({(p.column, p.proxy.model_dump_json()) for p in self.protected if p.proxy is not None}) > 1:
            raise ValueError("protected: one proxy per spec (its probabilities are staged once); the "
                             "proxied attributes must share one column and one proxy")
        clash = pcols & set(feats)
        if clash:
            raise ValueError(f"features: protected column(s) {sorted(clash)} cannot also be features")
        if self.source.truth is not None:
            self.check_attribute_names("source.truth.total", list(self.source.truth.total))
            self.check_attribute_names("source.truth.total_posterior", list(self.source.truth.total_posterior))
            for name in ("direct", "direct_posterior"):
                if isinstance(getattr(self.source.truth, name), dict):
                    self.check_attribute_names(f"source.truth.{name}", list(getattr(self.source.truth, name)))
        if self.decision is not None and self.decision.reasons is not None:
            unknown = sorted(set(self.decision.reasons.codes.values()) - set(feats))
            if unknown:
                raise ValueError(f"decision.reasons.codes: {unknown} are not declared features")
            others = {self.decision.column, *feats, *pcols, *([self.label.column] if self.label else [])}
            clash = sorted(set(self.decision.reasons.columns) & others)
            if clash:
                raise ValueError(f"decision.reasons.columns: {clash} are already other columns of the spec")
        if self.decision is not None and self.decision.bounds:
            outcomes = {"denial", "any", *(self.pricing.fields if self.pricing is not None else [])}
            names = set(pnames) | {c["label"] for c in self.comparisons()}
            for i, b in enumerate(self.decision.bounds):
                if b.outcome not in outcomes:
                    raise ValueError(f"decision.bounds[{i}].outcome: {b.outcome!r} is none of denial, any "
                                     f"or the pricing fields {sorted(outcomes - {'denial', 'any'})}")
                unknown = [a for a in b.attributes if a not in names
                           and not ("&" in a and all(part in pnames for part in a.split("&")))]
                if unknown:
                    raise ValueError(f"decision.bounds[{i}].attributes: {unknown} are not protected "
                                     f"attributes, comparisons {sorted(names)} or intersections (race&sex)")
        if self.pricing is not None:
            if self.decision is None:
                raise ValueError("pricing needs a `decision` column (the originations are picked by it)")
            others = {self.decision.column, *feats, *pcols, *([self.label.column] if self.label else []),
                      *(self.decision.reasons.columns if self.decision.reasons else [])}
            clash = sorted(set(self.pricing.columns()) & others)
            if clash:
                raise ValueError(f"pricing: {clash} are already other columns of the spec")
        if self.model is not None:
            unknown = [f for f in self.model.features if f not in feats and f not in pnames]
            if unknown:
                raise ValueError(f"model.features: {unknown} are neither declared `features` nor "
                                 f"protected attribute names {pnames}{self._pooled_hint(unknown)}")
            dup = sorted({f for f in self.model.features if self.model.features.count(f) > 1})
            if dup:
                raise ValueError(f"model.features: {dup} listed more than once")
            if self.model.kind == "surrogate":
                if self.model.target == "label" and self.label is None:
                    raise ValueError("model.target 'label' needs a `label` section")
                if self.model.target == "decision" and self.decision is None:
                    raise ValueError("model.target 'decision' needs a `decision` section")
            if self.decision is None and not self.model.use_for_decisions:
                raise ValueError("no `decision` column: set model.use_for_decisions: true")
        if self.scm is not None:
            known = set(feats) | set(pnames)
            targets = [eq.target for eq in self.scm.equations]
            for eq in self.scm.equations:
                if eq.target not in feats:
                    raise ValueError(f"scm: equation target {eq.target!r} is not a declared feature")
                missing = [p for p in eq.parents if p not in known]
                if missing:
                    raise ValueError(f"scm: equation for {eq.target!r} names unknown parent(s) "
                                     f"{missing}{self._pooled_hint(missing)}")
            if len(set(targets)) != len(targets):
                raise ValueError(f"scm: more than one equation for the same target in {targets}")
            cycle = _find_cycle({eq.target: eq.parents for eq in self.scm.equations})
            if cycle:
                raise ValueError(f"scm: the causal graph has a cycle {' -> '.join(cycle)}")
            tables = self.scm.counterfactuals
            if isinstance(tables, CounterfactualTable) and len(pnames) > 1:
                raise ValueError(f"scm.counterfactuals: one table is do(A := a') for one attribute, but "
                                 f"{pnames} are protected: give a mapping attribute (or 'a&b') -> table")
            for key, table in (tables.items() if isinstance(tables, dict) else [("", tables)] if tables else []):
                unknown = [a for a in key.split("&") if a not in pnames] if key else []
                if unknown or (key and len(set(key.split("&"))) != len(key.split("&"))):
                    raise ValueError(f"scm.counterfactuals: key {key!r} must name protected attribute(s) "
                                     f"{pnames}, joined by '&' for an intersection")
                stray = sorted(set(table.columns or {}) - set(feats))
                if stray:
                    raise ValueError(f"scm.counterfactuals{f'[{key}]' if key else ''}.columns: {stray} are "
                                     "not declared features")
        if self.geography is not None:
            self._check_geography(feats, pcols)
        for name in engine_names():
            check = getattr(self.engines.params(name), "check_spec", None)
            if check is not None:
                check(self, running=name in self.engines.run)
        return self

    def _check_geography(self, feats: list[str], pcols: set[str]) -> None:
        g = self.geography
        for role in ("lender", "market"):
            name = getattr(g, role)
            if name not in feats or self.feature(name).type != "categorical":
                raise ValueError(f"geography.{role}: {name!r} is not a declared categorical feature")
        if g.lender == g.market:
            raise ValueError("geography: lender and market name the same feature")
        staged = g.staged()
        ranged = {p.column for p in self.protected if p.by_range}  # their numbers are not staged otherwise
        others = {*feats, *(pcols - ranged), *([self.decision.column] if self.decision else []),
                  *(self.decision.reasons.columns if self.decision and self.decision.reasons else []),
                  *([self.label.column] if self.label else []),
                  *([self.source.id_column] if self.source.id_column else [])}
        clash = sorted(set(staged) & others)
        if clash:
            raise ValueError(f"geography: {clash} are already other columns of the spec")

    def _pooled_hint(self, names: list[str]) -> str:
        expanded = sorted({p.of for p in self.protected if p.of in names})
        return (f" ({expanded} compare each value only: `compare: both` keeps the pooled attribute)"
                if expanded else "")

    # -- conveniences -------------------------------------------------------------------
    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    def check_attribute_names(self, field: str, *groups) -> None:
        """For params models' ``check_spec``: fail naming ``field`` when one of ``groups`` (lists
        of attribute names, e.g. intersections) names an attribute that is not protected."""
        names = [p.name for p in self.protected]
        for group in groups:
            unknown = [a for a in group if a not in names]
            if unknown:
                raise ValueError(f"{field}: {unknown} are not protected attribute names {names}")

    def check_features(self, field: str, names: list[str]) -> None:
        """For params models' ``check_spec``: fail naming ``field`` when ``names`` (e.g. an
        engine's controls) holds a name that is not a declared feature, or one twice."""
        unknown = [c for c in names if c not in self.feature_names]
        if unknown:
            raise ValueError(f"{field}: {unknown} are not declared features (features: {self.feature_names})")
        dup = sorted({c for c in names if names.count(c) > 1})
        if dup:
            raise ValueError(f"{field}: {dup} listed more than once")

    def check_levels(self, field: str, names: list[str]) -> None:
        """For params models' ``check_spec``: fail naming ``field`` when a feature read by its levels
        (a fixed effect, a cluster, a segment) is not declared, is numeric, or is listed twice."""
        for name in names:
            if name not in self.feature_names:
                raise ValueError(f"{field}: {name!r} is not a declared feature (features: {self.feature_names})")
            if self.feature(name).type == "numeric":
                raise ValueError(f"{field}: {name!r} is numeric; levels are needed (declare it categorical)")
        dup = sorted({c for c in names if names.count(c) > 1})
        if dup:
            raise ValueError(f"{field}: {dup} listed more than once")

    def check_intersections(self, field: str, *groups) -> None:
        """As :meth:`check_attribute_names` for intersections, whose attributes must also read
        different columns (race and race=Asian intersect in nothing new)."""
        self.check_attribute_names(field, *groups)
        column = {p.name: p.column for p in self.protected}
        for group in groups:
            shared = [a for a in group if [column[b] for b in group].count(column[a]) > 1]
            if shared:
                raise ValueError(f"{field}: {shared} read the same column ({column[shared[0]]!r}); "
                                 "an intersection joins attributes of different columns")

    def model_input(self, name: str) -> str | None:
        """The model input that stands for protected attribute ``name``: the attribute itself
        when ``model.features`` lists it, else another comparison of its column that it lists
        (race for race=Asian: the model sees the pooled indicator), else None."""
        inputs = self.model.features if self.model is not None else []
        if name in inputs:
            return name
        column = next((p.column for p in self.protected if p.name == name), None)
        return next((p.name for p in self.protected if p.column == column and p.name in inputs), None)

    def intervened(self, names: list[str]) -> list[str]:
        """The attributes an intervention on ``names`` sets to their reference: every comparison
        reading the same columns, since do(race := White) for an Asian applicant makes both the
        pooled race indicator and race=Asian the reference's (``protected[].compare``)."""
        columns = {p.column for p in self.protected if p.name in names}
        return list(dict.fromkeys([*names, *(p.name for p in self.protected if p.column in columns)]))

    def feature(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(f"no feature named {name!r}")

    def columns(self) -> list[str]:
        """Every source column the audit reads, id first, without duplicates."""
        cols = [self.source.id_column] if self.source.id_column else []
        for p in self.protected:
            cols += p.proxy.source_columns(p.column) if p.proxy is not None else [p.column]
        if self.decision:
            cols.append(self.decision.column)
            cols += self.decision.reasons.columns if self.decision.reasons else []
        if self.label:
            cols.append(self.label.column)
        cols += self.feature_names
        cols += list(self.geography.staged()) if self.geography is not None else []
        cols += self.pricing.columns() if self.pricing else []
        return list(dict.fromkeys(cols))

    def run_parameters(self) -> dict:
        """What a run records as its parameters (``audit.runs.parameters``): the engines section,
        and under ``audit`` what the findings need to say what they are evidence of: the
        question, whether the records hold every input of the decisions, and whose model the
        model-based engines examine (the lender's, or a surrogate fitted to the decisions)."""
        model = None if self.model is None else ("surrogate" if self.model.kind == "surrogate" else "lender")
        return {**self.engines.model_dump(mode="json"),
                "audit": {"question": self.question,
                          "inputs": self.decision.inputs if self.decision is not None else "partial",
                          "missing_inputs": list(self.decision.missing_inputs) if self.decision else [],
                          "bounds": [b.model_dump(mode="json") for b in self.decision.bounds]
                          if self.decision else [],
                          "model": model, "comparisons": self.comparisons(),
                          "groups": [{"attribute": p.name, **p.group_labels()} for p in self.protected],
                          "proxied": [{"attribute": p.name, "method": p.proxy.method, "geography": p.proxy.geography,
                                       "threshold": p.proxy.threshold} for p in self.protected if p.proxy],
                          "decision": self.decision_labels(),
                          "units": {f.name: f.units for f in self.features if f.units},
                          "values": self.value_labels(),
                          "records": self.record_layout(),
                          "source": self.source_text()}}

    def record_layout(self) -> dict:
        """What a lender's file review reads of the staged records (``aequum report --cases`` on a
        lenders finding): the decision, lender and market columns and the ordinal features' orders."""
        g = self.geography
        return {"decision": self.decision.column if self.decision is not None else None,
                "lender": g.lender if g is not None else None, "market": g.market if g is not None else None,
                "ordinal": {f.name: [str(v) for v in f.order] for f in self.features if f.type == "ordinal"}}

    def value_labels(self) -> dict[str, dict[str, str]]:
        """What the protected columns' recorded values mean, for the reports' case pages:
        {"Gender": {"1": "Female", "0": "Male"}} (a group's side label is not a value's)."""
        out: dict[str, dict[str, str]] = {}
        for p in self.protected:
            named = {k: v for k, v in p.labels.items() if k not in ("protected", "reference")}
            if named:
                out.setdefault(p.column, {}).update(named)
        return out

    def decision_labels(self) -> dict[str, str]:
        """The decisions as the spec records them: {"favourable": "1", "unfavourable": "-1"}."""
        if self.decision is None:
            return {}
        out = {"favourable": " or ".join(str(v) for v in self.decision.favourable)}
        if self.decision.unfavourable:
            out["unfavourable"] = " or ".join(str(v) for v in self.decision.unfavourable)
        return out

    def source_text(self) -> str:
        """Where the records come from, in a few words (no credentials: a URI is not shown)."""
        s = self.source
        if s.kind == "generated":
            return f"generated by the {s.generator} generator (seed {s.seed}, {s.rows or 'default'} rows)"
        if s.kind == "postgres":
            return f"PostgreSQL {'query' if s.query else 'table ' + str(s.table)}"
        where = s.path or ""
        return f"{s.kind} {where}{' table ' + s.table if s.table else ''}".strip()

    def comparisons(self) -> list[dict]:
        """The per-value comparisons (``compare: each``) as the audit tables name them and what
        the name is made of: ``{"label": "race=Asian", "attribute": "race", "value": "Asian"}``.
        The findings read the parts from here (``audit.comparisons``), never by splitting the
        label, which an attribute name or a value holding ``=`` would split wrongly."""
        return [{"label": p.name, "attribute": p.of, "value": str(p.protected_values[0])}
                for p in self.protected if p.of is not None]

    def digest(self) -> str:
        """A stable content hash of the validated spec (the run record's spec hash)."""
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()


def _find_cycle(parents: dict[str, list[str]]) -> list[str] | None:
    """Return one cycle of the graph child -> parents as a path, or None (DFS colouring)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for p in parents.get(node, []):
            if state.get(p) == 1:
                return stack[stack.index(p):] + [p]
            if state.get(p) is None:
                found = visit(p)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in parents:
        if node not in state:
            found = visit(node)
            if found:
                return found[::-1]
    return None


def _format_errors(err: ValidationError, where: str) -> str:
    lines = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        shown = "" if isinstance(value, (dict, list)) or value is None else f" (got {value!r})"
        lines.append(f"  {path}: {msg}{shown}")
    return f"invalid audit spec{' ' + where if where else ''}:\n" + "\n".join(lines)


def parse_spec(raw: Any, where: str = "") -> AuditSpec:
    """Validate a mapping (parsed YAML) into an :class:`AuditSpec` or raise :class:`SpecError`."""
    if not isinstance(raw, dict):
        raise SpecError(f"invalid audit spec{' ' + where if where else ''}: the top level must be a mapping, "
                        f"got {type(raw).__name__}")
    try:
        return AuditSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc, where)) from None


def load_spec(path: str | Path) -> AuditSpec:
    """Read and validate a YAML spec file. Relative source paths stay relative to its directory."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read spec file {path}: {exc}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"spec file {path} is not valid YAML: {exc}") from None
    return parse_spec(raw, where=str(path))
