"""The report in a real headless Chromium (Debian's ``chromium``, driven by playwright through
``executable_path``; no browser is ever downloaded): it loads with no console error, makes no
network request, and shows every section and every plot."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from aequum.flows.commands.report import write_report
from aequum.flows.reporting.exhibit_page import chromium as installed_chromium


def chromium() -> str:
    found = installed_chromium()
    if found is None:
        pytest.skip("no Chromium on this machine (.ci/setup installs Debian's chromium where it can)")
    return found


SPLIT_HEADERS = """() => [...document.querySelectorAll('th')].flatMap(th => {
    const out = [];
    for (const t of th.childNodes) {
      if (t.nodeType !== 3) continue;
      for (const m of t.data.matchAll(/[^\\s-]+/g)) {  // a line may end at a space or a hyphen
        const r = document.createRange();
        r.setStart(t, m.index); r.setEnd(t, m.index + m[0].length);
        if (r.getClientRects().length > 1) out.push(m[0]);
      }
    }
    return out; })"""
TOO_WIDE = ("() => [...document.querySelectorAll('main *')].filter(e => !(e instanceof SVGElement) && "
            "e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)"
            ".map(e => e.tagName + '.' + e.className).slice(0, 5)")
PRINT_WIDTHS = {"Letter": 980, "A4": 1047}  # landscape (@page), px inside 10 mm margins


def open_in_chromium(html: Path, screenshot: Path | None = None, printed: bool = False) -> dict:
    """Load ``html`` and report console messages, page errors, requests and what is shown: at
    1280 px the elements wider than the page and the header words broken across lines; with
    ``printed``, the same under the print style sheet at the widths of A4 and Letter pages."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a test extra")
    seen = {"console": [], "errors": [], "requests": [], "blocked": []}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})

            def route(r):
                url = r.request.url
                if url.startswith(("file:", "data:")):
                    r.continue_()
                else:
                    seen["blocked"].append(url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: seen["console"].append((m.type, m.text)))
            page.on("pageerror", lambda e: seen["errors"].append(str(e)))
            page.on("request", lambda r: seen["requests"].append(r.url))
            page.goto(html.resolve().as_uri(), wait_until="load")
            seen["first_screen"] = page.evaluate(
                "() => [...document.querySelectorAll('section[data-section]')]"
                ".filter(s => s.getBoundingClientRect().top < innerHeight).map(s => s.id)")
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
            seen["too_wide"] = page.evaluate(
                "() => [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right"
                " > document.documentElement.clientWidth + 1).map(e => e.tagName + '.' + e.className).slice(0, 5)")
            seen["scroll_width"] = page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
            seen["sections"] = page.eval_on_selector_all(
                "section[data-section]", "els => els.map(e => [e.id, e.offsetHeight > 0])")
            seen["plots"] = page.eval_on_selector_all(
                "figure.plot svg", "els => els.map(e => { const r = e.getBoundingClientRect(); "
                "return [r.width, r.height, e.querySelectorAll('path, text, use').length]; })")
            seen["title"] = page.title()
            seen["split_headers"] = page.evaluate(SPLIT_HEADERS)
            seen["height"] = page.evaluate("() => document.documentElement.scrollHeight")
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
            if printed:
                page.emulate_media(media="print")
                seen["print"] = {}
                for paper, width in PRINT_WIDTHS.items():
                    page.set_viewport_size({"width": width, "height": 800})
                    seen["print"][paper] = (page.evaluate(TOO_WIDE), page.evaluate(SPLIT_HEADERS))
        finally:
            browser.close()
    return seen


def test_report_in_headless_chromium(small_audit_warehouse, tmp_path):
    out = write_report(small_audit_warehouse, "loan-small", tmp_path / "report.html")
    text = out.read_text(encoding="utf-8")
    seen = open_in_chromium(out, tmp_path / "report.png")
    assert seen["errors"] == []
    assert [m for m in seen["console"] if m[0] in ("error", "warning")] == []
    assert seen["blocked"] == [] and seen["requests"] == [out.resolve().as_uri()]
    expected = re.findall(r'<section id="([^"]+)" data-section', text)
    assert [s[0] for s in seen["sections"]] == expected and len(expected) == 7
    assert all(shown for _, shown in seen["sections"])
    assert len(seen["plots"]) == text.count('<figure class="plot"><svg ') == 9
    assert all(w > 200 and h > 80 and marks > 10 for w, h, marks in seen["plots"])
    assert seen["title"] == "aequum audit report: loan"
    assert expected[0] == "conclusion" and seen["first_screen"][0] == "conclusion"
    assert seen["too_wide"] == [] and seen["scroll_width"][0] <= seen["scroll_width"][1]  # no scroll at 1280 px
    assert "=protected" not in text and "<td>protected</td>" not in text  # the spec's values, not placeholders
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert seen["split_headers"] == []


