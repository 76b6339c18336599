"""Report section of pricing: among originated loans, each pricing field's means and medians by
group, the adjusted difference (OLS on the regression engine's controls) with its interval,
adjusted p and robustness, and the higher-priced (HPML) shares with their ratio. Groups are
named by their recorded values (``labels.Labels``)."""
from __future__ import annotations

from aequum.flows.reporting.html import Section, flag, markup, percent, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.outcome import p_text
from aequum.flows.reporting.run import Run
from aequum.flows.reporting.registry import section


@section("pricing", "Pricing of originated loans", ("pricing_estimates", "pricing_hpml"))
def pricing_section(run: Run, sec: Section) -> None:
    labels = Labels(run.parameters)
    estimates = sorted(run.result("pricing_estimates"), key=lambda r: (r["attribute"], r["field"]))
    hpml = sorted(run.result("pricing_hpml"), key=lambda r: r["attribute"])
    sec.add("<p>Among originated loans, what the protected group paid against the reference group: "
            "each pricing field's mean and median by group, and the difference after controlling for the "
            "recorded inputs named (the regression engine's, and the other groups held), with its interval "
            "and its p-value adjusted across the run's pricing tests. Loans that do not report a field "
            "(\"NA\", \"Exempt\") are left out of that field. A difference is flagged when it is significant "
            "and in the borrower's disfavour. Records that lack an input the price depends on (the public "
            "LAR lacks the credit score a pricer reads) leave a flagged difference unexplained, not "
            "evidence, unless it survives a stated bound on that input (the spec's decision bounds); the "
            "robustness value says how strong such an input would have to be.</p>")
    sec.add(table([{"groups": labels.versus(r["attribute"], "protected"), "field": r["field"],
                    "N protected": r["n_protected"], "N reference": r["n_reference"],
                    "mean protected": r["mean_protected"], "mean reference": r["mean_reference"],
                    "median protected": r["median_protected"], "median reference": r["median_reference"],
                    "raw difference": r["raw_difference"],
                    "adjusted difference (interval)": _interval(r["estimate"], r["ci_low"], r["ci_high"]),
                    "adjusted p": p_text(r["p_adjusted"]),
                    "flagged": flag(bool(r["significant"] and r["adverse"])), "robust": r["robust"],
                    "note": r["note"]} for r in estimates]))
    if hpml:
        first, subordinate = hpml[0]["threshold_first"], hpml[0]["threshold_subordinate"]
        sec.add(markup("<p>Higher-priced loans (Reg Z 1026.35: a rate spread of at least {:g} points for a "
                       "first lien, {:g} for a subordinate lien): each group's share with its interval, "
                       "and the ratio of the shares. A raw disparity: the groups' risks differ too.</p>",
                       first, subordinate))
        sec.add(table([{"groups": labels.versus(r["attribute"], "protected"),
                        "N protected": r["n_protected"], "N reference": r["n_reference"],
                        "share protected": percent(r["share_protected"]),
                        "share reference": percent(r["share_reference"]),
                        "ratio (interval)": _interval(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"], "{:.2f}"),
                        "adjusted p": p_text(r["p_adjusted"]),
                        "flagged": flag(bool(r["significant"] and (r["difference"] or 0) > 0)),
                        "note": r["note"]} for r in hpml]))


def _interval(value, low, high, spec: str = "{:+,.2f}") -> str:
    """A figure with its interval in one cell, in the field's units: "+0.04 (+0.03 to +0.05)"."""
    if value is None:
        return "n/a"
    text = spec.format(value)
    return text if low is None or high is None else f"{text} ({spec.format(low)} to {spec.format(high)})"
