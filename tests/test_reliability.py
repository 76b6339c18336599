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
