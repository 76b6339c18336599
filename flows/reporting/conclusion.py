"""The report's first screen and the end of ``aequum audit`` in the terminal: a conclusion in
a few plain sentences generated from ``audit.findings`` (what differs between which groups, by
how much, how sure, whether it is evidence on the audit's question, what the data cannot show),
then the findings ranked by severity × confidence (``audit.findings.rank``)."""
from __future__ import annotations

from aequum.flows.reporting.html import Raw, Section, badge, markup, table
from aequum.flows.reporting.labels import Labels

RANKED = 12  # findings listed on the first screen; the rest fold below

QUESTION = {"disparate_treatment": "disparate treatment", "disparate_impact": "disparate impact",
            "counterfactual_fairness": "counterfactual unfairness"}
MEANS = {  # what a finding of each estimand can say
    "raw disparity": "rates differ, not why",
    "adjusted disparity": "a difference that remains given the named controls",
    "direct effect": "a difference the group makes given the recorded inputs",
    "total effect": "a difference the group makes through the causal model",
    "path-specific effect": "a difference along one path of the causal model",
    "procedural": "the reasons or explanations differ",
    "model property": "a property of the model examined, not of every decision",
    "recourse": "how hard it is to be approved, not the decisions themselves",
    "detection quality": "how well the audit's findings find the harmed (a grade of the audit)",
}


def ordered(findings: list[dict]) -> list[dict]:
    """The findings by their rank (warehouses written before the rank column: the same order)."""
    if findings and all(f.get("rank") is not None for f in findings):
        return sorted(findings, key=lambda f: f["rank"])
    return sorted(findings, key=lambda f: (not f.get("evidence"), not f.get("flagged"), not f.get("headline"),
                                           f.get("estimand") == "detection quality",
                                           f["p_value"] if f.get("p_value") is not None else 2.0,
                                           -(f.get("individuals") or 0)))


def verdict(f: dict) -> tuple[str, str]:
    """The finding's word and colour: evidence, flagged, not flagged; detection rows grade the
    audit (better / no better than chance), never the decisions."""
    if f.get("estimand") == "detection quality":
        return "audit quality", "quality"
    if f.get("evidence"):
        return "evidence", "evidence"
    if f.get("flagged"):
        return "flagged", "flagged"
    return "not flagged", "quiet"


def confidence_text(f: dict) -> str:
    p = f.get("p_value")
    if p is not None:
        return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
    if f.get("ci_low") is not None and f.get("confidence"):
        return f"{100 * f['confidence']:g}% interval"
    return "no test (descriptive)"


def figure_text(f: dict, labels: Labels) -> str:
    value = f.get("value")
    if value is None:
        return "n/a"
    text = f"{labels.measure(f.get('measure'))}: {value:.3g}"
    if f.get("ci_low") is not None and f.get("ci_high") is not None:
        text += f" ({100 * (f.get('confidence') or 0.95):g}% CI {f['ci_low']:.3g} to {f['ci_high']:.3g})"
    return text


CLAIMS = ("about the lender", "about the model", "descriptive", "audit quality")
LISTED = 6  # flagged claims named in the conclusion's second sentence (every controlled group beside them)


def claim_of(f: dict) -> str:
    """The finding's kind of claim (``audit.findings.claim``; warehouses written before it: from
    the estimand)."""
    if f.get("claim"):
        return f["claim"]
    estimand = f.get("estimand") or ""
    if estimand == "detection quality":
        return "audit quality"
    if estimand in ("model property", "recourse") or estimand.startswith("procedural (model"):
        return "about the model"
    return "descriptive" if estimand == "raw disparity" else "about the lender"


# the measures a statement writes in points of denial, and those in a price field's own units
# (the field named by the finding: "adjusted rate_spread difference"), with what follows the figure
IN_POINTS = {"adjusted_denial_difference": "points of denial", "denial_difference": "points of denial",
             "excess_denial_rate": "points of denial beyond its markets' other lenders"}
