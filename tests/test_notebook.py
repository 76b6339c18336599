"""aequum.audit(frame, spec): the CLI's audit of an in-memory frame, in-process (issue 17)."""
from __future__ import annotations

import copy

import polars as pl
import pyarrow as pa
import pytest
import yaml

import aequum
from aequum.engines.core.spec import SpecError
from aequum.engines.core.validation import SourceSchemaError
from aequum.engines.generators.loan import iter_loan_batches
from conftest import REPO

LOAN = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())


def loan_frame(rows: int = 300) -> pa.Table:
    return pa.Table.from_batches(list(iter_loan_batches(rows, 0, rows)))


def notebook_spec(engines: list[str]) -> dict:
    raw = copy.deepcopy(LOAN)
    del raw["source"]
    raw["source"] = {"id_column": "id"}
    raw["engines"] = {"run": engines, "cst": {"k": [5, 10]}, "fgce": {"epsilon": 0.2},
                      "raguel": {"sweep_tolerances": [0.5]}}
    return raw


@pytest.mark.prefect
def test_notebook_tables_equal_the_cli_audit(prefect_server, tmp_path):
    """The same engines and the same tables as `aequum audit` (the flow), row for row."""
    from aequum.flows.audit import audit_flow
    from aequum.flows.store.warehouse import Warehouse

    engines = ["outcome", "cst", "raguel", "fgce"]
    frame = loan_frame()
    tables = aequum.audit(pl.from_arrow(frame), notebook_spec(engines), say=None)
    raw = notebook_spec(engines)
    pq_path = tmp_path / "loan.parquet"
    import pyarrow.parquet as pq

    pq.write_table(frame, pq_path)
    raw["source"] = {"kind": "parquet", "path": str(pq_path), "id_column": "id"}
    raw["name"] = "loan"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    audit_flow(str(tmp_path / "s.yaml"), warehouse=str(tmp_path / "wh.duckdb"), lake=str(tmp_path / "lake"),
               run_id="r")
    with Warehouse(tmp_path / "wh.duckdb", read_only=True) as wh:
        written = set(wh.query("run_tables")["table_name"].to_pylist()) - {"run_engines", "group_labels"}
        assert set(tables) - {"quarantine"} == written
        for name in written:  # both carry the group labels beside the codes, in the same columns
            cli = pl.from_arrow(wh.result(name, "r")).drop("run_id")
            timed = [c for c in ("seconds",) if c in cli.columns]  # wall time of the step itself
            assert cli.drop(timed).equals(tables[name].drop(timed)), name
    assert tables["cst_summary"].height > 0 and tables["quarantine"].height == 0
    assert tables["outcome_gaps"].select("group_label", "reference_group_label").row(0) == ("Female", "Male")
    assert set(tables["cst_summary"]["group_label"]) == {"Female against Male"}


def test_frames_of_every_kind_and_a_spec_file(tmp_path):
    frame = loan_frame(200)
    by_arrow = aequum.audit(frame, notebook_spec(["outcome"]), say=None)
    by_polars = aequum.audit(pl.from_arrow(frame), notebook_spec(["outcome"]), say=None)
    assert pl.from_arrow(by_arrow["outcome_gaps"]).equals(by_polars["outcome_gaps"])
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(notebook_spec(["outcome"])))
    by_file = aequum.audit(frame.to_batches()[0], spec, say=None)
    assert isinstance(by_arrow["outcome_gaps"], pa.Table) and isinstance(by_file.findings, pa.Table)
    assert by_file["outcome_gaps"].equals(by_arrow["outcome_gaps"])
    messages = []
    aequum.audit(frame, notebook_spec(["outcome"]), say=messages.append)
    assert any("staged 200 rows" in m for m in messages)


def test_bad_input_is_named():
    frame = loan_frame(50)
    with pytest.raises(TypeError, match="pandas or polars DataFrame or an Arrow table"):
        aequum.audit([[1, 2]], notebook_spec(["outcome"]))
    with pytest.raises(SourceSchemaError, match="'AccountBalance'"):
        aequum.audit(frame.drop(["AccountBalance"]), notebook_spec(["outcome"]), say=None)
    with pytest.raises(SpecError, match="engines.run"):
        aequum.audit(frame, notebook_spec(["nosuch"]), say=None)
    bad = frame.set_column(frame.schema.get_field_index("Gender"), "Gender",
                           pa.array(["x"] * 50))
    with pytest.raises(Exception, match="failed validation"):
        aequum.audit(bad, notebook_spec(["outcome"]), say=None)


