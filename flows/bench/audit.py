"""``aequum bench audit``: the HMDA audit end to end at 1M rows (``--rows N …``; ``--quick``: 40k).

For each size, generated HMDA LAR rows (``engines.generators.hmda``) are written to a Parquet
file and audited under ``data/specs/hmda.yaml`` with every engine of the spec (its sampling as
it stands), each measurement in a fresh process so that its peak memory is its own:

- **end to end** (``flows.bench.audit_run``): ``run_audit`` as the CLI runs it (Prefect, a local
  Dask cluster of 2 workers): wall time, each engine's seconds, the rest, the peak of the summed
  memory of every process; against, in the same command, one DuckDB pass over every column of
  the staged lake and (not ``--quick``) the same audit without the regression engine;
- **1 worker** (not ``--quick``): the same with one Dask worker, and the speed-up of two;
- **stages** (not ``--quick``): the flow's steps one after the other in one process, without
  Prefect or Dask (staging, model fit and assessment, each engine over the lake, the result
  write): seconds per stage and the process's peak RSS (``flows.bench.measure.peak_rss_mb``);
- **outcome vs GROUPING SETS** (with the stages): the outcome engine over the staged lake (the
  columns it declares, read and counted) against one DuckDB GROUPING SETS query computing the
  same counts over the same lake (best of three each; ratio > 1: the engine is slower);
- **fixed cost** (not ``--quick``): ``aequum audit --engines outcome`` on 1,000 loan records
  (the default spec), wall time from the command's start to its exit, with Prefect's temporary
  server and a new local cluster, with a Prefect server already running (``PREFECT_API_URL``),
  and with a running Prefect server and Dask cluster (``AEQUUM_DASK_ADDRESS``, as a deployment
  has them), fastest of three each, alternated; beside them, in the same run, the floors of
  those set-ups on this machine (:func:`start_floors`): Prefect's temporary API alone from its
  start to its first answer, a fresh process starting the local cluster of a small audit (one
  worker) until it is ready, and a fresh process importing the flow's modules.

``aequum bench national`` (``flows.bench.national``) runs the end to end part on a LAR of
national shape.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from aequum.flows.bench.audit_run import audit_in_fresh_process, bench_audit, write_spec
from aequum.flows.bench.measure import every, in_fresh_process, peak_rss_mb

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "data" / "specs" / "hmda.yaml"
SMALL_SPEC = REPO / "data" / "specs" / "loan.yaml"


def grouping_sets_sql(spec, lake_path: str) -> str:
    """One query counting what the outcome engine counts: per attribute and per intersection
    the engine reports, per group, records, favourable decisions (and, with labels, the label
    × decision cells). ``grouped_out`` has a bit set for each group column not in the row's
    grouping set (first column, highest bit)."""
    from aequum.engines.core.data import group_column
    from aequum.flows.store.warehouse import quote_ident

    names = [p.name for p in spec.protected]
    sets = [(n,) for n in names] + list(spec.engines.params("outcome").combinations(spec))
    cols = {n: quote_ident(group_column(n)) for n in names}
    grouping = ", ".join("(" + ", ".join(cols[n] for n in s) + ")" for s in sets)
    label = (", sum(_label) AS positive, sum(_label * _decision) AS tp" if spec.label is not None else "")
    path = str(Path(lake_path) / "**" / "*.parquet").replace("'", "''")
    return (f"SELECT {', '.join(cols.values())}, GROUPING({', '.join(cols.values())}) AS grouped_out, "
            f"count(*) AS n, sum(_decision) AS favourable{label} "
            f"FROM read_parquet('{path}', hive_partitioning = false) GROUP BY GROUPING SETS ({grouping})")


def _best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _measure_stages(spec_path: str, workdir: str) -> dict:
    """The flow's steps in one process (no Prefect, no Dask), timed one by one."""
    import duckdb

    from aequum.engines.core.spec import load_spec
    from aequum.flows.audit import new_run_id, write_run
    from aequum.flows.engine_tasks import run_engine_pieces
    from aequum.flows.model_step import prepare_model, supplied_counterfactuals
    from aequum.flows.store.staging import stage
    from aequum.flows.store.versioning import code_version
    from aequum.flows.store.warehouse import Warehouse

    spec_file = Path(spec_path)
    spec = load_spec(spec_file)
    warehouse = str(Path(workdir) / "wh.duckdb")
    run_id = new_run_id(spec.name)
    out: dict = {"stages": {}}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        out["stages"][name] = now - clock
        clock = now

    t_start = clock
    with Warehouse(warehouse) as wh:
        wh.start_run(run_id, spec.name, spec.digest(), code_version(), spec.run_parameters())
        ref = stage(spec, spec_file.parent, wh, Path(workdir) / "lake")
    lap("staging")
    model, quality, problem = prepare_model(spec, spec_file.parent, ref, lambda _m: None, engines=spec.engines.run)
    cfs = supplied_counterfactuals(spec, spec_file.parent, ref)
    lap("model")
    outcomes = []
    for name in spec.engines.run:
        outcomes.append(run_engine_pieces(name, spec, ref.lake_path, ref.categories, model, cfs))
        lap(f"engine {name}")
    from aequum.engines.core.model_quality import QUALITY

    write_run(warehouse, run_id, outcomes, ref, model, {"model_quality": (QUALITY, quality)} if quality else {})
    lap("write")
    out["total"] = time.perf_counter() - t_start
    out["peak_rss_mb"] = peak_rss_mb()
    out["rows_staged"] = ref.rows_staged
    out["statuses"] = {o.engine: o.status if not o.error else f"{o.status}: {o.error[:120]}" for o in outcomes}
    out["model_problem"] = problem

    con = duckdb.connect(config={"memory_limit": os.environ.get("AEQUUM_DUCKDB_MEMORY_LIMIT", "1GB")})
    sql = grouping_sets_sql(spec, ref.lake_path)
    out["grouping_sets_s"] = _best(lambda: con.sql(sql).fetchall())
    con.close()
    out["outcome_s"] = _best(lambda: run_engine_pieces("outcome", spec, ref.lake_path, ref.categories, None, None))
    return out


