"""Integrity and operations (issue 13): no spec can damage the warehouse, a run is exactly what
it says, a dead process leaves nothing behind, and user errors arrive before Prefect starts."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import yaml

from conftest import REPO
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.flows.commands.cli import main
from aequum.flows.store.staging import stage
from aequum.flows.store.warehouse import Warehouse, WarehouseError, this_process

LOAN = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())


def loan_spec(tmp_path: Path, engines: list[str], rows: int = 300, **cst) -> Path:
    raw = copy.deepcopy(LOAN)
    raw["source"]["rows"] = rows
    raw["engines"] = {"run": engines, "cst": {"k": [5], **cst}}
    path = tmp_path / "loan.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def small_csv_spec(tmp_path: Path, id_column: str | None = "id", sex_values=(["F"], ["M"]),
                   extra_rows=()):
    """A 40-row CSV (id, sex, income, y) and its spec."""
    numeric = isinstance(sex_values[0][0], int)
    rows = [f"{i},{(1 if i % 3 == 0 else 0) if numeric else ('F' if i % 3 == 0 else 'M')},"
            f"{100 + 7 * i},{int(i % 4 < 2)}" for i in range(40)]
    (tmp_path / "d.csv").write_text("\n".join(["id,sex,income,y", *rows, *extra_rows]) + "\n")
    return parse_spec({
        "name": "small", "source": {"kind": "csv", "path": str(tmp_path / "d.csv"), "id_column": id_column},
        "protected": [{"name": "sex", "column": "sex", "protected_values": sex_values[0],
                       "reference_values": sex_values[1]}],
        "decision": {"column": "y", "favourable": [1]},
        "features": [{"name": "income"}], "ingest": {"max_bad_fraction": 0.5}})


def run_rows(wh_path, run_id: str) -> dict[str, int]:
    """Rows per audit table for one run (tables that hold rows per run)."""
    with Warehouse(wh_path, read_only=True) as wh:
        names = wh.query("run_tables")["table_name"].to_pylist()
        return {n: wh.con.execute(f"SELECT count(*) FROM audit.{n} WHERE run_id = $r",
                                  {"r": run_id}).fetchall()[0][0] for n in names}


# -- a run is exactly what it says -------------------------------------------------------------

@pytest.mark.prefect
def test_replacing_a_run_leaves_none_of_its_old_rows(prefect_server, tmp_path):
    """Re-using a run_id with fewer engines, with a failing engine, or with a staging failure:
    every table keeps only what the latest attempt wrote."""
    from aequum.flows.audit import audit_flow

    wh, lake = str(tmp_path / "wh.duckdb"), str(tmp_path / "lake")
    spec = loan_spec(tmp_path, ["outcome", "cst"])
    audit_flow(str(spec), warehouse=wh, lake=lake, run_id="r")
    first = run_rows(wh, "r")
    assert first["cst_claims"] > 0 and first["outcome_gaps"] > 0 and first["run_engines"] == 2

    audit_flow(str(spec), warehouse=wh, lake=lake, run_id="r", engines=["outcome"])
    fewer = run_rows(wh, "r")
    assert fewer["cst_claims"] == fewer["cst_summary"] == 0 and fewer["outcome_gaps"] == first["outcome_gaps"]
    assert fewer["run_engines"] == 1

    audit_flow(str(spec), warehouse=wh, lake=lake, run_id="r")  # both again
    failing = loan_spec(tmp_path, ["outcome", "cst"], features=["AnnualSalary"], max_distance=1e-300)
    raw = yaml.safe_load(failing.read_text())
    raw["engines"]["cst"] = {"k": [100000]}  # no group has that many members: CST fails
    failing.write_text(yaml.safe_dump(raw))
    audit_flow(str(failing), warehouse=wh, lake=lake, run_id="r")
    with Warehouse(wh, read_only=True) as w:
        assert w.run("r")["status"] == "partial"
        assert w.engine_status("r")["cst"]["status"] == "failed"
    after_fail = run_rows(wh, "r")
    assert after_fail["cst_claims"] == 0 and after_fail["outcome_gaps"] > 0

    raw["ingest"] = {"max_bad_fraction": 0.0}
    raw["features"][0]["range"] = [0, 1]  # every row out of range: staging fails
    failing.write_text(yaml.safe_dump(raw))
    with pytest.raises(Exception, match="failed validation"):
        audit_flow(str(failing), warehouse=wh, lake=lake, run_id="r")
    with Warehouse(wh, read_only=True) as w:
        assert w.run("r")["status"] == "failed"
    assert not any(run_rows(wh, "r").values())


@pytest.mark.prefect
def test_the_warehouse_is_free_while_engines_run(prefect_server, tmp_path, monkeypatch):
    """The audit holds no warehouse connection between staging and the result write: another
    connection (here a read-only one, as a BI tool or `aequum runs` opens) gets in."""
    import aequum.flows.audit as audit

    wh = tmp_path / "wh.duckdb"
    seen = []
    prepare = audit.prepare_model  # the model step, between staging and the engines (it fits no
                                   # model for the outcome engine alone, but always runs)

    def prepare_and_peek(*args, **kwargs):
        with Warehouse(wh, read_only=True, wait=0) as reader:
            seen.append(reader.run("r")["status"])
        return prepare(*args, **kwargs)

    monkeypatch.setattr(audit, "prepare_model", prepare_and_peek)
    audit.audit_flow(str(loan_spec(tmp_path, ["outcome"])), warehouse=str(wh),
                     lake=str(tmp_path / "lake"), run_id="r")
    assert seen == ["running"]


@pytest.mark.prefect
def test_a_failed_result_write_leaves_nothing_and_says_why(prefect_server, tmp_path, monkeypatch):
    """Disk full at commit: one clear error naming the file, the run recorded as failed, and
    no result rows of it."""
    from aequum.flows.audit import audit_flow

    def full(*_args, **_kwargs):
        raise duckdb.IOException("IO Error: Could not write file: No space left on device")

    monkeypatch.setattr(Warehouse, "insert_run_rows", full)
    wh = tmp_path / "wh.duckdb"
    with pytest.raises(WarehouseError, match=r"could not write the results of run r .*No space left"):
        audit_flow(str(loan_spec(tmp_path, ["outcome"])), warehouse=str(wh),
                   lake=str(tmp_path / "lake"), run_id="r")
    with Warehouse(wh, read_only=True) as w:
        run = w.run("r")
    assert run["status"] == "failed" and "No space left" in run["error"]
    assert not any(run_rows(wh, "r").values())


# -- what a dead process leaves behind ----------------------------------------------------------

def test_runs_of_dead_processes_are_abandoned_and_orphans_dropped(tmp_path):
    path = tmp_path / "wh.duckdb"
    with Warehouse(path) as wh:
        wh.start_run("alive", "s", "h", "v", {})
        wh.start_run("dead", "s", "h", "v", {})
        wh.write_results("dead", {"cst_claims": (pa.schema([("x", pa.int64())]), pa.table({"x": [1, 2]}))})
        gone = dead_pid()
        wh.con.execute("UPDATE audit.runs SET pid = $p WHERE run_id = 'dead'", {"p": gone})
        me = this_process()
        wh.con.execute(f"CREATE TABLE staging.incoming_{gone}_123_abc AS SELECT 1 AS x")
        live = f"incoming_{me['pid']}_{int(me['pid_started'] * 1000)}_def"
        wh.con.execute(f"CREATE TABLE staging.{live} AS SELECT 1 AS x")
    with Warehouse(path) as wh:  # the next writer cleans up
        assert wh.run("dead")["status"] == "abandoned" and "ended" in wh.run("dead")["error"]
        assert wh.run("alive")["status"] == "running"
        assert wh.result("cst_claims", "dead").num_rows == 0
        tables = [r[0] for r in wh.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'staging'").fetchall()]
        assert tables == [live]


def test_an_ingest_removes_only_dead_processes_temporary_lake_folders(tmp_path, warehouse):
    spec = small_csv_spec(tmp_path)
    spec_lake = tmp_path / "lake" / spec.name
    spec_lake.mkdir(parents=True)
    mine = spec_lake / f".abc.{os.getpid()}.11111111.tmp"  # another ingest of this process
    orphan = spec_lake / f".abc.{dead_pid()}.22222222.tmp"
    results = spec_lake / f".results.{dead_pid()}.33333333.tmp"  # an audit's spooled results
    for folder in (mine, orphan, results):
        folder.mkdir()
    stage(spec, tmp_path, warehouse, tmp_path / "lake")
    assert mine.exists() and not orphan.exists() and not results.exists()


# -- dataset versions are reused only when verifiably the same -----------------------------------

def test_row_number_ids_make_row_order_part_of_the_version(tmp_path, warehouse):
    spec = small_csv_spec(tmp_path, id_column=None)
    first = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    lines = (tmp_path / "d.csv").read_text().splitlines()
    (tmp_path / "d.csv").write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")
    reordered = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    assert reordered.version != first.version and not reordered.reused
    # with ids of their own, the order of the records does not matter
    spec_ids = small_csv_spec(tmp_path, id_column="id")
    a = stage(spec_ids, tmp_path, warehouse, tmp_path / "lake")
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    b = stage(spec_ids, tmp_path, warehouse, tmp_path / "lake")
    assert a.version == b.version and b.reused


def test_a_version_whose_lake_is_gone_is_staged_again_with_an_absolute_path(tmp_path, warehouse, monkeypatch):
    import shutil

    monkeypatch.chdir(tmp_path)
    spec = small_csv_spec(tmp_path)
    first = stage(spec, tmp_path, warehouse, Path("lake"))  # a relative lake root
    assert Path(first.lake_path).is_absolute() and Path(first.lake_path).is_dir()
    assert warehouse.dataset(first.version)["lake_path"] == first.lake_path
    shutil.rmtree(first.lake_path)
    again = stage(spec, tmp_path, warehouse, Path("lake"))
    assert again.version == first.version and not again.reused and Path(again.lake_path).is_dir()
    assert stage(spec, tmp_path, warehouse, Path("lake")).reused
    warehouse.con.execute(f"DELETE FROM {first.staged_table} WHERE _row = 0")  # half a table
    assert not stage(spec, tmp_path, warehouse, Path("lake")).reused


# -- values outside the declared sets -----------------------------------------------------------

def test_text_values_in_a_numeric_protected_column_are_rejected_or_excluded(tmp_path, warehouse):
    spec = small_csv_spec(tmp_path, sex_values=([1], [0]), extra_rows=["90,female,50,1", "91,NA,60,0"])
    ref = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    bad = warehouse.con.execute("SELECT record_id, field, value FROM audit.quarantine ORDER BY record_id").fetchall()
    assert bad == [("90", "sex", "female"), ("91", "sex", "NA")]
    assert ref.rows_quarantined == 2
    raw = spec.model_dump(mode="json")
    raw["protected"][0]["unmapped"] = "exclude"
    ref = stage(parse_spec(raw), tmp_path, warehouse, tmp_path / "lake")
    groups = warehouse.staged(ref.version)["_g_sex"].to_pylist()
    assert ref.rows_quarantined == 0 and groups.count(None) == 2


@pytest.mark.parametrize("section, lists", [
    ("protected", {"protected_values": [1], "reference_values": [0, 1.0]}),
    ("protected", {"protected_values": ["1"], "reference_values": [1]}),
    ("decision", {"favourable": [1], "unfavourable": [0, "1.0"]}),
    ("decision", {"favourable": ["A"], "out_of_scope": [" A"]}),
    ("label", {"positive": [1], "negative": [1.0]}),
])
def test_the_same_value_in_two_lists_is_an_overlap(section, lists):
    raw = {"name": "t", "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
           "protected": [{"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]}],
           "decision": {"column": "y", "favourable": [1]}, "label": {"column": "l", "positive": [1]},
           "features": [{"name": "income"}]}
    target = raw["protected"][0] if section == "protected" else raw[section]
    target.update(lists)
    with pytest.raises(SpecError, match="is both"):
        parse_spec(raw)


# -- errors a user can act on, before Prefect starts --------------------------------------------

@pytest.fixture
def no_prefect(monkeypatch):
    """Fail the test if the CLI gets as far as starting Prefect."""
    import aequum.flows.commands.cli as cli

    def refuse():
        raise AssertionError("Prefect was started before the user error was found")

    monkeypatch.setattr(cli, "_prefect_env", refuse)


@pytest.mark.parametrize("case, message", [
    ("missing_column", "source lacks column(s) named in the spec: 'Ghost'"),
    ("wrong_delimiter", "it reads as 1 column(s): check source.path and source.delimiter"),
    ("directory", "is a directory"),
    ("not_a_csv", "none of the spec's columns"),
    ("binary", "is not a delimited text file"),
    ("unknown_engine", "engines.run: unknown engine(s) ['csst']"),
    ("no_engines", "engines.run"),
    ("cst_feature_typo", "engines.cst.features: ['AnualSalary']"),
    ("engines_flag", "--engines: unknown engine(s) ['outcom']"),
])
def test_user_errors_exit_2_with_one_line_before_prefect(tmp_path, capsys, no_prefect, case, message):
    csv = tmp_path / "loan.csv"
    assert main(["generate", "loan", "--rows", "50", "--format", "csv", "--out", str(csv)]) == 0
    raw = copy.deepcopy(LOAN)
    raw["source"] = {"kind": "csv", "path": str(csv), "id_column": "id"}
    raw["engines"] = {"run": ["outcome"]}
    argv = []
    if case == "missing_column":
        raw["features"].append({"name": "Ghost"})
    elif case == "wrong_delimiter":
        raw["source"]["delimiter"] = ";"
    elif case == "directory":
        raw["source"]["path"] = str(tmp_path)
    elif case == "not_a_csv":
        (tmp_path / "secret.txt").write_text("password=hunter2\nsecond line\n")
        raw["source"]["path"] = str(tmp_path / "secret.txt")
    elif case == "binary":
        (tmp_path / "blob.bin").write_bytes(b"\x00\x01secret\x00" * 100)
        raw["source"]["path"] = str(tmp_path / "blob.bin")
    elif case == "unknown_engine":
        raw["engines"]["run"] = ["csst"]
    elif case == "no_engines":
        raw["engines"]["run"] = []
    elif case == "cst_feature_typo":
        raw["engines"] = {"run": ["cst"], "cst": {"features": ["AnualSalary"]}}
    elif case == "engines_flag":
        argv = ["--engines", "outcom"]
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(raw))
    capsys.readouterr()
    code = main(["audit", "--spec", str(spec), "--warehouse", str(tmp_path / "wh.duckdb"),
                 "--lake", str(tmp_path / "lake"), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert "hunter2" not in err and "secret" not in err.replace(str(tmp_path), "")
    assert not (tmp_path / "wh.duckdb").exists()


# -- the warehouse is shared, and readable by standard tools ------------------------------------

def test_openers_wait_for_a_busy_warehouse_then_say_who_holds_it(tmp_path, capsys):
    path = tmp_path / "wh.duckdb"
    Warehouse(path).close()
    hold = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                             "print('held', flush=True); time.sleep(float(sys.argv[2]))", str(path), "3"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout.readline().strip() == "held"
        with pytest.raises(WarehouseError, match=r"in use by another process .*PID \d+.*stayed busy"):
            Warehouse(path, read_only=True, wait=0.3)
        assert main(["runs", "--warehouse", str(path), "--wait", "0.3"]) == 2
        err = capsys.readouterr().err
        assert "is in use by" in err and "waiting up to 0.3 s" in err and "Traceback" not in err
        with Warehouse(path, read_only=True, wait=30) as wh:  # waits for the holder to finish
            assert "runs" in wh.table_names()
    finally:
        hold.kill()
        hold.wait()


def test_the_warehouse_file_opens_in_duckdb_1x(tmp_path):
    """New warehouse files are written in the DuckDB 1.0 storage format, which every 1.x release
    reads (the DuckDB 2 default, format 69, is refused by them). .ci/setup installs DuckDB 1.5
    beside the project's DuckDB for this check."""
    duckdb1 = REPO / ".venv" / "duckdb-1.x"
    path = tmp_path / "wh.duckdb"
    with Warehouse(path) as wh:
        wh.start_run("r", "s", "h", "v", {})
        wh.write_results("r", {"cst_claims": (pa.schema([("x", pa.int64())]), pa.table({"x": [7]}))})
        assert wh.storage_version == "v1.0.0+"
        # a staged table with row numbers as ids: its `_id` is a virtual column (flows.store.staging)
        ref = stage(small_csv_spec(tmp_path, id_column=None), tmp_path, wh, tmp_path / "lake")
    if not (duckdb1 / "duckdb").is_dir():
        pytest.skip(f"DuckDB 1.x is not installed at {duckdb1} (.ci/setup installs it)")
    probe = ("import duckdb, sys; assert duckdb.__version__.startswith('1.'), duckdb.__version__; "
             "c = duckdb.connect(sys.argv[1], read_only=True); "
             "print(duckdb.__version__, c.sql('SELECT x FROM audit.cst_claims').fetchall(), "
             "c.sql('SELECT status FROM audit.runs').fetchall(), "
             "c.sql(f'SELECT _id, _row FROM {sys.argv[2]} ORDER BY _row LIMIT 2').fetchall())")
    out = subprocess.run([sys.executable, "-c", probe, str(path), ref.staged_table], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(duckdb1)}, check=True).stdout
    assert "[(7,)] [('running',)] [('0', 0), ('1', 1)]" in out


