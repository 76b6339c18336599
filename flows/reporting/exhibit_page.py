"""The matched-pair exhibit as a printable page (one self-contained HTML file, print CSS:
landscape on A4 or Letter, one case after another, table headers repeated on every page) and,
where Debian's Chromium is installed, as a PDF printed by Chromium headless (offline: the page
makes no request)."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from aequum.flows.store.guard import UsageError
from aequum.flows.reporting.exhibit import Exhibit, csv_rows, group_name
from aequum.flows.reporting.html import Section, markup, page, table
from aequum.flows.reporting.labels import Labels, utc

NEAREST = 10  # comparators of each group on a case's page (the CSV holds every one)
KEY = ["role", "group", "rank", "record_id"]  # who a row is: repeated in each of a case's tables
PANEL = 12  # other columns per table: a case's tables fit a 1280 px screen and an A4 or Letter page, landscape

ABOUT = ("Each case is a complainant the finding counts, beside the records the engine compared it "
         "with: its control group (role control: the nearest members of its own group) and its test "
         "group (role test: the "
         "nearest members of the reference group: nearest to the complainant for situation testing, "
         "nearest to its counterfactual — the same applicant had they belonged to the reference group, "
         "through the causal model — for counterfactual situation testing). Distances are the engine's "
         "mixed distance on the normalised features (Thanh et al., Eq. 6; 0 is identical), so they "
         "compare within an exhibit, not across audits. Δp is the control group's refusal rate minus "
         "the test group's; with search centres (CST) the complainant's own decision counts in the "
         "control group and its counterfactual decision in the test group. For counterfactual situation "
         "testing and counterfactual fairness the row of role counterfactual is that counterfactual: the "
         "values it has in the reference group's world on the features of the distance (mediators at their "
         "recorded values) and its decision — the point the test group's distances are measured from.")
ABOUT_CEC = ("Each case is a matched pair: a record and its nearest record of the other group with the "
             "same decision, matched on the financial features (distance: the matching's, 0 is identical), "
             "whose explanations differ by Δ_CEC (regime B: the same decision for different reasons).")


def exhibit_html(run_record: dict, e: Exhibit, labels: Labels) -> str:
    """The printable page of one finding's exhibit."""
    f = e.finding
    about = Section("finding", f"Finding {e.rank}: {f['finding']}")
    about.add(markup("<p><strong>{}</strong> ({}). {}</p>", labels.versus(f["attribute"], f["group_name"]),
                     f["engine"], f.get("statement") or ""))
    about.add(markup("<p>{:,} of the {:,} cases the finding counts are shown here, the surest first; all of them "
                     "are in <code>audit.{}</code> (run_id = '{}'). Run {}, spec {}, started {}.</p>",
                     e.shown, e.cases, f.get("cases_table"), run_record["run_id"], run_record["run_id"],
                     run_record["spec_name"], utc(run_record.get("started_at"))))
    about.add(markup("<p>{}</p>", ABOUT if f["engine"] == "cst" else ABOUT_CEC))
    for note in e.notes:
        about.add(markup('<p class="note">{}.</p>', note))
    if labels.codes():
        about.add(markup('<p class="note">Decisions as the spec records them: {}.</p>', labels.codes()))
    columns, rows = csv_rows(e, labels, page=True)
    shown = [*KEY, "distance", "decision", *columns[columns.index("decision") + 1:]]
    keep = [c for c in shown if c not in ("delta_p", "ci_low", "ci_high", "p_control", "p_test", "delta_cec",
                                          "counterfactual_decision")]
    headers = {c: readable(c) for c in keep} | {"record_id": "record", "rank": "neighbour rank"}
    sections = [about]
    for i, case in enumerate(dict.fromkeys(r["case"] for r in rows), 1):
        claim = e.claims.get(case, {})
        sec = Section(f"case-{i}", f"Case {i}: record {case}")
        sec.add(markup("<p>{}</p>", _claim_text(f, claim, labels)))
        mine = [r for r in rows if r["case"] == case]
        near = [r for r in mine if r["role"] not in ("control", "test") or (r.get("rank") or 0) <= NEAREST]
        for columns_ in panels(keep, near):
            sec.add(table([{c: r.get(c) for c in columns_} for r in near], columns=columns_, cls="exhibit",
                          headers=headers, fields={c: c for c in columns_}))
        empty = [c for c in keep[len(KEY):] if all(r.get(c) in (None, "") for r in near)]
        if empty:
            sec.add(markup('<p class="note">Empty for every record shown: {}.</p>', ", ".join(map(readable, empty))))
        if len(near) < len(mine):
            sec.add(markup('<p class="note">The {} nearest of each group are shown; all {:,} comparators are in '
                           'the CSV file of this exhibit.</p>', NEAREST,
                           sum(r["role"] in ("control", "test") for r in mine)))
        sections.append(sec)
    return page(f"Matched-pair exhibit: finding {e.rank} of run {run_record['run_id']}",
                f"{f['finding']} — {labels.group(f['attribute'], group_name(f['attribute'], 'protected'))} "
                f"of {f['attribute']}", sections, wide=True)


