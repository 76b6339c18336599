"""Report section of FGCE (feasible group counterfactual explanations): coverage curves per
group (over k counterfactuals and over the distance budget d), the cost of covering each group,
k0 / d0 per group and the chosen counterfactuals with their rules."""
from __future__ import annotations

from aequum.flows.reporting import plots
from aequum.flows.reporting.html import Section, markup, plot, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.run import CASES, Run
from aequum.flows.reporting.registry import section


def coverage_plot(curves: list[dict], k: int) -> str:
    cov = [c for c in curves if c["curve"] == "coverage"]
    fig = plots.figure(7.5, 2.8)
    by_k, by_d = fig.subplots(1, 2)
    for group in sorted({c["group_name"] for c in cov}):
        rows = [c for c in cov if c["group_name"] == group]
        d_max = max(c["d"] for c in rows)
        line_k = sorted((c for c in rows if c["d"] == d_max), key=lambda c: c["k"])
        by_k.plot([c["k"] for c in line_k], [c["coverage"] for c in line_k], "o-", markersize=3,
                  color=plots.group_colour(group), label=group)
        k_here = k if any(c["k"] == k for c in rows) else max(c["k"] for c in rows)
        line_d = sorted((c for c in rows if c["k"] == k_here), key=lambda c: c["d"])
        by_d.plot([c["d"] for c in line_d], [c["coverage"] for c in line_d], "o-", markersize=3,
                  color=plots.group_colour(group), label=group)
    by_k.set_xlabel("k counterfactuals (largest distance budget)")
    by_d.set_xlabel(f"distance budget d (k = {k})")
    for ax in (by_k, by_d):
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("coverage of the rejected")
        ax.grid(alpha=0.3)
    by_k.legend(frameon=False, fontsize=8)
    return plots.to_svg(fig, "FGCE coverage curves per group")


def cost_plot(curves: list[dict], unit: str = "distance") -> str:
    cost = [c for c in curves if c["curve"] == "cost" and c["cost"] is not None]
    fig = plots.figure(7.5, 2.6)
    ax = fig.subplots()
    top = max((c["c"] for c in cost), default=None)
    for group in sorted({c["group_name"] for c in cost}):
        rows = sorted((c for c in cost if c["group_name"] == group and c["c"] == top), key=lambda c: c["k"])
        ax.plot([c["k"] for c in rows], [c["cost"] for c in rows], "o-", markersize=3,
                color=plots.group_colour(group), label=group)
    ax.set_xlabel("k counterfactuals")
    ax.set_ylabel(f"smallest maximum cost ({unit})\nto cover {100 * (top or 0):g}% of the coverable")
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=8)
    return plots.to_svg(fig, "FGCE cost curves per group")


@section("fgce", "Feasible group counterfactual explanations (FGCE)", ("fgce_k0d0", "fgce_curves"))
def fgce_section(run: Run, sec: Section) -> None:
    summary = run.result("fgce_k0d0")
    curves = run.result("fgce_curves")
    chosen = run.result("fgce_counterfactuals")
    labels = Labels(run.parameters)
    unit = labels.cost_unit("fgce", run.parameters)
    sec.add("<p>For the rejected members of each group: how many can be shown a feasible path (through "
            "the data, respecting what they can change) to a favourable decision with k "
            "counterfactual explanations, and how far they must go. A group covered less, or only at a "
            "higher cost, has less recourse.</p>")
    for attribute in sorted({s["attribute"] for s in summary}):
        rows = [s for s in summary if s["attribute"] == attribute]
        sec.add(markup("<h3>{}</h3>", attribute))
        mine = [c for c in curves if c["attribute"] == attribute]
        k = rows[0]["k"]
        if any(c["curve"] == "coverage" for c in mine):
            sec.add(plot(coverage_plot(mine, k), "Coverage of each group's rejected members: over the "
                         "number of counterfactuals (left) and the distance budget (right)."))
        if any(c["curve"] == "cost" and c["cost"] is not None for c in mine):
            sec.add(plot(cost_plot(mine, unit), "The cost of covering each group's coverable members with k "
                         "counterfactuals."))
        d0 = f"d0 at k0 ({unit})"
        sec.add(table([{"group": labels.group(attribute, s["group_name"]), "rejected": s["factuals"], "coverable": s["coverable"],
                        "coverable share": s["coverable_share"], "k0": s["k0"], d0: s["d0_at_k0"],
                        f"coverage at k = {s['k']}": s["coverage_at_k"]} for s in rows],
                      fields={"rejected": "factuals", "coverable share": "coverable_share", d0: "d0_at_k0",
                              f"coverage at k = {rows[0]['k']}": "coverage_at_k"}))
        picks = sorted((c for c in chosen if c["attribute"] == attribute),
                       key=lambda c: (c["group_name"], c["pick"]))
        if picks:
            sec.add("<h4>Chosen counterfactuals (the recourse each group is shown)</h4>", table(
                [{"group": labels.group(attribute, c["group_name"]), "pick": c["pick"], "counterfactual record": c["record_id"],
                  "covers": c["factuals_covered"], "cumulative coverage": c["cumulative_coverage"],
                  f"mean cost ({unit})": c["mean_cost"], "rule": c["rule"]} for c in picks[:CASES * 2]]))