def _in_subprocess(fn: str, *args: str) -> dict:
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING")}
    return in_fresh_process(__name__, fn, *args, env=env)


FIXED_COST_REPEAT = 3


def fixed_cost(tmp: Path) -> dict:
    """Wall time of ``aequum audit --engines outcome`` on 1,000 loan records, start to exit: with
    Prefect's temporary server and a new local cluster (what a first audit on a fresh machine
    does), with a Prefect server already running (``PREFECT_API_URL``), and with a running
    Prefect server and Dask cluster (``AEQUUM_DASK_ADDRESS`` too, as a deployment has them);
    each the fastest of ``FIXED_COST_REPEAT`` runs, alternated. The caller's own settings of
    either are left out, so that each set-up is the one named."""
    from unittest.mock import patch

    from aequum.flows.commands.cli import _prefect_env

    # the command line's Prefect settings (its PREFECT_HOME) for every server here, and for
    # this measurement only: the stages measured after it keep the bench process's own
    with patch.dict(os.environ):
        _prefect_env()
        return _fixed_cost(tmp)


def _fixed_cost(tmp: Path) -> dict:
    from distributed import LocalCluster

    from aequum.flows.cluster import local_cluster_options
    from aequum.flows.prefect_api import TemporaryAPI

    raw = yaml.safe_load(SMALL_SPEC.read_text())
    raw["source"]["rows"] = 1000
    spec = tmp / "loan_small.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "AEQUUM_DASK_ADDRESS")}
    env["PREFECT_LOGGING_LEVEL"] = "WARNING"

    def audit(extra: dict) -> float:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", str(spec), "--engines",
                              "outcome", "--warehouse", str(tmp / "small.duckdb"), "--lake", str(tmp / "small_lake")],
                             capture_output=True, text=True, env={**env, **extra}, cwd=tmp)
        if out.returncode:
            raise RuntimeError(f"the small audit failed:\n{out.stderr[-3000:]}")
        return time.perf_counter() - t0

    server = TemporaryAPI()  # a running server, as `prefect server start` leaves one
    # a running Dask cluster, as a deployment's scheduler and workers are (dask_runner's settings)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, preload=["aequum.flows.audit"],
                           **local_cluster_options())
    try:
        running = {"PREFECT_API_URL": server.wait(120)}
        both = {**running, "AEQUUM_DASK_ADDRESS": cluster.scheduler_address}
        times = {"temporary": [], "running": [], "running_cluster": []}
        for _ in range(FIXED_COST_REPEAT):
            times["temporary"].append(audit({}))
            times["running"].append(audit(running))
            times["running_cluster"].append(audit(both))
    finally:
        server.stop()
        cluster.close()
    return {"temporary_server_s": min(times["temporary"]), "running_server_s": min(times["running"]),
            "running_server_and_cluster_s": min(times["running_cluster"]), "runs": times,
            **start_floors(env)}


_CLUSTER_START = (  # one worker: a default cluster's for an audit below flows.cluster.ONE_WORKER_ROWS
    "from distributed import Client, LocalCluster\n"
    "from aequum.flows.cluster import local_cluster_options\n"
    "cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, "
    "preload=['aequum.flows.audit'], **local_cluster_options())\n"
    "Client(cluster).wait_for_workers(1)\n"
    "import os; os._exit(0)\n")  # the audit's own exit skips the teardown too (flows.commands.cli: program)