# -- a model worth auditing (issue 16) ----------------------------------------------------------

@pytest.mark.prefect
def test_a_degenerate_surrogate_stops_the_model_engines_and_its_quality_is_stored(prefect_server, tmp_path):
    """Decisions that the features cannot explain: the surrogate's balanced accuracy is near
    0.5, CST (which re-decides counterfactuals with it) is skipped with the reason, outcome
    metrics still land, and the model's quality per group is in audit.model_quality."""
    from aequum.flows.audit import audit_flow

    raw = copy.deepcopy(LOAN)
    raw["source"]["rows"] = 600
    raw["model"] = {"kind": "surrogate", "target": "label", "features": ["AnnualSalary", "AccountBalance"],
                    "hidden": [8], "epochs": 5}
    raw["label"] = {"column": "u1_coin", "positive": [1]}
    raw["engines"] = {"run": ["outcome", "cst"], "cst": {"k": [5]}}
    csv = tmp_path / "loan.csv"
    assert main(["generate", "loan", "--rows", "600", "--format", "csv", "--out", str(csv)]) == 0
    lines = csv.read_text().splitlines()
    coins = [int(c) for c in (np.random.default_rng(0).random(len(lines) - 1) < 0.5)]
    csv.write_text("\n".join([lines[0] + ",u1_coin", *(f"{ln},{c}" for ln, c in zip(lines[1:], coins))]) + "\n")
    raw["source"] = {"kind": "csv", "path": str(csv), "id_column": "id"}
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(raw))
    wh = tmp_path / "wh.duckdb"
    audit_flow(str(spec), warehouse=str(wh), lake=str(tmp_path / "lake"), run_id="r")
    with Warehouse(wh, read_only=True) as w:
        status = w.engine_status("r")
        assert status["outcome"]["status"] == "succeeded"
        assert status["cst"]["status"] == "skipped" and "balanced accuracy" in status["cst"]["error"]
        assert w.run("r")["status"] == "partial"
        quality = w.result("model_quality", "r").to_pylist()
    splits = {(q["attribute"], q["group_name"], q["split"]): q for q in quality}
    assert splits[("all", "all", "holdout")]["balanced_accuracy"] < 0.6
    assert splits[("all", "all", "all")]["n"] == 600
    assert {k[:2] for k in splits} >= {("gender", "protected"), ("gender", "reference")}


