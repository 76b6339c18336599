"""The audit end to end for ``aequum bench audit`` and ``aequum bench national``: ``run_audit``
as the command line runs it (Prefect, a local Dask cluster of 2 workers), with every engine of
the shipped spec (``data/specs/hmda.yaml``), in a fresh process each, against baselines run in
the same command.

Measured per run: the wall time from the flow's start to its end, each engine's seconds as the
run records them (``audit.run_engines``, from when the engine holds the run's lock), the rest
(staging, the model, starting the cluster, writing the results), and the peak of the summed
resident memory of every process of the audit (flow, Dask workers, the temporary Prefect API:
``TreePeak``). Baselines, each in the same command:

- **lake scan**: one DuckDB pass over every column of the run's staged lake (``sql/lake_scan.sql``,
  fastest of 3): what merely reading the records once costs on this machine now;
- **without the regression** (``bench audit`` at full size): the same audit, every engine but
  the regression, so the ratio is the regression's share of the whole.

The engines' progress lines of the audit being measured go on to the bench's standard error.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import yaml

from aequum.flows.bench.measure import TreePeak, in_fresh_process, memory_lines, peak_rss_mb

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "data" / "specs" / "hmda.yaml"


def write_spec(source: Path, out: Path) -> Path:
    """The shipped HMDA spec reading ``source`` (a generated LAR Parquet file), every engine."""
    raw = yaml.safe_load(SPEC.read_text())
    raw["source"] = {"kind": "parquet", "path": str(source), "id_column": raw["source"].get("id_column")}
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def spec_engines() -> list[str]:
    return list(yaml.safe_load(SPEC.read_text())["engines"]["run"])


def measure_audit(spec_path: str, workdir: str, workers: str = "2", engines: str = "") -> dict:
    """One audit end to end in this process (run by :func:`audit_in_fresh_process`)."""
    from aequum.flows.audit import run_audit
    from aequum.flows.store.warehouse import Warehouse

    warehouse, lake = str(Path(workdir) / "wh.duckdb"), str(Path(workdir) / "lake")
    t0 = time.perf_counter()
    with TreePeak() as tree, tree.follow_audit():
        run_id = run_audit(spec_path, warehouse=warehouse, lake=lake, workers=int(workers),
                           engines=engines.split(",") if engines else None)
    seconds = time.perf_counter() - t0
    with Warehouse(warehouse, read_only=True) as wh:
        run = wh.run(run_id)
        dataset = wh.dataset(run["dataset_version"]) or {}
        engines_run = {name: {"seconds": float(e["seconds"] or 0.0), "status": e["status"], "pieces": e.get("pieces"),
                              "started": e.get("started")}
                       for name, e in wh.engine_status(run_id).items()}
    return {"seconds": seconds, "status": run["status"], "tree_peak_mb": tree.peak_mb, "peak_rss_mb": peak_rss_mb(),
            "memory": tree.figures(),
            "engines": engines_run, "rows_staged": dataset.get("rows_staged"), "lake_path": dataset.get("lake_path")}


def scan_lake(lake_path: str, repeat: str = "3") -> dict:
    """The lake-scan baseline in this process: fastest of ``repeat`` passes, and the rows."""
    import duckdb

    from aequum.flows.store.warehouse import load_sql

    (sql,) = load_sql("lake_scan")
    con = duckdb.connect(config={"memory_limit": os.environ.get("AEQUUM_DUCKDB_MEMORY_LIMIT", "1GB")})
    files = str(Path(lake_path) / "**" / "*.parquet")
    times, rows = [], 0
    for _ in range(int(repeat)):
        t0 = time.perf_counter()
        rows = con.execute(sql, {"files": files}).fetchone()[0]
        times.append(time.perf_counter() - t0)
    con.close()
    return {"seconds": min(times), "rows": rows, "peak_rss_mb": peak_rss_mb()}


def audit_in_fresh_process(spec: Path, work: Path, workers: int = 2, engines: list[str] | None = None) -> dict:
    from unittest.mock import patch

    from aequum.flows.commands.cli import _prefect_env

    work.mkdir(parents=True, exist_ok=True)
    with patch.dict(os.environ):  # the command line's Prefect and Dask settings, for the audit's process only
        _prefect_env()
        env = {**os.environ, "AEQUUM_PROGRESS": "plain"}
    return in_fresh_process(__name__, "measure_audit", str(spec), str(work), str(workers), ",".join(engines or []),
                            env=env, show=True)


def engine_lines(e2e: dict) -> list[str]:
    """Each engine's seconds, the slowest first, the engines' span (from the first one's start
    to the last one's end: the engines of a small run overlap, two at a time) and the rest."""
    engines = sorted(e2e["engines"].items(), key=lambda kv: -kv[1]["seconds"])
    spans = [(e["started"], e["started"] + e["seconds"]) for _, e in engines if e.get("started") is not None]
    spent = (max(b for _, b in spans) - min(a for a, _ in spans)) if spans else sum(e["seconds"] for _, e in engines)
    parts = [f"{name} {e['seconds']:.1f} s" + ("" if e["status"] == "succeeded" else f" ({e['status']})")
             for name, e in engines]
    return [f"  engines: {', '.join(parts)}; from the first one's start to the last one's end {spent:.1f} s",
            f"  the rest (start-up, staging, writing the results; the model when no engine ran beside it): "
            f"{e2e['seconds'] - spent:.1f} s"]


def bench_audit(spec: Path, work: Path, label: str, without_regression: bool) -> dict:
    """The audit of ``spec`` end to end and its baselines, printed as they come; the figures."""
    e2e = audit_in_fresh_process(spec, work / "full")
    print(f"\n{label}: {e2e['rows_staged'] or 0:,} staged, every engine of data/specs/hmda.yaml, end to end "
          f"(Prefect, local Dask, 2 workers): {e2e['seconds']:.1f} s ({e2e['status']}), peak memory of every "
          f"process (flow, workers, Prefect API) {e2e['tree_peak_mb'] / 1024:.2f} GB, of the flow's "
          f"{e2e['peak_rss_mb'] / 1024:.2f} GB", flush=True)
    print("\n".join(engine_lines(e2e) + memory_lines(e2e)), flush=True)
    row = {"end_to_end": e2e}
    if e2e.get("lake_path"):
        scan = in_fresh_process(__name__, "scan_lake", e2e["lake_path"])
        row["lake_scan"] = scan
        print(f"  baseline, one DuckDB pass over every column of the staged lake ({scan['rows']:,} rows, fastest "
              f"of 3): {scan['seconds']:.2f} s; the audit takes x{e2e['seconds'] / max(scan['seconds'], 1e-9):,.0f} "
              "its time", flush=True)
    if without_regression:
        rest = [n for n in spec_engines() if n != "regression"]
        bare = audit_in_fresh_process(spec, work / "without_regression", engines=rest)
        row["without_regression"] = bare
        print(f"  baseline, the same audit without the regression engine: {bare['seconds']:.1f} s, peak "
              f"{bare['tree_peak_mb'] / 1024:.2f} GB; the full audit x{e2e['seconds'] / bare['seconds']:.2f} its "
              f"time, x{e2e['tree_peak_mb'] / bare['tree_peak_mb']:.2f} its peak", flush=True)
    return row
