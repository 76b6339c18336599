"""Report section of the outcome metrics: favourable rates with their Wilson intervals per
group and intersection, DI ratios with their log-method intervals against the four-fifths line,
and the table of gaps with raw and adjusted p-values, the unadjusted unfavourable-rate (denial-rate)
ratio and odds ratio with Woolf's interval, and verdicts."""
from __future__ import annotations

from aequum.flows.reporting import plots
from aequum.flows.reporting.html import Section, flag, markup, percent, plot, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.run import Run
from aequum.flows.reporting.registry import section


def _label(row: dict, labels: Labels | None = None) -> str:
    """"sex: Female"; an intersection "race&sex: Black or African American & Female"."""
    return f"{row['attribute']}: {(labels or Labels({})).group(row['attribute'], row['group_name'])}"


def p_text(p: float | None) -> str:
    if p is None:
        return "not tested"
    return "<\u00a00.001" if p < 0.001 else f"{p:.3f}"


def interval_text(value: float | None, low: float | None, high: float | None) -> str:
    """"1.84 (1.52 to 2.23)"; the value alone without an interval; "n/a" without a value."""
    if value is None:
        return "n/a"
    return f"{value:.2f}" if low is None or high is None else f"{value:.2f} ({low:.2f} to {high:.2f})"


def rates_plot(metrics: list[dict], labels: Labels | None = None) -> str:
    rows = [m for m in metrics if m["favourable_rate"] is not None][::-1]
    fig = plots.figure(7.5, 0.9 + 0.28 * len(rows))
    ax = fig.subplots()
    for i, m in enumerate(rows):
        low = m.get("rate_ci_low") if m.get("rate_ci_low") is not None else m["favourable_rate"]
        high = m.get("rate_ci_high") if m.get("rate_ci_high") is not None else m["favourable_rate"]
        colour = plots.group_colour(m["group_name"])
        ax.errorbar(m["favourable_rate"], i, xerr=[[max(m["favourable_rate"] - low, 0.0)], [max(high - m["favourable_rate"], 0.0)]],
                    fmt="o", color=colour, ecolor=colour, capsize=3, alpha=0.45 if m.get("too_small") else 1)
    ax.set_yticks(range(len(rows)), [_label(m, labels) + ("  (too small)" if m.get("too_small") else "") for m in rows])
    ax.set_xlabel("favourable rate with its Wilson interval")
    ax.set_xlim(0, 1)
    ax.grid(axis="x", alpha=0.3)
    return plots.to_svg(fig, "Favourable rates per group with confidence intervals")


def di_plot(gaps: list[dict], threshold: float, labels: Labels | None = None) -> str:
    rows = [g for g in gaps if g["di_ratio"] is not None][::-1]
    fig = plots.figure(7.5, 0.9 + 0.28 * max(len(rows), 1))
    ax = fig.subplots()
    for i, g in enumerate(rows):
        low = g.get("di_ci_low") if g.get("di_ci_low") is not None else g["di_ratio"]
        high = g.get("di_ci_high") if g.get("di_ci_high") is not None else g["di_ratio"]
        colour = plots.SIGNIFICANT if g.get("verdict") == "adverse impact" else plots.NEUTRAL
        ax.errorbar(g["di_ratio"], i, xerr=[[max(g["di_ratio"] - low, 0.0)], [max(high - g["di_ratio"], 0.0)]], fmt="o",
                    color=colour, ecolor=colour, capsize=3, alpha=0.45 if g.get("too_small") else 1)
    ax.axvline(threshold, color=plots.SIGNIFICANT, linestyle="--", linewidth=1)
    ax.axvline(1.0, color=plots.NEUTRAL, linewidth=0.8)
    ax.set_yticks(range(len(rows)), [_label(g, labels) for g in rows])
    ax.set_xlabel(f"disparate impact ratio vs the reference\n(bars: log-method interval; dashed: {threshold:g})")
    ax.grid(axis="x", alpha=0.3)
    return plots.to_svg(fig, "Disparate impact ratios with confidence intervals")


@section("outcome", "Outcome metrics", ("outcome_metrics", "outcome_gaps"))
def outcome_section(run: Run, sec: Section) -> None:
    params = run.parameters.get("outcome", {})
    labels = Labels(run.parameters)
    confidence = params.get("confidence", 0.95)
    threshold = params.get("four_fifths", 0.8)
    metrics = sorted(run.result("outcome_metrics"), key=lambda m: (m["attribute"].count("&"), m["attribute"], m["group_name"]))
    gaps = sorted(run.result("outcome_gaps"), key=lambda g: (g["attribute"].count("&"), g["attribute"], g["group_name"]))
    adjusted = (f"p-values are adjusted across all {len(gaps)} comparisons of the run "
                f"({params.get('correction', 'holm')})" if len(gaps) != 1
                else "the run makes one comparison, so its p-value needs no adjustment")
    sec.add(markup("<p>Favourable-decision rates per protected group and intersection, at {:g}% "
                   "confidence; groups smaller than {} are shown faded and not judged; {}.</p>", 100 * confidence,
                   params.get("min_group_size", 30), adjusted))
    sec.add(plot(rates_plot(metrics, labels), "Favourable rate per group (orange: protected, blue: reference, "
                 "grey: mixed intersections); bars are Wilson intervals."))
    if gaps:
        sec.add(plot(di_plot(gaps, threshold, labels), "Disparate impact ratio per group against its reference "
                     "(red: adverse impact); bars are log-method intervals."))
    rows = [{"group": _label(g, labels), "n": g["n_group"], "rate": percent(g.get("favourable_rate")),
             "reference rate": percent(g.get("reference_rate")), "DI": g["di_ratio"],
             "DI interval": "n/a" if g.get("di_ci_low") is None else f"{g['di_ci_low']:.2f} to {g['di_ci_high']:.2f}",
             "unfavourable ratio": g.get("unfavourable_rate_ratio"),
             "odds ratio (interval)": interval_text(g.get("odds_ratio"), g.get("odds_ratio_ci_low"),
                                                    g.get("odds_ratio_ci_high")),
             "p": p_text(g["spd_p_value"]), "p adjusted": p_text(g.get("spd_p_adjusted")),
             "4/5 of reference": g["four_fifths_violation"], "4/5 of highest": g.get("four_fifths_vs_highest"),
             "verdict": flag(g.get("verdict") in ("adverse impact", "significant difference"),
                             g.get("verdict") or "n/a", g.get("verdict") or "n/a")} for g in gaps]
    sec.add("<h3>Gaps against the reference group</h3>", table(rows))
    sec.add(markup("<p class=\"note\">Unfavourable ratio: the group's unfavourable-decision (denial) "
                   "rate over the reference's. Odds ratio: of an unfavourable decision, the group's "
                   "against the reference's, with Woolf's {:g}% interval; both unadjusted (no controls).</p>",
                   100 * confidence))
    refs = [m for m in metrics if m["is_reference"] and m.get("four_fifths_vs_highest")]
    if refs:
        sec.add("<h3>Reference groups under four fifths of the highest rate</h3>",
                table([{"group": _label(m, labels), "rate": percent(m["favourable_rate"]), "highest group": labels.group(m["attribute"], m["highest_group"]),
                        "ratio to highest": m["ratio_to_highest"]} for m in refs]))
