"""``aequum bench cst``: the paper's Table 1 and CST at scale.

1. Table 1 (ST, CST w/o centres, CST at k = 15/30/50/100, and CF) on the reference loan data,
   side by side with the same work done naively in the same run: one full scan of the search
   spaces per complainant (what the reference implementation does; it takes about 73 s).
2. CST at k = 100 for every protected complainant of 1M generated HMDA rows, with peak RSS,
   plus the precision / recall of the claims against the generator's ground truth.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from aequum.flows.bench.measure import peak_rss_mb

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data" / "counterfactual-situation-testing" / "data" / "LoanApplication_v2.csv"




def _stage(spec, spec_dir: Path, tmp: Path):
    from aequum.engines.core.data import AuditData
    from aequum.flows.model_step import fit_model
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    with Warehouse(tmp / "wh.duckdb") as wh:
        ref = stage(spec, spec_dir, wh, tmp / "lake")
        table = wh.staged(ref.version)
    return AuditData(spec, table, ref.categories, fit_model(spec, spec_dir, table, ref.categories))


def naive_table_1(data, params) -> dict[tuple[str, int], int]:
    """Per complainant, full scans of the protected and non-protected spaces (the reference's way)."""
    from aequum.engines.matching.cst.engine import CSTEngine

    state = CSTEngine().prepare(data, params)
    test = state.tests[0]
    F, C = test.factual.metric, test.counterfactual.metric
    prot, ref = np.flatnonzero(test.protected), np.flatnonzero(test.reference)
    # the state holds the complainants' counterfactuals only: row i of C is complainants[i]'s
    neg, neg_cf = (state.decision == 0).astype(float), (test.decision_cf == 0).astype(float)
    counts: dict[tuple[str, int], int] = {}
    for i, c in enumerate(test.complainants):
        dc = np.abs(F[prot] - F[c]).sum(1) / F.shape[1]
        dc[prot == c] = np.inf
        ctrl = prot[np.lexsort((prot, dc))]
        ds = np.abs(F[ref] - F[c]).sum(1) / F.shape[1]
        st = ref[np.lexsort((ref, ds))]
        dt = np.abs(F[ref] - C[i]).sum(1) / F.shape[1]
        tst = ref[np.lexsort((ref, dt))]
        for k in params.k:
            pc, pt_st, pt = neg[ctrl[:k]].mean(), neg[st[:k]].mean(), neg[tst[:k]].mean()
            pc_c = (neg[ctrl[:k]].sum() + neg[c]) / (k + 1)
            pt_c = (neg[tst[:k]].sum() + neg_cf[i]) / (k + 1)
            for method, dp in (("ST", pc - pt_st), ("CST_wo_centres", pc - pt), ("CST", pc_c - pt_c)):
                counts[(method, k)] = counts.get((method, k), 0) + int(dp > params.tau)
        counts[("CF", 0)] = counts.get(("CF", 0), 0) + int(neg[c] - neg_cf[i] > params.tau)
    return counts


def table_1() -> dict:
    import polars as pl

    from aequum.engines.core.engine import run_serial
    from aequum.engines.core.spec import load_spec
    from aequum.engines.matching.cst.engine import CSTEngine

    if not SHARED.exists():
        print(f"skipping Table 1: {SHARED} is absent")
        return {}
    spec = load_spec(REPO / "data" / "specs" / "loan_reference.yaml")
    params = spec.engines.cst.model_copy(update={"evidence": "none"})
    with tempfile.TemporaryDirectory() as tmp:
        data = _stage(spec, REPO / "data" / "specs", Path(tmp))
        t0 = time.perf_counter()
        out = run_serial(CSTEngine(), data, params)
        fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        naive = naive_table_1(data, params)
        slow = time.perf_counter() - t0
    s = pl.from_arrow(out["cst_summary"])
    got = {(r["method"], r["k"]): r["discriminated"] for r in s.iter_rows(named=True)}
    same = got == naive
    print(f"Table 1 (4 methods x 4 k + CF, 1,712 complainants): aequum {fast:.3f} s, naive per-complainant "
          f"scan {slow:.2f} s, speed-up {slow / fast:.0f}x, identical counts: {same}; reference ~73 s "
          f"({73 / fast:.0f}x)")
    for method in ("ST", "CST_wo_centres", "CST"):
        print(f"  {method:15s} " + "  ".join(f"k={k}: {got[(method, k)]}" for k in params.k))
    print(f"  CF              {got[('CF', 0)]}")
    return {"table1_seconds": fast, "naive_seconds": slow, "speedup": slow / fast, "identical": same}


def score(spec, spec_dir: Path, out: dict, seconds: float):
    """CST's tables from ``run_serial`` scored against the source's truth as the audit flow
    scores an engine's outcome (``flows.ground_truth.score_run``), as a polars frame."""
    import polars as pl

    from aequum.engines.matching.cst.engine import CSTEngine
    from aequum.flows.engine_tasks import EngineOutcome
    from aequum.flows.ground_truth import score_run

    outcome = EngineOutcome("cst", "succeeded", seconds, 1, out, dict(CSTEngine.tables))
    return pl.from_arrow(score_run(spec, spec_dir, [outcome], lambda _m: None))


def generated_hmda(tmp: Path, rows: int) -> tuple[dict, float]:
    """Generate ``rows`` HMDA LAR records into ``tmp``; return the HMDA spec (as a dict, source
    pointed at the file) and the seconds it took."""
    from aequum.engines.core.spec import load_spec
    from aequum.flows.commands.generate import generate_to_file

    t0 = time.perf_counter()
    path = generate_to_file("hmda", tmp / "hmda.parquet", rows=rows, seed=0)
    gen = time.perf_counter() - t0
    raw = load_spec(REPO / "data" / "specs" / "hmda.yaml").model_dump(mode="json")
    raw["source"] = {"kind": "parquet", "path": str(path), "id_column": None}
    return raw, gen


def at_scale(rows: int) -> dict:
    """CST at k = 100 over every protected applicant of ``rows`` generated HMDA records, its
    findings scored against the generator's truth as every audit scores them
    (``flows.ground_truth.score_run``: total effect for CST and CF, direct for ST)."""
    import polars as pl

    from aequum.engines.core.engine import run_serial
    from aequum.engines.core.spec import parse_spec
    from aequum.engines.matching.cst.engine import CSTEngine

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw, gen = generated_hmda(tmp, rows)
        # the applicant's groups, whose truth the generator writes (not the tract attribute)
        raw["protected"] = [p for p in raw["protected"] if not p.get("protected_range")]
        raw["source"]["truth"] = {"path": "hmda_truth.parquet", "direct": "harmed",
                                  "total": {p["name"]: f"harmed_total_{p['column']}" for p in raw["protected"]}}
        raw["engines"]["cst"].update({"k": [100], "complainants": "all", "evidence": "none", "sample": None})
        spec = parse_spec(raw)
        t0 = time.perf_counter()
        data = _stage(spec, tmp, tmp)
        prep = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = run_serial(CSTEngine(), data, spec.engines.cst)
        secs = time.perf_counter() - t0
        det = score(spec, tmp, out, secs)
    n_comp = pl.from_arrow(out["cst_claims"]).filter(pl.col("method") == "CST").height
    print(f"CST k=100 over {rows:,} HMDA rows: generate {gen:.1f} s, stage + surrogate fit {prep:.1f} s, "
          f"CST {secs:.1f} s for {n_comp:,} complainants (every attribute); peak RSS {peak_rss_mb():,.0f} MB")
    res = {"rows": rows, "cst_seconds": secs, "peak_rss_mb": peak_rss_mb(), "complainants": n_comp}
    race = det.filter((pl.col("protected_attribute") == "race") & pl.col("same_kind")
                      & (pl.col("finding") == pl.when(pl.col("method") == "CF").then(pl.lit("discriminated"))
                         .otherwise(pl.lit("significant"))))
    for r in race.sort("method").iter_rows(named=True):
        print(f"  race, {r['method']:15s} {r['finding']} ({r['effect']} effect): {r['flagged']:,} of "
              f"{r['population']:,} flagged, precision {r['precision']:.3f} (base rate {r['base_rate']:.3f}), "
              f"recall {r['recall']:.3f}")
        res[f"{r['method']}_precision"], res[f"{r['method']}_recall"] = r["precision"], r["recall"]
    return res


def run(quick: bool = False) -> list[dict]:
    return [table_1(), at_scale(100_000 if quick else 1_000_000)]
