"""Report section of lenders: each lender's controlled gap against its markets' other lenders,
as a funnel plot (excess against applications, with the 95 % and 99.8 % limits of a lender with
no excess) per comparison and outcome, and a table of the lenders flagged or nearest to it
(ranked by the shrunk estimate), with the markets' gaps."""
from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from aequum.flows.reporting.html import Section, esc, flag, markup, plot, points, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.outcome import p_text
from aequum.flows.reporting.plots import NEUTRAL, SIGNIFICANT, figure, to_svg
from aequum.flows.reporting.registry import section
from aequum.flows.reporting.run import CASES, Run

FUNNELS = 4  # comparison x outcome funnels drawn (the ones with most flagged lenders first)


def gap(field: str, value, low=None, high=None) -> str:
    """A lender's or market's gap as its finding's statement writes it: denial in points of
    denial ("+6.0"), a price in its field's own units ("+0.110" points of rate spread)."""
    if field == "denial":
        return points(value, low, high)
    if value is None:
        return "n/a"
    return f"{value:+.3f}" + ("" if low is None or high is None else f" ({low:+.3f} to {high:+.3f})")


def funnel_plot(rows: list[dict], title: str) -> str:
    """Excess (points for denial) against the lender's compared applications, log scale; the
    funnel: ±1.96 and ±3.09 times a typical lender's standard error at that size (se ∝ 1/√n,
    scaled from the tested lenders' median se·√n)."""
    tested = [r for r in rows if r["p_value"] is not None and r["estimate"] is not None]
    scale = 100.0 if rows and rows[0]["field"] == "denial" else 1.0
    fig = figure(7.5, 3.4)
    ax = fig.add_subplot()
    if tested:
        n = np.array([r["n"] for r in tested], float)
        est = np.array([r["estimate"] for r in tested]) * scale
        k = float(np.median(np.array([r["se"] for r in tested]) * np.sqrt(n))) * scale
        grid = np.geomspace(max(n.min() * 0.8, 2), n.max() * 1.25, 100)
        for z, style in ((1.96, "--"), (3.09, ":")):
            ax.plot(grid, z * k / np.sqrt(grid), style, color=NEUTRAL, linewidth=0.8)
            ax.plot(grid, -z * k / np.sqrt(grid), style, color=NEUTRAL, linewidth=0.8)
        hot = np.array([bool(r["flagged"]) for r in tested])
        ax.scatter(n[~hot], est[~hot], s=10, color=NEUTRAL, alpha=0.6, label="not flagged")
        ax.scatter(n[hot], est[hot], s=22, color=SIGNIFICANT, label="flagged")
        for r, x, y in zip(tested, n, est):
            if r["flagged"]:
                ax.annotate(r["lei"][-8:], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        # plain numbers (the report's text is never parsed as math: no 10^{2} markup)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel("applications compared (log scale)" if scale == 100 else "originations compared (log scale)")
    ax.set_ylabel("excess over peers" + (" (points)" if scale == 100 else ""))
    ax.legend(loc="upper right", fontsize=7, frameon=False)
    ax.set_title(title, fontsize=9)
    return to_svg(fig, title)


@section("lenders", "Lender by lender, market by market", ("lender_disparities", "market_disparities"))
def lenders_section(run: Run, sec: Section) -> None:
    labels = Labels(run.parameters)
    rows = run.result("lender_disparities")
    names = {r["lei"]: r["name"] for r in run.query("lender_names")} if rows else {}
    markets = run.result("market_disparities")
    sec.add("<p>Each lender's gap between the protected and the reference group — in denial, and in price "
            "among originated loans — after the recorded inputs, within each market and loan type, "
            "<em>minus</em> the gap the same markets' other lenders show within their own books (the lender "
            "left out of its own benchmark, and lenders flagged left out of their peers'). Intervals, "
            "p-values adjusted across the lenders of each comparison (Benjamini-Hochberg), and an estimate "
            "shrunk towards the lenders' mean (empirical Bayes), so a lender of 40 applications cannot top "
            "the list by chance. Flagged: significant and the shrunk estimate adverse. The public LAR lacks "
            "the credit score: a flagged lender is an unexplained disparity for file review, not evidence "
            "of discrimination.</p>")
    families: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        families.setdefault((r["attribute"], r["field"]), []).append(r)
    summary = [{"groups": labels.versus(a, "protected"), "outcome": f,
                "lenders": len(fam), "tested": sum(r["p_value"] is not None for r in fam),
                "flagged": sum(bool(r["flagged"]) for r in fam),
                "markets tested": sum(m["p_value"] is not None for m in markets
                                      if m["attribute"] == a and m["field"] == f),
                "markets with a significant gap": sum(bool(m["significant"] and m["adverse"]) for m in markets
                                                      if m["attribute"] == a and m["field"] == f)}
               for (a, f), fam in sorted(families.items())]
    sec.add(table(summary))
    order = sorted(families, key=lambda k: (-sum(bool(r["flagged"]) for r in families[k]), k))
    for a, f in order[:FUNNELS]:
        title = f"{labels.versus(a, 'protected')}: {f}"
        sec.add(plot(funnel_plot(families[(a, f)], title),
                     f"{title}. Each dot a lender; dashed: 95 % limits, dotted: 99.8 % limits of a lender "
                     "without excess (typical standard error at its size)."))
    ranked = sorted((r for r in rows if r["shrunk_estimate"] is not None),
                    key=lambda r: (not r["flagged"], -(r["shrunk_estimate"] * (-1 if r["field"] == "lender_credits" else 1))))
    if ranked:
        sec.add(markup("<h4>Lenders ranked by shrunk excess (at most {}; flagged first)</h4><p class=\"note\">"
                       "Gaps in denial are in points of denial; in a price, in the field's own units "
                       "(the rate spread in percentage points of the rate).</p>", CASES))
        sec.add(table([{"lender": f"{names[r['lei']]} ({r['lei']})" if r["lei"] in names else r["lei"], "groups": labels.versus(r["attribute"], "protected"), "outcome": r["field"],
                        "N protected": r["n_protected"], "N reference": r["n_reference"],
                        "own gap": gap(r["field"], r["lender_gap"]), "peers' gap": gap(r["field"], r["peer_benchmark"]),
                        "excess (interval)": gap(r["field"], r["estimate"], r["ci_low"], r["ci_high"]),
                        "adjusted p": p_text(r["p_adjusted"]), "shrunk": gap(r["field"], r["shrunk_estimate"]), "flagged": flag(bool(r["flagged"])), "note": r["note"]}
                       for r in ranked[:CASES]]))
    hot = sorted((m for m in markets if m["significant"] and m["adverse"]), key=lambda m: m["p_adjusted"])
    if hot:
        sec.add(markup("<h4>Markets with a significant controlled gap (at most {})</h4><p>Within each market's "
                       "lenders and loan types; an unexplained disparity (the omitted credit score's own gap "
                       "shows here), not a lender's.</p>", CASES))
        sec.add(table([{"market": m["market"], "groups": labels.versus(m["attribute"], "protected"),
                        "outcome": m["field"], "N": m["n"], "lenders": m["lenders"],
                        "gap (interval)": gap(m["field"], m["estimate"], m["ci_low"], m["ci_high"]),
                        "adjusted p": p_text(m["p_adjusted"]),
                        "note": m["note"]} for m in hot[:CASES]]))
    else:
        sec.add("<p>" + esc("No market showed a significant controlled gap.") + "</p>")
