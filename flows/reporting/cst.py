"""Report section of counterfactual situation testing (Alvarez & Ruggieri 2023): detections per
k and method, Δp with its interval per complainant (significant ones marked), the Δp
distribution, the top cases with who they were compared with (cst_evidence), the effect
measured, the complainant sample (cst_sampling) and, when the source has a ground truth, how
well the findings detect the harmed (audit.detection)."""
from __future__ import annotations

from aequum.flows.reporting import plots
from aequum.flows.reporting.html import Section, flag, markup, percent, plot, points, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.run import CASES, EVIDENCE_CASES, Run
from aequum.flows.reporting.registry import section

PLOTTED = 80  # complainants in the Δp interval plot


def detections_plot(summary: list[dict], attribute: str) -> str:
    fig = plots.figure(7.5, 2.8)
    ax = fig.subplots()
    for method, colour in (("CST", plots.PROTECTED), ("CST_wo_centres", plots.NEUTRAL), ("ST", plots.REFERENCE)):
        rows = sorted((s for s in summary if s["method"] == method), key=lambda s: s["k"])
        if rows:
            ax.plot([s["k"] for s in rows], [s["significant_share"] for s in rows], "o-", color=colour, label=method)
    cf = [s for s in summary if s["method"] == "CF"]
    if cf:  # one decision against one: no test, the share of decisions that flip
        ax.axhline(cf[0]["discriminated_share"], color=plots.SIGNIFICANT, linestyle=":", label="CF (flips)")
    ax.set_xlabel("k (neighbours per comparison group)")
    ax.set_ylabel("share of complainants\nsignificantly discriminated")
    top = max([s["significant_share"] or 0 for s in summary] + [cf[0]["discriminated_share"] or 0 if cf else 0])
    ax.set_ylim(0, max(0.05, min(1.0, 1.15 * top)) if top < 0.9 else 1.05)
    ax.legend(frameon=False, fontsize=8)
    ax.grid(alpha=0.3)
    return plots.to_svg(fig, f"CST detections by k for {attribute}")


def delta_significant(claim: dict, tau: float) -> bool:
    """A point is drawn red when its test found it significant and the interval drawn with it
    lies above τ, so no red point's interval crosses τ."""
    low = claim["ci_low"] if claim["ci_low"] is not None else claim["delta_p"]
    return bool(claim["significant"]) and low is not None and low > tau


def delta_plot(claims: list[dict], k: int, tau: float = 0.0) -> str:
    fig = plots.figure(7.5, 3.0)
    ax = fig.subplots()
    total = claims[0]["total"] if claims else 0
    sampled = claims[0]["sampled"] if claims else 0
    for red in (False, True):  # one series per colour: the SVG defines each marker once, not per point
        drawn = [c for c in claims if c["delta_p"] is not None and delta_significant(c, tau) == red]
        if not drawn:
            continue
        low = [c["ci_low"] if c["ci_low"] is not None else c["delta_p"] for c in drawn]
        high = [c["ci_high"] if c["ci_high"] is not None else c["delta_p"] for c in drawn]
        colour = plots.SIGNIFICANT if red else plots.NEUTRAL
        ax.errorbar([100 * c["position"] / max(sampled - 1, 1) for c in drawn], [c["delta_p"] for c in drawn],
                    yerr=[[c["delta_p"] - lo for c, lo in zip(drawn, low)], [hi - c["delta_p"] for c, hi in zip(drawn, high)]],
                    fmt="o", markersize=3, color=colour, ecolor=colour, elinewidth=0.8, capsize=0)
    ax.axhline(0, color=plots.NEUTRAL, linewidth=0.8)
    ax.set_xlabel(f"complainants ranked by Δp, percent ({sampled:,} of {total:,}), k = {k}")
    ax.set_ylabel("Δp = p_control − p_test")
    ax.set_xlim(-2, 102)
    return plots.to_svg(fig, "Delta p per complainant with confidence intervals")


def histogram_plot(bins: list[dict]) -> str:
    fig = plots.figure(7.5, 2.4)
    ax = fig.subplots()
    centres = sorted({b["bin"] for b in bins})
    plain = [sum(b["claims"] for b in bins if b["bin"] == c and not b["significant"]) for c in centres]
    marked = [sum(b["claims"] for b in bins if b["bin"] == c and b["significant"]) for c in centres]
    x = [c + 0.05 for c in centres]
    ax.bar(x, plain, width=0.09, color=plots.NEUTRAL, label="not significant")
    ax.bar(x, marked, width=0.09, bottom=plain, color=plots.SIGNIFICANT, label="significant")
    ax.set_xlabel("Δp (all complainants)")
    ax.set_ylabel("complainants (log scale)")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize=8)
    return plots.to_svg(fig, "Distribution of delta p")


