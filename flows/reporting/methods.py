"""The report's methods and limitations: where the records came from (file, rows read, staged,
quarantined, out of scope, the period they cover) and one short paragraph per engine that ran —
what it measures, its estimand, what would make it wrong — with the figures' field names and
what they mean."""
from __future__ import annotations

from pathlib import Path

from aequum.flows.reporting.html import Section, markup, table
from aequum.flows.reporting.labels import MEASURES, Labels

METHODS = {
    "outcome": ("Favourable-decision rates per group and intersection, their ratio to the reference "
                "group (disparate impact, against the four-fifths line) and the difference's test.",
                "raw disparity",
                "It says that rates differ, not why: groups that differ in income or debt differ in rates "
                "without any unequal treatment."),
    "regression": ("The group's coefficient in a model of the decision given the recorded inputs "
                   "(logit and linear probability), with a sensitivity analysis for an unobserved "
                   "confounder (robustness value).",
                   "adjusted disparity (given the named controls)",
                   "An input the lender used and the records lack, correlated with the group, would "
                   "produce the same coefficient; a confounder stronger than the robustness value "
                   "removes it."),
    "pricing": ("Among originated loans, each pricing field (rate spread, interest rate, costs, points, "
                "credits) by group: means, medians, the group's coefficient in an OLS of the price on the "
                "regression engine's controls, and the higher-priced (HPML) share.",
                "adjusted disparity (given the named controls); the HPML share a raw disparity",
                "A pricing input the records lack (the credit score, in the public LAR), correlated with the "
                "group, would produce the same difference; a confounder stronger than the robustness value "
                "removes it."),
    "reasons": ("Among unfavourable decisions citing a reason, the cited variable's values compared "
                "between the groups: a reason cited at better values for the protected group is a "
                "stricter standard for them.",
                "procedural",
                "Other inputs the records lack can make the same reason cited at different values."),
    "cst": ("Each complainant compared with its nearest neighbours of its own group and with the "
            "neighbours of its counterfactual in the reference group (situation testing); Δp is "
            "the difference of their refusal rates.",
            "direct effect (ST) / total effect through the causal model (CST, CF)",
            "A wrong causal model (CST, CF) or a distance that ignores an input the lender used "
            "(ST) makes the comparators unlike the complainant."),
    "cec": ("Matched pairs of the two groups with the same decision compared on the model's "
            "reasoning (integrated gradients): the same decision for different reasons.",
            "procedural (of the model examined)",
            "Attributions describe the model examined (a surrogate where the lender's is not "
            "supplied) and depend on the baseline."),
    "pba": ("Each input paired with its twin, the same input with the protected attribute flipped; "
            "a box of nearby inputs is proven to favour one copy.",
            "model property",
            "A proof about the model examined: about the lender's decisions only when it is the "
            "lender's model."),
    "raguel": ("Rejected applicants ranked by the cost of their cheapest recourse; whether each group "
               "is represented in every block or prefix near its population share, and what a "
               "re-ranking by suggested actions takes.",
               "recourse",
               "Costs depend on the spec's recourse weights and steps; a different cost model ranks "
               "differently."),
    "fgce": ("How many of each group's rejected members can be shown a feasible path through the "
             "data to approval, and at what cost.",
             "recourse",
             "Feasibility rests on the spec's mutability and the data's density; a sparse group looks "
             "worse covered."),
    "detection": ("The individual findings scored against the source's ground truth of harm "
                  "(generated sources only).",
                  "detection quality",
                  "It grades the audit, not the decisions; it exists only where the truth is known."),
}


def data_period(lake_path: str | None) -> str:
    """The period the staged records cover: the first and last value of each date or time
    column, or the years of a column named ``*year`` (HMDA's activity_year) — or that none is
    recorded. Read from the lake copy, one column at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    files = sorted(str(p) for p in Path(lake_path).rglob("*.parquet")) if lake_path and Path(lake_path).is_dir() else []
    if not files:
        return "the staged records are not in the lake, so their period is not known"
    data = ds.dataset(files, format="parquet")
    parts = []
    for f in data.schema:
        timed = pa.types.is_temporal(f.type) and not pa.types.is_duration(f.type)
        if not (timed or f.name.lower().endswith("year")) or f.name.startswith("_"):
            continue
        span = pc.min_max(data.to_table(columns=[f.name])[f.name])
        low, high = span["min"].as_py(), span["max"].as_py()
        if low is not None:
            parts.append(f"{f.name} {low}" + (f" to {high}" if high != low else ""))
    if not parts:
        return "no date or activity year is recorded in the audited records, so their period is not stated"
    return "period: " + "; ".join(parts)


def methods_section(run, dataset: dict | None, labels: Labels) -> Section:
    sec = Section("methods", "Data and methods", fold="Show the data source, the methods and the glossary")
    source = run.parameters.get("audit", {}).get("source")
    if dataset:
        sec.add(markup("<p>Records: {} ({}); {:,} rows read, {:,} audited, {:,} quarantined (failed "
                       "validation; <code>audit.quarantine</code>), {:,} out of scope; dataset version {}, "
                       "staged {:%Y-%m-%d %H:%M} UTC.</p>",
                       source or dataset.get("source_kind"), dataset.get("source_kind"), dataset["rows_read"],
                       dataset["rows_staged"], dataset["rows_quarantined"], dataset["rows_out_of_scope"],
                       dataset["dataset_version"], dataset["created_at"]))
        sec.add(markup("<p>Data period: {}.</p>", data_period(dataset.get("lake_path"))))
    elif source:
        sec.add(markup("<p>Records: {}.</p>", source))
    for engine in [e for e in METHODS if e in run.engines]:
        what, estimand, wrong = METHODS[engine]
        sec.add(markup("<p><strong>{}.</strong> {} Estimand: {}. What would make it wrong: {}</p>",
                       engine, what, estimand, wrong))
    sec.add("<h3>Glossary of figures</h3>", table(
        [{"figure": label, "field": name} for name, label in MEASURES.items()]))
    return sec