IN_PRICE = {"adjusted_price_difference": ("adjusted ", " difference", ""),
            "excess_price": ("lender against peers: ", "", " beyond its markets' other lenders")}
# the shares of people a statement writes in percent ("41 of 1,751 complainants (2.3%)")
IN_PERCENT = ("significant_share", "discriminated_share")


def figure_words(f: dict, labels: Labels) -> str:
    """The finding's figure in the unit its statement uses: points of denial, a price in the
    field's units, else the measure as the table names it."""
    value, low, high, measure = f.get("value"), f.get("ci_low"), f.get("ci_high"), f.get("measure")
    if value is None:
        return "no estimate"
    if measure in IN_POINTS:
        scale, digits, what = 100.0, 1, IN_POINTS[measure]
    elif measure in IN_PRICE:
        prefix, suffix, beyond = IN_PRICE[measure]
        scale, digits = 1.0, 3
        what = f"in {(f.get('finding') or '').removeprefix(prefix).removesuffix(suffix)}{beyond}"
    elif measure in IN_PERCENT:
        text = f"{labels.measure(measure)}: {100 * value:.1f}%"
        if low is not None and high is not None:
            text += f" ({100 * (f.get('confidence') or 0.95):g}% CI {100 * low:.1f}% to {100 * high:.1f}%)"
        return text
    else:
        return figure_text(f, labels)
    text = f"{scale * value:+.{digits}f} {what}"
    if low is not None and high is not None:
        text += (f" ({100 * (f.get('confidence') or 0.95):g}% CI {scale * low:+.{digits}f} "
                 f"to {scale * high:+.{digits}f})")
    return text


def _grouped(found: list[dict], labels: Labels) -> str:
    """Findings of one engine and kind together, in rank order: "regression (adjusted denial
    disparity): Black or African American against White (+9.6 points of denial (95% CI +8.5 to
    +10.7), p < 0.001), Hispanic or Latino against ..."."""
    kinds: dict[tuple[str, str], list[dict]] = {}
    for f in found:
        kinds.setdefault((f["engine"], f["finding"]), []).append(f)
    return "; ".join(f"{engine} ({finding}): " + ", ".join(
        f"{_who(f, labels)} ({figure_words(f, labels)}, {confidence_text(f)})"
        for f in group) for (engine, finding), group in kinds.items())


def _and(names: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] if names else ""


def _who(f: dict, labels: Labels) -> str:
    """The finding's group as people read it; a lender's finding names the lender (its LEI) and
    the groups compared."""
    if f["engine"] == "lenders" and f["group_name"] not in ("protected", "reference"):
        return f"lender {f['group_name']}, {labels.versus(f['attribute'], 'protected')}"
    return labels.versus(f["attribute"], f["group_name"])