def test_an_unchanged_source_is_reused_without_reading_it(tmp_path, warehouse, monkeypatch):
    """Issue 16: an audit of a dataset that is already staged does not re-read and re-validate
    the whole source to find that out: same files (path, size, modification time) under the
    same record contract are reused at once; a touched file is read and fingerprinted again."""
    import aequum.flows.store.staging as staging

    spec = small_csv_spec(tmp_path)
    first = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    reads = []
    real_open = staging.open_source
    monkeypatch.setattr(staging, "open_source", lambda *a, **k: reads.append(1) or real_open(*a, **k))
    again = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    assert again.reused and again.version == first.version and again.rows_staged == first.rows_staged
    assert reads == []
    os.utime(tmp_path / "d.csv", ns=(1, 1))  # same bytes, another modification time
    touched = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    assert reads == [1] and touched.reused and touched.version == first.version
    raw = spec.model_dump(mode="json")
    raw["ingest"]["reuse_unchanged_files"] = False
    stage(parse_spec(raw), tmp_path, warehouse, tmp_path / "lake")
    assert reads == [1, 1]
    raw["ingest"]["reuse_unchanged_files"] = True
    raw["features"][0]["range"] = [0, 10_000]  # another record contract: staged anew
    other = stage(parse_spec(raw), tmp_path, warehouse, tmp_path / "lake")
    assert reads == [1, 1, 1] and other.version != first.version