@section("cst", "Counterfactual situation testing (CST)", ("cst_claims", "cst_summary"))
def cst_section(run: Run, sec: Section) -> None:
    params = run.parameters.get("cst", {})
    labels = Labels(run.parameters)
    summary = run.result("cst_summary")
    sec.add(markup("<p>Each complainant (a member of the protected group) is compared with its k nearest "
                   "neighbours in the protected group (control) and with the k nearest reference-group "
                   "neighbours of its counterfactual, the same person had they belonged to the reference "
                   "group (test). Δp is the difference of the groups' negative-decision rates; a complainant "
                   "is significantly discriminated when the one-sided {:g}% lower bound of Δp exceeds "
                   "τ = {:g}.</p>", 100 * (1 - params.get("alpha", 0.05)), params.get("tau", 0.0)))
    for attribute in sorted({s["protected_attribute"] for s in summary}):
        rows = [s for s in summary if s["protected_attribute"] == attribute]
        ks = [s["k"] for s in rows if s["method"] == "CST"]
        if not ks:
            continue
        k = max(ks)
        sec.add(markup("<h3>{}</h3>", attribute))
        sec.add(plot(detections_plot(rows, attribute), "Share of complainants significantly discriminated, "
                     "by k: CST, CST without search centres, ST (situation testing) and CF."))
        claims = run.query("cst_top_claims", attribute=attribute, method="CST", k=k, limit=CASES)
        spread = run.query("cst_claims_spread", attribute=attribute, method="CST", k=k, points=PLOTTED)
        if spread:
            sec.add(plot(delta_plot(spread, k, params.get("tau", 0.0)), f"Δp with its two-sided interval for a fixed sample of "
                         f"complainants (by a hash of their id), ranked by Δp, at k = {k} (red: significant, its "
                         f"interval above τ = {params.get('tau', 0.0):g}); all of them are in audit.cst_claims."))
        bins = run.query("cst_delta_histogram", attribute=attribute, method="CST", k=k)
        if bins:
            sec.add(plot(histogram_plot(bins), f"Δp of every complainant at k = {k} (a logarithmic "
                         f"count axis, so the bins away from 0 stay visible)."))
        sec.add(markup("<h4>Top {} cases at k = {}</h4>", min(CASES, len(claims)), k), table([
            {"record": c["record_id"], "decision": labels.decision(c["decision"]),
             "counterfactual decision": labels.decision(c["decision_counterfactual"]),
             "control decisions": c["n_control"], "test decisions": c["n_test"], "refused, control": percent(c["p_c"]),
             "refused, test": percent(c["p_t"]), "Δp (points)": points(c["delta_p"]),
             "interval (points)": "n/a" if c["ci_low"] is None else points(c["ci_low"]) + " to " + points(c["ci_high"]),
             "significant": flag(c["significant"], "significant", "no")} for c in claims[:CASES]],
            fields={"control decisions": "n_control", "test decisions": "n_test", "refused, control": "p_c",
                    "refused, test": "p_t", "Δp (points)": "delta_p"}))
        sec.add(markup('<p class="note">Decisions counted: the k = {} nearest neighbours of each group, and with '
                       'search centres (CST) the complainant\'s own decision in the control group and its '
                       'counterfactual decision in the test group ({} each); neighbours farther than '
                       'engines.cst.max_distance do not count.</p>', k, k + 1))
        ids = [c["record_id"] for c in claims[:EVIDENCE_CASES]]
        evidence = run.query("cst_evidence", attribute=attribute, ids=ids) if ids and "cst_evidence" in run.tables else []
        if evidence:
            shown = len({e["record_id"] for e in evidence})  # those with groups stored (engines.cst.evidence)
            sec.add(markup("<h4>Who the top {} complainants were compared with</h4>", shown), table(
                [{"record": e["record_id"], "centre": e["centre"], "group": e["search_group"],
                  "neighbours": e["members"], "nearest (distance)": e["nearest"], "farthest": e["farthest"]}
                 for e in evidence], fields={"neighbours": "members"}))
        elif ids:
            sec.add('<p class="note">No comparison groups were written for these complainants '
                    '(engines.cst.evidence: significant, the default, keeps those of the complainants '
                    'found significantly discriminated; all keeps every one).</p>')
    _effect_sampling_truth(run, sec, summary)


def _effect_sampling_truth(run: Run, sec: Section, summary: list[dict]) -> None:
    effects = sorted({s["effect"] for s in summary if s.get("effect") and s["method"] != "ST"})
    if effects:
        sec.add(markup("<p>Effect measured by CF and CST: {} (ST compares the same observed features "
                       "across groups: ceteris paribus).</p>", ", ".join(effects)))
    sampling = run.result("cst_sampling") if "cst_sampling" in run.tables else []
    if any(r["sampled"] < r["population"] for r in sampling):
        sec.add("<h3>Complainant sample</h3><p>A stratified random sample of the complainants was tested "
                "(engines.cst.sample; strata: recorded value × decision).</p>", table(
                    [{"attribute": r["protected_attribute"], "stratum": r["stratum"], "decision": r["decision"],
                      "population": r["population"], "sampled": r["sampled"]} for r in sampling]))
    detection = run.result("detection") if "detection" in run.tables else []
    rows = [d for d in detection if d["engine"] == "cst" and d["same_kind"]
            and (d["finding"] in ("significant", "probable") or d["method"] == "CF")]
    if rows:
        sec.add("<h3>Against the ground truth</h3><p>The source has a ground truth of who was harmed: each "
                "method's findings against the truth of its kind (CF and CST: the total effect; ST: the "
                "direct effect). Lift = precision / base rate; 1 is no better than flagging at random. "
                "Best possible precision: flagging as many by the truth's posterior of harm given "
                "the data's variables, where the truth gives it; at recall 0.5: flagging by that "
                "posterior until half of the harmed are flagged, the ceiling of any method's "
                "precision at that recall.</p>",
                table([{"attribute": d["protected_attribute"], "group": d["group"], "method": d["method"],
                        "k": d["parameter"], "finding": d["finding"], "truth": d["effect"],
                        "complainants": d["population"], "named by the method": d["flagged"], "harmed": d["harmed"],
                        "base rate": d["base_rate"], "precision": d["precision"],
                        "precision 95% CI": "n/a" if d.get("precision_ci_low") is None
                        else f"{d['precision_ci_low']:.2f} to {d['precision_ci_high']:.2f}",
                        "lift": None if not d["precision"] or not d["base_rate"] else d["precision"] / d["base_rate"],
                        "recall": d["recall"], "F1": d["f1"],
                        "best possible precision": d.get("oracle_precision"),
                        "best possible precision at recall 0.5": d.get("oracle_precision_half_recall")}
                       for d in rows]))