def sentences(run_record: dict, parameters: dict, findings: list[dict], labels: Labels) -> list[str]:
    """Three to six plain sentences: first the verdict (evidence, or plainly that nothing is),
    then what was flagged for whom, by how much and how sure (every group the controlled
    analysis flags among them), the counts by kind of claim (they add up to every finding),
    and what the data cannot show."""
    audit = parameters.get("audit", {})
    question = QUESTION.get(audit.get("question") or "disparate_treatment", "disparate treatment")
    name = run_record.get("spec_name")
    partial = audit.get("inputs", "partial") != "complete"
    missing = _and(audit.get("missing_inputs") or []) or "inputs of the decisions (such as the credit score)"
    bounds = audit.get("bounds") or []
    kinds = {k: [f for f in findings if claim_of(f) == k] for k in CLAIMS}
    lender = kinds["about the lender"]
    flagged = [f for f in ordered(lender) if f.get("flagged")]
    evidence = [f for f in flagged if f.get("evidence")]
    out = []
    if evidence:
        out.append(f"Evidence of {question} in the decisions of {name}: "
                   + _grouped(evidence[:LISTED], labels)
                   + (f"; and {len(evidence) - LISTED} more" if len(evidence) > LISTED else "") + ".")
    elif partial and flagged:
        out.append(f"Nothing in this audit of {name} is evidence of {question}: the records lack {missing}, "
                   + ("and no flagged difference survives the stated bound on them"
                      if bounds else "and no bound on them was stated (decision.bounds)")
                   + (", so the difference flagged below is an unexplained disparity for review."
                      if len(flagged) == 1 else
                      f", so the {len(flagged)} differences flagged below are unexplained disparities for review."))
    elif flagged:
        kinds_found = sorted({f.get("estimand") or "" for f in flagged})
        out.append(f"Nothing in this audit of {name} is evidence of {question}: "
                   + (f"the difference flagged below is a {_and(kinds_found)} finding, which shows "
                      if len(flagged) == 1 else
                      f"the {len(flagged)} differences flagged below are {_and(kinds_found)} findings, which show ")
                   + _and([MEANS.get(k, "a difference") for k in kinds_found]) + ".")
    else:
        out.append(f"Nothing in this audit of {name} is evidence of {question}: no tested difference in the "
                   "applicants' disfavour is significant.")
    rest = [f for f in flagged if not f.get("evidence")]
    # lenders named one by one get a sentence of their own (the headline rows only count them)
    lenders = [f for f in rest if f["engine"] == "lenders" and f["group_name"] not in ("protected", "reference")]
    listed = [f for f in rest if f["engine"] != "lenders" or not lenders]
    if listed:
        named = listed[:LISTED]
        # every group the controlled denial analysis flags is named, however far down the list
        named += [f for f in listed[LISTED:] if f["engine"] == "regression"]
        more = len(listed) - len(named)
        out.append(("Also flagged for review: " if evidence else "Flagged for review: ") + _grouped(named, labels)
                   + (f"; and {more} more (the ranked table)" if more else "") + ".")
    elif not flagged:
        out.append("No finding about the lender flags a difference at the configured confidence; that is not "
                   "proof that the decisions are fair.")
    if lenders:
        out.append("Lenders that stand out against the other lenders of their markets: "
                   + "; ".join(f"{_who(f, labels)} ({figure_words(f, labels)}, {confidence_text(f)})"
                               for f in lenders[:5])
                   + (f"; and {len(lenders) - 5} more" if len(lenders) > 5 else "") + ".")
    counts = [f"{len(lender)} {'is a claim' if len(lender) == 1 else 'are claims'} about the lender's decisions "
              f"({len(flagged)} flagged, {len(evidence)} evidence)"]
    words = {"about the model": ("describes the model examined", "describe the model examined"),
             "descriptive": ("is a descriptive figure", "are descriptive figures"),
             "audit quality": ("grades the audit against a known truth", "grade the audit against a known truth")}
    counts += [f"{len(kinds[k])} {w[len(kinds[k]) != 1]}" for k, w in words.items() if kinds[k]]
    out.append(f"Of its {len(findings)} findings, " + ", ".join(counts[:-1])
               + (" and " if len(counts) > 1 else "") + counts[-1] + ".")
    limits = []
    if partial:
        limits.append(f"the records lack {missing}, so an input they lack may explain a difference")
    if audit.get("model") == "surrogate":
        limits.append("the model-based engines examine a surrogate fitted to the decisions, not the "
                      "lender's model")
    limits.append("a statistical audit cannot show intent, and a finding about groups does not prove "
                  "that any one applicant was treated worse")
    out.append("What the data cannot show: " + "; ".join(limits) + ".")
    return out


