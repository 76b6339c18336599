"""The audit spec: one YAML file per audited decision system (DESIGN.md, "The audit spec").

Validated with pydantic before any work starts. Every error names the field path and the
offending value (:class:`SpecError`). The spec says where the records come from, which
attributes are protected and how they map to protected / reference groups, the decision and
model, the label, the features (type, order, range, financial flag, mutability, recourse
weight, actionable step, perturbation unit), the SCM, and per-engine parameters.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from collections.abc import Callable

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ValidationError as CoreValidationError

from aequum.engines.core.geography_spec import Geography

Scalar = str | int | float | bool

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_\- .]*$")


class SpecError(ValueError):
    """A spec that cannot be used; the message names the field and the offending value."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TruthTable(_Model):
    """A ground truth of harm per record, for scoring the engines' individual findings
    (``audit.detection``). A generated source gets its generator's truth without this."""

    path: str = Field(description="Parquet or CSV file; relative paths are resolved against the spec file's "
                      "directory.")
    id_column: str = Field("id", description="Column holding the record id (the source's id, or its 0-based "
                           "row number when source.id_column is null).")
    direct: str | dict[str, str] | None = Field(
        None, description="Boolean column: harmed by the mechanism's direct effect (approved had the "
        "mechanism not acted, everything else as observed); or, per protected attribute, the column of its "
        "own controlled direct effect (e.g. harmed_direct_derived_race).")
    total: dict[str, str] = Field(default_factory=dict, description="Per protected attribute (by name), the "
                                  "boolean column: harmed by its total effect (approved under do(attribute := "
                                  "reference value), everything it causes moving with it).")
    direct_posterior: str | dict[str, str] | None = Field(
        None, description="Numeric column (or one per protected attribute, as `direct`): each record's "
        "probability of direct harm given what the data show (e.g. the HMDA generator's p_harmed); "
        "detection then reports the best achievable precision.")
    total_posterior: dict[str, str] = Field(default_factory=dict, description="Per protected attribute, the "
                                            "same for its total effect (e.g. p_harmed_total_derived_race).")

    @model_validator(mode="after")
    def _some(self) -> "TruthTable":
        if self.direct is None and not self.total:
            raise ValueError("source.truth needs `direct` or `total` (the columns saying who was harmed)")
        return self


