"""Report section of reason consistency: per attribute and reason, the groups' medians of the
cited variable among the decisions citing it, and the adjusted rank test; a plot of the gap
between the groups' medians relative to the reference group's (the penalty direction marked)."""
from __future__ import annotations

from aequum.flows.reporting import plots
from aequum.flows.reporting.html import Section, plot, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.outcome import p_text
from aequum.flows.reporting.run import Run
from aequum.flows.reporting.registry import section

PLOTTED = 20  # attribute x reason rows drawn, the smallest adjusted p-value first


def relative_gap(r: dict) -> float | None:
    """The protected group's median of the cited variable relative to the reference group's:
    (m_protected − m_reference) / |m_reference| (None where a median is missing or 0)."""
    p, q = r.get("protected_median_value"), r.get("reference_median_value")
    if p is None or q is None or q == 0:
        return None
    return (p - q) / abs(q)


def reasons_plot(rows: list[dict], labels: Labels) -> str:
    """One row per attribute and reason: the relative gap of the medians, red where the test is
    significant in the penalty direction (the protected group cited at better values)."""
    drawn = [r for r in rows if relative_gap(r) is not None]
    drawn = sorted(drawn, key=lambda r: (r["p_adjusted"] if r["p_adjusted"] is not None else 2.0))[:PLOTTED][::-1]
    fig = plots.figure(10, 0.9 + 0.28 * max(len(drawn), 1))  # wide: the rows' labels are long
    ax = fig.subplots()
    for i, r in enumerate(drawn):
        hit = bool(r["significant"]) and bool(r.get("penalty_direction"))
        ax.plot([0, 100 * relative_gap(r)], [i, i], color=plots.SIGNIFICANT if hit else plots.NEUTRAL, lw=1.5)
        ax.plot(100 * relative_gap(r), i, "o", color=plots.SIGNIFICANT if hit else plots.NEUTRAL, markersize=4)
    ax.axvline(0, color=plots.NEUTRAL, linewidth=0.8)
    ax.set_yticks(range(len(drawn)), [f"{labels.group(r['attribute'], 'protected')}: reason {r['reason_code']}, "
                                      f"{r['feature']}" for r in drawn])
    ax.set_xlabel("% difference of the medians")
    ax.grid(axis="x", alpha=0.3)
    return plots.to_svg(fig, "Reason consistency: the groups' medians of the cited variable")


@section("reasons", "Reason consistency of unfavourable decisions", ("reason_consistency",))
def reasons_section(run: Run, sec: Section) -> None:
    rows = run.result("reason_consistency")
    labels = Labels(run.parameters)
    sec.add("<p>Among the unfavourable decisions that cite a reason (e.g. the debt-to-income ratio), "
            "the values of the variable the reason cites are compared between the groups. Only a "
            "reason cited at significantly <em>better</em> values for the protected group (the penalty "
            "direction: a stricter standard for them) is flagged; which values are worse is read from "
            "the denials themselves (those citing the reason against those that do not). Inputs the "
            "records lack can also produce the difference: it is a screen, not proof.</p>")
    if any(relative_gap(r) is not None for r in rows):
        sec.add(plot(reasons_plot(rows, labels), f"Per attribute and reason (at most {PLOTTED}, the smallest "
                     "adjusted p-value first): how far the protected group's median of the cited variable "
                     "lies from the reference group's, in percent of the reference group's, among the "
                     "denials citing the reason; red: significant in the penalty direction."))
    sec.add(table([{"attribute": r["attribute"], "reason": r["reason_code"], "variable": labels.feature(r["feature"]),
                    "protected citing": r["protected_citing"], "reference citing": r["reference_citing"],
                    "protected median": r["protected_median"], "reference median": r["reference_median"],
                    "adjusted p": p_text(r["p_adjusted"]), "significant": r["significant"],
                    "direction": r["direction"], "worse values": r.get("worse_values"),
                    "penalty direction": r.get("penalty_direction"), "note": r["note"]}
                   for r in sorted(rows, key=lambda r: (r["attribute"], r["reason_code"]))],
                  fields={"reason": "reason_code", "variable": "feature", "protected citing": "protected_citing",
                          "reference citing": "reference_citing", "adjusted p": "p_adjusted",
                          "worse values": "worse_values", "penalty direction": "penalty_direction"}))
