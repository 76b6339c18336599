"""``aequum bench ingest``: stage generated HMDA LAR rows; rows/s and peak memory.

For each size the same file is also read and partition-written by DuckDB alone (no
validation), in the same run: that is the machine's ceiling, and aequum's figure is reported
as a ratio to it. Each measurement runs in a fresh process so its peak RSS is its own.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = Path(__file__).resolve().parent.parent / "data" / "specs" / "hmda.yaml"


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measure_baseline(path: str, out: str) -> dict:
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect()
    rel = con.read_parquet(path) if path.endswith(".parquet") else con.read_csv(path, all_varchar=True)
    rows = rel.count("*").fetchall()[0][0]
    rel.to_parquet(out, partition_by=["derived_race", "action_taken"])
    return {"rows": rows, "seconds": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb()}


def _measure_stage(path: str, workdir: str) -> dict:
    from engines.core.spec import load_spec
    from flows.staging import stage
    from flows.warehouse import Warehouse

    spec = load_spec(SPEC)
    raw = spec.model_dump(mode="json")
    raw["source"] = {"kind": "parquet" if path.endswith(".parquet") else "hmda_lar", "path": path,
                     "id_column": spec.source.id_column}
    from engines.core.spec import parse_spec

    spec = parse_spec(raw)
    t0 = time.perf_counter()
    with Warehouse(Path(workdir) / "wh.duckdb") as wh:
        ref = stage(spec, Path(workdir), wh, Path(workdir) / "lake")
    return {"rows": ref.rows_read, "staged": ref.rows_staged, "quarantined": ref.rows_quarantined,
            "out_of_scope": ref.rows_out_of_scope, "seconds": time.perf_counter() - t0,
            "peak_rss_mb": _peak_rss_mb()}


def _in_subprocess(fn: str, *args: str) -> dict:
    code = f"import json, flows.bench_ingest as b; print(json.dumps(b.{fn}(*{list(args)!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[dict]:
    from flows.generate import generate_to_file

    sizes = [200_000] if quick else [1_000_000, 10_000_000]
    rows_out: list[dict] = []
    print(f"{'source':26s} {'rows':>11s} {'duckdb s':>9s} {'duckdb r/s':>11s} {'aequum s':>9s} "
          f"{'aequum r/s':>11s} {'ratio':>6s} {'peak MB':>8s}")
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
                    "ratio_to_duckdb": base["seconds"] / ours["seconds"],
                    "aequum_peak_rss_mb": ours["peak_rss_mb"], "staged": ours["staged"],
                    "quarantined": ours["quarantined"], "out_of_scope": ours["out_of_scope"],
                }
                rows_out.append(row)
                print(f"{row['source']:26s} {n:11,d} {base['seconds']:9.2f} {row['duckdb_rows_per_s']:11,.0f} "
                      f"{ours['seconds']:9.2f} {row['aequum_rows_per_s']:11,.0f} {row['ratio_to_duckdb']:6.2f} "
                      f"{ours['peak_rss_mb']:8.0f}", flush=True)
                for p in Path(tmp).glob(f"hmda_{n}.*"):
                    p.unlink()
    return rows_out
