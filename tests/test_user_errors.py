"""Every user or configuration error is one line and exit 2, never a traceback: found before
Prefect starts where the data allow, otherwise at the flow's boundary (the flow run ends Failed
with the line)."""
from __future__ import annotations

import copy
import socket

import pytest
import yaml

from conftest import REPO
from aequum.flows.commands.cli import main

LOAN = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
MLP = {"kind": "mlp", "features": ["AnnualSalary", "AccountBalance"], "hidden": [4]}


@pytest.fixture
def no_prefect(monkeypatch):
    import aequum.flows.commands.cli as cli

    def refuse():
        raise AssertionError("Prefect was started before the user error was found")

    monkeypatch.setattr(cli, "_prefect_env", refuse)


@pytest.fixture(scope="module")
def loan_csv(tmp_path_factory):
    csv = tmp_path_factory.mktemp("loan") / "loan.csv"
    assert main(["generate", "loan", "--rows", "200", "--format", "csv", "--out", str(csv)]) == 0
    return csv


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case, message", [
    ("header_only", "has no rows (a header line only?)"),
    ("empty_model_file", "model file"),
    ("model_path_is_a_folder", "is not a file"),
    ("input_mean_not_a_list", "model.input_mean"),
    ("warehouse_wait", "AEQUUM_WAREHOUSE_WAIT must be a number of seconds, got 'abc'"),
    ("memory_limit", "DuckDB memory limit must look like 2GB or 512MB, got 'lots'"),
    ("workers", "--workers must be at least 1, got -1"),
    ("lake_is_a_file", "is a file, not a folder"),
    ("dead_prefect_api", "PREFECT_API_URL: no Prefect API answers at"),
    ("dead_dask_scheduler", "no Dask scheduler answers at"),
    ("source_is_the_warehouse", "is the warehouse"),
    ("counterfactual_query_reads_a_file", "scm.counterfactuals: cannot read query"),
    ("counterfactual_query_copies", "must be a SELECT statement"),
    ("counterfactual_file_missing", "scm.counterfactuals: file not found"),
    ("modifying_cte", "must only read: it holds DELETE"),
])
def test_user_and_configuration_errors_are_one_line_before_prefect(tmp_path, capsys, monkeypatch, no_prefect,
                                                                    loan_csv, case, message):
    import duckdb

    raw = copy.deepcopy(LOAN)
    raw["source"] = {"kind": "csv", "path": str(loan_csv), "id_column": "id"}
    raw["engines"] = {"run": ["outcome"]}
    wh, argv = tmp_path / "wh.duckdb", []
    db = tmp_path / "cf.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE t AS SELECT 1 AS id")
    if case == "header_only":
        (tmp_path / "h.csv").write_text(loan_csv.read_text().splitlines()[0] + "\n")
        raw["source"]["path"] = str(tmp_path / "h.csv")
    elif case == "empty_model_file":
        (tmp_path / "m.pt").write_bytes(b"")
        raw["model"] = {**MLP, "path": str(tmp_path / "m.pt")}
    elif case == "model_path_is_a_folder":
        raw["model"] = {**MLP, "path": str(tmp_path)}
    elif case == "input_mean_not_a_list":
        raw["model"] = {**MLP, "path": "m.pt", "input_mean": 5}
    elif case == "warehouse_wait":
        monkeypatch.setenv("AEQUUM_WAREHOUSE_WAIT", "abc")
    elif case == "memory_limit":
        monkeypatch.setenv("AEQUUM_DUCKDB_MEMORY_LIMIT", "lots")
    elif case == "workers":
        argv = ["--workers", "-1"]
    elif case == "lake_is_a_file":
        (tmp_path / "lakefile").write_text("x")
        argv = ["--lake", str(tmp_path / "lakefile")]
    elif case == "dead_prefect_api":
        monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{closed_port()}/api")
    elif case == "dead_dask_scheduler":
        argv = ["--dask-address", f"tcp://127.0.0.1:{closed_port()}"]
    elif case == "source_is_the_warehouse":
        with duckdb.connect(str(wh)) as con:
            con.execute("CREATE TABLE t AS SELECT 1 AS id")
        raw["source"] = {"kind": "duckdb", "path": str(wh), "table": "t", "id_column": "id"}
    elif case.startswith("counterfactual"):
        query = {"counterfactual_query_reads_a_file": f"SELECT * FROM read_csv('{loan_csv}')",
                 "counterfactual_query_copies": f"COPY t TO '{tmp_path / 'x.csv'}'"}.get(case)
        raw["scm"]["counterfactuals"] = ({"kind": "duckdb", "path": str(db), "query": query} if query
                                         else {"kind": "csv", "path": str(tmp_path / "nope.csv")})
    elif case == "modifying_cte":
        raw["source"] = {"kind": "duckdb", "path": str(db), "id_column": "id",
                         "query": "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d"}
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(raw))
    capsys.readouterr()
    code = main(["audit", "--spec", str(spec), "--warehouse", str(wh), "--lake", str(tmp_path / "lake"), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err, err
    if case != "input_mean_not_a_list":  # a spec's errors are listed one per line under its name
        assert len(err.strip().splitlines()) == 1, err
    if case != "source_is_the_warehouse":
        assert not wh.exists()
    with duckdb.connect(str(db)) as con:
        assert con.execute("SELECT count(*) FROM t").fetchall() == [(1,)]


def bad_rows_spec(tmp_path, loan_csv, keep_women: int, engines: list[str], bad_fraction: float = 0.95):
    """The loan records with every woman's salary but ``keep_women``'s made unreadable."""
    lines = loan_csv.read_text().splitlines()
    header = lines[0].replace('"', "").split(",")
    g, s = header.index("Gender"), header.index("AnnualSalary")
    out, women = [lines[0]], 0
    for line in lines[1:]:
        cells = line.split(",")
        if cells[g] == "1":
            women += 1
            if women > keep_women:
                cells[s] = "n/a"
        out.append(",".join(cells))
    (tmp_path / "bad.csv").write_text("\n".join(out) + "\n")
    raw = copy.deepcopy(LOAN)
    raw["source"] = {"kind": "csv", "path": str(tmp_path / "bad.csv"), "id_column": "id"}
    raw["engines"] = {"run": engines, "cst": {"k": [10]}}
    raw["ingest"] = {"max_bad_fraction": bad_fraction}
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(raw))
    return spec


@pytest.mark.prefect
def test_errors_found_inside_the_flow_are_one_line_and_the_run_failed(prefect_server, tmp_path, loan_csv, capfd):
    """All rows bad (the command line: exit 2, one line, no traceback); k larger than a group
    once the quarantined rows are gone (CST not run, recorded failed with the line; the other
    engines land)."""
    from aequum.flows.audit import audit_flow
    from aequum.flows.store.warehouse import Warehouse

    spec = bad_rows_spec(tmp_path, loan_csv, keep_women=5, engines=["outcome", "cst"])
    audit_flow(str(spec), warehouse=str(tmp_path / "wh.duckdb"), lake=str(tmp_path / "lake"), run_id="k")
    with Warehouse(tmp_path / "wh.duckdb", read_only=True) as wh:
        assert wh.run("k")["status"] == "partial"
        status = wh.engine_status("k")
    assert status["outcome"]["status"] == "succeeded" and status["cst"]["status"] == "failed"
    assert status["cst"]["error"] == ("not run: engines.cst.k needs at least 11 members in the protected group "
                                      "of 'gender'; the staged records (without the quarantined rows) have 5")
    spec = bad_rows_spec(tmp_path, loan_csv, keep_women=0, engines=["outcome"], bad_fraction=0.1)
    capfd.readouterr()
    code = main(["audit", "--spec", str(spec), "--warehouse", str(tmp_path / "wh.duckdb"),
                 "--lake", str(tmp_path / "lake"), "--run-id", "bad"])
    err = capfd.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.startswith("aequum: error:")] == [
        next(line for line in err.splitlines() if "failed validation, above ingest.max_bad_fraction" in line)]


