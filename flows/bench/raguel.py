"""``aequum bench raguel``: RAGUEL at the paper's size and at HMDA scale.

1. 30,000 ranked records (the paper's DC3 size; it reports under 2.5 s): the generated loan data
   priced against a boundary every applicant is below, Algorithm 1 and Algorithm 2 (blocks of
   100) through the engine, each timed.
2. 10M generated HMDA records (``--quick``: 1M), staged to the lake, then ranked out of core by
   DuckDB and re-ranked block by block (size 100) by the streaming Algorithm 2, written to
   Parquet; records/s and peak RSS, with the bare DuckDB sorted scan of the same query measured
   in the same run as the floor.
3. Algorithm 2's repair table at both sizes: unfair blocks before/after, points changed and r
   before/after for each reading of the paper's choices (Eq. 3 on every swap or only outside
   the recourse tolerance or as "r may not fall"; the strict recourse rule; the records in
   neither group kept as a third group or left out), on the same ranked records in memory.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from aequum.flows.bench.measure import peak_rss_mb

REPO = Path(__file__).resolve().parents[2]


REPAIR_READINGS = [                      # (label, params of rerank_blocks, two groups only)
    ("default: Eq. 3 outside tolerance", {}, False),
    ("Eq. 3 on every swap", {"eq3": "always"}, False),
    ("Eq. 3 as 'r may not fall'", {"eq3": "no_worse"}, False),
    ("recourse strict", {"recourse": "strict"}, False),
    ("two groups (others left out)", {}, True),
    ("two groups, 'r may not fall'", {"eq3": "no_worse"}, True),
]


def repair_table(cost, group, X, model, block_size: int = 100, t: float = 1 / 3) -> list[dict]:
    """Algorithm 2 on one ranked list under each reading in REPAIR_READINGS."""
    import numpy as np

    from aequum.engines.reranking.algorithms import rerank_blocks
    from aequum.engines.reranking.fairness import ratio_of, shares

    rows = []
    for label, kw, two in REPAIR_READINGS:
        keep = group < 2 if two else np.ones(len(group), bool)
        c, g, x = cost[keep].copy(), group[keep], X[keep].copy()
        G = int(g.max()) + 1
        p = shares(g, G)
        n = len(c)
        t0 = time.process_time()
        out = list(rerank_blocks(c, g, x, model, p, (list(range(s, min(s + block_size, n)))
                                                     for s in range(0, n, block_size)), t, **kw))
        secs = time.process_time() - t0
        order = np.concatenate([m for m, _ in out])
        row = {"reading": label, "records": n, "groups": G, "blocks": len(out),
               "unfair_before": sum(not i["fair_before"] for _, i in out),
               "unfair_after": sum(not i["fair_after"] for _, i in out),
               "points_changed": sum(1 for _, i in out for _, _, a in i["moves"] if a.attributes),
               "r_before": ratio_of(cost[keep], g, G), "r_after": ratio_of(c[order], g[order], G),
               "cpu_seconds": secs}
        rows.append(row)
        print(f"  {label:34s} {n:>9,} rec {G} groups: unfair blocks {row['unfair_before']:>5,} -> "
              f"{row['unfair_after']:>5,} of {len(out):,}; points changed {row['points_changed']:>5,}; "
              f"r {row['r_before']:.4f} -> {row['r_after']:.4f}; {secs:.1f} s CPU")
    return rows


def paper_size(rows: int = 30_000) -> dict:
    from aequum.engines.core.spec import load_spec, parse_spec
    from aequum.engines.reranking.engine import RaguelEngine
    from aequum.flows.bench.cst import _stage

    raw = load_spec(REPO / "data" / "specs" / "loan.yaml").model_dump(mode="json")
    raw["source"]["rows"] = rows
    raw["engines"]["raguel"] = {"boundary": "linear", "population": "all",
                                "coefficients": {"AnnualSalary": 1.0, "AccountBalance": 5.0},
                                "intercept": -1_000_000.0, "sweep_tolerances": [], "block_size": 100}
    spec = parse_spec(raw)
    with tempfile.TemporaryDirectory() as tmp:
        data = _stage(spec, REPO / "data" / "specs", Path(tmp))
    engine = RaguelEngine()
    t0 = time.perf_counter()
    state = engine.prepare(data, spec.engines.raguel)
    prep = time.perf_counter() - t0
    res = {}
    for alg in ("full", "block"):
        t0 = time.perf_counter()
        out = engine.run_piece(state, (0, alg, 1 / 3, 100, "main"))
        secs = time.perf_counter() - t0
        s = out["raguel_summary"].to_pylist()[0]
        res[alg] = s["seconds"]
        print(f"  Algorithm {'1 (full)' if alg == 'full' else '2 (blocks of 100)'}: {s['seconds']:.2f} s for "
              f"{s['n']:,} records (+ {prep:.2f} s pricing and ranking; {secs:.2f} s with the tables and "
              f"the exact rKL/rND/rRD normalisers); points changed "
              f"{s['points_changed']}, r {s['r_before']:.3f} -> {s['r_after']:.3f}, rND "
              f"{s['rND_before']:.3f} -> {s['rND_after']:.3f}, success {s['success']}")
    print(f"30k records: paper < 2.5 s; aequum full {res['full'] + prep:.2f} s, block {res['block'] + prep:.2f} s")
    print("  Algorithm 2 repair table (blocks of 100):")
    r = state.ranked[0]
    table = repair_table(r.cost, r.group, r.X, state.model)
    return {"prepare_seconds": prep, **{f"{k}_seconds": v for k, v in res.items()}, "repair_table": table}


HMDA_RAGUEL = {
    "boundary": "linear", "population": "all", "block_size": 100, "sweep_tolerances": [],
    "coefficients": {"income": 0.02, "loan_amount": -0.000001, "combined_loan_to_value_ratio": -0.05},
    "intercept": -20.0,       # a top-tier query every applicant is below: costs for all of them
}
HMDA_WEIGHTS = {"income": (1.0, 1.0, "increase"), "loan_amount": (1e-8, 10_000, "decrease"),
                "combined_loan_to_value_ratio": (0.01, 1.0, "decrease")}


def at_scale(rows: int) -> dict:
    import duckdb
    import pyarrow.parquet as pq

    from aequum.engines.core.spec import parse_spec
    from aequum.engines.reranking.engine import recourse_model
    from aequum.flows.bench.cst import generated_hmda
    from aequum.flows.raguel_stream import ranked_query, rerank_lake
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw, gen = generated_hmda(tmp, rows)
        raw["model"] = None
        for f in raw["features"]:
            if f["name"] in HMDA_WEIGHTS:
                f["recourse_weight"], f["step"], f["mutability"] = HMDA_WEIGHTS[f["name"]]
        raw["engines"] = {"run": ["raguel"], "raguel": HMDA_RAGUEL}
        raw["scm"] = None
        spec = parse_spec(raw)
        t0 = time.perf_counter()
        with Warehouse(tmp / "wh.duckdb") as wh:
            ref = stage(spec, tmp, wh, tmp / "lake")
        staging = time.perf_counter() - t0
        params = spec.engines.raguel
        # the floor: DuckDB alone pricing, sorting and handing over the same batches
        features, model = recourse_model(spec, params)
        con = duckdb.connect()
        con.execute("SET memory_limit = '1GB'")
        t0 = time.perf_counter()
        reader = con.sql(ranked_query(features, "sex", False),
                         params=[str(Path(ref.lake_path) / "**" / "*.parquet"), model.b, model.norm,
                                 *map(float, model.a)]).to_arrow_reader(100_000)
        n_bare = sum(b.num_rows for b in reader)
        bare = time.perf_counter() - t0
        con.close()
        t0 = time.perf_counter()
        summary = rerank_lake(ref.lake_path, spec, params, "sex", tmp / "reranked.parquet", memory_limit="1GB")
        secs = time.perf_counter() - t0
        written = pq.ParquetFile(tmp / "reranked.parquet").metadata.num_rows
        con = duckdb.connect()
        con.execute("SET memory_limit = '1GB'")
        ranked = con.sql(ranked_query(features, "sex", False),
                         params=[str(Path(ref.lake_path) / "**" / "*.parquet"), model.b, model.norm,
                                 *map(float, model.a)]).to_arrow_table()
        con.close()
    n = summary["n"]
    print(f"HMDA {rows:,} rows generated in {gen:.0f} s, staged in {staging:.0f} s "
          f"({ref.rows_staged:,} staged); sex: {n:,} ranked records (protected share "
          f"{summary['protected_share']:.3f})")
    print(f"  RAGUEL-Block (size 100), DuckDB out-of-core ranking + streaming re-rank + Parquet: "
          f"{secs:.1f} s = {n / secs:,.0f} records/s; bare DuckDB priced sorted scan {bare:.1f} s "
          f"({n_bare:,} rows): ratio {secs / bare:.2f}; peak RSS {peak_rss_mb():,.0f} MB")
    print(f"  blocks {summary['blocks']:,}, unfair {summary['unfair_blocks_before']:,} -> "
          f"{summary['unfair_blocks_after']:,}, points changed {summary['points_changed']:,}, "
          f"r {summary['r_before']:.4f} -> {summary['r_after']:.4f}, written {written:,} rows")
    print("  Algorithm 2 repair table (blocks of 100, in memory):")
    import numpy as np
    table = repair_table(ranked.column("cost").to_numpy(), ranked.column("group").to_numpy().astype(np.int64),
                         np.column_stack([ranked.column(f).to_numpy().astype(float) for f in features]), model)
    return {"rows": rows, "ranked": n, "seconds": secs, "records_per_second": n / secs,
            "bare_duckdb_seconds": bare, "peak_rss_mb": peak_rss_mb(), **summary, "repair_table": table}


def run(quick: bool = False, rows: int | list[int] | None = None) -> dict:
    """The paper's size, then ``rows`` records out of core (the command line's ``--rows``: its
    first size; default 10M, 1M with ``quick``)."""
    rows = rows[0] if isinstance(rows, list) else rows
    print("RAGUEL at the paper's size (30k records):")
    out = {"paper_size": paper_size()}
    out["at_scale"] = at_scale(rows or (1_000_000 if quick else 10_000_000))
    return out


if __name__ == "__main__":
    import sys
    run(rows=int(sys.argv[1]) if len(sys.argv) > 1 else None)
