"""``aequum report``: one self-contained HTML file for a run (no CDN, no script, no request).

Reads the warehouse read-only: what was audited (spec, dataset version and fingerprint, model
fingerprint, code version, time), an executive summary of the run's findings (``audit.findings``)
with their confidence, then one section per engine that ran (``flows/reporting``), each with
its plots and its top individual cases (the rest stay in the warehouse)."""
from __future__ import annotations

import json
from pathlib import Path

from aequum.flows.reporting.html import Section, esc, flag, markup, page, table
from aequum.flows.reporting.run import Run
from aequum.flows.reporting.sections import engine_sections
from aequum.flows.guard import check_output, check_run_id
from aequum.flows.warehouse import Warehouse, lake_roots


def audited_section(run: Run) -> Section:
    r = run.record
    meta = [("run", r["run_id"]), ("spec", f"{r['spec_name']} (hash {r['spec_hash']})"),
            ("dataset version", r.get("dataset_version")), ("source fingerprint", r.get("source_fingerprint")),
            ("model fingerprint", r.get("model_fingerprint") or "no model"), ("code version", r.get("code_version")),
            ("started", r.get("started_at")), ("finished", r.get("finished_at")), ("status", r.get("status"))]
    if r.get("error"):
        meta.append(("error", r["error"]))
    sec = Section("audited", "What was audited")
    sec.add('<dl class="meta">' + "".join(markup("<dt>{}</dt><dd>{}</dd>", k, v if v is not None else "n/a")
                                          for k, v in meta) + "</dl>")
    sec.add("<h3>Engines</h3>", table([
        {"engine": name, "status": e["status"], "seconds": e.get("seconds"), "error": e.get("error") or ""}
        for name, e in sorted(run.engines.items())]))
    sec.add("<details><summary>Engine parameters of the spec</summary><pre>"
            + esc(json.dumps(run.parameters, indent=2, sort_keys=True)) + "</pre></details>")
    return sec


def _figure(f: dict) -> str:
    value = f["value"]
    if value is None:
        return "n/a"
    text = f"{f['measure']} {value:.3g}"
    if f["ci_low"] is not None and f["ci_high"] is not None:
        text += f" ({100 * f['confidence']:g}% CI {f['ci_low']:.3g} to {f['ci_high']:.3g})"
    return text


def _confidence(f: dict) -> str:
    if f["p_value"] is not None:
        p = "p < 0.001" if f["p_value"] < 0.001 else f"p = {f['p_value']:.3f}"
        return f"{p}: {'significant' if f['significant'] else 'not significant'} at {100 * (1 - f['confidence']):g}%"
    if f["significant"] is not None and f["confidence"] is not None:
        return f"{'significant' if f['significant'] else 'none significant'} at {100 * (1 - f['confidence']):g}% (one-sided)"
    return "descriptive (no test)"


def summary_section(run: Run) -> Section:
    findings = run.query("findings")
    headline = [f for f in findings if f["headline"]]
    flagged = [f for f in headline if f["flagged"]]
    evidence = [f for f in findings if f["evidence"]]
    question = run.parameters.get("audit", {}).get("question", "disparate_treatment").replace("_", " ")
    sec = Section("summary", "Executive summary")
    engines = ", ".join(sorted(n for n in run.engines if run.ran(n))) or "none"
    sec.add(markup("<p>The audit's question: <strong>{}</strong>. "
            "{} finding(s) are evidence on it; {} of {} headline "
            "findings show a difference that calls for attention (engines that ran: {}). "
            "Each finding names its estimand: a raw disparity says that rates differ, not why; a "
            "direct effect or controlled disparity is evidence only when it survives the sensitivity "
            "analysis for an unobserved confounder; a model property describes the model examined. "
            "Each row is one finding of <code>audit.findings</code> (run_id = '{}'); "
            "the sections below show the evidence.</p>", question, len(evidence), len(flagged), len(headline),
            engines, run.run_id))
    sec.add(table([{"": flag(f["flagged"]), "evidence": "evidence" if f["evidence"] else "",
                    "engine": f["engine"], "attribute": f["attribute"],
                    "finding": f["finding"], "estimand": f["estimand"], "figure": _figure(f),
                    "confidence": _confidence(f),
                    "individuals": f["individuals"], "statement": f["statement"]} for f in headline],
                  cls="findings"))
    others = [f for f in findings if not f["headline"]]
    if others:
        sec.add(markup("<details><summary>{} further findings (other k, methods and baselines)</summary>",
                       len(others))
                + table([{"": flag(f["flagged"]), "engine": f["engine"], "finding": f["finding"],
                          "figure": _figure(f), "individuals": f["individuals"], "statement": f["statement"]}
                         for f in others]) + "</details>")
    return sec


def build_report(run: Run) -> str:
    """The report's HTML for one run."""
    r = run.record
    sections = [audited_section(run)]
    if "findings" in {v[0] for v in run.wh.con.execute(
            "SELECT view_name FROM duckdb_views() WHERE schema_name = 'audit'").fetchall()}:
        sections.append(summary_section(run))
    sections += engine_sections(run)
    return page(f"aequum audit report: {r['spec_name']}",
                f"run {r['run_id']}, {r['status']}, started {r['started_at']}", sections)


def write_report(warehouse: str | Path, run_id: str | None = None, out: str | Path | None = None,
                 wait: float | None = None, notify=None) -> Path:
    """Write the report of ``run_id`` (default: the latest run) and return its path (default
    ``report-<run_id>.html`` in the current directory). ``wait`` / ``notify``: as for
    :class:`Warehouse` (how long to wait for a warehouse another process is writing)."""
    with Warehouse(warehouse, read_only=True, wait=wait, notify=notify) as wh:
        run = Run.open(wh, run_id)
        path = Path(out) if out is not None else Path(f"report-{check_run_id(run.run_id, 'run id')}.html")
        check_output(path, "--out", warehouse, lake_roots(wh))
        text = build_report(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
