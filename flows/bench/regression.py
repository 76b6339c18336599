"""``aequum bench regression``: the regression engine's every comparison at HMDA scale in CPU
seconds, against a baseline checkout, and the logit's passes over parts on a Dask cluster (local
or external) with 2 workers against 1.

1M generated HMDA LAR rows (``--quick``: 200k; ``--rows N [N ...]``: each of those sizes in
turn, e.g. 4M or 10M, where a pass has 4-10 times the work: staging 10M takes a few minutes and
the every-comparison run some more) are staged under ``data/specs/hmda.yaml`` (its model left
out), then, each in a fresh process:

- **every comparison**: the regression engine as the spec sets it — 9 attributes and the
  intersections the data allow, pooled and within each loan type (31 comparisons at 1M), market
  and lender fixed effects, lender clusters, the linear model with its sensitivity and the logit —
  its CPU seconds (``time.process_time``: every thread of the process) and the machine's load
  average beside them (the machine may be shared: CPU seconds, not wall time, are what compare);
  with ``AEQUUM_BASELINE`` set to another checkout of aequum (e.g. the main branch before this
  change), the same in a process that imports that checkout, and the largest relative difference
  between the two runs' tables (every numeric column of ``regression_estimates``,
  ``regression_segments``, ``regression_coefficients`` and ``regression_benchmarks``; every other
  column equal);
- **passes over workers**: the pooled race comparison's logit with its passes over the rows
  (the Newton evaluations, the marginal effect's, the robust errors') run on 1 then 2 Dask
  workers — a LocalCluster started here (127.0.0.1, one thread a worker), or with
  ``--scheduler tcp://HOST:PORT`` the first 1 then 2 workers of a scheduler the user started
  (``dask scheduler``; ``dask worker tcp://HOST:PORT --nworkers 2 --nthreads 1`` in the same
  environment) — through ``engines.regression.passes.Executor``: the rows cut into 16 parts of
  whole cells (fewer below 512k rows), each worker holding a contiguous run of them in an actor,
  one call a worker a pass straight from the driver (a client connected to the workers
  directly), the parts' sums added on the driver in the parts' order. Printed: the seconds in
  the passes and in the whole fit, the CPU seconds of the driver, the workers (their imports
  done before) and an external scheduler, the passes' busiest worker's CPU seconds (what idle
  cores would take, less the messages) and the wall time a pass beyond it (the messages, the
  driver's work between passes and, on a loaded machine, the waits for a core), and whether the
  two results are the same bits.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from aequum.flows.bench.measure import in_fresh_process

THIS = Path(__file__).resolve()


def _state(rows: int, tmp: str, staged: dict):
    """The regression engine, its state on the staged records (the spec's segments kept)."""
    import yaml

    from aequum.engines.core.data import AuditData
    from aequum.engines.core.spec import parse_spec
    from aequum.engines.regression.engine import RegressionEngine
    from aequum.flows.store.warehouse import Warehouse, quote_ident, staged_table

    import aequum

    raw = yaml.safe_load((Path(aequum.__file__).resolve().parent / "data" / "specs" / "hmda.yaml").read_text())
    raw["source"].update({"rows": rows, "seed": 0})
    raw.pop("model", None)
    raw["engines"]["run"] = ["regression"]
    raw["engines"].pop("pba", None)
    spec = parse_spec(raw)
    params = spec.engines.params("regression")
    engine = RegressionEngine()
    columns = set(engine.columns(spec, params))
    with Warehouse(Path(tmp) / "wh.duckdb", read_only=True) as wh:
        table = staged_table(staged["version"])
        names = [r[0] for r in wh.con.execute(f"DESCRIBE {table}").fetchall()]
        wanted = ", ".join(quote_ident(c) for c in names if c.startswith("_") or c in columns)
        records = wh.con.sql(f"SELECT {wanted} FROM {table} ORDER BY _row").to_arrow_table()
    return engine, AuditData(spec, records, staged["categories"]), params


def measure_engine(rows: str, tmp: str, staged_json: str, out: str) -> dict:
    """Every comparison of the engine, serially in this process; its tables written to ``out``.
    Uses only the engine's public interface, so that a baseline checkout can run it too."""
    import pyarrow.parquet as pq

    from aequum.engines.core.engine import run_rounds

    engine, data, params = _state(int(rows), tmp, json.loads(staged_json))
    cpu, wall = time.process_time(), time.perf_counter()
    state = engine.prepare(data, params)
    # every round of pieces (a checkout whose engine has one round runs that one)
    state, parts, pieces, _ = run_rounds(engine, state, lambda st, ps: [engine.run_piece(st, p) for p in ps])
    tables = engine.combine(state, parts)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    Path(out).mkdir(parents=True, exist_ok=True)
    for name, t in tables.items():
        pq.write_table(t, Path(out) / f"{name}.parquet")
    return {"cpu": cpu, "wall": wall, "pieces": pieces, "load": os.getloadavg()[0]}


def compare_tables(a: str, b: str) -> dict:
    """The largest relative difference between two runs' numeric columns, and the columns of
    another type that differ."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    worst, differ = 0.0, []
    for f in sorted(Path(a).glob("*.parquet")):
        ta, tb = pq.read_table(f), pq.read_table(Path(b) / f.name)
        if ta.num_rows != tb.num_rows or ta.schema != tb.schema:
            differ.append(f"{f.stem}: rows or columns")
            continue
        for name in ta.column_names:
            x, y = ta[name].to_pylist(), tb[name].to_pylist()
            kind = ta.schema.field(name).type
            if pa.types.is_floating(kind) or pa.types.is_integer(kind):
                xa = np.array([np.nan if v is None else v for v in x], np.float64)
                ya = np.array([np.nan if v is None else v for v in y], np.float64)
                if not np.array_equal(np.isnan(xa), np.isnan(ya)):
                    differ.append(f"{f.stem}.{name}: nulls")
                    continue
                ok = ~np.isnan(xa) & (xa != ya)
                if ok.any():
                    worst = max(worst, float(np.max(np.abs(xa[ok] - ya[ok]) / np.abs(xa[ok]))))
            elif x != y:
                differ.append(f"{f.stem}.{name}")
    return {"max_relative_difference": worst, "differ": differ}


def _baseline(rows: str, tmp: str, blob: str, out: str, checkout: str) -> dict:
    """:func:`measure_engine` (this file's) in a process importing the checkout at ``checkout``."""
    link = Path(tmp) / "baseline-path"
    link.mkdir(exist_ok=True)
    if not (link / "aequum").exists():
        (link / "aequum").symlink_to(Path(checkout).resolve())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env["PYTHONPATH"] = str(link)
    import subprocess
    import sys

    code = (f"import json, runpy; m = runpy.run_path({str(THIS)!r}, run_name='bench'); "
            f"print('RESULT ' + json.dumps(m['measure_engine']({rows!r}, {tmp!r}, {blob!r}, {out!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"the baseline run failed:\n{done.stderr.strip()[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _cluster(stack, workers: int, scheduler: str):
    """``(client, the addresses of the workers to use)``: the first ``workers`` workers of the
    external scheduler at ``scheduler``, or those of a LocalCluster of ``workers`` started here
    (127.0.0.1, one thread a worker); the client connects to the workers directly, so that the
    passes' calls go straight to them (``engines.regression.passes.Executor``)."""
    import logging

    from distributed import Client, LocalCluster

    from aequum.flows.cluster import local_cluster_options, worker_addresses

    if scheduler:
        client = stack.enter_context(Client(scheduler, set_as_default=False, timeout="30s", direct_to_workers=True))
        client.wait_for_workers(workers, timeout=60)
    else:
        cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                   silence_logs=logging.ERROR, **local_cluster_options()))
        client = stack.enter_context(Client(cluster, set_as_default=False, direct_to_workers=True))
    return client, sorted(worker_addresses(client))[:workers]


def measure_workers(rows: str, tmp: str, staged_json: str, workers: str, scheduler: str = "") -> dict:
    """The pooled race logit with its Newton passes on ``workers`` Dask workers (:func:`_cluster`):
    the seconds in the passes and in the whole fit, the CPU seconds of this process (the driver;
    with a LocalCluster its scheduler too), of the workers used and of an external scheduler."""
    from contextlib import ExitStack
    from importlib import import_module

    from aequum.engines.regression.passes import Executor
    from aequum.engines.regression.design import design
    from aequum.engines.regression.engine import held_cells
    from aequum.engines.regression.logit import controlled_logit

    engine, data, params = _state(int(rows), tmp, json.loads(staged_json))
    state = engine.prepare(data, params)
    groups, y = state["groups"]["race"], state["y"]
    fit_rows = np.flatnonzero(((groups == 0) | (groups == 1)) & ~np.isnan(y))
    cells = held_cells([state["groups"][a] for a in state["others"]["race"]], params.min_group_size, y, fit_rows)
    blocks, names = [*state["controls"], cells], [*state["names"], "held"]
    kw = dict(fixed=state["fixed"], fixed_names=params.fixed_effects, cluster=state["cluster"])
    with ExitStack() as stack:
        client, used = _cluster(stack, int(workers), scheduler)
        prepared = design(y, groups, blocks, names, fit_rows, None, kw["fixed"], kw["fixed_names"], kw["cluster"])
        executor = Executor(client, used)
        # the workers' one-time imports (about 1 s of CPU each: scipy.stats) done before the measure
        client.run(import_module, "aequum.engines.regression.logit", workers=used)
        def cpu_of() -> tuple[float, float]:
            return (sum(client.run(time.process_time, workers=used).values()),
                    client.run_on_scheduler(time.process_time) if scheduler else 0.0)

        before = cpu_of()
        cpu, wall = time.process_time(), time.perf_counter()
        fit = controlled_logit(y, groups, blocks, names, rows=fit_rows, prepared=prepared, executor=executor, **kw)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        worker_cpu, scheduler_cpu = (b - a for a, b in zip(before, cpu_of()))
    return {"n": fit.n, "fit_seconds": wall, "pass_seconds": executor.seconds, "passes": executor.passes,
            "tasks": executor.tasks, "parts": executor.parts, "busiest": executor.busiest, "task_cpu": executor.task_cpu, "driver_cpu": cpu,
            "worker_cpu": worker_cpu, "scheduler_cpu": scheduler_cpu, "load": os.getloadavg()[0],
            "result": [fit.coefficient, fit.se, fit.ame, fit.ame_se, fit.log_likelihood,
                       *map(float, fit.coefficients["coef"]), *map(float, fit.coefficients["se"])]}


def check_scheduler(scheduler: str, workers: int = 2, timeout: str = "10s") -> list[str]:
    """The addresses of the external scheduler's workers, or a UsageError naming what is
    missing: no scheduler answering at ``scheduler``, or fewer than ``workers`` workers."""
    from distributed import Client

    from aequum.flows.cluster import worker_addresses
    from aequum.flows.store.guard import UsageError

    try:
        with Client(scheduler, set_as_default=False, timeout=timeout) as client:
            found = sorted(worker_addresses(client))
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise UsageError(f"--scheduler {scheduler}: no Dask scheduler answers there ({exc})") from None
    if len(found) < workers:
        raise UsageError(f"--scheduler {scheduler}: the scheduler has {len(found)} worker(s); the bench needs "
                         f"{workers} (start them with `dask worker {scheduler} --nworkers {workers} --nthreads 1`)")
    return found


SIZES = (1_000_000,)  # the generated rows a run stages (--quick: 200k; --rows N [N ...]: those)


def run(quick: bool = False, rows: list[int] | None = None, scheduler: str | None = None) -> None:
    sizes = [int(n) for n in rows] if rows else [200_000] if quick else list(SIZES)
    if any(n < 10_000 for n in sizes):
        from aequum.flows.store.guard import UsageError

        raise UsageError(f"--rows {min(sizes)}: bench regression needs 10,000 rows or more")
    addresses = check_scheduler(scheduler) if scheduler else []
    for n in sizes:
        _run_size(n, scheduler, addresses)


def _run_size(n: int, scheduler: str | None, addresses: list[str]) -> None:
    """The bench at ``n`` generated rows, staged in a folder of its own (1M: about 35 s and
    1 GB; 10M: a few minutes and about 2 GB)."""
    baseline = os.environ.get("AEQUUM_BASELINE")
    print(f"aequum bench regression: {n:,} generated LAR rows, the hmda spec's regression engine")
    with tempfile.TemporaryDirectory(prefix="aequum-regression-") as tmp:
        staged = in_fresh_process("aequum.flows.bench.fairlending", "stage_world", str(n), tmp)
        print(f"  staged in {staged['seconds']:.0f} s")
        blob = json.dumps({k: staged[k] for k in ("version", "categories")})
        ours = in_fresh_process("aequum.flows.bench.regression", "measure_engine", str(n), tmp, blob,
                                str(Path(tmp) / "ours"))
        print(f"  every comparison ({ours['pieces']}): {ours['cpu']:.1f} s CPU ({ours['wall']:.1f} s wall, "
              f"1-minute load {ours['load']:.1f} on {os.cpu_count()} cores)")
        if baseline:
            base = _baseline(str(n), tmp, blob, str(Path(tmp) / "base"), baseline)
            diff = compare_tables(str(Path(tmp) / "base"), str(Path(tmp) / "ours"))
            print(f"  the baseline checkout {baseline}: {base['cpu']:.1f} s CPU ({base['wall']:.1f} s wall, load "
                  f"{base['load']:.1f}): {base['cpu'] / ours['cpu']:.2f}x the CPU seconds; largest relative "
                  f"difference {diff['max_relative_difference']:.1e}"
                  + (f"; differing: {', '.join(diff['differ'])}" if diff["differ"] else "; every other column equal"))
        else:
            print("  (set AEQUUM_BASELINE to another checkout of aequum to run it beside)")
        found = {k: in_fresh_process("aequum.flows.bench.regression", "measure_workers", str(n), tmp, blob, str(k),
                                     scheduler or "") for k in (1, 2)}
        one, two = found[1], found[2]
        where = (f"the external scheduler {scheduler} (the first 1 then 2 of its {len(addresses)} workers)" if scheduler
                 else "a LocalCluster of 1 then 2 workers (one thread each)")
        print(f"  the pooled race logit ({one['n']:,} applications), its {one['passes']} passes over {one['parts']} parts "
              f"(Newton's, the marginal effect's, the robust errors') on {where}, one call a worker a pass:")
        for k, f in found.items():
            print(f"    {k} worker{'s' if k > 1 else ' '}: {f['pass_seconds']:.2f} s in the passes, {f['fit_seconds']:.2f} s "
                  f"the whole fit; CPU: driver {f['driver_cpu']:.1f} s, workers {f['worker_cpu']:.1f} s"
                  + (f", scheduler {f['scheduler_cpu']:.1f} s" if scheduler else "")
                  + f", the passes' busiest worker {f['busiest']:.2f} s; beyond it "
                  f"{(f['pass_seconds'] - f['busiest']) / f['passes'] * 1e3:.0f} ms a pass (load {f['load']:.1f})")
        print(f"    2 workers against 1: {one['pass_seconds'] / two['pass_seconds']:.2f}x in the passes, "
              f"{one['fit_seconds'] / two['fit_seconds']:.2f}x the whole fit, {one['busiest'] / two['busiest']:.2f}x "
              f"the busiest worker's CPU; the same bits: {one['result'] == two['result']}")
