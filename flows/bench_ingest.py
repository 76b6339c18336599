"""``aequum bench ingest``: stage generated HMDA LAR rows; rows/s and peak memory.

For each size the same file is also handled by DuckDB alone in the same run, doing the same
work without validation: the spec's columns read, stored as a table in a DuckDB file and
written as Parquet partitioned by group and decision, under the same memory cap (1 GB, or
``AEQUUM_DUCKDB_MEMORY_LIMIT``) and, like staging, without keeping the insertion order in the
partitioned write (with it, DuckDB needs far more memory for 10M rows under the cap). That is the machine's ceiling for this work, and aequum's
figure is reported as a ratio to it (> 1: aequum is slower). Each measurement runs in a fresh
process so its peak RSS is its own.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aequum.flows.benchmarking import peak_rss_mb

SPEC = Path(__file__).resolve().parent.parent / "data" / "specs" / "hmda.yaml"


def _measure_baseline(path: str, out: str) -> dict:
    """DuckDB alone doing the same work without validation: read the spec's columns (as text
    for CSV, as aequum does), store them as a table in a DuckDB file and write them to Parquet
    partitioned by the raw group and decision columns, under the same memory cap."""
    import os

    import duckdb

    from aequum.engines.core.spec import load_spec

    spec = load_spec(SPEC)
    cols = spec.columns()
    t0 = time.perf_counter()
    con = duckdb.connect(str(Path(out).with_suffix(".duckdb")),
                         config={"memory_limit": os.environ.get("AEQUUM_DUCKDB_MEMORY_LIMIT", "1GB")})
    rel = con.read_parquet(path) if path.endswith(".parquet") else con.read_csv(path, all_varchar=True)
    rel = rel.select(*[duckdb.ColumnExpression(c) for c in cols])
    rel.create("staged")
    rows = con.table("staged").count("*").fetchall()[0][0]
    con.execute("SET preserve_insertion_order = false")  # as staging writes the lake
    con.table("staged").to_parquet(out, partition_by=[spec.protected[0].column, spec.decision.column])
    con.close()
    return {"rows": rows, "seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb()}


def _measure_stage(path: str, workdir: str) -> dict:
    from aequum.engines.core.spec import load_spec
    from aequum.flows.staging import stage
    from aequum.flows.warehouse import Warehouse

    spec = load_spec(SPEC)
    raw = spec.model_dump(mode="json")
    raw["source"] = {"kind": "parquet" if path.endswith(".parquet") else "hmda_lar", "path": path,
                     "id_column": spec.source.id_column}
    from aequum.engines.core.spec import parse_spec

    spec = parse_spec(raw)
    t0 = time.perf_counter()
    with Warehouse(Path(workdir) / "wh.duckdb") as wh:
        ref = stage(spec, Path(workdir), wh, Path(workdir) / "lake")
    return {"rows": ref.rows_read, "staged": ref.rows_staged, "quarantined": ref.rows_quarantined,
            "out_of_scope": ref.rows_out_of_scope, "seconds": time.perf_counter() - t0,
            "peak_rss_mb": peak_rss_mb()}


def _in_subprocess(fn: str, *args: str) -> dict:
    code = f"import json, aequum.flows.bench_ingest as b; print(json.dumps(b.{fn}(*{list(args)!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[dict]:
    from aequum.flows.generate import generate_to_file

    sizes = [200_000] if quick else [1_000_000, 10_000_000]
    rows_out: list[dict] = []
    print(f"{'source':26s} {'rows':>11s} {'duckdb s':>9s} {'duckdb r/s':>11s} {'aequum s':>9s} "
          f"{'aequum r/s':>11s} {'x duckdb':>8s} {'peak MB':>8s} {'duckdb MB':>9s}")
    with tempfile.TemporaryDirectory(prefix="aequum-bench-") as tmp:
        for n in sizes:
            formats = ["parquet", "csv"] if n <= 1_000_000 else ["parquet"]
            for fmt in formats:
                path = str(Path(tmp) / f"hmda_{n}.{fmt}")
                generate_to_file("hmda", path, rows=n, seed=0, fmt=fmt)
                base = _in_subprocess("_measure_baseline", path, str(Path(tmp) / f"base_{n}_{fmt}"))
                work = Path(tmp) / f"stage_{n}_{fmt}"
                work.mkdir()
                ours = _in_subprocess("_measure_stage", path, str(work))
                row = {
                    "source": f"HMDA LAR {fmt}", "rows": n,
                    "duckdb_read_partition_s": base["seconds"], "duckdb_rows_per_s": n / base["seconds"],
                    "aequum_stage_s": ours["seconds"], "aequum_rows_per_s": n / ours["seconds"],
                    "ratio_to_duckdb": ours["seconds"] / base["seconds"],
                    "aequum_peak_rss_mb": ours["peak_rss_mb"], "staged": ours["staged"],
                    "quarantined": ours["quarantined"], "out_of_scope": ours["out_of_scope"],
                }
                rows_out.append(row)
                print(f"{row['source']:26s} {n:11,d} {base['seconds']:9.2f} {row['duckdb_rows_per_s']:11,.0f} "
                      f"{ours['seconds']:9.2f} {row['aequum_rows_per_s']:11,.0f} {row['ratio_to_duckdb']:8.2f} "
                      f"{ours['peak_rss_mb']:8.0f} {base['peak_rss_mb']:9.0f}", flush=True)
                for p in Path(tmp).glob(f"hmda_{n}.*"):
                    p.unlink()
    return rows_out
