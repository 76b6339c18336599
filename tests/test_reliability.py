"""Reliability III (issue 49): every subcommand's help prints, a model file's stored input mean
that is no tensor, a warehouse path that is another kind of file, bench validity's smallest
size, the hint under ``aequum runs``, and the Dask dashboard's bind address."""
from __future__ import annotations

import io
import os
from contextlib import redirect_stdout

import psutil
import pytest

from aequum.flows.commands import cli


def subcommands() -> list[str]:
    sub = next(a for a in cli.parser()._actions if a.dest == "command")
    return sorted(sub.choices)


@pytest.mark.parametrize("command", subcommands())
def test_every_subcommands_help_prints(command):
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as ended:
        cli.parser().parse_args([command, "--help"])
    assert ended.value.code == 0 and f"usage: aequum {command}" in out.getvalue()
    if command == "generate":
        assert "75% fewer" in out.getvalue()  # a world's description with a % sign


def test_the_top_level_help_prints():
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as ended:
        cli.parser().parse_args(["--help"])
    assert ended.value.code == 0 and "generate" in out.getvalue()


def test_a_model_files_input_mean_that_is_a_number_is_refused_with_one_line(tmp_path):
    import torch

    from aequum.engines.core.models import ModelError, TorchMLP

    m = TorchMLP(["a", "b"], [4], 1)
    m.save(tmp_path / "m.pt")
    state = torch.load(tmp_path / "m.pt", weights_only=True)
    state["input_mean"] = 3  # an int, as a hand-made file had it
    torch.save(state, tmp_path / "m.pt")
    with pytest.raises(ModelError, match=r"input_mean is a int \(3\), not a tensor"):
        TorchMLP.load(tmp_path / "m.pt", ["a", "b"], [4], 1)


def test_a_warehouse_path_that_is_a_csv_is_refused_before_any_work(tmp_path, capsys):
    from aequum.flows.store.warehouse import Warehouse, WarehouseError

    csv = tmp_path / "data.csv"
    csv.write_text("id,income\n1,2\n")
    assert cli.main(["audit", "--warehouse", str(csv), "--spec", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"aequum: error: --warehouse {csv} is not a DuckDB database (an existing "
                                        "file of another kind); name a new file or a warehouse"]
    assert cli.main(["runs", "--warehouse", str(csv)]) == 2
    assert "is not a DuckDB database" in capsys.readouterr().err
    with pytest.raises(WarehouseError, match="not a DuckDB database"):
        Warehouse(csv)
    assert csv.read_text() == "id,income\n1,2\n"  # untouched


def test_bench_validity_with_too_few_rows_is_refused_at_once(capsys):
    assert cli.main(["bench", "validity", "--rows", "10"]) == 2
    assert "--rows 10 is too few rows" in capsys.readouterr().err


def test_runs_hints_at_an_option_it_accepts(warehouse, capsys):
    warehouse.start_run("a-run-with-a-long-name", "spec", "h" * 64, "0", {"engines": ["outcome"]})
    warehouse.close()
    args = ["runs", "--warehouse", str(warehouse.path)]
    os.environ["COLUMNS"] = "60"
    try:
        assert cli.main(args) == 0
    finally:
        del os.environ["COLUMNS"]
    out = capsys.readouterr().out
    assert "more column(s)" in out and "(--format csv shows all)" in out
    assert cli.main([*args, "--format", "csv"]) == 0
    csv = capsys.readouterr().out
    assert csv.splitlines()[0].startswith('"run_id"') and "a-run-with-a-long-name" in csv


def listening(pids: list[int]) -> set[tuple[str, int]]:
    found = set()
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                found.add((conn.laddr.ip, conn.laddr.port))
    return found


@pytest.mark.parametrize("dashboard", [False, True])
def test_the_clusters_dashboard_and_every_listener_are_on_loopback(dashboard):
    """An audit's LocalCluster: the scheduler, its HTTP server, the nanny and the worker listen on
    127.0.0.1 only; the dashboard is served only when asked."""
    from distributed import Client

    from aequum.flows.cluster import dask_runner

    said: list[str] = []
    before = listening([os.getpid()])
    with dask_runner(workers=1, dashboard=dashboard, say=said.append) as runner:
        with Client(runner.address, set_as_default=False) as client:
            client.wait_for_workers(1, timeout=120)
            info = client.scheduler_info()
        procs = [os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))]
        ours = listening(procs) - before
        assert ours and {ip for ip, _ in ours} == {"127.0.0.1"}, ours
        assert runner.address.startswith("tcp://127.0.0.1:")
        assert all(w.startswith("tcp://127.0.0.1:") for w in info["workers"])
        http = info["services"]["dashboard"]  # the scheduler's HTTP server, dashboard or not
        assert ("127.0.0.1", http) in ours
        assert served(f"http://127.0.0.1:{http}/status") == dashboard
        assert said == ([f"Dask dashboard (this machine only): http://127.0.0.1:{http}/status"] if dashboard else [])


