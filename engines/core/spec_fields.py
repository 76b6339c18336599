"""The audit spec's record contract (DESIGN.md, "The audit spec"): where the records come from
(``Source``, its ground truth), the protected attributes and their groups, the decision, its
reasons and prices, the label and the features. Assembled into the whole spec by
``engines.core.spec.AuditSpec``, which also re-exports every name here."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aequum.engines.core.proxy_spec import Proxy


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
    generator: Literal["loan", "cec_synthetic", "hmda", "hmda_lender", "hmda_market", "hmda_market_lender",
                       "hmda_single", "hmda_single_lender", "bisg"] | None = Field(
        None, description="Built-in generator (generated); hmda_market / hmda_single: the LAR of 60 lenders in 12 "
        "markets / of one lender, whose decisions and prices a credit score the LAR lacks drives; their _lender "
        "twins: the same applications as internal records, with the score (engines.generators.lar_market); bisg: "
        "applications whose race is never recorded but known, for the BISG proxy (engines.generators.bisg).")
    rows: int | None = Field(None, gt=0, description="Rows to generate (generated).")
    seed: int = Field(0, description="Generator seed (generated).")
    world: Literal["null", "dti_penalty", "score_penalty", "intersection", "redlining", "input_penalty",
                   "lender_redlining", "pricing_penalty",
                   "named_score_penalty", "named_pricing_penalty", "dti_cap"] = Field(
        "dti_penalty", description="The planted mechanism, for the hmda and hmda_lender generators only "
        "(engines.generators.hmda.WORLDS): null (none), dti_penalty (default: DTI read 5 points higher for "
        "Black and for Hispanic applicants), score_penalty (0.45 on their risk, through no input), "
        "intersection (0.45 on Black women's risk only), redlining (0.45 on applications from tracts more "
        "than 50% minority), input_penalty (LTV read 8 points higher for Asian applicants), lender_redlining "
        "(no decision changes; five named lenders take 75% fewer applications from such tracts), pricing_penalty (the null world's decisions, 0.25 points added to the rate spread of "
        "Black and of Hispanic borrowers' loans); the hmda_market generators also named_score_penalty, "
        "named_pricing_penalty (at named lenders only) and dti_cap (engines.generators.lar_worlds). Part of the "
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
        worlds = ("hmda", "hmda_lender", "hmda_market", "hmda_market_lender", "hmda_single", "hmda_single_lender")
        if self.world != "dti_penalty" and (self.kind != "generated" or self.generator not in worlds):
            raise ValueError(f"source.world={self.world!r} is for the {', '.join(worlds)} generators only")
        if self.effect != 1.0 and (self.kind != "generated" or self.generator not in worlds):
            raise ValueError(f"source.effect={self.effect!r} is for the {', '.join(worlds)} generators only")
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
    proxy: Proxy | None = Field(None, description="Race inferred where it was not recorded (BISG from "
                                "surname and geography; docs/proxies.md).")
    labels: dict[str, str] = Field(
        default_factory=dict, description="What recorded values mean, for reports (e.g. {1: Female, "
        "0: Male}); a value without a label is shown as recorded. A group is named by its side: "
        "{protected: majority-minority tract (> 50 %), reference: tract under 20 % minority} (a range "
        "attribute), {protected: minority race (pooled)} (several values shown as one group).")

    @field_validator("labels", mode="before")
    @classmethod
    def _label_keys(cls, v: Any) -> Any:
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else v

    def value_label(self, value: Any) -> str:
        return self.labels.get(str(value), str(value))

    def group_labels(self) -> dict[str, str]:
        """The protected and reference groups as people read them: the side's label (labels:
        {protected: ..., reference: ...}), else the recorded values (their labels) joined with
        ' / ', or the column's range."""
        def named(side: str, values: list, rng: "Range | None") -> str:
            if self.labels.get(side):
                return self.labels[side]
            if rng is not None:
                return f"{self.column} {rng.text()}"
            return " / ".join(self.value_label(v) for v in values)
        return {"protected": named("protected", self.protected_values, self.protected_range),
                "reference": named("reference", self.reference_values, self.reference_range)}

    def _check_proxy(self, where: str) -> None:
        if self.unmapped != "exclude":
            raise ValueError(f"{where}: a proxied attribute keeps the records the proxy cannot assign "
                             "outside both groups: set unmapped: exclude")
        # a per-value comparison (race=Native Hawaiian ...) may name a value no proxied race writes
        if self.of is None and (not self.proxy_races("protected") or not self.proxy_races("reference")):
            raise ValueError(f"{where}: proxy.values {self.proxy.values} name no race of the protected or of "
                             "the reference values; list the values the proxy writes there")

    def proxy_races(self, side: str) -> list[str]:
        """The proxy's races (white, black, ...) whose values are in the protected or reference list."""
        if self.proxy is None:
            return []
        listed = {value_key(v) for v in (self.protected_values if side == "protected" else self.reference_values)}
        return [r for r, v in self.proxy.values.items() if value_key(v) in listed]

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
        if self.proxy is not None:
            self._check_proxy(where)
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
            labels = item.get("labels")  # the pooled group's name is not one value's
            labels = {k: x for k, x in labels.items() if str(k) != "protected"} if isinstance(labels, dict) else labels
            out.append({**item, "name": f"{item['name']}={v}", "protected_values": [v], "compare": "pooled",
                        **({"labels": labels} if labels is not None else {}),
                        "others": [*rest, *(item.get("others") or [])], "of": item["name"]})
    return {**raw, "protected": out}


