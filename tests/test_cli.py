"""The command line: clean one-line errors for user mistakes, generate/ingest/runs/show work."""
from __future__ import annotations

import subprocess
import sys

import yaml
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from aequum.flows.commands.cli import main
from aequum.flows.store.warehouse import Warehouse


def test_generate_ingest_runs_show(tmp_path, capsys):
    out = tmp_path / "loan.parquet"
    assert main(["generate", "loan", "--rows", "500", "--out", str(out)]) == 0
    assert pq.read_metadata(out).num_rows == 500
    spec = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    spec["source"] = {"kind": "parquet", "path": str(out), "id_column": "id"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    wh = str(tmp_path / "wh.duckdb")
    assert main(["ingest", "--spec", str(tmp_path / "s.yaml"), "--warehouse", wh,
                 "--lake", str(tmp_path / "lake")]) == 0
    assert "500 rows staged" in capsys.readouterr().out
    assert main(["runs", "--warehouse", wh]) == 0


def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsource: {kind: csv}\n")
    assert main(["ingest", "--spec", str(bad), "--warehouse", str(tmp_path / "w.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aequum: error: invalid audit spec") and "Traceback" not in err
    assert main(["runs", "--warehouse", str(tmp_path / "none.duckdb")]) == 2
    assert "no warehouse" in capsys.readouterr().err
    assert main(["ingest", "--spec", str(tmp_path / "missing.yaml")]) == 2


def test_show_names_unknown_tables(tmp_path, capsys):
    from aequum.flows.store.warehouse import Warehouse

    Warehouse(tmp_path / "w.duckdb").close()
    assert main(["show", "nope", "--warehouse", str(tmp_path / "w.duckdb")]) == 2
    assert "no table audit.nope" in capsys.readouterr().err


@pytest.mark.parametrize("table, writer", [("cec_training", "`aequum train --spec SPEC` writes it"),
                                           ("cec_lambda_search", "`aequum train --spec SPEC` writes it"),
                                           ("pba_summary", "the 'pba' engine writes it"),
                                           ("reason_consistency", "the 'reasons' engine writes it"),
                                           ("detection", "a run whose source has a ground truth writes it")])
def test_show_of_a_table_not_written_yet_names_what_writes_it(tmp_path, capsys, table, writer):
    """A table the README names but no run has written yet (an engine's first run, or
    `aequum train`, creates it) is one line saying what writes it, exit 2."""
    Warehouse(tmp_path / "w.duckdb").close()
    assert main(["show", table, "--warehouse", str(tmp_path / "w.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aequum: error: no table audit.{table} yet: {writer}") and "Traceback" not in err
    assert err.count("\n") == 1


def test_prefect_yaml_deployments_point_at_real_flows():
    from prefect.flows import load_flow_from_entrypoint

    conf = yaml.safe_load((REPO / "prefect.yaml").read_text())
    assert conf["deployments"]
    for dep in conf["deployments"]:
        flow = load_flow_from_entrypoint(str(REPO / dep["entrypoint"]))
        flow.validate_parameters(dep["parameters"])
        assert (REPO / dep["parameters"]["spec_path"]).exists()
        assert dep["schedules"][0]["cron"]


def test_missing_model_file_is_a_user_error(tmp_path, capsys, monkeypatch):
    spec = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    spec["model"] = {"kind": "mlp", "features": ["AnnualSalary", "AccountBalance"], "path": "none.pt",
                     "hidden": [4]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    from aequum.flows.model_step import fit_model
    from aequum.engines.core.models import ModelError
    from aequum.engines.core.spec import load_spec

    with pytest.raises(ModelError, match="not found"):
        fit_model(load_spec(tmp_path / "s.yaml"), tmp_path, None, {})


def test_surrogate_for_decisions_fits_the_recorded_ones(staged_data, tmp_path):
    spec = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    spec["model"] = {"kind": "surrogate", "target": "decision", "use_for_decisions": True,
                     "features": ["AnnualSalary", "AccountBalance"], "hidden": [8], "epochs": 200}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    data = staged_data(tmp_path / "s.yaml")
    recorded = data.table["_decision"].to_numpy()
    assert data.model.fidelity["train"] > 0.9
    assert (data.decision == recorded).mean() > 0.9


def test_the_command_exits_with_mains_code_and_all_its_output(tmp_path):
    """``aequum`` as a process (``program``: ends by ``os._exit`` after the exit handlers):
    the exit code is main's, output to a pipe (held in Python's buffer until flushed) arrives,
    a warehouse it wrote opens with what it wrote, and an exception escaping main still exits
    1 with its traceback."""
    import subprocess
    import sys

    def aequum(*args: str, code: str = "from aequum.flows.commands.cli import program; program()"):
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)

    out = tmp_path / "loan.csv"
    done = aequum("generate", "loan", "--rows", "3000", "--out", str(out), "--format", "csv")
    assert done.returncode == 0 and done.stdout.strip() == str(out), done.stderr[-2000:]
    spec = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    spec["source"] = {"kind": "csv", "path": str(out), "id_column": "id"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    wh = str(tmp_path / "wh.duckdb")
    done = aequum("ingest", "--spec", str(tmp_path / "s.yaml"), "--warehouse", wh, "--lake", str(tmp_path / "lake"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3,000 rows staged" in done.stdout and "warehouse:" in done.stdout.splitlines()[-1]
    with Warehouse(wh, read_only=True) as opened:
        [(version, staged)] = opened.con.execute(
            "SELECT dataset_version, rows_staged FROM audit.datasets").fetchall()
        assert staged == 3000 and opened.staged(version).num_rows == 3000
    assert aequum("runs", "--warehouse", str(tmp_path / "none.duckdb")).returncode == 2
    crash = aequum(code="import sys; from aequum.flows.commands import cli; "
                        "cli.main = lambda: 1 / 0; cli.program()")
    assert crash.returncode == 1 and "ZeroDivisionError" in crash.stderr


def test_a_closed_output_pipe_ends_the_command_quietly(tmp_path):
    """`aequum runs | head`: the reader closes the pipe before the command has written
    (it closes it at once, the command takes a second to import); the command ends with 141
    (128 + SIGPIPE) and no traceback, as a shell tool does."""
    Warehouse(tmp_path / "w.duckdb").close()
    proc = subprocess.Popen([sys.executable, "-c", "from aequum.flows.commands.cli import program; program()",
                             "runs", "--warehouse", str(tmp_path / "w.duckdb")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_the_command_line_starts_without_the_data_libraries():
    """``aequum`` parses its arguments before importing DuckDB, Arrow, polars, pydantic or
    Prefect (they cost about 1.5 s, before ``audit`` could start Prefect's temporary API, and
    made ``aequum --help`` take as long); ``aequum.audit`` is still there, imported on use."""
    code = """
import sys
import aequum.flows.commands.cli as cli
cli.parser().parse_args(["audit", "--spec", "x.yaml"])
heavy = sorted(m for m in ("duckdb", "pyarrow", "polars", "pydantic", "prefect", "numpy", "distributed") if m in sys.modules)
assert not heavy, heavy
import aequum
assert callable(aequum.audit) and aequum.audit.__module__ == "aequum.flows.commands.notebook"
try:
    aequum.nothing
except AttributeError as exc:
    assert "nothing" in str(exc)
else:
    raise AssertionError("aequum.nothing resolved")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr[-2000:]


def test_a_user_error_is_one_line_and_a_bug_a_traceback(tmp_path, capsys, monkeypatch):
    """The user errors are imported when an error comes: one still ends in one line and exit
    2; any other exception still propagates."""
    import argparse

    import aequum.flows.commands.cli as cli

    assert main(["audit", "--spec", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "missing.yaml" in err

    class Parsed:
        def parse_args(self, argv):
            return argparse.Namespace(func=lambda _args: 1 / 0)

    monkeypatch.setattr(cli, "parser", Parsed)
    with pytest.raises(ZeroDivisionError):
        cli.main([])


def test_every_option_of_every_command_has_help():
    import argparse

    from aequum.flows.commands.cli import parser

    (sub,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name} {a.option_strings or a.dest}" for name, p in sub.choices.items() for a in p._actions
               if not a.help and not isinstance(a, argparse._HelpAction)]
    assert missing == []


@pytest.mark.parametrize("name", ["detection", "cst", "ingest"])
def test_bench_rows_for_a_bench_of_fixed_sizes_is_one_line(name, capsys):
    """`--rows` on a bench that has fixed sizes is a usage error naming the benches that take
    sizes, not a TypeError from deep inside the command."""
    assert main(["bench", name, "--rows", "1000"]) == 2
    err = capsys.readouterr().err
    assert err == (f"aequum: error: bench {name} has fixed sizes (--quick for smaller ones); "
                   "--rows is for bench audit, fairlending, lenders, national, proxy, raguel, regression, validity\n")
