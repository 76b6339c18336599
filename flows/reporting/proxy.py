"""Report section of the race proxy (BISG): how many records were inferred and how well, and the
gap between the inferred groups four to six ways (``engines.proxy.estimates``,
``engines.proxy.controlled``): hard assignment, the probability-weighted means, the corrected
estimate (the outcome regressed on the group probabilities) and its controlled regressions.
A gap in the unfavourable rate is written in points, as the statements write it; a pricing
field's gap in the field's own units."""
from __future__ import annotations

from aequum.flows.reporting.html import Section, markup, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.outcome import p_text
from aequum.flows.reporting.run import Run
from aequum.flows.reporting.registry import section

ESTIMATORS = {  # estimator -> how a reader names it, in the order the table lists them
    "corrected_regression": "corrected, controlled regression (headline)",
    "corrected": "corrected (outcome on the probabilities)",
    "corrected_controlled": "corrected, numeric controls",
    "weighted_regression": "probability-weighted regression",
    "weighted": "probability-weighted means (CFPB)",
    "hard": "largest-probability assignment",
}
LENDERS_SHOWN = 10  # lenders with the smallest p-value of their corrected gap


def _figure(value, outcome: str, digits: int = 3) -> str:
    """A gap or a limit in the unit of its outcome: points of the unfavourable rate, else the field's."""
    if value is None or value != value:
        return "n/a"
    return f"{100 * value:+.1f}" if outcome == "unfavourable" else f"{value:+.{digits}f}"


def _gap_rows(rows: list[dict], labels: Labels) -> list[dict]:
    order = list(ESTIMATORS)
    rows = sorted(rows, key=lambda r: (r["attribute"], r["outcome"] != "unfavourable", r["outcome"],
                                       order.index(r["estimator"]) if r["estimator"] in order else len(order)))
    out = []
    for r in rows:
        unit = "points" if r["outcome"] == "unfavourable" else "field units"
        out.append({"groups": labels.versus(r["attribute"], "protected"),
                    "outcome": "unfavourable decision" if r["outcome"] == "unfavourable" else r["outcome"],
                    "estimator": ESTIMATORS.get(r["estimator"], r["estimator"]),
                    "gap": f"{_figure(r['gap'], r['outcome'])} {unit}",
                    "interval": f"{_figure(r['ci_low'], r['outcome'])} to {_figure(r['ci_high'], r['outcome'])}",
                    "p": p_text(r["p_value"] if r["p_value"] == r["p_value"] else None), "records": r["records"],
                    "controls": ", ".join(x for x in (r.get("controls"), r.get("fixed_effects") and
                                                      f"within {r['fixed_effects']}") if x) or "none",
                    "errors": r.get("inference") or ("HC1" if r["estimator"].startswith("corrected")
                                                      else "sampling only, not the proxy's error")})
    return out


@section("proxy", "Groups inferred by the race proxy (BISG)", ("proxy_coverage", "proxy_gaps"))
def proxy_section(run: Run, sec: Section) -> None:
    labels = Labels(run.parameters)
    coverage = sorted(run.result("proxy_coverage"), key=lambda r: r["attribute"])
    gaps = run.result("proxy_gaps")
    sec.add("<p>Race was not recorded for some or all records, so it was inferred by Bayesian Improved "
            "Surname Geocoding: the Census surname list's racial mix, updated by where people of each race "
            "live. The engines that need one group per record use the most probable race when its "
            "probability reaches the spec's threshold; the records below it belong to no group. Misassigned "
            "records pull a difference between the groups toward zero, so the gaps below are estimated "
            "from the probabilities themselves: the <em>corrected</em> estimates regress the outcome on "
            "the group probabilities, which recovers the groups' means when the outcome depends on race "
            "and not on surname or place once race is known; their intervals include the proxy's "
            "uncertainty. The probability-weighted figures, the usual practice, are shown beside them: "
            "where race moves the outcome they are biased toward zero.</p>")
    if coverage:
        sec.add(markup("<p>Census tables: {}.</p>", coverage[0]["vintage"]))
        sec.add(table([{"groups": labels.versus(r["attribute"], "protected"), "records": r["records"],
                        "race recorded": r["recorded"], "proxied": r["proxied"],
                        "assigned a race": r["inferred"], "below the threshold": r["not_inferred"],
                        "threshold": r["threshold"], "surnames not on the list": r["surnames_not_found"],
                        "places not found": r["geographies_not_found"],
                        "mean top probability": r["mean_top_probability"]} for r in coverage]))
    pooled = [r for r in gaps if r.get("lender") is None]
    sec.add("<p>The gap between the groups, each estimator (the unfavourable rate in points; a pricing "
            "field in its own units):</p>")
    sec.add(table(_gap_rows(pooled, labels)))
    lenders = [r for r in gaps if r.get("lender") is not None and r.get("p_value") is not None]
    if lenders:
        shown = sorted(lenders, key=lambda r: (r["p_value"], r["lender"]))[:LENDERS_SHOWN]
        sec.add(markup("<p>Each lender's corrected gap in the unfavourable rate (not controlled; {} lenders "
                       "estimated, the {} with the smallest p-value shown; the p-values are not adjusted for "
                       "the number of lenders):</p>", len({r["lender"] for r in lenders}), len(shown)))
        kept = ("groups", "gap", "interval", "p", "records")
        sec.add(table([{"lender": r["lender"], **{k: v for k, v in _gap_rows([r], labels)[0].items() if k in kept}}
                       for r in shown]))
