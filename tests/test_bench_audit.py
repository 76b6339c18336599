"""``aequum bench audit`` and ``aequum bench national`` (issue 48): each engine's seconds and the
peak memory of an audit end to end, against baselines run in the same command. No timing is
asserted: what is measured, and how the ratios are formed."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import REPO
from aequum.flows.bench import audit_run


@pytest.mark.prefect
def test_an_audit_is_measured_engine_by_engine_and_its_lake_scanned(prefect_server, tmp_path):
    raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    raw["source"]["rows"] = 1000
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    got = audit_run.measure_audit(str(tmp_path / "s.yaml"), str(tmp_path / "work"), "1", "outcome,cst")
    assert got["status"] == "succeeded" and set(got["engines"]) == {"outcome", "cst"}
    assert all(e["status"] == "succeeded" and e["seconds"] >= 0 for e in got["engines"].values())
    assert all(got["seconds"] >= e["seconds"] and e["started"] > 0 for e in got["engines"].values())
    assert got["rows_staged"] == 1000 and got["tree_peak_mb"] >= got["peak_rss_mb"] * 0.5 > 0
    memory = got["memory"]  # by role and by phase, RSS and PSS (flows.bench.measure.TreePeak)
    assert {"staging", "model", "engine outcome", "engine cst", "writing the results"} <= set(memory["phases"])
    assert {"flow", "dask worker 1"} <= set(memory["roles"]) and memory["peak_mb"] == got["tree_peak_mb"]
    assert 0 < memory["peak_pss_mb"] <= memory["peak_mb"] and memory["peak_phase"] in memory["phases"]
    scan = audit_run.scan_lake(got["lake_path"], "1")
    assert scan["rows"] == 1000 and scan["seconds"] > 0


def fake_audit(seconds: float, peak: float, engines: dict[str, tuple[float, float]]) -> dict:
    return {"seconds": seconds, "status": "succeeded", "tree_peak_mb": peak, "peak_rss_mb": peak / 2,
            "rows_staged": 840_642, "lake_path": "/lake", "engines": {
                n: {"seconds": s, "started": t, "status": "succeeded", "pieces": 1} for n, (t, s) in engines.items()}}


def test_the_bench_prints_each_engine_and_its_ratios_to_the_baselines(monkeypatch, tmp_path, capsys):
    calls = []

    def audit(spec, work, workers=2, engines=None):
        calls.append(engines)
        # (the engines overlap: cst starts 20 s into the regression's 40)
        return fake_audit(60.0, 3072.0, {"regression": (100.0, 40.0), "cst": (120.0, 10.0)}) if engines is None else \
            fake_audit(20.0, 2048.0, {"cst": (100.0, 10.0)})

    monkeypatch.setattr(audit_run, "audit_in_fresh_process", audit)
    monkeypatch.setattr(audit_run, "in_fresh_process", lambda module, fn, *args, **kw: {
        "seconds": 0.5, "rows": 840_642, "peak_rss_mb": 100.0})
    row = audit_run.bench_audit(tmp_path / "s.yaml", tmp_path, "1,000,000 rows", without_regression=True)
    out = capsys.readouterr().out
    assert calls == [None, [n for n in audit_run.spec_engines() if n != "regression"]]
    assert "1,000,000 rows: 840,642 staged" in out and "60.0 s (succeeded)" in out and "3.00 GB" in out
    assert "engines: regression 40.0 s, cst 10.0 s" in out  # the slowest first
    assert "from the first one's start to the last one's end 40.0 s" in out
    assert "the rest (start-up, staging, writing the results; the model when no engine ran beside it): 20.0 s" in out
    assert "the audit takes x120 its time" in out  # 60 s against a 0.5 s scan
    assert "without the regression engine: 20.0 s" in out and "x3.00 its time, x1.50 its peak" in out
    assert row["lake_scan"]["rows"] == 840_642


def test_bench_national_audits_a_national_lar_with_the_shipped_spec(monkeypatch, capsys):
    from aequum.flows.bench import national

    seen = {}

    def bench(spec, work, label, without_regression):
        raw = yaml.safe_load(spec.read_text())
        seen.update(raw=raw, label=label, table=pq.read_table(raw["source"]["path"]))
        return {"end_to_end": {}}

    monkeypatch.setattr(national, "bench_audit", bench)
    rows = national.run(rows=[4000])
    shipped = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    assert seen["raw"]["engines"] == shipped["engines"] and seen["raw"]["protected"] == shipped["protected"]
    table = seen["table"]
    assert table.num_rows == 4000 and len(table.column_names) == 99
    assert len(set(table["lei"].to_pylist())) > 1000  # of 5,000 lenders (4,000 rows of a Zipf market)
    assert rows[0]["rows"] == 4000 and "4,000 applications of national shape" == seen["label"]
    assert "400 markets" in capsys.readouterr().out


def test_bench_audit_at_full_size_runs_each_part_once_per_size(monkeypatch, tmp_path, capsys):
    """Without --quick: the fixed cost once, then per size the end to end with its baselines,
    the 1-worker run (its speed-up) and the stages; --quick: the end to end and the scan only."""
    from aequum.flows.bench import audit as bench
    from aequum.flows.commands import generate

    calls = []

    def fake_source(name, out, **kw):
        calls.append(("generate", name, kw["rows"]))
        out.write_bytes(b"")
        return out

    monkeypatch.setattr(generate, "generate_to_file", fake_source)
    monkeypatch.setattr(bench, "_print_fixed_cost", lambda tmp: calls.append(("fixed",)) or {})
    monkeypatch.setattr(bench, "bench_audit", lambda spec, work, label, without_regression: calls.append(
        ("e2e", label, without_regression)) or {"end_to_end": {"seconds": 30.0}})
    monkeypatch.setattr(bench, "audit_in_fresh_process", lambda spec, work, workers=2: calls.append(
        ("workers", workers)) or {"seconds": 45.0, "tree_peak_mb": 1024.0})
    monkeypatch.setattr(bench, "_print_stages", lambda spec, work: calls.append(("stages",)) or {})
    rows = bench.run(rows=[1000, 2000])
    assert calls == [("fixed",), ("generate", "hmda", 1000), ("e2e", "1,000 generated HMDA LAR rows", True),
                     ("workers", 1), ("stages",), ("generate", "hmda", 2000),
                     ("e2e", "2,000 generated HMDA LAR rows", True), ("workers", 1), ("stages",)]
    assert "speed-up from 1 to 2 workers: x1.50" in capsys.readouterr().out and len(rows) == 3
    calls.clear()
    bench.run(quick=True)
    assert calls == [("generate", "hmda", bench.QUICK_ROWS), ("e2e", "40,000 generated HMDA LAR rows", False)]
