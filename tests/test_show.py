"""aequum show: tables that fit the terminal, CSV / Parquet output, and a clear note when the
table's engine did not run (or failed) in the run instead of an empty table."""
from __future__ import annotations

import io
import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from aequum.flows.commands.cli import main
from aequum.flows.commands.show import print_table
from aequum.flows.store.warehouse import Warehouse


def test_print_table_fits_the_width_and_names_hidden_columns():
    table = pa.table({f"column_{i}": [1.23456789 * i, None, 3.0] for i in range(30)}
                     | {"text": ["x" * 200, "y", None]})
    out = io.StringIO()
    print_table(table, width=70, title="t", out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "t: 3 rows"
    assert all(len(line) <= 70 for line in lines[:-1])
    assert lines[-1].startswith("25 more column(s): column_6, ") and lines[-1].count("column_") == 24
    wide = io.StringIO()
    print_table(table.select(["column_1", "text"]), width=200, out=wide)
    assert "more column" not in wide.getvalue() and "1.2346" in wide.getvalue()


def two_runs(source, tmp_path):
    """The small audit (all engines) plus a later run that ran only the outcome metrics and a
    third whose CST engine failed."""
    from aequum.engines.outcome.engine import GAPS, METRICS

    path = tmp_path / "wh.duckdb"
    shutil.copy(source, path)
    with Warehouse(path) as wh:
        gaps = wh.result("outcome_gaps", "loan-small").drop(["run_id"])
        metrics = wh.result("outcome_metrics", "loan-small").drop(["run_id"])
        for run_id, cst in (("only-outcome", None), ("cst-failed", "failed")):
            wh.start_run(run_id, "loan", "h", "test", {})
            wh.write_results(run_id, {"outcome_gaps": (GAPS, gaps), "outcome_metrics": (METRICS, metrics)})
            wh.record_engine(run_id, "outcome", "succeeded", 0.1, 1,
                             {"outcome_gaps": gaps.num_rows, "outcome_metrics": metrics.num_rows}, None)
            if cst:
                wh.record_engine(run_id, "cst", cst, 0.1, 1, {}, "ValueError: no scm")
            wh.finish_run(run_id, "succeeded" if cst is None else "partial")
    return str(path)


def test_show_says_when_the_engine_did_not_run(small_audit_warehouse, tmp_path, capsys):
    wh = two_runs(small_audit_warehouse, tmp_path)
    assert main(["show", "cst_claims", "--warehouse", wh, "--run-id", "only-outcome"]) == 1
    err = capsys.readouterr().err
    assert "engine 'cst' did not run in run only-outcome" in err and "outcome" in err
    assert main(["show", "cst_summary", "--warehouse", wh, "--run-id", "cst-failed"]) == 1
    assert "engine 'cst' failed in run cst-failed: ValueError: no scm" in capsys.readouterr().err
    assert main(["show", "outcome_gaps", "--warehouse", wh, "--run-id", "only-outcome"]) == 0
    assert "audit.outcome_gaps, run only-outcome: 1 row" in capsys.readouterr().out
    assert main(["show", "cst_summary", "--warehouse", wh, "--run-id", "loan-small"]) == 0
    assert "13 rows" in capsys.readouterr().out
    assert main(["show", "--warehouse", wh, "--run-id", "loan-small"]) == 0
    listing = capsys.readouterr().out
    assert "cst_claims" in listing and "raguel_ranking" in listing


def test_show_writes_csv_and_parquet(small_audit_warehouse, tmp_path, capsys):
    wh = str(small_audit_warehouse)
    with Warehouse(wh, read_only=True) as w:
        claims = w.result("cst_claims", "loan-small")
    out = tmp_path / "claims.parquet"
    assert main(["show", "cst_claims", "--warehouse", wh, "--format", "parquet", "--out", str(out)]) == 0
    written = pq.read_table(out)  # every column, and beside the attribute what it compares
    names = claims.column_names
    at = names.index("protected_attribute") + 1
    assert written.num_rows == claims.num_rows and written.column_names == names[:at] + ["group_label"] + names[at:]
    assert set(written["group_label"].to_pylist()) == {"Female against Male"}
    capsys.readouterr()
    assert main(["show", "outcome_gaps", "--warehouse", wh, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith('"run_id","attribute","group_name","group_label","reference_group",'
                               '"reference_group_label"') and len(lines) == 2
    assert lines[1].startswith('"loan-small","gender","protected","Female","reference","Male"')
    assert main(["show", "outcome_gaps", "--warehouse", wh, "--format", "parquet"]) == 2
    assert "--format parquet needs --out" in capsys.readouterr().err


def test_show_prints_every_fixed_table_of_the_run(small_audit_warehouse, tmp_path, capsys):
    """The tables without a run_id column: datasets and quarantine by the run's dataset, the
    registry aequum_tables whole; runs and run_engines by the run."""
    path = tmp_path / "wh.duckdb"
    shutil.copy(small_audit_warehouse, path)
    with Warehouse(path) as w:
        version = w.run("loan-small")["dataset_version"]
        for v in (version, "another0dataset0"):
            w.con.execute("INSERT INTO audit.datasets (dataset_version, spec_name, source_kind, "
                          "source_fingerprint, rows_read, rows_staged, rows_quarantined, "
                          "rows_out_of_scope, staged_table, created_at) VALUES "
                          "(?, 'loan', 'generator', '400:1', 402, 400, 2, 0, 'staging.d_x', now())", [v])
        w.con.execute("INSERT INTO audit.quarantine VALUES (?, 3, 'a3', 'income', '-1', 'below 0'), "
                      "(?, 9, 'a9', 'age', 'x', 'not a number'), ('another0dataset0', 1, 'b', 'f', "
                      "'v', 'r')", [version, version])
    wh = str(path)
    for table, title in (("datasets", f"audit.datasets, dataset {version} of run loan-small: 1 row"),
                         ("quarantine", f"audit.quarantine, dataset {version} of run loan-small: 2 rows"),
                         ("aequum_tables", "audit.aequum_tables (every run): "),
                         ("runs", "audit.runs, run loan-small: 1 row"),
                         ("run_engines", "audit.run_engines, run loan-small: ")):
        assert main(["show", table, "--warehouse", wh]) == 0, table
        captured = capsys.readouterr()
        assert captured.out.startswith(title) and captured.err == "", table
    assert main(["show", "quarantine", "--warehouse", wh, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith('"dataset_version","source_row"') and len(lines) == 3
    assert lines[1].startswith(f'"{version}",3,"a3","income"')
    assert main(["show", "datasets", "--warehouse", wh, "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert out.count(version) == 1 and "another0dataset0" not in out


def test_show_of_a_dataset_table_for_a_run_without_a_dataset_is_one_line(small_audit_warehouse,
                                                                          tmp_path, capsys):
    path = tmp_path / "wh.duckdb"
    shutil.copy(small_audit_warehouse, path)
    with Warehouse(path) as wh:
        wh.start_run("no-data", "loan", "h", "test", {})
        wh.finish_run("no-data", "failed", error="the source could not be read")
    assert main(["show", "quarantine", "--warehouse", str(path), "--run-id", "no-data"]) == 2
    err = capsys.readouterr().err
    assert err == ("aequum: error: run no-data staged no dataset, so audit.quarantine has no rows of "
                   "it; pick another run with --run-id (aequum runs lists them)\n")


def test_show_prints_every_table_and_view_of_the_warehouse(small_audit_warehouse, capsys):
    """Whatever the README's warehouse section names: every table and view of a run's warehouse."""
    wh = str(small_audit_warehouse)
    with Warehouse(wh, read_only=True) as w:
        names = w.table_names()
    assert {"runs", "run_engines", "datasets", "quarantine", "aequum_tables", "findings",
            "latest_runs", "comparisons"} <= set(names)
    for name in names:
        assert main(["show", name, "--warehouse", wh]) == 0, name
        assert capsys.readouterr().out.startswith(f"audit.{name}"), name
