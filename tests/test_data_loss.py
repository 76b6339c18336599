"""No command destroys what aequum keeps: an output path is checked against the warehouse, the
lake and the sources before anything is written; a run id belongs to one spec; replacing a run
touches only aequum's own tables; a run id is a safe name wherever it enters."""
from __future__ import annotations

import copy
import hashlib
import os
import shutil

import pytest
import yaml

from conftest import REPO
from aequum.flows.commands.cli import main
from aequum.flows.store.guard import UsageError
from aequum.flows.store.warehouse import Warehouse, WarehouseError

LOAN = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())


@pytest.fixture
def wh_copy(small_audit_warehouse, tmp_path):
    path = tmp_path / "wh.duckdb"
    shutil.copy(small_audit_warehouse, path)
    return path


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_exit_2(argv, capsys, expect: str) -> None:
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert expect in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", ["show-csv", "show-parquet", "report", "report-symlink", "show-lake"])
def test_show_and_report_refuse_to_write_over_the_warehouse_or_into_the_lake(wh_copy, tmp_path, capsys, command):
    before = digest(wh_copy)
    target = wh_copy
    if command == "report-symlink":
        target = tmp_path / "innocent.html"
        os.symlink(wh_copy, target)
    if command == "show-lake":
        assert main(["ingest", "--spec", str(REPO / "data" / "specs" / "raguel_example.yaml"),
                     "--warehouse", str(wh_copy), "--lake", str(tmp_path / "lake")]) == 0
        before = digest(wh_copy)
        target = tmp_path / "lake" / "raguel_example" / "out.csv"  # the lake a dataset was staged to
    argv = {"show-csv": ["show", "outcome_gaps", "--format", "csv"],
            "show-parquet": ["show", "outcome_gaps", "--format", "parquet"],
            "show-lake": ["show", "outcome_gaps", "--format", "csv"]}.get(command, ["report"])
    expect = "inside the lake" if command == "show-lake" else "is the warehouse"
    one_line_exit_2([*argv, "--warehouse", str(wh_copy), "--out", str(target)], capsys, expect)
    assert digest(wh_copy) == before
    with Warehouse(wh_copy, read_only=True) as wh:
        assert wh.run("loan-small")["status"] == "succeeded"


def test_show_and_report_refuse_to_write_over_a_source_the_warehouse_was_staged_from(wh_copy, tmp_path, capsys):
    """The warehouse records the files each dataset version was read from (audit.datasets.
    source_files): show and report never write there."""
    import shutil

    source = tmp_path / "raguel.csv"
    shutil.copy(REPO / "data" / "examples" / "raguel_example1.csv", source)
    raw = yaml.safe_load((REPO / "data" / "specs" / "raguel_example.yaml").read_text())
    raw["source"]["path"] = str(source)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert main(["ingest", "--spec", str(tmp_path / "s.yaml"), "--warehouse", str(wh_copy),
                 "--lake", str(tmp_path / "lake")]) == 0
    before = source.read_bytes()
    for argv in (["show", "outcome_gaps", "--format", "csv"], ["report"]):
        one_line_exit_2([*argv, "--warehouse", str(wh_copy), "--out", str(source)], capsys, "is read by the audit")
    assert source.read_bytes() == before


def test_any_duckdb_database_is_refused_as_an_output(wh_copy, tmp_path, capsys):
    other = tmp_path / "other.duckdb"
    Warehouse(other).close()
    one_line_exit_2(["report", "--warehouse", str(wh_copy), "--out", str(other)], capsys, "is a DuckDB database")


def test_audit_report_path_and_run_id_are_checked_before_prefect(tmp_path, capsys, monkeypatch):
    import aequum.flows.commands.cli as cli

    monkeypatch.setattr(cli, "_prefect_env", lambda: (_ for _ in ()).throw(AssertionError("Prefect started")))
    raw = copy.deepcopy(LOAN)
    raw["source"]["rows"] = 200
    raw["engines"] = {"run": ["outcome"]}
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(raw))
    wh = tmp_path / "wh.duckdb"
    with Warehouse(wh) as w:
        w.start_run("shared", "another_spec", "h", "0", {})
    base = ["audit", "--spec", str(spec), "--warehouse", str(wh), "--lake", str(tmp_path / "lake")]
    one_line_exit_2([*base, "--report", str(wh)], capsys, "is the warehouse")
    one_line_exit_2([*base, "--report", str(spec)], capsys, "is read by the audit")
    one_line_exit_2([*base, "--run-id", "shared"], capsys, "run id 'shared' is a run of spec 'another_spec'")
    one_line_exit_2([*base, "--run-id", "../../etc/x"], capsys, "--run-id: run id '../../etc/x' must be")


