"""``aequum bench national``: a year of national shape audited end to end with every engine of
the shipped spec (``data/specs/hmda.yaml``).

The LAR is the lending-market generator's national shape (``aequum generate hmda --national``:
5,000 lenders of Zipf sizes in 400 markets and 70,000 tracts; world ``dti_penalty``), written
batch by batch to a Parquet file; it is audited as ``flows.bench.audit_run`` audits (Prefect, a
local Dask cluster of 2 workers, each engine's seconds, the peak of every process's memory)
against one DuckDB pass over every column of the staged lake in the same command.

Sizes: ``--rows N`` (default 16,000,000, a national year: an hour or more on 2 cores;
``--quick``: 200,000).
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from aequum.flows.bench.audit_run import bench_audit, write_spec
from aequum.flows.bench.measure import every

YEAR = 16_000_000
QUICK_ROWS = 200_000


def run(quick: bool = False, rows: list[int] | None = None) -> list[dict]:
    from aequum.flows.commands.generate import generate_to_file

    sizes = rows or [QUICK_ROWS if quick else YEAR]
    results = []
    with tempfile.TemporaryDirectory(prefix="aequum-bench-national-") as tmp_dir:
        tmp = Path(tmp_dir)
        for n in sizes:
            print(f"aequum bench national: generating {n:,} applications of national shape (5,000 lenders, "
                  f"400 markets, 70,000 tracts)", flush=True)
            t0 = time.perf_counter()
            source = generate_to_file("hmda_market", tmp / f"national_{n}.parquet", rows=n, seed=0, national=True,
                                      progress=every(10.0))
            generated = time.perf_counter() - t0
            print(f"  generated in {generated:.1f} s", flush=True)
            spec = write_spec(source, tmp / f"national_{n}.yaml")
            row = {"rows": n, "generate_s": generated,
                   **bench_audit(spec, tmp / f"e2e_{n}", f"{n:,} applications of national shape",
                                 without_regression=False)}
            results.append(row)
            source.unlink()
    return results