class Source(_Model):
    """Where the decision records come from."""

    kind: Literal["csv", "parquet", "duckdb", "postgres", "hmda_lar", "generated"] = Field(
        description="csv (any delimiter), parquet (file or glob), duckdb (table or query in a "
        "DuckDB file), postgres (table or query, read with ADBC), hmda_lar (the public HMDA LAR "
        "file, comma or pipe delimited), generated (a built-in generator, see `generator`)."
    )
    path: str | None = Field(None, description="File path or glob (csv, parquet, duckdb, hmda_lar); "
                             "relative paths are resolved against the spec file's directory.")
    uri: str | None = Field(None, description="Postgres connection URI (postgres).")
    table: str | None = Field(None, description="Table name (duckdb, postgres); quoted as an identifier.")
    query: str | None = Field(None, description="Exactly one SELECT statement (duckdb, postgres), instead of "
                              "`table`; checked by the SQL parser and run on a read-only connection.")
    delimiter: str | None = Field(None, description="CSV delimiter; detected from the header when omitted.")
    header_names: list[str] | None = Field(
        None, description="CSV without a header row: the column names, in file order.")
    generator: Literal["loan", "cec_synthetic", "hmda", "hmda_lender"] | None = Field(
        None, description="Built-in generator (generated).")
    rows: int | None = Field(None, gt=0, description="Rows to generate (generated).")
    seed: int = Field(0, description="Generator seed (generated).")
    world: Literal["null", "dti_penalty", "score_penalty", "intersection", "redlining", "input_penalty",
                   "lender_redlining",
                   "pricing_penalty"] = Field(
        "dti_penalty", description="The planted mechanism, for the hmda and hmda_lender generators only "
        "(engines.generators.hmda.WORLDS): null (none), dti_penalty (default: DTI read 5 points higher for "
        "Black and for Hispanic applicants), score_penalty (0.45 on their risk, through no input), "
        "intersection (0.45 on Black women's risk only), redlining (0.45 on applications from tracts more "
        "than 50% minority), input_penalty (LTV read 8 points higher for Asian applicants), lender_redlining "
        "(no decision changes; five named lenders take 75% fewer applications from such tracts), pricing_penalty (the null world's decisions, 0.25 points added to the rate spread of "
        "Black and of Hispanic borrowers' loans). Part of the "
        "generated dataset's identity and of the truth it is scored against.")
    effect: float = Field(
        1.0, ge=0, allow_inf_nan=False, description="The world's penalty times this (hmda and hmda_lender "
        "only): 0.5 for half the points or half the shift, 2 for twice; part of the dataset's identity.")
    id_column: str | None = Field(
        description="Column holding a unique record id; null: the 0-based source row number is "
        "the id (for files without one, such as the papers' reference data).")
    truth: TruthTable | None = Field(
        None, description="A ground truth of harm per record (see TruthTable); scored against every run's "
        "individual findings in audit.detection. A generated source uses its generator's truth.")

    @model_validator(mode="after")
    def _complete(self) -> "Source":
        need = {"csv": "path", "parquet": "path", "hmda_lar": "path", "duckdb": "path",
                "generated": "generator"}
        if self.kind in need and getattr(self, need[self.kind]) is None:
            raise ValueError(f"source.kind={self.kind!r} needs source.{need[self.kind]}")
        if self.world != "dti_penalty" and (self.kind != "generated" or self.generator not in ("hmda", "hmda_lender")):
            raise ValueError(f"source.world={self.world!r} is for the hmda and hmda_lender generators only")
        if self.effect != 1.0 and (self.kind != "generated" or self.generator not in ("hmda", "hmda_lender")):
            raise ValueError(f"source.effect={self.effect!r} is for the hmda and hmda_lender generators only")
        if self.kind == "postgres" and self.uri is None:
            raise ValueError("source.kind='postgres' needs source.uri")
        if self.kind in ("duckdb", "postgres") and (self.table is None) == (self.query is None):
            raise ValueError(f"source.kind={self.kind!r} needs exactly one of source.table, source.query")
        if self.delimiter is not None and len(self.delimiter) != 1:
            raise ValueError(f"source.delimiter must be one character, got {self.delimiter!r}")
        return self


def value_key(v: Scalar) -> str | float:
    """The value a spec entry stands for when records are matched against it: numbers (and text
    that reads as one, as a CSV cell does) compare as numbers, so 1, 1.0 and "1" are one value."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v.strip())
    except ValueError:
        return v.strip()


def _check_disjoint(where: str, **lists: list[Scalar] | None) -> None:
    """Fail when a value (by :func:`value_key`) is in more than one of the named lists."""
    seen: dict[str | float, str] = {}
    for what, values in lists.items():
        for v in values or []:
            key = value_key(v)
            if key in seen and seen[key] != what:
                raise ValueError(f"{where}: value {v!r} is both {seen[key]} and {what}")
            seen[key] = what


class Range(_Model):
    """A numeric range: the values with ``gt`` < v, ``ge`` <= v, v < ``lt``, v <= ``le`` (the
    bounds given; at least one)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    @model_validator(mode="after")
    def _bounds(self) -> "Range":
        if all(b is None for b in (self.gt, self.ge, self.lt, self.le)):
            raise ValueError("a range needs at least one bound: gt, ge, lt or le")
        if self.gt is not None and self.ge is not None or self.lt is not None and self.le is not None:
            raise ValueError("a range takes one lower bound (gt or ge) and one upper bound (lt or le)")
        low = self.gt if self.gt is not None else self.ge
        high = self.lt if self.lt is not None else self.le
        if low is not None and high is not None and (low > high or low == high and (self.gt is not None or self.lt is not None)):
            raise ValueError(f"an empty range: {self.text()}")
        return self

    def text(self) -> str:
        parts = [f"> {self.gt:g}" if self.gt is not None else None, f">= {self.ge:g}" if self.ge is not None else None,
                 f"< {self.lt:g}" if self.lt is not None else None, f"<= {self.le:g}" if self.le is not None else None]
        return " and ".join(p for p in parts if p)

    def overlaps(self, other: "Range") -> bool:
        """Whether some number lies in both ranges."""
        inf = float("inf")

        def low(r):  # (bound, open); of two equal bounds the open one is the tighter (the max)
            return (-inf, False) if r.gt is None and r.ge is None else (r.gt, True) if r.gt is not None else (r.ge, False)

        def high(r):  # (bound, closed); of two equal bounds the open one is the tighter (the min)
            return (inf, True) if r.lt is None and r.le is None else (r.lt, False) if r.lt is not None else (r.le, True)

        (lo, lo_open), (hi, hi_closed) = max(low(self), low(other)), min(high(self), high(other))
        return lo < hi or (lo == hi and not lo_open and hi_closed)


