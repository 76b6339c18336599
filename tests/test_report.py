"""aequum report: a self-contained HTML file per run (sections per engine that ran, inline SVG
plots, top cases only), written in seconds and under 10 MB however large the run's tables."""
from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from aequum.flows.commands.cli import main
from aequum.flows.commands.report import REPORT_CASES, write_report
from aequum.flows.reporting.conclusion import RANKED
from aequum.flows.reporting.run import CASES
from aequum.flows.reporting.sections import SECTIONS
from aequum.flows.store.warehouse import Warehouse

SECTION_IDS = ["conclusion", "audited", "methods", "engine-outcome", "engine-cst", "engine-raguel", "engine-fgce"]


def sections(text: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)" data-section', text)


def figures(text: str, section: str) -> int:
    body = text.split(f'<section id="{section}"', 1)[1].split("</section>", 1)[0]
    return len(re.findall(r'<figure class="plot"><svg ', body))


CASE_FILE = re.compile(r"[^/]+-cases/finding-\d+-\w+\.csv|[^/]+-findings\.(csv|xlsx)")


def external_references(text: str) -> list[str]:
    """URLs the page could fetch: src/href attributes and CSS url()s that are not fragments or
    data, nor links to the report's own files beside it (its case files, its findings as CSV and
    XLSX: a link is followed only when clicked)."""
    refs = re.findall(r'(?:src|href|xlink:href)\s*=\s*"([^"]*)"', text) + re.findall(r"url\(([^)]*)\)", text)
    return [r for r in refs if not r.startswith(("#", "data:")) and not CASE_FILE.fullmatch(r)]


def test_report_of_a_small_real_audit(small_audit_warehouse, tmp_path):
    out = write_report(small_audit_warehouse, "loan-small", tmp_path / "r.html")
    text = out.read_text(encoding="utf-8")
    assert sections(text) == SECTION_IDS
    assert figures(text, "engine-outcome") == 2 and figures(text, "engine-cst") == 3
    assert figures(text, "engine-fgce") == 2 and figures(text, "engine-raguel") == 2
    assert external_references(text) == []
    for fmt in ("csv", "xlsx"):  # every finding beside the report, linked from its conclusion
        assert (tmp_path / f"r-findings.{fmt}").is_file() and f'href="r-findings.{fmt}" download' in text
    with Warehouse(small_audit_warehouse, read_only=True) as wh:  # the gaps' unadjusted odds ratios, shown
        odds = wh.con.execute("SELECT odds_ratio, odds_ratio_ci_low, odds_ratio_ci_high FROM audit.outcome_gaps "
                              "WHERE odds_ratio_ci_low IS NOT NULL").fetchall()
    assert odds and "odds ratio (interval)</th>" in text
    assert all(f"{o:.2f} ({lo:.2f} to {hi:.2f})" in text for o, lo, hi in odds)
    links = re.findall(r'<a href="(r-cases/[^"]+)"', text)
    assert links and all((tmp_path / link).is_file() for link in links)  # the flagged findings' cases
    assert "<script" not in text and "default-src 'none'" in text
    for field in ("dataset version", "source fingerprint", "model fingerprint", "code version", "started"):
        assert f"<dt>{field}</dt>" in text
    with Warehouse(small_audit_warehouse, read_only=True) as wh:
        # the first screen's findings (flagged, evidence or headline; the surest RANKED) say
        # what they found; the folded list of every finding leaves its sentences in audit.findings
        statements = [r[0] for r in wh.con.execute(
            "SELECT statement FROM audit.findings WHERE flagged OR evidence OR headline "
            "ORDER BY rank LIMIT $n", {"n": RANKED}).fetchall()]
        unshown = [r[0] for r in wh.con.execute(
            "SELECT statement FROM audit.findings WHERE NOT (flagged OR evidence OR headline)").fetchall()]
        top = wh.con.execute("SELECT record_id FROM audit.cst_claims WHERE method = 'CST' AND k = 100 "
                             "ORDER BY significant DESC, delta_p DESC, record_id LIMIT 1").fetchall()[0][0]
    from html import escape
    assert statements and all(escape(s) in text for s in statements)
    assert not any(escape(s) in text for s in unshown if s)
    assert "Who the top 5 complainants were compared with" in text and f"<td>{top}</td>" in text
    again = write_report(small_audit_warehouse, "loan-small", tmp_path / "again.html").read_text()
    assert again.replace('"again-cases/', '"r-cases/').replace('"again-findings.', '"r-findings.') == text


