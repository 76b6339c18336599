"""Report section of RAGUEL (ranking by recourse cost, re-ranking with actions): the protected
group's share per block before and after re-ranking, the summary per algorithm and the
suggested actions (who should change what, and whom they overtake)."""
from __future__ import annotations

from aequum.flows.reporting import plots
from aequum.flows.reporting.html import Raw, Section, badge, markup, plot, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.run import CASES, Run
from aequum.flows.reporting.registry import section

BLOCKS = 50  # blocks drawn; the rest of the ranking stays in audit.raguel_ranking


def shares_plot(shares: list[dict], overall: float | None, title: str) -> str:
    fig = plots.figure(7.5, 2.6)
    ax = fig.subplots()
    for stage, colour, style in (("before", plots.NEUTRAL, "o-"), ("after", plots.PROTECTED, "s--")):
        rows = sorted((s for s in shares if s["stage"] == stage), key=lambda s: s["block"])
        ax.plot([s["block"] + 1 for s in rows], [s["protected_share"] for s in rows], style,
                markersize=3, color=colour, label=f"{stage} re-ranking")
    if overall is not None:
        ax.axhline(overall, color=plots.REFERENCE, linewidth=0.8, label="share in the population")
    ax.set_xlabel("block of the ranking by recourse cost (1 = cheapest recourse)")
    ax.set_ylabel("protected share")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=8)
    return plots.to_svg(fig, title)


@section("raguel", "Recourse-aware ranking (RAGUEL)", ("raguel_summary", "raguel_ranking"))
def raguel_section(run: Run, sec: Section) -> None:
    summary = [s for s in run.result("raguel_summary") if s["configuration"] == "main"]
    sec.add("<p>Rejected applicants ranked by the cost of their cheapest recourse (what they would "
            "have to change to be accepted). A fair ranking represents each group in every prefix "
            "or block near its share of the population; RAGUEL re-ranks by suggesting actions that "
            "move under-represented applicants up.</p>")
    labels = Labels(run.parameters)
    unit = labels.cost_unit("raguel")
    block_size = next((s["block_size"] for s in summary if s["block_size"]), 100)
    for attribute in sorted({s["attribute"] for s in summary}):
        rows = sorted((s for s in summary if s["attribute"] == attribute), key=lambda s: s["algorithm"])
        sec.add(markup("<h3>{}</h3>", attribute))
        for s in rows:
            size = s["block_size"] or block_size
            shares = run.query("raguel_block_shares", attribute=attribute, algorithm=s["algorithm"],
                               block_size=size, blocks=BLOCKS)
            if shares:
                sec.add(plot(shares_plot(shares, s["protected_share"], f"RAGUEL {s['algorithm']} shares"),
                             f"Algorithm {s['algorithm']}: the protected share per block of {size} before "
                             f"and after re-ranking (first {BLOCKS} blocks)."))
        total = f"total cost ({unit})"
        sec.add(table([{"algorithm": s["algorithm"], "ranked": s["n"], "protected share": s["protected_share"],
                        "tolerance": s["tolerance"], "unfair blocks before": s["unfair_blocks_before"],
                        "after": s["unfair_blocks_after"], "r before": s["r_before"], "r after": s["r_after"],
                        "applicants moved": s["points_changed"], total: s["total_modification_cost"],
                        "re-ranking": Raw(badge("repaired" if s["success"] else "not repaired", "repair"))}
                       for s in rows], fields={"ranked": "n", "protected share": "protected_share",
                                               "unfair blocks before": "unfair_blocks_before",
                                               "after": "unfair_blocks_after", "r before": "r_before",
                                               "r after": "r_after", "applicants moved": "points_changed",
                                               total: "total_modification_cost"}))
        for s in rows:
            actions = run.query("raguel_top_actions", attribute=attribute, algorithm=s["algorithm"], limit=CASES)
            if actions:
                sec.add(markup("<h4>Suggested actions ({}, the {} costliest)</h4>", s["algorithm"], len(actions)), table(
                    [{"record": a["record_id"], "group": labels.group(attribute, a["group_name"]), "feature": labels.feature(a["feature"]),
                      "from": a["value_before"], "to": a["value_after"], f"cost before ({unit})": a["cost_before"],
                      f"cost after ({unit})": a["cost_after"], f"modification cost ({unit})": a["modification_cost"],
                      "overtakes": a["overtakes"]} for a in actions]))