# what joins protected attributes into an intersection (race&sex): a name cannot hold it, so an
# intersection splits into its attributes one way
INTERSECTION = "&"


class ProtectedAttribute(_Model):
    """A protected attribute mapped to a binary protected / reference grouping.

    Records whose value is in neither list (e.g. HMDA "Race Not Available", "Joint") belong to
    neither group: they stay in the data but are excluded from that attribute's comparisons.

    A numeric column (a neighbourhood's minority share: HMDA's
    ``tract_minority_population_percent``) is grouped by ranges instead of values:
    ``protected_range: {gt: 50}`` and ``reference_range: {lt: 20}`` make majority-minority tracts
    the protected group and tracts under 20% minority the reference, so every engine can ask
    about neighbourhoods (redlining). A value in neither range, or not a number, is unmapped.

    ``compare`` says how an auditor reads several protected values: ``pooled`` (one protected
    group against the reference), ``each`` (one comparison per protected value, e.g. Black vs
    White and Asian vs White, named ``race=Black or African American``) or ``both``. The spec
    expands ``each`` / ``both`` into one attribute per comparison when it is read
    (:func:`_expand_comparisons`): every engine then treats each comparison as an attribute.
    """

    name: str = Field(description="Short name used in audit tables (e.g. race, sex).")
    column: str = Field(description="Source column.")
    protected_values: list[Scalar] = Field(
        default_factory=list, description="Values of the protected group (or protected_range).")
    reference_values: list[Scalar] = Field(
        default_factory=list, description="Values of the reference group (or reference_range).")
    protected_range: Range | None = Field(
        None, description="A numeric column: the range of the protected group, e.g. {gt: 50}.")
    reference_range: Range | None = Field(
        None, description="A numeric column: the range of the reference group, e.g. {lt: 20}.")
    unmapped: Literal["reject", "exclude"] = Field(
        "reject", description="A value in neither list: reject the row (quarantine) or keep it "
        "outside both groups (e.g. HMDA 'Race Not Available', 'Joint').")
    compare: Literal["pooled", "each", "both"] = Field(
        "pooled", description="pooled: the protected values together against the reference; each: "
        "one comparison per protected value against the reference, as attributes named "
        "'<name>=<value>'; both: the pooled comparison and each value's.")
    others: list[Scalar] = Field(
        default_factory=list, description="Values in neither group that are still known values of "
        "the column (not unmapped): a per-value comparison lists the other protected values here.")
    of: str | None = Field(None, description="For a per-value comparison: the attribute it was "
                           "expanded from (set by `compare`).")
    labels: dict[str, str] = Field(
        default_factory=dict, description="What recorded values mean, for reports (e.g. {1: Female, "
        "0: Male}); a value without a label is shown as recorded.")

    @field_validator("labels", mode="before")
    @classmethod
    def _label_keys(cls, v: Any) -> Any:
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else v

    def value_label(self, value: Any) -> str:
        return self.labels.get(str(value), str(value))

    def group_labels(self) -> dict[str, str]:
        """The protected and reference groups as people read them: the recorded values (their
        labels), or the column's range; several values are joined with ' / '."""
        def named(values: list, rng: "Range | None") -> str:
            if rng is not None:
                return f"{self.column} {rng.text()}"
            return " / ".join(self.value_label(v) for v in values)
        return {"protected": named(self.protected_values, self.protected_range),
                "reference": named(self.reference_values, self.reference_range)}

    @property
    def by_range(self) -> bool:
        """Grouped by numeric ranges (protected_range / reference_range), not by values."""
        return self.protected_range is not None

    @model_validator(mode="after")
    def _disjoint(self) -> "ProtectedAttribute":
        where = f"protected attribute {self.name!r}"
        named = self.of if self.of is not None else self.name
        if INTERSECTION in named or not named.strip() or any(ord(c) < 32 or ord(c) == 127 for c in named):
            raise ValueError(f"{where}: a name must not be blank, hold control characters or "
                             f"{INTERSECTION!r} (it joins the attributes of an intersection: race&sex)")
        ranges = (self.protected_range is not None, self.reference_range is not None)
        if any(ranges):
            if not all(ranges):
                raise ValueError(f"{where}: protected_range and reference_range go together")
            if self.protected_values or self.reference_values or self.others:
                raise ValueError(f"{where}: give either ranges or values, not both")
            if self.compare != "pooled":
                raise ValueError(f"{where}: a range attribute is compared pooled (compare: pooled)")
            if self.protected_range.overlaps(self.reference_range):
                raise ValueError(f"{where}: the protected range ({self.protected_range.text()}) and the "
                                 f"reference range ({self.reference_range.text()}) overlap")
            return self
        if not self.protected_values or not self.reference_values:
            raise ValueError(f"{where}: needs protected_values and reference_values (or protected_range "
                             "and reference_range for a numeric column)")
        _check_disjoint(where, protected=self.protected_values,
                        reference=self.reference_values, others=self.others)
        return self