def loan_result(kind: str, capfd):
    frame = loan_frame(400)
    given = frame.to_pandas() if kind == "pandas" else pl.from_arrow(frame)
    result = aequum.audit(given, notebook_spec(["outcome", "regression"]))
    out, _ = capfd.readouterr()
    assert out == ""  # silent unless asked: no progress lines, no HiGHS banner
    return result


@pytest.mark.parametrize("kind", ["pandas", "polars"])
def test_the_result_object(kind, capfd, tmp_path):
    """aequum.audit returns an AuditResult (issue 50): the terminal's conclusion, the ranked
    findings with the labels people read, every table, the report, frames of the user's kind."""
    import pandas as pd

    from aequum.flows.commands.notebook import AuditResult
    from aequum.flows.reporting.conclusion import terminal_lines
    from aequum.flows.store.warehouse import Warehouse

    result = loan_result(kind, capfd)
    frame_type = pd.DataFrame if kind == "pandas" else pl.DataFrame
    assert isinstance(result, AuditResult)
    assert isinstance(result.findings, frame_type)
    assert all(isinstance(t, frame_type) for t in result.tables.values())
    assert result["outcome_gaps"] is result.tables["outcome_gaps"] and len(result["outcome_gaps"]) > 0
    findings = pl.from_pandas(result.findings) if kind == "pandas" else result.findings
    assert findings["rank"].to_list() == list(range(1, findings.height + 1))
    assert set(findings["group_label"]) == {"Female against Male"}
    with Warehouse(result.warehouse, read_only=True) as wh:
        record = wh.run(result.run_id)
        rows = wh.query("report/findings", {"run_id": result.run_id}).to_pylist()
    import json
    lines = terminal_lines(record, json.loads(record["parameters"]), rows)
    assert lines[0] == "Conclusion:"
    said = result.conclusion.splitlines()
    assert said and said == [line.strip() for line in lines[1:1 + len(said)]]
    assert said[0].startswith("Nothing in this audit of loan is evidence")
    text = repr(result)
    assert said[0] in text and "outcome_gaps" in text and "regression_estimates" in text
    path = result.report(tmp_path / "r.html")
    html = path.read_text()
    assert path.is_file() and "<html" in html[:200].lower()
    # the regression section folds every coefficient per comparison and links the whole table,
    # written beside the report as `aequum show regression_coefficients` writes it
    assert "<summary>Female against Male (" in html and "aequum show regression_coefficients --format csv" in html
    for fmt in ("csv", "xlsx"):
        assert (tmp_path / f"r-regression_coefficients.{fmt}").is_file()
        assert f'<a href="r-regression_coefficients.{fmt}">' in html
    beside = pl.read_csv(tmp_path / "r-regression_coefficients.csv")
    assert beside.height == len(result["regression_coefficients"]) and "term" in beside.columns
    assert "linear model R²" in html  # the loan lender's rule separates the logit: no pseudo R² here
    coefficients = result["regression_coefficients"]
    assert "lpm" in set(coefficients["model"]) and {"const", "gender"} <= set(coefficients["term"])
    # every per-group table carries the labels beside its codes, as the warehouse holds them
    gaps = pl.from_pandas(result["outcome_gaps"]) if kind == "pandas" else result["outcome_gaps"]
    assert gaps.select("group_name", "group_label", "reference_group_label").rows() == [("protected", "Female", "Male")]
    estimates = pl.from_pandas(result["regression_estimates"]) if kind == "pandas" else result["regression_estimates"]
    assert estimates.columns[:2] == ["attribute", "group_label"] and set(estimates["group_label"]) == {"Female against Male"}
    with Warehouse(result.warehouse, read_only=True) as wh:
        stored = wh.con.execute("SELECT group_label FROM audit.regression_estimates").fetchall()
    assert stored == [("Female against Male",)] * len(estimates)
    assert any(s.startswith("Female applicants received favourable decisions") for s in findings["statement"])
    assert not any(" group of " in s for s in findings["statement"])
    assert capfd.readouterr().out == ""


def test_verbose_prints_progress(capfd):
    aequum.audit(loan_frame(100), notebook_spec(["outcome"]), verbose=True)
    assert "engine outcome: done" in capfd.readouterr().out


def test_silent_with_the_solvers(capfd):
    """FGCE's HiGHS selections and CST's searches print nothing, on stdout or stderr."""
    aequum.audit(loan_frame(200), notebook_spec(["cst", "raguel", "fgce"]))
    out, err = capfd.readouterr()
    assert out == "" and err == ""