def start_floors(env: dict) -> dict:
    """What the fixed cost of each set-up cannot go below on this machine, each the fastest of
    ``FIXED_COST_REPEAT``: ``server_start_s``, Prefect's temporary API (as ``aequum audit``
    starts it) from its start to its first answer (the audit with a temporary server waits for
    it, and its process is then still starting the API's services); ``cluster_start_s``, a fresh
    Python process starting a local cluster of one worker that imports the flow's modules, as
    a small audit's does, until it is ready, then exiting; ``flow_import_s``, a fresh process
    importing the flow's modules (Prefect, Dask, the engines' core) and exiting: the audit's
    own process does that before it can start anything."""
    from aequum.flows.prefect_api import TemporaryAPI

    def wall(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env)
        return time.perf_counter() - t0

    def server() -> float:
        t0 = time.perf_counter()
        api = TemporaryAPI()
        try:
            api.wait(120)
            return time.perf_counter() - t0
        finally:
            api.stop()

    floors = {"server_start_s": [], "cluster_start_s": [], "flow_import_s": []}
    for _ in range(FIXED_COST_REPEAT):
        floors["server_start_s"].append(server())
        floors["cluster_start_s"].append(wall(_CLUSTER_START))
        floors["flow_import_s"].append(wall("import aequum.flows.audit"))
    return {name: min(times) for name, times in floors.items()}


QUICK_ROWS = 40_000  # the fewest generated rows whose groups CST's k = 50 of the spec can compare


def run(quick: bool = False, rows: list[int] | None = None) -> list[dict]:
    from aequum.flows.commands.generate import generate_to_file

    sizes = rows or ([QUICK_ROWS] if quick else [1_000_000])
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="aequum-bench-audit-") as tmp_dir:
        tmp = Path(tmp_dir)
        if not quick:
            results.append({"fixed_cost": _print_fixed_cost(tmp)})
        for n in sizes:
            print(f"aequum bench audit: generating {n:,} HMDA LAR rows", flush=True)
            source = generate_to_file("hmda", tmp / f"hmda_{n}.parquet", rows=n, seed=0, fmt="parquet",
                                      progress=every(10.0))
            spec = write_spec(source, tmp / f"hmda_{n}.yaml")
            row = {"rows": n, **bench_audit(spec, tmp / f"e2e_{n}", f"{n:,} generated HMDA LAR rows",
                                            without_regression=not quick)}
            if not quick:
                one = audit_in_fresh_process(spec, tmp / f"e2e_{n}_1", workers=1)
                row["end_to_end_1_worker"] = one
                two = row["end_to_end"]["seconds"]
                print(f"  one Dask worker: {one['seconds']:.1f} s, peak {one['tree_peak_mb'] / 1024:.2f} GB; "
                      f"speed-up from 1 to 2 workers: x{one['seconds'] / two:.2f}", flush=True)
                row.update(_print_stages(spec, tmp / f"stages_{n}"))
            results.append(row)
            source.unlink()
    return results


def _print_stages(spec: Path, work: Path) -> dict:
    work.mkdir()
    st = _in_subprocess("_measure_stages", str(spec), str(work))
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in st["stages"].items())
    print(f"  stages in one process (no Prefect, no Dask): {stages}; total {st['total']:.1f} s, peak RSS "
          f"{st['peak_rss_mb']:,.0f} MB", flush=True)
    print(f"  outcome engine {st['outcome_s']:.3f} s vs DuckDB GROUPING SETS {st['grouping_sets_s']:.3f} s: "
          f"x{st['outcome_s'] / st['grouping_sets_s']:.2f}", flush=True)
    print(f"  engines: {st['statuses']}" + (f"; model: {st['model_problem']}" if st["model_problem"] else ""))
    return {"stages": st}


def _print_fixed_cost(tmp: Path) -> dict:
    cost = fixed_cost(tmp)
    print(f"fixed cost of a small audit (1,000 loan records, outcome only; fastest of "
          f"{FIXED_COST_REPEAT}, alternated): {cost['temporary_server_s']:.1f} s with Prefect's temporary "
          f"server and a new local cluster, {cost['running_server_s']:.1f} s with a running Prefect server "
          f"(PREFECT_API_URL), {cost['running_server_and_cluster_s']:.1f} s with a running Prefect server and "
          "Dask cluster (AEQUUM_DASK_ADDRESS)", flush=True)
    print(f"  floors on this machine (fastest of {FIXED_COST_REPEAT}): Prefect's temporary API alone, start to "
          f"first answer {cost['server_start_s']:.1f} s; a local 1-worker cluster from a fresh process "
          f"{cost['cluster_start_s']:.1f} s; importing the flow's modules {cost['flow_import_s']:.1f} s; "
          f"ratios: temporary server x{cost['temporary_server_s'] / cost['server_start_s']:.2f}, running server "
          f"x{cost['running_server_s'] / cost['cluster_start_s']:.2f}, running server and cluster "
          f"x{cost['running_server_and_cluster_s'] / cost['flow_import_s']:.2f}", flush=True)
    return cost
