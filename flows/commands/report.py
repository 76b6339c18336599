"""``aequum report``: one self-contained HTML file for a run (no CDN, no script, no request).

Reads the warehouse read-only. First a conclusion generated from the run's findings
(``audit.findings``) and the findings ranked by severity × confidence; folded below, what was
audited (spec, dataset version and fingerprint, model fingerprint, code version, time), the data
source and the engines' methods, then one section per engine that ran (``flows/reporting``),
each with its plots and its top individual cases (the rest stay in the warehouse). The cases of
every flagged individual finding go beside the report as matched-pair exhibits, one CSV file
per finding in ``<report>-cases/``, linked from the ranked findings; ``aequum report --cases
RANK`` writes one finding's exhibit as CSV and as a printable page (``flows.reporting.exhibit``)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from aequum.flows.reporting import exhibit, lender_review
from aequum.flows.reporting.conclusion import conclusion_section
from aequum.flows.reporting.exhibit_page import exhibit_html, print_pdf
from aequum.flows.reporting.html import Section, esc, markup, page, table
from aequum.flows.reporting.labels import Labels, utc
from aequum.flows.reporting.methods import methods_section
from aequum.flows.reporting.run import Run
from aequum.flows.reporting.sections import engine_sections
from aequum.flows.store.guard import UsageError, check_output, check_run_id
from aequum.flows.store.warehouse import Warehouse, lake_roots, source_paths

REPORT_CASES = 20  # cases per flagged finding in the files beside the report (--cases: more)


def audited_section(run: Run) -> Section:
    r = run.record
    meta = [("run", r["run_id"]), ("spec", f"{r['spec_name']} (hash {r['spec_hash']})"),
            ("dataset version", r.get("dataset_version")), ("source fingerprint", r.get("source_fingerprint")),
            ("model fingerprint", r.get("model_fingerprint") or "no model"), ("code version", r.get("code_version")),
            ("started", utc(r.get("started_at"))), ("finished", utc(r.get("finished_at"))), ("status", r.get("status"))]
    if r.get("error"):
        meta.append(("error", r["error"]))
    sec = Section("audited", "What was audited", fold="Show the run, its engines and their parameters")
    sec.add('<dl class="meta">' + "".join(markup("<dt>{}</dt><dd>{}</dd>", k, v if v is not None else "n/a")
                                          for k, v in meta) + "</dl>")
    sec.add("<h3>Engines</h3>", table([
        {"engine": name, "status": e["status"], "seconds": e.get("seconds"), "error": e.get("error") or ""}
        for name, e in sorted(run.engines.items())]))
    sec.add("<details><summary>Engine parameters of the spec</summary><pre>"
            + esc(json.dumps(run.parameters, indent=2, sort_keys=True)) + "</pre></details>")
    return sec


def has_findings(run: Run) -> bool:
    return "findings" in {v[0] for v in run.wh.con.execute(
        "SELECT view_name FROM duckdb_views() WHERE schema_name = 'audit'").fetchall()}


def build_report(run: Run, cases: dict[int, str] | None = None, findings: list[dict] | None = None,
                 done=None) -> str:
    """The report's HTML for one run: the conclusion and the ranked findings first, then (folded)
    what was audited, the data and methods, and one section per engine. ``cases``: per finding
    rank, the link to its cases' file; ``findings``: the run's, when already read; ``done(name)``
    called as each engine's section is ready. Sections link the files ``run.files`` names."""
    r = run.record
    labels = Labels(run.parameters)
    engines = engine_sections(run, done)
    sections = []
    if has_findings(run):
        findings = run.query("findings") if findings is None else findings
        sections.append(conclusion_section(run, findings, labels, {s.id[len("engine-"):] for s in engines},
                                           cases or {}))
    sections.append(audited_section(run))
    dataset = run.query("dataset") if r.get("dataset_version") else []
    sections.append(methods_section(run, dataset[0] if dataset else None, labels))
    sections += engines
    return page(f"aequum audit report: {r['spec_name']}",
                f"run {r['run_id']}, {r['status']}, started {utc(r['started_at'])}", sections)


def table_files(path: Path, table: str) -> dict[str, Path]:
    """A table's files beside a report: ``<report>-<table>.csv`` and ``.xlsx``."""
    return {fmt: path.with_name(f"{path.stem}-{table}.{fmt}") for fmt in ("csv", "xlsx")}


# tables written whole beside the report (as ``aequum show TABLE --format csv|xlsx`` writes
# them), each linked from its section: the ranked findings and the controlled regression's
# every coefficient
BESIDE = ("findings", "regression_coefficients")