def _expand_comparisons(raw: Any) -> Any:
    """``protected[i].compare`` of ``each`` / ``both``: one attribute per protected value (named
    ``<name>=<value>``, that value against the same reference, the other protected values known
    but in neither group), after the pooled attribute for ``both``. Entries it cannot read are
    left for the field validation to report."""
    if not isinstance(raw, dict) or not isinstance(raw.get("protected"), list):
        return raw
    out: list[Any] = []
    for i, item in enumerate(raw["protected"]):
        if isinstance(item, ProtectedAttribute):
            item = item.model_dump()
        compare = item.get("compare", "pooled") if isinstance(item, dict) else "pooled"
        values = item.get("protected_values") if isinstance(item, dict) else None
        if compare not in ("each", "both") or not isinstance(values, list) or not isinstance(item.get("name"), str):
            out.append(item)
            continue
        if compare == "both":
            out.append({**item, "compare": "pooled"})
        for v in values:
            if "&" in str(v):
                raise ValueError(f"protected[{i}].compare: value {v!r} contains '&', which joins the "
                                 "attributes of an intersection; compare it pooled")
            rest = [w for w in values if value_key(w) != value_key(v)]
            out.append({**item, "name": f"{item['name']}={v}", "protected_values": [v], "compare": "pooled",
                        "others": [*rest, *(item.get("others") or [])], "of": item["name"]})
    return {**raw, "protected": out}


class Reasons(_Model):
    """Reason codes recorded with unfavourable decisions (e.g. HMDA's denial_reason_1..4) and the
    feature each code cites, for the reason-consistency engine (``reasons``)."""

    columns: list[str] = Field(min_length=1, description="Columns holding reason codes (text; any may be empty).")
    codes: dict[str, str] = Field(min_length=1, description="Reason code -> the declared feature it cites "
                                  "(e.g. '1': debt_to_income_ratio).")