@pytest.mark.prefect
def test_a_single_class_surrogate_skips_the_model_engines(prefect_server, tmp_path, loan_csv):
    from aequum.flows.audit import audit_flow
    from aequum.flows.store.warehouse import Warehouse

    lines = loan_csv.read_text().splitlines()
    (tmp_path / "d.csv").write_text("\n".join([lines[0] + ",flat", *(f"{ln},1" for ln in lines[1:])]) + "\n")
    raw = copy.deepcopy(LOAN)
    raw["source"] = {"kind": "csv", "path": str(tmp_path / "d.csv"), "id_column": "id"}
    raw["label"] = {"column": "flat", "positive": [1]}
    raw["model"] = {"kind": "surrogate", "target": "label", "features": ["AnnualSalary", "AccountBalance"],
                    "hidden": [4], "epochs": 2}
    raw["engines"] = {"run": ["outcome", "cst"], "cst": {"k": [5]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    audit_flow(str(tmp_path / "s.yaml"), warehouse=str(tmp_path / "wh.duckdb"), lake=str(tmp_path / "lake"), run_id="r")
    with Warehouse(tmp_path / "wh.duckdb", read_only=True) as wh:
        status = wh.engine_status("r")
        assert wh.run("r")["status"] == "partial"
    assert status["outcome"]["status"] == "succeeded"
    assert status["cst"]["status"] == "skipped" and "single class" in status["cst"]["error"]


def test_a_ragged_csv_line_is_a_source_error_naming_the_line(tmp_path, warehouse):
    from aequum.engines.core.spec import parse_spec
    from aequum.flows.store.readers import SourceError
    from aequum.flows.store.staging import stage

    rows = [f"{i},{'F' if i % 3 == 0 else 'M'},{100 + i},{i % 2}" for i in range(3000)]
    rows[2500] += ",secret,cells"
    (tmp_path / "d.csv").write_text("id,sex,income,y\n" + "\n".join(rows) + "\n")
    spec = parse_spec({"name": "r", "source": {"kind": "csv", "path": str(tmp_path / "d.csv"), "id_column": "id"},
                       "protected": [{"name": "sex", "column": "sex", "protected_values": ["F"],
                                      "reference_values": ["M"]}],
                       "decision": {"column": "y", "favourable": [1]}, "features": [{"name": "income"}]})
    with pytest.raises(SourceError, match=r"d.csv: .*Line: 2502 \(Expected Number of Columns: 4 Found: \d+\)") as err:
        stage(spec, tmp_path, warehouse, tmp_path / "lake", batch_rows=1000)
    assert "secret" not in str(err.value) and "\n" not in str(err.value)


@pytest.mark.prefect
@pytest.mark.parametrize("case, message", [("busy_warehouse", "is in use by another process"),
                                           ("parquet_of_other_types", "AnnualSalary")])
def test_a_busy_warehouse_and_a_parquet_of_other_types_are_one_line(prefect_server, tmp_path, loan_csv, capfd,
                                                                    monkeypatch, case, message):
    """Two errors that only the flow meets: the warehouse held by another process past
    AEQUUM_WAREHOUSE_WAIT, and a Parquet source whose column holds another type (lists where the
    spec reads a number). One line, exit 2, no traceback."""
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.csv as pv
    import pyarrow.parquet as pq

    raw = copy.deepcopy(LOAN)
    raw["source"] = {"kind": "csv", "path": str(loan_csv), "id_column": "id"}
    raw["engines"] = {"run": ["outcome"]}
    wh = tmp_path / "wh.duckdb"
    hold = None
    if case == "busy_warehouse":
        from aequum.flows.store.warehouse import Warehouse

        Warehouse(wh).close()
        monkeypatch.setenv("AEQUUM_WAREHOUSE_WAIT", "0.5")
        hold = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                                 "print('held', flush=True); time.sleep(60)", str(wh)], stdout=subprocess.PIPE, text=True)
        assert hold.stdout.readline().strip() == "held"
    else:
        table = pv.read_csv(loan_csv)
        salary = table.schema.get_field_index("AnnualSalary")
        table = table.set_column(salary, "AnnualSalary", pa.array([[v] for v in table["AnnualSalary"].to_pylist()]))
        pq.write_table(table, tmp_path / "loan.parquet")
        raw["source"] = {"kind": "parquet", "path": str(tmp_path / "loan.parquet"), "id_column": "id"}
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(raw))
    try:
        capfd.readouterr()
        code = main(["audit", "--spec", str(spec), "--warehouse", str(wh), "--lake", str(tmp_path / "lake")])
        err = capfd.readouterr().err
    finally:
        if hold is not None:
            hold.kill()
            hold.wait()
    assert code == 2 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("aequum: error:")]
    assert len(errors) == 1 and message in errors[0], err