def ranked_rows(findings: list[dict], labels: Labels, engines_shown: set[str], limit: int | None,
                cases: dict[int, str] | None = None, statements: bool = True) -> list[dict]:
    """The findings' rows of the ranked table; ``cases``: per rank, the link to its cases' file;
    ``statements``: with every finding's sentence, else none (the list of every finding leaves
    them in ``audit.findings``: on the 10M-row HMDA audit its 193 headline sentences alone were
    140 KB of the report)."""
    rows = []
    for f in ordered(findings)[:limit]:
        word, kind = verdict(f)
        if kind == "quality" and f.get("value") is not None:
            word = "audit: no better than chance" if _below_chance(f) else "audit: better than chance"
        anchor = f"engine-{f['engine']}" if f["engine"] in engines_shown else None
        finding = Raw(markup('<a href="#{}">{}</a>', anchor, f["finding"])) if anchor else f["finding"]
        rows.append({"rank": f.get("rank"), "": Raw(badge(word, kind)), "groups": labels.versus(f["attribute"], f["group_name"]),
                     "finding": finding, "figure": Raw(markup('<span title="{}">{}</span>', f.get("measure") or "",
                                                             figure_words(f, labels))),
                     "how sure": confidence_text(f),
                     **({"what it says": f.get("statement") or ""} if statements else {})})
        if cases:
            link = cases.get(f.get("rank"))
            rows[-1]["cases"] = Raw(markup('<a href="{}">CSV</a>', link)) if link else ""
    return rows


def _below_chance(f: dict) -> bool:
    """A detection row's findings no better than chance (precision at or below the base rate,
    which its statement states as the lift)."""
    import re

    m = re.search(r"(\d+(?:\.\d+)?)x chance", f.get("statement") or "")
    return m is not None and float(m.group(1)) <= 1.0


def conclusion_section(run, findings: list[dict], labels: Labels, engines_shown: set[str],
                       cases: dict[int, str] | None = None) -> Section:
    """The conclusion, the ranked findings and (when the report wrote them beside itself:
    ``run.files["findings"]``, names by format) the links to every finding as CSV and XLSX."""
    sec = Section("conclusion", "Conclusion")
    sec.add("".join(markup("<p class=\"conclusion\">{}</p>", s)
                    for s in sentences(run.record, run.parameters, findings, labels)))
    top = [f for f in ordered(findings) if f.get("flagged") or f.get("evidence") or f.get("headline")][:RANKED]
    sec.add(markup("<h3>The findings, most serious and most certain first</h3>"),
            table(ranked_rows(top, labels, engines_shown, None, cases), cls="findings"))
    if downloads := run.files.get("findings"):
        links = " · ".join(markup('<a href="{}" download>{}</a>', name, fmt.upper())
                           for fmt, name in sorted(downloads.items()))
        sec.add(markup('<p class="downloads">Every finding, ranked, with its groups, figures and statement: {} '
                       '(files beside this report; <code>aequum show findings --format csv</code> or '
                       '<code>xlsx</code> writes them again).</p>', Raw(links)))
    if cases:
        sec.add(markup('<p class="note">Cases: the matched-pair exhibit of each flagged individual finding (its '
                       'surest cases, each complainant beside its comparators of both groups with their '
                       'features, decisions and distances) as a CSV file beside this report; '
                       '<code>aequum report --cases RANK</code> writes one as a printable page.</p>'))
    rest = len(findings) - len(top)
    if rest > 0:
        sec.add(markup("<details><summary>Every finding of the run ({:,}; what each says is in "
                       "<code>audit.findings</code>, run_id = '{}', ordered by <code>rank</code>)</summary>",
                       len(findings), run.run_id)
                + table(ranked_rows(findings, labels, engines_shown, None, cases, statements=False), cls="findings")
                + "</details>")
    return sec


def terminal_lines(run_record: dict, parameters: dict, findings: list[dict], limit: int = 15) -> list[str]:
    """The end of ``aequum audit``: the conclusion and the ranked findings in at most ``limit`` lines."""
    labels = Labels(parameters)
    said = sentences(run_record, parameters, findings, labels)
    lines = ["Conclusion:"] + [f"  {s}" for s in said]
    ranked = [f for f in ordered(findings) if f.get("flagged") or f.get("evidence")]
    room = limit - len(lines) - 1
    if ranked and room > 0:
        lines.append("Ranked findings:")
        for f in ranked[:room]:
            word, _ = verdict(f)
            lines.append(f"  {f.get('rank') or '-':>3} {word:11s} {labels.versus(f['attribute'], f['group_name'])}: "
                         f"{f['engine']}, {f['finding']} ({confidence_text(f)})")
    return lines[:limit]
