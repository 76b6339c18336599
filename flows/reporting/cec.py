"""Report section of CEC (counterfactual explanation consistency, seed 000): the regime shares
per group, the regime-B share over the reasoning threshold, the inputs whose attributions
differ most between the groups, and the regime-B pairs with the largest explanation gap."""
from __future__ import annotations

from aequum.flows.reporting import plots
from aequum.flows.reporting.html import Section, markup, plot, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.run import CASES, Run
from aequum.flows.reporting.registry import section

REGIMES = (("regime_a", "A: same decision, same reasoning"), ("regime_b", "B: same decision, different reasoning"),
           ("regime_c", "C: different decision, same reasoning"), ("regime_d", "D: both differ"))


def cec_plot(summary: list[dict], sweep: list[dict], attribute: str) -> str:
    fig = plots.figure(7.5, 2.8)
    shares, curve = fig.subplots(1, 2)
    groups = [r["group"] for r in summary]
    left = [0.0] * len(summary)
    for (key, label), colour in zip(REGIMES, ("#9ecae1", "#de2d26", "#fdae6b", "#756bb1")):
        values = [r[key] or 0.0 for r in summary]
        shares.barh(groups, values, left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, values)]
    shares.set_xlim(0, 1)
    shares.set_xlabel("share of matched pairs")
    shares.legend(frameon=False, fontsize=6, loc="lower left", bbox_to_anchor=(0, 1.02), ncol=2)
    for group in groups:
        line = sorted((r for r in sweep if r["group"] == group), key=lambda r: r["threshold"])
        curve.plot([r["threshold"] for r in line], [r["regime_b"] for r in line], "o-", markersize=3,
                   color=plots.group_colour(group), label=group)
    curve.axvline(summary[0]["threshold"], color="grey", lw=0.8, ls=":")
    curve.set_xlabel("reasoning threshold on Δ_CEC")
    curve.set_ylabel("regime B share")
    curve.set_ylim(0, 1.02)
    curve.grid(alpha=0.3)
    curve.legend(frameon=False, fontsize=7)
    return plots.to_svg(fig, f"CEC regimes for {attribute}")


@section("cec", "Counterfactual explanation consistency (CEC)", ("cec_summary", "cec_regimes", "cec_features"))
def cec_section(run: Run, sec: Section) -> None:
    summary, sweep, features = run.result("cec_summary"), run.result("cec_regimes"), run.result("cec_features")
    labels = Labels(run.parameters)
    sec.add("<p>Each record is matched with its nearest real record of the other group with the same "
            "outcome on the financial features, and the model's reasoning for both is compared by "
            "integrated gradients against the same baseline. Regime B — the same decision for different "
            "reasons — is bias that outcome metrics cannot see.</p>")
    for attribute in sorted({r["attribute"] for r in summary}):
        rows = [r for r in summary if r["attribute"] == attribute]
        sec.add(markup("<h3>{}</h3>", attribute))
        sec.add(plot(cec_plot(rows, [r for r in sweep if r["attribute"] == attribute], attribute),
                     "Left: regime shares per group at the configured threshold. Right: the regime B "
                     "share over the threshold sweep (dotted line: the configured threshold)."))
        sec.add(table([{"group": labels.group(attribute, r["group"]), "records": r["records"], "matched": r["matched"],
                        "coverage": r["coverage"], "median match distance": r["distance_median"],
                        "CEC": r["cec"], "PFR": r["pfr"], "regime B": r["regime_b"],
                        "IG completeness error, mean": r["completeness_mean_error"],
                        "worst": r["completeness_max_error"], "note": r["note"]}
                       for r in rows]))
        top = sorted((f for f in features if f["attribute"] == attribute and f["group"] == "all"),
                     key=lambda f: f["rank"])[:10]
        if top:
            sec.add("<h4>Where the reasoning differs (all pairs)</h4>", table(
                [{"input": f["feature"], "share of the gap": f["share_of_delta"],
                  f"attribution, {labels.group(attribute, 'protected')} member": f["attribution_protected"],
                  f"attribution, {labels.group(attribute, 'reference')} member": f["attribution_reference"],
                  "direction": f["direction"]}
                 for f in top]))
        cases = run.query("cec_top_pairs", attribute=attribute, limit=CASES)
        if cases:
            sec.add("<h4>Regime B pairs with the largest explanation gap</h4>", table(
                [{"record": c["record_id"], "matched with": c["counterpart_id"], "distance": c["distance"],
                  "decision": c["decision"], "counterpart decision": c["counterpart_decision"],
                  "Δ_CEC": c["delta_cec"]} for c in cases]))