def test_k_larger_than_a_group_is_found_before_prefect(tmp_path, capsys, no_prefect):
    """Issue 13: engine parameters that need groups of some size (CST's k) are checked against
    the source's groups before Prefect starts, naming the parameter, group and sizes."""
    csv = tmp_path / "loan.csv"
    assert main(["generate", "loan", "--rows", "300", "--format", "csv", "--out", str(csv)]) == 0
    raw = copy.deepcopy(LOAN)
    raw["source"] = {"kind": "csv", "path": str(csv), "id_column": "id"}
    raw["engines"] = {"run": ["outcome", "cst"], "cst": {"k": [15, 500]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    capsys.readouterr()
    code = main(["audit", "--spec", str(tmp_path / "s.yaml"), "--warehouse", str(tmp_path / "wh.duckdb")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "engines.cst.k needs at least 501 members in the protected group of 'gender'; the source has" in err
    assert not (tmp_path / "wh.duckdb").exists()
    # --engines without cst: nothing to check
    raw["engines"]["run"] = ["outcome"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    from aequum.flows.preflight import preflight

    assert preflight(tmp_path / "s.yaml").name == "loan"


def test_group_sizes_stop_reading_once_every_group_is_large_enough():
    """A large source costs one batch: counting stops when every unit has what it needs."""
    from aequum.engines.core.validation import group_sizes

    spec = parse_spec({**copy.deepcopy(LOAN), "engines": {"run": ["outcome"]}})
    batch = pa.table({"Gender": pa.array([1, 0, 0, 1, 0] * 20)})

    def stream():
        yield batch
        raise AssertionError("read past the first batch")

    assert group_sizes(stream(), spec, [["gender"]], {"gender": (30, 50)}) == {"gender": (40, 60)}
    assert group_sizes(iter([batch, batch]), spec, [["gender"]], {"gender": (50, 50)}) == {"gender": (80, 120)}


def test_group_sizes_count_per_value_comparisons_of_one_column():
    """`compare: both` expands an attribute into several that read the same column (the HMDA
    spec's races): the column is prepared once and each expanded attribute counted."""
    from aequum.engines.core.validation import group_sizes

    raw = copy.deepcopy(LOAN)
    raw.pop("scm", None)
    raw["protected"] = [{"name": "g", "column": "G", "protected_values": [1, 2], "reference_values": [0],
                         "compare": "both"}]
    spec = parse_spec({**raw, "engines": {"run": ["outcome"]}})
    batch = pa.table({"G": pa.array([1, 2, 2, 0, 0, 0, 3])})
    units = [[p.name] for p in spec.protected]
    assert group_sizes(iter([batch]), spec, units, {}) == {"g": (3, 3), "g=1": (1, 3), "g=2": (2, 3)}


def test_engine_pieces_report_their_progress(tmp_path):
    """Issue 16: a long engine says how many of its pieces are done (here every piece, with a
    zero interval), serially as on a cluster."""
    from aequum.flows.engine_tasks import Progress

    said = []
    progress = Progress("cst", said.append, every=3600)
    for done in range(1, 5):
        progress(done, 4)
    assert len(said) == 1 and said[0].startswith("engine cst: 4/4 pieces done, ")  # nothing between, the end always
    progress = Progress("cst", said.append, every=0)
    progress(1, 4)
    assert said[-1].startswith("engine cst: 1/4 pieces done, ") and " elapsed, about " in said[-1]
