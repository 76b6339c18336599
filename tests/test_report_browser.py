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


def open_in_chromium(html: Path, screenshot: Path | None = None) -> dict:
    """Load ``html`` and report console messages, page errors, requests and what is shown."""
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
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
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