def test_a_run_id_of_another_spec_is_refused_and_its_rows_kept(warehouse):
    import pyarrow as pa

    schema = pa.schema([("x", pa.int64())])
    warehouse.start_run("shared", "first", "h1", "0", {})
    warehouse.write_results("shared", {"t_first": (schema, pa.table({"x": [1, 2]}))})
    with pytest.raises(WarehouseError, match="run of spec 'first'.*spec 'second'"):
        warehouse.start_run("shared", "second", "h2", "0", {})
    assert warehouse.run("shared")["spec_name"] == "first"
    assert warehouse.result("t_first", "shared").num_rows == 2
    warehouse.start_run("shared", "first", "h3", "0", {})  # the same spec replaces its own run


def test_replacing_a_run_leaves_a_users_own_tables_alone(warehouse):
    import pyarrow as pa

    schema = pa.schema([("x", pa.int64())])
    warehouse.con.execute("CREATE TABLE audit.notes (run_id VARCHAR, note VARCHAR)")
    warehouse.con.execute("INSERT INTO audit.notes VALUES ('r', 'my notes on run r')")
    warehouse.start_run("r", "s", "h", "0", {})
    warehouse.write_results("r", {"t_result": (schema, pa.table({"x": [1]}))})
    warehouse.write_results("r", {"t_result": (schema, pa.table({"x": [2, 3]}))})  # replaced
    assert warehouse.result("t_result", "r")["x"].to_pylist() == [2, 3]
    assert warehouse.con.execute("SELECT note FROM audit.notes").fetchall() == [("my notes on run r",)]
    with warehouse.transaction():
        warehouse.purge_run("r")
    assert warehouse.result("t_result", "r").num_rows == 0
    assert warehouse.con.execute("SELECT count(*) FROM audit.notes").fetchall() == [(1,)]


def test_a_result_table_written_before_the_registry_is_still_replaced(tmp_path):
    """A warehouse whose result tables predate audit.aequum_tables: the tables its engines
    recorded writing are registered when it is opened."""
    import duckdb

    path = tmp_path / "old.duckdb"
    with Warehouse(path) as wh:
        wh.con.execute("CREATE TABLE audit.cst_claims (run_id VARCHAR, x INTEGER)")
        wh.con.execute("INSERT INTO audit.cst_claims VALUES ('r', 1)")
        wh.record_engine("r", "cst", "succeeded", 1.0, 1, {"cst_claims": 1}, None)
        wh.con.execute("DELETE FROM audit.aequum_tables WHERE table_name = 'cst_claims'")
    with duckdb.connect(str(path)) as con:
        assert con.execute("SELECT count(*) FROM audit.aequum_tables WHERE table_name = 'cst_claims'").fetchall() == [(0,)]
    with Warehouse(path) as wh, wh.transaction():
        wh.purge_run("r")
        assert wh.result("cst_claims", "r").num_rows == 0


@pytest.mark.parametrize("run_id", ["../x", "a/b", "", ".hidden", "-rf", "a b", "x" * 129, "r\n1"])
def test_unsafe_run_ids_are_refused_where_they_enter(warehouse, tmp_path, capsys, run_id):
    with pytest.raises(UsageError, match="must be 1-128 letters"):
        warehouse.start_run(run_id, "s", "h", "0", {})
    assert warehouse.runs().num_rows == 0
    if run_id and not run_id.startswith("-"):  # argparse takes "-rf" for an option
        one_line_exit_2(["report", run_id, "--warehouse", str(tmp_path / "wh.duckdb")], capsys, "must be 1-128")
        one_line_exit_2(["show", "--run-id", run_id, "--warehouse", str(tmp_path / "wh.duckdb")], capsys, "must be")


@pytest.mark.prefect
def test_a_disk_that_cannot_take_even_the_run_record_leaves_the_run_failed(prefect_server, tmp_path, monkeypatch):
    """The results' write fails (a full disk) and so does every write after it: the run is
    failed, not running, with none of its rows."""
    import duckdb

    from aequum.flows import audit
    from test_integrity import loan_spec, run_rows

    def full(*_args, **_kwargs):
        raise duckdb.IOException("IO Error: Could not write file: No space left on device")

    monkeypatch.setattr(Warehouse, "insert_run_rows", full)
    monkeypatch.setattr(audit, "close_failed_run", full)
    wh = tmp_path / "wh.duckdb"
    with pytest.raises(WarehouseError, match="could not write the results of run r"):
        audit.audit_flow(str(loan_spec(tmp_path, ["outcome"])), warehouse=str(wh), lake=str(tmp_path / "lake"),
                         run_id="r")
    with Warehouse(wh, read_only=True) as w:
        run = w.run("r")
    assert run["status"] == "failed" and run["error"] == "writing the results did not complete"
    assert not any(run_rows(wh, "r").values())
