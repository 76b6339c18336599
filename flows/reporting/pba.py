"""Report section of PBA (twin-network verification, seed 004): the PBA score per group and
setting over δ, robustness bias, and the verified inputs with the largest proven margin."""
from __future__ import annotations

from aequum.flows.reporting import plots
from aequum.flows.reporting.html import Section, markup, plot, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.run import CASES, Run
from aequum.flows.reporting.registry import section


def pba_plot(rows: list[dict], attribute: str) -> str:
    fig = plots.figure(7.5, 2.8)
    score, robust = fig.subplots(1, 2)
    for group in sorted({r["group_name"] for r in rows}):
        for setting, style in (("observed", "o-"), ("flipped", "s--")):
            line = sorted((r for r in rows if r["group_name"] == group and r["setting"] == setting),
                          key=lambda r: r["delta"])
            if line:
                score.plot([r["delta"] for r in line], [r["pba"] for r in line], style, markersize=3,
                           color=plots.group_colour(group), label=f"{group}, {setting}")
                robust.plot([r["delta"] for r in line], [r["robustness"] for r in line], style, markersize=3,
                            color=plots.group_colour(group), label=f"{group}, {setting}")
    score.set_ylabel("PBA score (share verified)")
    robust.set_ylabel("robustness (decision constant)")
    for ax in (score, robust):
        ax.set_xlabel("δ (perturbation units)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    score.legend(frameon=False, fontsize=7)
    return plots.to_svg(fig, f"PBA scores by delta for {attribute}")


@section("pba", "Persistent bias verification (PBA)", ("pba_summary", "pba_inputs"))
def pba_section(run: Run, sec: Section) -> None:
    summary = run.result("pba_summary")
    labels = Labels(run.parameters)
    sec.add("<p>Each input is paired with its twin, the same input with the protected attribute "
            "flipped, and every input within δ perturbation units of it is checked: the model is "
            "<em>persistently</em> biased on an input when it is proven more confident in the true "
            "class for one copy than for the other over the whole box (observed: for the input "
            "itself; flipped: for its twin). These are proofs, not estimates; inputs the bounds "
            "cannot decide are counted as inconclusive.</p>")
    for attribute in sorted({r["attribute"] for r in summary}):
        rows = [r for r in summary if r["attribute"] == attribute]
        sec.add(markup("<h3>{}</h3>", attribute))
        sec.add(plot(pba_plot(rows, attribute), "PBA score (left) and robustness (right) per group "
                     "and setting over δ (solid: observed, dashed: flipped)."))
        sec.add(table([{"group": labels.group(attribute, r["group_name"]), "setting": r["setting"], "δ": r["delta"],
                        "inputs": r["inputs"], "considered": r["considered"], "verified": r["verified"],
                        "falsified": r["falsified"], "inconclusive": r["inconclusive"], "PBA": r["pba"],
                        "robustness": r["robustness"], "favourable rate": r["favourable_rate"],
                        "CFA": r["cfa"]} for r in sorted(rows, key=lambda r: (r["group_name"], r["setting"], r["delta"]))]))
        flipped = [r for r in rows if r["setting"] == "flipped" and r["verified"]]
        if flipped:
            top = min(flipped, key=lambda r: (r["group_name"] != "protected", r["delta"]))
            cases = run.query("pba_top_inputs", attribute=attribute, group_name=top["group_name"],
                              setting="flipped", delta=top["delta"], limit=CASES)
            sec.add(markup("<h4>Verified inputs of {} (flipped, δ = {:g}), largest proven margin first</h4>",
                           labels.group(attribute, top["group_name"]), top["delta"]), table(
                        [{"record": c["record_id"], "decision": c["decision"], "twin decision": c["twin_decision"],
                          "objective": c["objective"], "lower bound": c["lower_bound"],
                          "upper bound": c["upper_bound"], "method": c["method"]} for c in cases]))
