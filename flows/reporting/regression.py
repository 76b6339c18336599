"""Report section of the controlled denial regression: per group (and intersection) the odds
ratio of denial after the recorded inputs, within market and lender where the spec holds them
fixed, with its interval, the average marginal effect, the linear model's difference and its
robustness to an unobserved factor; then the same within each product segment; last, folded per
comparison, every coefficient of both models with the rows they were fitted on and their fit."""
from __future__ import annotations

from aequum.flows.reporting import plots
from aequum.flows.reporting.html import Raw, Section, flag, markup, plot, points, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.outcome import p_text
from aequum.flows.reporting.run import Run
from aequum.flows.reporting.registry import section


def side(labels: Labels, attribute: str, which: str) -> str:
    """The group as recorded: "Black or African American", "Black or African American & Female"."""
    return " & ".join(labels.side(a, which) or f"{which} group of {a}" for a in attribute.split("&"))


def ratio(value, low=None, high=None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if low is None or high is None else f"{value:.2f} ({low:.2f} to {high:.2f})"


def flagged(row: dict) -> bool:
    return bool(row.get("logit_significant")) and (row.get("odds_ratio") or 0) > 1


def odds_plot(rows: list[dict], labels: Labels) -> str:
    shown = [r for r in rows if r["odds_ratio"] is not None][::-1]
    fig = plots.figure(7.5, 0.9 + 0.3 * max(len(shown), 1))
    ax = fig.subplots()
    for i, r in enumerate(shown):
        colour = plots.SIGNIFICANT if flagged(r) else plots.NEUTRAL
        ax.errorbar(r["odds_ratio"], i, xerr=[[r["odds_ratio"] - r["or_ci_low"]], [r["or_ci_high"] - r["odds_ratio"]]],
                    fmt="o", color=colour, ecolor=colour, capsize=3)
    ax.axvline(1.0, color=plots.NEUTRAL, linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(shown)), [side(labels, r["attribute"], "protected") for r in shown])
    ax.set_xlabel("odds ratio of denial after controls, against the reference group\n"
                  "(log scale; bars: interval; red: significant after adjustment, above 1)")
    ax.grid(axis="x", alpha=0.3)
    return plots.to_svg(fig, "Adjusted odds ratios of denial with confidence intervals")


@section("regression", "Controlled denial regression", ("regression_estimates",))
def regression_section(run: Run, sec: Section) -> None:
    labels = Labels(run.parameters)
    rows = sorted(run.result("regression_estimates"), key=lambda r: (r["attribute"].count("&"), r["attribute"]))
    first = rows[0] if rows else {}
    confidence = first.get("confidence") or 0.95
    within = (markup(" Applicants are compared within the same {} (fixed effects){}.", first["fixed_effects"].replace(", ", " and "),
                     markup("; intervals are robust to clustering by {}", first["cluster"]) if first.get("cluster") else "")
              if first.get("fixed_effects") else "")
    sec.add(markup("<p>Is a protected applicant denied more often than a reference applicant with the same "
                   "recorded inputs ({})?{} The denial logit gives the odds ratio and the average marginal "
                   "effect in points, at {:g}% confidence, with p-values adjusted across the run ({}); the "
                   "linear model on the same rows gives the difference in points and its robustness: the "
                   "share of the residual variance of both group and denial an unobserved factor (such as a "
                   "credit score the records lack) would need to explain it away. An adjusted disparity is a "
                   "screen, not proof: inputs the records lack may explain it.</p>",
                   first.get("controls") or "no controls", Raw(within), 100 * confidence, first.get("correction") or "holm"))
    if any(r["odds_ratio"] is not None for r in rows):
        sec.add(plot(odds_plot(rows, labels), "Odds ratio of denial per group after controls (red: significant, "
                     "above 1); bars are intervals."))
    sec.add(table([{
        "group": side(labels, r["attribute"], "protected"), "against": side(labels, r["attribute"], "reference"),
        "applicants (protected / reference)": f"{r['n_protected']:,} / {r['n_reference']:,}",
        "unadjusted difference (points)": points(r["raw_difference"]),
        "adjusted difference (points)": points(r["estimate"], r["ci_low"], r["ci_high"]),
        "odds ratio": ratio(r["odds_ratio"], r["or_ci_low"], r["or_ci_high"]),
        "marginal effect (points)": points(r["ame"], r["ame_ci_low"], r["ame_ci_high"]),
        "adjusted p": p_text(r["logit_p_adjusted"]),
        "robust": "n/a" if r["robust"] is None else ("yes" if r["robust"] else "no"),
        "robustness value": "n/a" if r["rv_q1_alpha"] is None else f"{100 * r['rv_q1_alpha']:.1f}%",
        "E-value": ratio(r["e_value"]),
        "flagged": flag(flagged(r), "flagged", "not flagged"),
        "note": "; ".join(n for n in (r["note"], r["logit_note"]) if n) or ""} for r in rows]))
    coefficients_section(run, sec, rows, labels)
    segments = sorted(run.result("regression_segments"), key=lambda r: (r["attribute"].count("&"), r["attribute"],
                                                                         r["segment"])) \
        if "regression_segments" in run.tables else []
    if segments:
        sec.add("<h3>Within each product segment</h3>",
                markup("<p>The same models within each {} (its own family of {} tests, adjusted together); "
                       "small segments are listed, not tested.</p>", segments[0]["segment_feature"], len(segments)),
                table([{"group": side(labels, r["attribute"], "protected"), "segment": r["segment"],
                        "applicants": f"{r['n']:,}", "odds ratio": ratio(r["odds_ratio"], r["or_ci_low"], r["or_ci_high"]),
                        "marginal effect (points)": points(r["ame"], r["ame_ci_low"], r["ame_ci_high"]),
                        "adjusted p": p_text(r["logit_p_adjusted"]),
                        "flagged": flag(flagged(r), "flagged", "not flagged"),
                        "note": "; ".join(n for n in (r["note"], r["logit_note"]) if n) or ""} for r in segments]))