class Decision(_Model):
    """The production decision column (ŷ). Values in `favourable` map to 1, others to 0."""

    column: str
    favourable: list[Scalar] = Field(min_length=1, description="Values meaning a favourable decision.")
    unfavourable: list[Scalar] | None = Field(
        None, description="If given, only these values count as unfavourable; any other value is "
        "a bad row (quarantined). If omitted, every non-favourable value is unfavourable.")
    out_of_scope: list[Scalar] | None = Field(
        None, description="Rows with these values are not decisions to audit (e.g. HMDA "
        "action_taken 4 withdrawn, 5 incomplete, 6 purchased): skipped and counted, not quarantined.")
    reasons: Reasons | None = Field(None, description="Reason codes given with the decisions.")
    inputs: Literal["partial", "complete"] = Field(
        "partial", description="Whether the records hold every input the decisions depend on. "
        "partial (default; the public HMDA LAR, which lacks the credit history and score): a "
        "direct-effect or controlled finding is evidence of disparate treatment only when it "
        "survives the sensitivity analysis for an unobserved confounder (engines.regression). "
        "complete (an internal audit with the lender's own inputs): the recorded inputs are the "
        "decision's, so no omitted input can explain a direct effect; the sensitivity analysis is "
        "still reported.")

    @model_validator(mode="after")
    def _disjoint(self) -> "Decision":
        _check_disjoint("decision", favourable=self.favourable, unfavourable=self.unfavourable,
                        out_of_scope=self.out_of_scope)
        return self


class Pricing(_Model):
    """The prices of the loans a decision led to (FAIR_LENDING.md, "Pricing"; the HMDA LAR's
    ``rate_spread``, ``interest_rate``, ``total_loan_costs``, ``discount_points``,
    ``lender_credits``, ``origination_charges``), for the ``pricing`` engine.

    They are outcomes of an origination, not inputs of the decision, so they are no
    ``features`` (which every engine may read as the decision's inputs) but a section of their
    own. The LAR publishes them as text that is "NA" where not applicable (every application not
    originated), "Exempt" for a partially exempt lender, or empty: such a value (``missing``, or
    an empty cell) is staged as a null and never quarantines its record, which every other
    engine still reads. Any other value that is not a finite number is a bad row, as for a
    numeric feature. Staged as DOUBLE under the column's name, with the decision column's
    recorded value as text (the engine picks the originations by it: HMDA action_taken 1, not
    the favourable 2, approved but not accepted) and the lien column's as text."""

    fields: list[str] = Field(min_length=1, description="Numeric pricing columns (points, percent or "
                              "USD as recorded).")
    missing: list[str] = Field(default_factory=lambda: ["NA", "Exempt"], description="Text meaning "
                               "not reported (with an empty cell): staged as null, never a bad row.")
    rate_spread: str | None = Field(None, description="The field holding the rate spread (APR minus "
                                    "the average prime offer rate, points), for the higher-priced share.")
    lien: str | None = Field(None, description="Column of the lien status (HMDA lien_status), for the "
                             "higher-priced threshold (Reg Z 1026.35: 1.5 points first lien, 3.5 subordinate); none: every "
                             "loan read as a first lien.")
    first_lien: list[Scalar] = Field(default_factory=lambda: ["1"], description="Values of `lien` "
                                     "meaning a first lien.")
    subordinate_lien: list[Scalar] = Field(default_factory=lambda: ["2"], description="Values of `lien` "
                                           "meaning a subordinate lien.")

    @model_validator(mode="after")
    def _consistent(self) -> "Pricing":
        dup = sorted({f for f in self.fields if self.fields.count(f) > 1})
        if dup:
            raise ValueError(f"pricing.fields: {dup} listed more than once")
        if self.rate_spread is not None and self.rate_spread not in self.fields:
            raise ValueError(f"pricing.rate_spread {self.rate_spread!r} is not among pricing.fields {self.fields}")
        if self.lien is not None and self.lien in self.fields:
            raise ValueError(f"pricing.lien {self.lien!r} is a pricing field")
        _check_disjoint("pricing", first_lien=self.first_lien, subordinate_lien=self.subordinate_lien)
        return self

    def columns(self) -> list[str]:
        """The source columns the section reads: the fields, then the lien column."""
        return [*self.fields, *([self.lien] if self.lien else [])]