def write_report(warehouse: str | Path, run_id: str | None = None, out: str | Path | None = None,
                 wait: float | None = None, notify=None, findings: list[dict] | None = None,
                 say=None, pdf: bool = False) -> Path:
    """Write the report of ``run_id`` (default: the latest run) and return its path (default
    ``report-<run_id>.html`` in the current directory), the tables of ``BESIDE`` beside it as CSV
    and XLSX (every finding, labelled, by rank, and the regression's every coefficient: as
    ``aequum show TABLE --format csv|xlsx``), and,
    with ``pdf``, ``<report>.pdf`` printed by Chromium headless. ``wait`` / ``notify``: as for
    :class:`Warehouse` (how long to wait for a warehouse another process is writing);
    ``findings``: the run's ranked findings when the caller has read them (``sql/report/findings.sql``,
    seconds at a million records); ``say``: the report's progress (its steps done of the total,
    elapsed, left: ``flows.progress``), live on a terminal."""
    from aequum.flows.commands.show import write_file
    from aequum.flows.progress import board
    from aequum.flows.reporting.sections import shown_engines

    t0 = time.perf_counter()
    with Warehouse(warehouse, read_only=True, wait=wait, notify=notify) as wh, \
            board(say or (lambda _line: None), unit="steps") as shown:
        run = Run.open(wh, run_id)
        path = Path(out) if out is not None else Path(f"report-{check_run_id(run.run_id, 'run id')}.html")
        check_output(path, "--out", warehouse, lake_roots(wh), source_paths(wh))
        folder = path.with_name(path.stem + "-cases")
        # findings (and their files), exhibits, file reviews, the engines' sections, the page, the PDF
        total = 4 + len(shown_engines(run)) + int(pdf)
        steps = iter(range(1, total + 1))

        def step(_name: str = "") -> None:
            shown.update("report", next(steps), total, time.perf_counter() - t0)

        shown.update("report", 0, total, 0.0)
        if findings is None:
            findings = run.query("findings") if has_findings(run) else []
        beside = {t: table_files(path, t) for t in BESIDE
                  if (findings if t == "findings" else t in run.tables and run.result(t))}
        for p in [*(p for f in beside.values() for p in f.values()), *([path.with_suffix(".pdf")] if pdf else [])]:
            check_output(p, "--out", warehouse, lake_roots(wh), source_paths(wh))
        path.parent.mkdir(parents=True, exist_ok=True)
        for t, files in beside.items():
            for fmt, p in files.items():
                write_file(wh, t, run.run_id, fmt, str(p))
            run.files[t] = {fmt: p.name for fmt, p in files.items()}
        step()
        exhibits = exhibit.build(run, exhibit.flagged_individual(findings), REPORT_CASES)
        step()
        reviews, _ = lender_review.build_all(run, findings, REPORT_CASES)  # flagged lenders' file reviews
        step()
        named = [(e.rank, exhibit.file_name(e)) for e in exhibits] + [(r.rank, lender_review.file_name(r))
                                                                     for r in reviews]
        for _, name in named:
            check_output(folder / name, "--out", warehouse, lake_roots(wh), source_paths(wh))
        text = build_report(run, {rank: f"{folder.name}/{name}" for rank, name in named}, findings, step)
        labels = Labels(run.parameters)
        path.parent.mkdir(parents=True, exist_ok=True)
        if folder.is_dir():  # the files of an earlier report of the same name: this run's replace them
            for old in folder.glob("finding-*.csv"):
                old.unlink()
        for e in exhibits:
            exhibit.write_csv(e, labels, folder / exhibit.file_name(e))
        for r in reviews:
            lender_review.write_csv(r, labels, folder / lender_review.file_name(r))
        path.write_text(text, encoding="utf-8")
        step()
        if pdf:
            print_pdf(path, path.with_suffix(".pdf"))
            step()
    return path


def write_cases(warehouse: str | Path, key: str, run_id: str | None = None, out: str | Path | None = None,
                limit: int = exhibit.CASES, pdf: bool = False, wait: float | None = None, notify=None) -> list[Path]:
    """Write the matched-pair exhibit of finding ``key`` (its rank in the run; default run: the
    latest) as ``<out>.csv`` and the printable ``<out>.html`` (and ``<out>.pdf`` with ``pdf``,
    printed by Chromium headless); default ``out``: ``cases-<run_id>-<rank>``. Returns the paths."""
    if limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    with Warehouse(warehouse, read_only=True, wait=wait, notify=notify) as wh:
        run = Run.open(wh, run_id)
        found = exhibit.find(run, key)
        stem = Path(out) if out is not None else Path(f"cases-{check_run_id(run.run_id, 'run id')}-{found['rank']}")
        stem = stem.with_suffix("") if stem.suffix.lower() in (".csv", ".html", ".pdf") else stem
        paths = [stem.with_name(stem.name + ext) for ext in (".csv", ".html") + ((".pdf",) if pdf else ())]
        for p in paths:
            check_output(p, "--out", warehouse, lake_roots(wh), source_paths(wh))
        labels = Labels(run.parameters)
        if lender_review.reviewable(found):  # a flagged lender: its file review
            e = lender_review.build(run, found, limit)
            text, write_csv = lender_review.review_html(run.record, e, labels), lender_review.write_csv
        else:
            (e,) = exhibit.build(run, [found], limit)
            text, write_csv = exhibit_html(run.record, e, labels), exhibit.write_csv
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    write_csv(e, labels, paths[0])
    paths[1].write_text(text, encoding="utf-8")
    if pdf:
        print_pdf(paths[1], paths[2])
    return paths