def fit_line(r: dict) -> str:
    """The rows a comparison's models were fitted on, the rows left out and why, and the fit."""
    out = [f"{r['n']:,} applicants fitted ({r['n_protected']:,} protected, {r['n_reference']:,} reference)"]
    if r.get("dropped_null"):
        out.append(f"{r['dropped_null']:,} left out for a missing input")
    if r.get("separated_rows"):
        out.append(f"{r['separated_rows']:,} left out in levels where every applicant had one outcome"
                   + (f" ({r['separated_levels']})" if r.get("separated_levels") else ""))
    fit = [f"logit log-likelihood {r['logit_log_likelihood']:,.1f}" if r.get("logit_log_likelihood") is not None else None,
           f"McFadden pseudo R² {r['logit_pseudo_r2']:.3f}" if r.get("logit_pseudo_r2") is not None else None,
           f"linear model R² {r['r_squared']:.3f}" if r.get("r_squared") is not None else None]
    return "; ".join(out + [f for f in fit if f]) + "."


def coefficient_rows(terms: list[dict]) -> list[dict]:
    """One line per term: the logit's log-odds, standard error and odds ratio beside the linear
    model's coefficient and its classical standard error in points of denial probability (per
    unit of the term), the unit the section's sentences use."""
    out: dict[str, dict] = {}
    for t in terms:
        row = out.setdefault(t["term"], {"term": t["term"], "logit estimate": None, "logit se": None,
                                         "odds ratio": None, LINEAR: None, LINEAR_SE: None})
        if t["model"] == "logit":
            row.update({"logit estimate": t["estimate"], "logit se": t["se"], "odds ratio": t["odds_ratio"]})
        else:
            row.update({LINEAR: f"{100 * t['estimate']:+.2f}" if t["estimate"] is not None else None,
                        LINEAR_SE: f"{100 * t['se']:.2f}" if t["se"] is not None else None})
    return [{k: ("" if v is None else v if isinstance(v, str) else f"{v:.4g}") for k, v in r.items()}
            for r in out.values()]


LINEAR, LINEAR_SE = "linear estimate (points)", "linear se (points)"


def coefficients_section(run: Run, sec: Section, rows: list[dict], labels: Labels) -> None:
    """Every coefficient of both models, folded per pooled comparison (``regression_coefficients``)."""
    if "regression_coefficients" not in run.tables:
        return
    terms = [t for t in run.result("regression_coefficients") if t["segment"] is None]
    if not terms:
        return
    sec.add("<h3>Every coefficient of the models</h3>",
            "<p>Per comparison, the denial logit's coefficients (log-odds, with the odds ratio) and the "
            "linear model's (the denial probability), each with its standard error: the group's row is "
            "the disparity above, a level's row is against the level the model leaves out; fixed "
            "effects are absorbed, not estimated one by one. The whole table, segments included: "
            + (markup('<a href="{}">CSV</a>, <a href="{}">XLSX</a> beside this report, or ', files["csv"], files["xlsx"])
               if (files := run.files.get("regression_coefficients")) else "")
            + "<code>aequum show regression_coefficients --format csv</code>.</p>")
    for r in rows:
        mine = [t for t in terms if t["attribute"] == r["attribute"]]
        if not mine:
            continue
        title = f"{side(labels, r['attribute'], 'protected')} against {side(labels, r['attribute'], 'reference')}"
        sec.add(markup("<details><summary>{} ({} terms)</summary><p>{}</p>", title,
                       len({t["term"] for t in mine}), fit_line(r))
                + table(coefficient_rows(mine)) + "</details>")