def served(url: str) -> bool:
    """Whether the page answers (a 404: the dashboard is off)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as page:
            return page.status == 200
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
        return False


def test_a_word_in_an_optional_price_field_nulls_that_field_only(tmp_path, warehouse, capsys):
    """337 applications with a word in ``interest_rate`` were quarantined, dropped from every
    engine: now the field is null for the pricing engine, the records kept and counted."""
    import json

    import yaml

    from aequum.engines.core.spec import parse_spec
    from aequum.flows.store.staging import stage

    rows = ["id,sex,action,ltv,interest_rate,total_loan_costs"]
    for i in range(200):
        rate = "call us" if i % 20 == 0 else ("NA" if i % 7 == 0 else f"{5 + (i % 9) / 10:.2f}")
        rows.append(f"{i},{'F' if i % 2 else 'M'},{1 if i % 3 else 3},{60 + i % 30},{rate},{1000 + i}")
    (tmp_path / "lar.csv").write_text("\n".join(rows) + "\n")
    raw = {"name": "words", "source": {"kind": "csv", "path": "lar.csv", "id_column": "id"},
           "protected": [{"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]}],
           "decision": {"column": "action", "favourable": ["1"], "unfavourable": ["3"]},
           "features": [{"name": "ltv"}],
           "pricing": {"fields": ["interest_rate", "total_loan_costs"]},
           "engines": {"run": ["outcome"]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    said: list[str] = []
    ref = stage(parse_spec(raw), tmp_path, warehouse, tmp_path / "lake", progress=said.append)
    assert ref.rows_quarantined == 0 and ref.rows_staged == 200
    assert ref.fields_nulled == {"interest_rate": 10}
    (row,) = warehouse.con.execute("SELECT fields_nulled FROM audit.datasets").fetchall()
    assert json.loads(row[0]) == {"interest_rate": 10}
    assert any("interest_rate in 10 record(s)" in m for m in said), said
    staged = warehouse.con.execute(f"SELECT count(*), count(interest_rate) FROM {ref.staged_table}").fetchall()
    assert staged == [(200, 200 - 10 - len([i for i in range(200) if i % 7 == 0 and i % 20]))]
    assert stage(parse_spec(raw), tmp_path, warehouse, tmp_path / "lake").fields_nulled == {"interest_rate": 10}


def test_a_full_disk_leaves_the_run_failed_with_one_line(tmp_path):
    """A 40 MB file system that a million staged records fill: the audit ends with one line and
    the run recorded failed (it stayed running, and the line was a traceback). Needs a tmpfs
    mount (root)."""
    import subprocess
    import sys

    import yaml

    from conftest import REPO

    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(small)],
                                           capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
        raw["source"]["rows"] = 1_000_000
        raw["engines"] = {"run": ["outcome"]}
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        env["AEQUUM_LOG_DIR"] = str(tmp_path / "logs")
        out = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec",
                              str(tmp_path / "s.yaml"), "--warehouse", str(small / "wh.duckdb"), "--lake",
                              str(small / "lake")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        assert out.returncode == 2, out.stderr[-3000:]
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith("aequum: error: the disk is full (No space left on device); run loan-")
        assert "Traceback" not in out.stderr
        from aequum.flows.store.warehouse import Warehouse

        with Warehouse(small / "wh.duckdb", read_only=True) as wh:
            runs = wh.runs().to_pylist()
        assert [r["status"] for r in runs] == ["failed"] and "No space left on device" in runs[0]["error"]
        assert not list(small.glob("*.reserve"))
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_a_bad_data_failure_inside_the_flow_ends_with_its_one_line(tmp_path):
    """The user error's line is the last: no "--- Error logging to API --- / All connection
    attempts failed" after it (Prefect's log worker, the run's API already stopped)."""
    import subprocess
    import sys

    rows = ["id,sex,y,repaid,income"] + [f"{i},{'F' if i % 3 == 0 else 'M'},{i % 2},{(i // 2) % 2},"
                                         f"{'oops' if i % 2 else 1000 + i}" for i in range(400)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "s.yaml").write_text(
        "name: badtest\nsource: {kind: csv, path: d.csv, id_column: id}\n"
        "protected:\n  - {name: sex, column: sex, protected_values: [F], reference_values: [M]}\n"
        "decision: {column: y, favourable: [1]}\nlabel: {column: repaid, positive: [1]}\n"
        "features: [{name: income, range: [0, 100000]}]\nengines: {run: [outcome]}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(PREFECT_LOGGING_LEVEL="INFO", AEQUUM_LOG_DIR=str(tmp_path / "logs"))
    out = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", "s.yaml",
                          "--warehouse", "wh.duckdb", "--lake", "lake"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("aequum: error: 200 of 400 in-scope rows (50.0%) failed validation"), lines[-5:]
    assert "Error logging to API" not in out.stderr and "Traceback" not in out.stderr


def test_a_cluster_with_its_dashboard_off_serves_no_page_after_one_that_had_it():
    """Without bokeh, distributed appends its 'bokeh is missing' page to the configured routes
    list itself when a dashboard is asked: a later cluster of the same process (a notebook, a
    scheduled worker) then served it with its dashboard off. Each cluster now has its own list."""
    from distributed import Client

    from aequum.flows.cluster import dask_runner

    for dashboard in (True, False):
        with dask_runner(workers=1, dashboard=dashboard) as runner:
            with Client(runner.address, set_as_default=False) as client:
                http = client.scheduler_info()["services"]["dashboard"]
            assert served(f"http://127.0.0.1:{http}/status") == dashboard