class Reasons(_Model):
    """Reason codes recorded with unfavourable decisions (e.g. HMDA's denial_reason_1..4) and the
    feature each code cites, for the reason-consistency engine (``reasons``)."""

    columns: list[str] = Field(min_length=1, description="Columns holding reason codes (text; any may be empty).")
    codes: dict[str, str] = Field(min_length=1, description="Reason code -> the declared feature it cites "
                                  "(e.g. '1': debt_to_income_ratio).")


class InputBound(_Model):
    """How strong an input the records lack can be, as Cinelli & Hazlett (2020, Sec. 4) bound an
    omitted confounder Z with explicit values: its partial R² with group membership given the
    controls (``r2_group`` = R²_{D~Z|X}) and with the outcome given group and controls
    (``r2_outcome`` = R²_{Y~Z|D,X}). The lender's internal records, where the input is recorded,
    measure both (``aequum bounds``); ``source`` says where the figures come from."""

    outcome: str = Field(description="denial, a pricing field (rate_spread, interest_rate, ...), or any.")
    r2_group: float = Field(ge=0, lt=1, description="Partial R² of the missing input with group membership "
                            "given the controls.")
    r2_outcome: float = Field(ge=0, le=1, description="Partial R² of the missing input with the outcome "
                              "given group membership and the controls.")
    source: str = Field(min_length=1, description="Where the figures come from (an internal audit's run, "
                        "a study): the statements cite it.")
    attributes: list[str] = Field(default_factory=list, description="The protected attributes or "
                                  "comparisons it applies to (race, race=Asian); empty: every one.")


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

    missing_inputs: list[str] = Field(
        default_factory=list, description="With inputs: partial, the inputs of the decisions the records "
        "lack, in words (the public HMDA LAR: [credit score, automated underwriting result]); the "
        "statements name them. Empty: 'inputs the records lack'.")
    bounds: list[InputBound] = Field(
        default_factory=list, description="With inputs: partial, how strong the missing inputs can be, "
        "with the source of the figures (Cinelli & Hazlett 2020, bounds for explicit values): a controlled "
        "difference that survives the bound is evidence, one that does not is an unexplained disparity. "
        "`aequum bounds` prints these entries from an internal audit that recorded the missing input.")

    @model_validator(mode="after")
    def _disjoint(self) -> "Decision":
        _check_disjoint("decision", favourable=self.favourable, unfavourable=self.unfavourable,
                        out_of_scope=self.out_of_scope)
        if self.inputs == "complete" and (self.missing_inputs or self.bounds):
            raise ValueError("decision: inputs: complete says no input is missing; drop missing_inputs "
                             "and bounds, or set inputs: partial")
        return self

    def bound_for(self, outcome: str, attribute: str, parent: str | None = None) -> "InputBound | None":
        """The bound on the missing inputs for one outcome (``denial`` or a pricing field) and one
        tested unit: the entries naming the outcome (or ``any``) and the unit, its attribute
        (``parent``: race for race=Asian) or every attribute; the most specific kind wins, and
        several of one kind combine into the strongest (the largest of each partial R²)."""
        def rank(b: "InputBound") -> int | None:
            if b.outcome not in (outcome, "any"):
                return None
            names = b.attributes
            specific = 0 if b.outcome == "any" else 1
            if not names:
                return specific
            if attribute in names:
                return 4 + specific
            return 2 + specific if parent is not None and parent in names else None
        scored = [(rank(b), b) for b in self.bounds]
        scored = [(r, b) for r, b in scored if r is not None]
        if not scored:
            return None
        best = max(r for r, _ in scored)
        chosen = [b for r, b in scored if r == best]
        if len(chosen) == 1:
            return chosen[0]
        return InputBound(outcome=outcome, r2_group=max(b.r2_group for b in chosen),
                          r2_outcome=max(b.r2_outcome for b in chosen),
                          source="; ".join(dict.fromkeys(b.source for b in chosen)))


class Pricing(_Model):
    """The prices of the loans a decision led to (docs/fair-lending.md, "Pricing"; the HMDA LAR's
    ``rate_spread``, ``interest_rate``, ``total_loan_costs``, ``discount_points``,
    ``lender_credits``, ``origination_charges``), for the ``pricing`` engine.

    They are outcomes of an origination, not inputs of the decision, so they are no
    ``features`` (which every engine may read as the decision's inputs) but a section of their
    own. The LAR publishes them as text that is "NA" where not applicable (every application not
    originated), "Exempt" for a partially exempt lender, or empty: such a value (``missing``, or
    an empty cell) is staged as a null and never quarantines its record, which every other
    engine still reads. Any other value that is not a finite number (a word) is staged as a null
    too, the record kept, and counted per field (``audit.datasets.fields_nulled``). Staged as DOUBLE under the column's name, with the decision column's
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