def panels(columns: list[str], rows: list[dict]) -> list[list[str]]:
    """A case's columns in tables that fit a page: each repeats the key columns (who the row
    is) and takes up to ``PANEL`` of the others; a column empty for every row is left out (the
    page names it)."""
    rest = [c for c in columns[len(KEY):] if any(r.get(c) not in (None, "") for r in rows)]
    return [columns[:len(KEY)] + rest[i:i + PANEL] for i in range(0, len(rest), PANEL)] or [columns[:len(KEY)]]


def readable(column: str) -> str:
    """A column's header on the page: its words ("debt to income ratio [percent]"), so that a
    narrow column wraps between words, never inside one; the field name is its tooltip."""
    return column.replace("_", " ")


def _claim_text(f: dict, claim: dict, labels: Labels) -> str:
    if f["engine"] == "cec":
        return (f"The model's decision {labels.decision(claim.get('decision'), code=False)}, the counterpart's "
                f"{labels.decision(claim.get('counterpart_decision'), code=False)} (column model_decision; decision: the "
                f"recorded one); explanation gap Δ_CEC = "
                f"{_num(claim.get('delta_cec'))}, model scores {_num(claim.get('score'))} and "
                f"{_num(claim.get('counterpart_score'))}.")
    text = (f"Decision {labels.decision(claim.get('decision'), code=False)}; counterfactual decision "
            f"{labels.decision(claim.get('decision_counterfactual'), code=False)}.")
    if claim.get("delta_p") is not None and claim.get("n_control") is not None and claim.get("n_test"):
        low, high = claim.get("ci_low"), claim.get("ci_high")
        text += (f" Refused: {_pct(claim.get('p_c'))} of {claim['n_control']} in the control group, "
                 f"{_pct(claim.get('p_t'))} of {claim['n_test']} in the test group: Δp = {_pts(claim['delta_p'])}"
                 + (f" (interval {_pts(low)} to {_pts(high)})" if low is not None and high is not None
                    and round(100 * low, 1) != round(100 * high, 1) else "") + ".")
    return text


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def _pts(v) -> str:
    """A difference of two shares in percentage points, as the report writes it."""
    return "n/a" if v is None else f"{100 * v:.1f} points"


def _num(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def chromium() -> str | None:
    """Debian's Chromium, where installed."""
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def print_pdf(html: Path, pdf: Path, timeout: float = 120) -> Path:
    """Print ``html`` to ``pdf`` with Chromium headless (offline, its own throwaway profile)."""
    browser = chromium()
    if browser is None:
        raise UsageError("--pdf needs Chromium (Debian's chromium package); the printable HTML page was "
                         f"written: {html} (print it from any browser)")
    with tempfile.TemporaryDirectory(prefix="aequum-print-") as profile:
        done = subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                               f"--user-data-dir={profile}", "--no-pdf-header-footer",
                               f"--print-to-pdf={pdf.resolve()}", html.resolve().as_uri()],
                              capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not pdf.is_file():
        raise UsageError(f"Chromium could not print {html} to PDF: {(done.stderr or '').strip().splitlines()[-1:]}")
    return pdf