def test_the_report_prints(small_audit_warehouse, tmp_path):
    """``aequum report --pdf``: Chromium prints the report; under the print style sheet nothing is
    wider than an A4 or Letter page and no header breaks inside a word."""
    from aequum.flows.commands.cli import main

    chromium()
    out = tmp_path / "report.html"
    assert main(["report", "loan-small", "--warehouse", str(small_audit_warehouse), "--out", str(out), "--pdf"]) == 0
    pdf = out.with_suffix(".pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and pdf.count(b"/Type /Page") - pdf.count(b"/Type /Pages") >= 2
    seen = open_in_chromium(out, printed=True)
    assert seen["print"] == {paper: ([], []) for paper in PRINT_WIDTHS}
    assert "@media print" in out.read_text(encoding="utf-8")


def test_an_hmda_exhibit_fits_the_screen_and_the_page(tmp_path):
    """The HMDA exhibit (40 columns of LAR fields): its cases in tables of a few columns each,
    nothing wider than 1280 px or a printed page, headers in words never broken inside one,
    values rounded and no raw codes, a case's page a few screens tall."""
    from audit_tables import small_audit
    from aequum.flows.commands.cli import main
    from aequum.flows.store.warehouse import Warehouse

    chromium()

    def edit(raw):  # CST's groups need members: race pooled, no tract attribute, k = 15
        for p in raw["protected"]:
            if p["name"] == "race":
                p["compare"] = "pooled"
        raw["protected"] = [p for p in raw["protected"] if p["name"] != "tract"]
        raw["engines"]["cst"]["k"] = [15]

    wh = small_audit(tmp_path, rows=6000, engines=["cst"], spec_name="hmda.yaml", records=True,
                     run_id="hmda-small", edit=edit)
    with Warehouse(wh, read_only=True) as w:
        (rank,) = w.con.execute("SELECT min(rank) FROM audit.findings WHERE engine = 'cst' AND individuals > 0 "
                                "AND finding LIKE 'counterfactual situation testing, k = %'").fetchone()
    out = tmp_path / "exhibit"
    assert main(["report", "--warehouse", str(wh), "--cases", str(rank), "--limit", "2", "--out", str(out)]) == 0
    seen = open_in_chromium(out.with_suffix(".html"), tmp_path / "exhibit.png", printed=True)
    assert seen["errors"] == [] and seen["blocked"] == []
    assert seen["too_wide"] == [] and seen["scroll_width"][0] <= seen["scroll_width"][1]
    assert seen["split_headers"] == [] and seen["print"] == {paper: ([], []) for paper in PRINT_WIDTHS}
    assert seen["height"] < 9000  # two cases of 15 comparators a group, in a few panels
    text = out.with_suffix(".html").read_text(encoding="utf-8")
    assert "debt to income ratio" in text and "<th>debt_to_income_ratio" not in text
    assert "unfavourable (3)" not in text and "Decisions as the spec records them" in text
    assert re.search(r"\d\.\d{5,}", re.sub(r"<[^>]+>", " ", text)) is None  # no raw floats on the page


def test_exhibit_page_in_chromium_and_printed_to_pdf(tmp_path):
    """``aequum report --cases RANK --pdf``: the exhibit page loads offline with no error, fits
    1280 px, shows both groups' features, and Chromium prints it to a PDF."""
    from audit_tables import small_audit
    from aequum.flows.commands.cli import main
    from aequum.flows.store.warehouse import Warehouse

    chromium()
    wh = small_audit(tmp_path, rows=400, engines=["cst"], records=True)
    with Warehouse(wh, read_only=True) as w:
        (rank,) = w.con.execute("SELECT min(rank) FROM audit.findings WHERE flagged "
                                "AND finding LIKE 'counterfactual situation testing, k = %'").fetchone()
    out = tmp_path / "exhibit"
    assert main(["report", "--warehouse", str(wh), "--cases", str(rank), "--limit", "2", "--out", str(out), "--pdf"]) == 0
    seen = open_in_chromium(out.with_suffix(".html"))
    assert seen["errors"] == [] and seen["blocked"] == [] and len(seen["requests"]) == 1
    assert seen["too_wide"] == [] and seen["scroll_width"][0] <= seen["scroll_width"][1]
    assert [s for s, _ in seen["sections"]] == ["finding", "case-1", "case-2"]
    text = out.with_suffix(".html").read_text(encoding="utf-8")
    assert "<td>Female</td>" in text and "<td>Male</td>" in text and "AccountBalance [USD]" in text
    assert "unfavourable (-1)" not in text and "Gender</th>" in text and "<td>1</td>" not in text  # labels
    assert "interval 100.0 points to 100.0 points" not in text
    pdf = out.with_suffix(".pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and pdf.count(b"/Type /Page") - pdf.count(b"/Type /Pages") >= 3


def test_browser_check_catches_network_requests(tmp_path):
    """The check itself fails on a page that fetches something (here a stylesheet on the web)."""
    page = tmp_path / "leaky.html"
    page.write_text('<!DOCTYPE html><html><head><title>x</title>'
                    '<link rel="stylesheet" href="https://cdn.example.org/x.css"></head>'
                    '<body><section id="s" data-section="s">x</section></body></html>')
    seen = open_in_chromium(page)
    assert seen["blocked"] == ["https://cdn.example.org/x.css"]