def test_sections_follow_the_engines_that_ran(tmp_path):
    from audit_tables import small_audit

    path = small_audit(tmp_path, rows=300, engines=["outcome"], run_id="only-outcome")
    text = write_report(path, out=tmp_path / "r.html").read_text()  # the latest run by default
    assert sections(text) == ["conclusion", "audited", "methods", "engine-outcome"]
    assert set(SECTIONS) >= {"outcome", "cst", "fgce", "raguel"}


def test_cli_report_and_unknown_run(small_audit_warehouse, tmp_path, capsys):
    out = tmp_path / "cli.html"
    assert main(["report", "loan-small", "--warehouse", str(small_audit_warehouse), "--out", str(out)]) == 0
    assert out.exists() and str(out.resolve()) in capsys.readouterr().out
    assert main(["report", "nope", "--warehouse", str(small_audit_warehouse), "--out", str(out)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def enlarge(path: Path, rows: int) -> None:
    """Grow the run's per-individual tables to ``rows`` rows (CST claims at every k and method,
    CST evidence, the RAGUEL ranking and actions), as a large audit would write them."""
    with Warehouse(path) as wh:
        wh.con.execute("""
            INSERT INTO audit.cst_claims BY NAME
            SELECT 'loan-small' AS run_id, 'x' || i AS record_id, 'gender' AS protected_attribute,
                   m AS method, k::INTEGER AS k, k::INTEGER AS n_control, k::INTEGER AS n_test,
                   ((hash(i) % 100)::INTEGER) / 100.0 AS p_c, ((hash(i + 7) % 100)::INTEGER) / 100.0 AS p_t,
                   ((hash(i) % 100)::INTEGER - (hash(i + 7) % 100)::INTEGER) / 100.0 AS delta_p, 0.05 AS se,
                   ((hash(i) % 100)::INTEGER - (hash(i + 7) % 100)::INTEGER) / 100.0 - 0.1 AS ci_low,
                   ((hash(i) % 100)::INTEGER - (hash(i + 7) % 100)::INTEGER) / 100.0 + 0.1 AS ci_high,
                   ((hash(i) % 100)::INTEGER - (hash(i + 7) % 100)::INTEGER) / 100.0 - 0.08 AS one_sided_low,
                   (hash(i) % 100)::INTEGER > (hash(i + 7) % 100)::INTEGER AS discriminated,
                   (hash(i) % 100)::INTEGER > (hash(i + 7) % 100)::INTEGER + 8 AS significant,
                   0::TINYINT AS decision, 1::TINYINT AS decision_counterfactual
            FROM range($n) t(i), (VALUES ('CST', 100), ('ST', 100)) v(m, k)""", {"n": rows // 2})
        wh.con.execute("""
            INSERT INTO audit.cst_evidence BY NAME
            SELECT 'loan-small' AS run_id, 'x' || (i // 50) AS record_id, 'gender' AS protected_attribute,
                   'factual' AS centre, 'control' AS search_group, (i % 50 + 1)::INTEGER AS rank,
                   'n' || i AS neighbour_id, (i % 50) / 100.0 AS distance
            FROM range($n) t(i)""", {"n": rows})
        wh.con.execute("""
            INSERT INTO audit.raguel_ranking BY NAME
            SELECT 'loan-small' AS run_id, 'gender' AS attribute, a AS algorithm, i AS position,
                   'x' || i AS record_id, CASE WHEN (hash(i) % 3)::INTEGER = 0 THEN 'protected' ELSE 'reference' END AS group_name,
                   i AS rank_before, i // 100 AS block, i * 1.0 AS cost_before, i * 1.0 AS cost_after,
                   false AS moved, 0.0 AS modification_cost
            FROM range($n) t(i), (VALUES ('full'), ('block')) v(a)""", {"n": rows // 2})
        wh.con.execute("""
            INSERT INTO audit.raguel_actions BY NAME
            SELECT 'loan-small' AS run_id, 'gender' AS attribute, 'full' AS algorithm, 'x' || i AS record_id,
                   'protected' AS group_name, 'AnnualSalary' AS feature, 1.0 AS value_before,
                   2.0 AS value_after, 1 AS steps, 5.0 AS cost_before, 1.0 AS cost_after,
                   (hash(i) % 1000)::INTEGER * 1.0 AS modification_cost, 'y' || i AS overtakes
            FROM range($n) t(i)""", {"n": rows // 10})


# Per section, the most bytes it may take, whatever the size of the run's tables: the sections
# show top-N cases, binned histograms and sampled plots, never a row per record.
SECTION_BOUNDS = {"conclusion": 60_000, "audited": 15_000, "methods": 15_000, "engine-outcome": 120_000,
                  "engine-cst": 300_000, "engine-raguel": 200_000, "engine-fgce": 200_000}


def section_sizes(text: str) -> dict[str, int]:
    """Bytes of each section of a report."""
    return {m.group(1): len(m.group(0).encode()) for m in
            re.finditer(r'<section id="([^"]+)" data-section.*?</section>', text, flags=re.S)}


def check_large_report(tmp_path, source: Path, rows: int) -> tuple[float, int]:
    path = tmp_path / "large.duckdb"
    shutil.copy(source, path)
    enlarge(path, rows)
    start = time.perf_counter()
    out = write_report(path, "loan-small", tmp_path / "large.html")
    seconds = time.perf_counter() - start
    text = out.read_text(encoding="utf-8")
    size = out.stat().st_size
    print(f"report of a run with {rows:,}-row tables: {seconds:.1f} s, {size / 1e6:.2f} MB")
    assert size < 10_000_000
    assert sections(text) == SECTION_IDS
    cases = text.split("<h4>Top ", 1)[1].split("</table>", 1)[0]
    assert cases.count("<tr>") == CASES + 1  # header + the top cases; the rest stay in the warehouse
    small = section_sizes(write_report(source, "loan-small", tmp_path / "small.html").read_text(encoding="utf-8"))
    large = section_sizes(text)
    print({name: (small[name], large[name]) for name in large})
    assert large.keys() == small.keys() == SECTION_BOUNDS.keys()
    for name, bound in SECTION_BOUNDS.items():  # no section grows with the rows
        assert small[name] <= bound and large[name] <= bound, (name, small[name], large[name])
    # the cases beside it: top cases x (2k comparators, the complainant and its counterfactual)
    for csv_file in (tmp_path / "large-cases").iterdir():
        assert sum(1 for _ in csv_file.open(encoding="utf-8")) <= 1 + REPORT_CASES * (2 * 100 + 2)
    return seconds, size


def test_report_stays_small_on_large_tables(small_audit_warehouse, tmp_path):
    check_large_report(tmp_path, small_audit_warehouse, 1_000_000)


@pytest.mark.slow
def test_report_of_a_ten_million_row_run(small_audit_warehouse, tmp_path):
    check_large_report(tmp_path, small_audit_warehouse, 10_000_000)


def test_audit_report_flag_writes_the_report_after_the_run(small_audit_warehouse, tmp_path, monkeypatch, capsys):
    """``aequum audit --report FILE``: after the run, the run's report (the run itself is stood in
    for by the small audit, so no Prefect server starts here; tests/test_flow.py runs real flows)."""
    import aequum.flows.audit
    import aequum.flows.commands.cli

    wh = tmp_path / "wh.duckdb"
    shutil.copy(small_audit_warehouse, wh)
    monkeypatch.setattr(aequum.flows.commands.cli, "_prefect_env", lambda: None)
    monkeypatch.setattr(aequum.flows.audit, "run_audit", lambda *a, **k: "loan-small")
    out = tmp_path / "after.html"
    spec = str(Path(__file__).resolve().parents[1] / "data" / "specs" / "loan.yaml")
    assert main(["audit", "--spec", spec, "--warehouse", str(wh), "--report", str(out)]) == 0
    assert f"report: {out.resolve()}" in capsys.readouterr().out
    assert sections(out.read_text()) == SECTION_IDS
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "--spec", spec, "--warehouse", str(wh), "--report"]) == 0
    assert (tmp_path / "report-loan-small.html").exists()


def test_pba_findings_and_section(tmp_path):
    """PBA (merged from main): its findings rows and its report section, on the HMDA spec's
    surrogate with race as a model input (a small sample, as tests/test_pba_end_to_end.py)."""
    from audit_tables import small_audit

    def edit(raw):
        raw["engines"]["pba"].update(sample=60, batch_size=30, attributes=["race"])  # pooled only
        raw["model"]["epochs"] = 40

    path = small_audit(tmp_path, rows=2000, engines=["outcome", "pba"], run_id="hmda-pba",
                       spec_name="hmda.yaml", edit=edit)
    with Warehouse(path, read_only=True) as wh:
        from test_findings import CONTRACT, columns

        assert [c for c, _ in columns(wh, "findings_pba")] == CONTRACT
        assert columns(wh, "findings_pba") == columns(wh, "findings_outcome")
        findings = wh.con.sql("SELECT * FROM audit.findings WHERE engine = 'pba'").to_arrow_table().to_pylist()
        summary = wh.result("pba_summary", "hmda-pba").to_pylist()
    assert len(findings) == len(summary) and all(f["statement"] for f in findings)
    (head,) = [f for f in findings if f["headline"]]
    assert head["group_name"] == "protected" and "flipped" in head["finding"] and "delta = 1.0" in head["finding"]
    (s,) = [s for s in summary if s["group_name"] == "protected" and s["setting"] == "flipped" and s["delta"] == 1.0]
    assert head["individuals"] == s["verified"] and head["value"] == s["pba"]
    assert f"of the {s['considered']:,} considered inputs" in head["statement"] and "a sample of" in head["statement"]
    text = write_report(path, "hmda-pba", tmp_path / "pba.html").read_text()
    assert sections(text) == ["conclusion", "audited", "methods", "engine-outcome", "engine-pba"]
    assert figures(text, "engine-pba") == 1 and external_references(text) == []


def test_cec_findings_and_section(tmp_path):
    """CEC: one findings row per attribute x group (the headline: the whole attribute), naming
    the input whose attributions differ most; its report section with the regime plot, the
    feature table and the regime-B pairs."""
    from audit_tables import small_audit

    def edit(raw):
        raw["engines"]["cec"] = {"steps": 8}

    path = small_audit(tmp_path, rows=600, engines=["outcome", "cec"], run_id="cec-small",
                       spec_name="cec_synthetic.yaml", edit=edit)
    with Warehouse(path, read_only=True) as wh:
        from test_findings import CONTRACT, columns

        assert [c for c, _ in columns(wh, "findings_cec")] == CONTRACT
        assert columns(wh, "findings_cec") == columns(wh, "findings_outcome")
        findings = wh.con.sql("SELECT * FROM audit.findings WHERE engine = 'cec'").to_arrow_table().to_pylist()
        summary = wh.result("cec_summary", "cec-small").to_pylist()
        top = wh.con.execute("SELECT feature FROM audit.cec_features WHERE run_id = 'cec-small' "
                             "AND \"group\" = 'all' AND rank = 1").fetchall()
    assert len(findings) == len(summary) and all(f["statement"] for f in findings)
    (head,) = [f for f in findings if f["headline"]]
    (s,) = [s for s in summary if s["group"] == "all"]
    assert head["value"] == s["regime_b"] and head["individuals"] == round(s["regime_b"] * s["matched"])
    # explanations of a model: the part marks the CEC threshold, the union flags no model property
    with Warehouse(path, read_only=True) as wh:
        (part,) = wh.con.execute("SELECT flagged FROM audit.findings_cec WHERE headline").fetchall()
    assert part[0] == (s["cec"] > s["threshold"]) and head["flagged"] is False and head["claim"] == "about the model"
    assert f"differ most on {top[0][0]}" in head["statement"]
    text = write_report(path, "cec-small", tmp_path / "cec.html").read_text()
    assert sections(text) == ["conclusion", "audited", "methods", "engine-outcome", "engine-cec"]
    assert figures(text, "engine-cec") == 1 and external_references(text) == []
    assert "Regime B pairs with the largest explanation gap" in text