class Label(_Model):
    """Ground truth (e.g. repaid), needed by CEC, equalized odds and FGCE false negatives."""

    column: str
    positive: list[Scalar] = Field(min_length=1)
    negative: list[Scalar] | None = Field(
        None, description="If given, only these values count as negative; any other is a bad row.")

    @model_validator(mode="after")
    def _disjoint(self) -> "Label":
        _check_disjoint("label", positive=self.positive, negative=self.negative)
        return self


class Feature(_Model):
    """One decision-relevant feature."""

    name: str
    type: Literal["numeric", "ordinal", "categorical"] = "numeric"
    order: list[Scalar] | None = Field(None, description="Ordinal: the values from lowest to highest.")
    categories: list[Scalar] | None = Field(
        None, description="Categorical: the allowed values (their order fixes the integer codes). "
        "Values outside it are bad rows. Inferred from the data when omitted.")
    range: tuple[float, float] | None = Field(
        None, description="Numeric: [low, high] domain in raw units; values outside are bad rows.")
    units: str | None = Field(None, description="Raw units, for reports (e.g. USD, thousands USD).")
    nullable: bool = Field(False, description="Allow nulls (otherwise a null is a bad row).")
    financial: bool = Field(False, description="In CEC's merit set F (legitimate credit factors).")
    mutability: Literal["free", "increase", "decrease", "immutable"] = "free"
    transitions: dict[str, list[str]] | None = Field(
        None, description="Categorical: allowed transitions from -> [to, ...] (FGCE, RAGUEL).")
    recourse_weight: float | None = Field(None, ge=0, description="Cost per unit change (RAGUEL).")
    step: float | None = Field(None, gt=0, description="Actionable step in raw units (RAGUEL).")
    perturbation: float | None = Field(None, ge=0, description="PBA δ unit in raw units.")

    @model_validator(mode="after")
    def _consistent(self) -> "Feature":
        if self.type == "ordinal" and not self.order:
            raise ValueError(f"feature {self.name!r} is ordinal but has no `order`")
        if self.type != "ordinal" and self.order:
            raise ValueError(f"feature {self.name!r}: `order` is only for ordinal features")
        if self.type != "categorical" and self.categories:
            raise ValueError(f"feature {self.name!r}: `categories` is only for categorical features")
        if self.transitions is not None and self.type == "numeric":
            raise ValueError(f"feature {self.name!r}: `transitions` needs a categorical or ordinal feature")
        if self.range is not None and not self.range[0] < self.range[1]:
            raise ValueError(f"feature {self.name!r}: range {list(self.range)} must be [low, high] with low < high")
        for values, what in ((self.order, "order"), (self.categories, "categories")):
            if values and len({str(v) for v in values}) != len(values):
                raise ValueError(f"feature {self.name!r}: duplicate values in `{what}`")
        return self


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
    for one protected attribute or intersection (read by ``flows/counterfactuals.py``)."""

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
                           "(keeps a million-row fit to seconds).")
    fit_rows: int | None = Field(
        1_000_000, gt=1, description="surrogate: fitted (and held out) on at most this many staged records, a "
        "sample stratified by the target and the protected groups, the same for the same records and "
        "seed whatever their order; its quality is then measured on every record. null: all records.")
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
        cols += [p.column for p in self.protected]
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
                          "model": model, "comparisons": self.comparisons(),
                          "groups": [{"attribute": p.name, **p.group_labels()} for p in self.protected],
                          "decision": self.decision_labels(),
                          "units": {f.name: f.units for f in self.features if f.units},
                          "source": self.source_text()}}

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
