"""``aequum bench pba``: PBA verification speed and the paper's Table 3 on German credit.

1. Throughput: inputs verified per second for (100, 50), (200, 100) and (500, 100) ReLU
   networks trained on German credit (the ``german_credit_pba`` spec: age group as the
   sensitive input), at δ = 1, 2, 3 separately, PBA only (robustness off), with the pieces
   spread over 2 worker processes as the audit flow spreads them over Dask workers; and the
   share of considered inputs decided without an LP. The paper reports 0.24 / 0.90 / 2.15 s
   per input at δ = 1 (0.30 / 1.30 / 3.04 at δ = 2, 0.36 / 1.66 / 3.82 at δ = 3) with Gurobi
   on 8 cores.
2. The paper's Table 3 in its setup (``german_credit_pba_table3``: the (100, 50) network fitted
   on 80 % of the applicants, verified on the held-out 20 %; RB as robustness accuracy): SP,
   TPR, CFA, RB and PBA observed / flipped per δ, Junior vs Senior, beside the paper's
   fairness-agnostic (100, 50) cells; docs/engines.md's table is this output (tests/test_pba_table3.py).
"""
from __future__ import annotations

import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "data" / "specs" / "german_credit_pba.yaml"
PAPER_SECONDS = {(100, 50): (0.24, 0.30, 0.36), (200, 100): (0.90, 1.30, 1.66), (500, 100): (2.15, 3.04, 3.82)}


def paper_table(summary, names: dict[str, str]) -> str:
    """The paper's Table 1/3 layout as Markdown: one column per group (flipped rows under the
    group the model is shown, as the paper prints them), one row per metric and δ."""
    import polars as pl

    s = summary
    groups = list(names)
    head = "| metric | setting | δ | " + " | ".join(names[g] for g in groups) + " |"
    lines = [head, "|" + " --- |" * (3 + len(groups))]

    def pct(v):
        return "–" if v is None else f"{100 * v:.1f}%"

    obs = s.filter(pl.col("setting") == "observed")
    first = obs.filter(pl.col("delta") == obs["delta"].min())
    for metric, col in (("SP", "favourable_rate"), ("EO (TPR)", "tpr"), ("CFA", "cfa")):
        vals = [first.filter(pl.col("group_name") == g)[col].to_list() for g in groups]
        lines.append(f"| {metric} | – | – | " + " | ".join(pct(v[0] if v else None) for v in vals) + " |")
    for metric, col in (("RB", "robustness"), ("PBA", "pba")):
        for setting in ("observed", "flipped"):
            part = s.filter(pl.col("setting") == setting)
            for delta in sorted(set(part["delta"])):
                row = part.filter(pl.col("delta") == delta)
                vals = [row.filter(pl.col("presented_group") == g)[col].to_list() for g in groups]
                lines.append(f"| {metric} | {setting} | {delta:g} | "
                             + " | ".join(pct(v[0] if v else None) for v in vals) + " |")
    return "\n".join(lines)


def _stage(rows_sample: int | None, hidden: tuple[int, int], deltas: list[float], robustness: bool,
           tmp: Path, epochs: int = 200):
    import yaml

    from aequum.engines.core.data import AuditData
    from aequum.engines.core.spec import parse_spec
    from aequum.flows.model_step import fit_model
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    raw = yaml.safe_load(SPEC.read_text())
    raw["model"].update(hidden=list(hidden), epochs=epochs)
    raw["engines"]["pba"] = {"deltas": deltas, "robustness": robustness, "batch_size": 32,
                             **({"sample": rows_sample} if rows_sample else {})}
    spec = parse_spec(raw)
    with Warehouse(tmp / f"w{hidden[0]}.duckdb") as wh:
        ref = stage(spec, SPEC.parent, wh, tmp / f"lake{hidden[0]}")
        table = wh.staged(ref.version)
    model = fit_model(spec, SPEC.parent, table, ref.categories)
    return AuditData(spec, table, ref.categories, model)


def _stage_spec(path: Path, tmp: Path):
    """Stage the spec at ``path`` and fit its model, as the audit does: its AuditData."""
    from aequum.engines.core.data import AuditData
    from aequum.engines.core.spec import load_spec
    from aequum.flows.model_step import fit_model
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    spec = load_spec(path)
    with Warehouse(tmp / "table3.duckdb") as wh:
        ref = stage(spec, path.parent, wh, tmp / "lake_table3")
        table = wh.staged(ref.version)
    return AuditData(spec, table, ref.categories, fit_model(spec, path.parent, table, ref.categories))


def _verify(data, workers: int = 2):
    """The engine's pieces over ``workers`` processes (as Dask spreads them); seconds, tables."""
    from aequum.engines.verification.engine import PBAEngine

    engine = PBAEngine()
    t0 = time.perf_counter()
    state = engine.prepare(data, data.spec.engines.pba)
    pieces = engine.pieces(state)
    with ProcessPoolExecutor(workers) as pool:
        parts = list(pool.map(engine.run_piece, [state] * len(pieces), pieces))
    out = engine.combine(state, parts)
    return time.perf_counter() - t0, out


def throughput(inputs: int, sizes=((100, 50), (200, 100), (500, 100))) -> list[dict]:
    import polars as pl

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for hidden in sizes:
            data = _stage(inputs, hidden, [1.0], False, Path(tmp))
            for k, delta in enumerate((1.0, 2.0, 3.0)):
                raw = data.spec.model_dump(mode="json")
                raw["engines"]["pba"]["deltas"] = [delta]
                from aequum.engines.core.data import AuditData
                from aequum.engines.core.spec import parse_spec

                d = AuditData(parse_spec(raw), data.table, data.categories, data.model)
                secs, out = _verify(d)
                rows = pl.from_arrow(out["pba_inputs"]).filter(pl.col("setting") == "observed")
                n = rows.height
                con = pl.from_arrow(out["pba_inputs"]).filter(pl.col("considered"))
                work = con.filter(~((pl.col("method") == "centre")))
                res = {"hidden": hidden, "delta": delta, "inputs": n, "seconds": secs,
                       "inputs_per_second": n / secs, "seconds_per_input": secs / n,
                       "paper_seconds_per_input": PAPER_SECONDS[hidden][k],
                       "speedup": PAPER_SECONDS[hidden][k] / (secs / n),
                       "considered_share": rows["considered"].mean(),
                       "decided_without_lp": float(work["method"].is_in(["symbolic", "search"]).mean())
                       if work.height else 1.0,
                       "lp_solved": int(work["method"].is_in(["lp", "open"]).sum()),
                       "inconclusive": int((con["verdict"] == "inconclusive").sum()),
                       "fidelity": data.model.fidelity}
                results.append(res)
                print(f"({hidden[0]}, {hidden[1]}) δ={delta:g}: {n} inputs in {secs:.2f} s = "
                      f"{res['inputs_per_second']:.1f} inputs/s ({1000 * res['seconds_per_input']:.1f} ms/input; "
                      f"paper {PAPER_SECONDS[hidden][k]} s -> {res['speedup']:.0f}x); "
                      f"considered {100 * res['considered_share']:.0f}%; "
                      f"bound queries decided without an LP {100 * res['decided_without_lp']:.1f}% "
                      f"({res['lp_solved']} LPs), inconclusive {res['inconclusive']}")
    return results


TABLE3_SPEC = REPO / "data" / "specs" / "german_credit_pba_table3.yaml"
# The paper's Table 3, "fairness-agnostic", network (100, 50): (Junior, Senior) per row, in %;
# flipped rows under the group the model is shown, as the paper prints them.
PAPER_TABLE3 = {
    ("SP", "–", None): (76.3, 81.5), ("EO (TPR)", "–", None): (85.0, 91.0), ("CFA", "–", None): (94.7, 93.8),
    ("RB", "observed", 1): (100.0, 100.0), ("RB", "observed", 2): (95.7, 97.6), ("RB", "observed", 3): (95.7, 95.2),
    ("RB", "flipped", 1): (97.6, 100.0), ("RB", "flipped", 2): (95.2, 95.7), ("RB", "flipped", 3): (95.2, 95.7),
    ("PBA", "observed", 1): (21.7, 80.0), ("PBA", "observed", 2): (21.7, 77.6), ("PBA", "observed", 3): (17.4, 76.0),
    ("PBA", "flipped", 1): (16.0, 78.3), ("PBA", "flipped", 2): (15.2, 73.9), ("PBA", "flipped", 3): (12.8, 69.6),
}


def table3_rows(summary) -> list[tuple[str, str, float | None, dict[str, str]]]:
    """The Table 3 cells of a pba_summary, as "57.9% (22/38)": SP, TPR and CFA of the inputs,
    RB as the paper's robustness accuracy (among the considered inputs), PBA (verified of
    considered), per group shown; RB and PBA per setting and δ."""
    import polars as pl

    s = summary.filter(pl.col("attribute") == summary["attribute"][0])

    def cell(row, value, num, den):
        return "–" if row is None or row[value] is None else \
            f"{100 * row[value]:.1f}% ({int(round(row[num]))}/{int(row[den])})"

    out = []
    first = s.filter((pl.col("setting") == "observed") & (pl.col("delta") == s["delta"].min()))
    for metric, col in (("SP", "favourable_rate"), ("EO (TPR)", "tpr"), ("CFA", "cfa")):
        cells = {}
        for g in ("protected", "reference"):
            part = first.filter(pl.col("group_name") == g)
            r = part.row(0, named=True) if part.height else None
            cells[g] = "–" if r is None or r[col] is None else f"{100 * r[col]:.1f}% of {r['inputs']}"
        out.append((metric, "–", None, cells))
    for metric, col, num in (("RB", "robust_accuracy", "robust_considered"), ("PBA", "pba", "verified")):
        for setting in ("observed", "flipped"):
            for delta in sorted(set(s["delta"])):
                cells = {}
                for g in ("protected", "reference"):
                    part = s.filter((pl.col("setting") == setting) & (pl.col("delta") == delta)
                                    & (pl.col("presented_group") == g))
                    r = part.row(0, named=True) if part.height else None
                    if r is not None and metric == "RB":
                        r = dict(r, robust_considered=(r["robust_accuracy"] or 0) * r["considered"])
                    cells[g] = cell(r, col, num, "considered")
                out.append((metric, setting, delta, cells))
    return out


def table3_markdown(summary) -> str:
    """Today's cells beside the paper's (Table 3, fairness-agnostic (100, 50))."""
    lines = ["| metric | setting | δ | Junior (≤ 25) | paper | Senior | paper |",
             "|---|---|---|---|---|---|---|"]
    for metric, setting, delta, cells in table3_rows(summary):
        paper = PAPER_TABLE3[(metric, setting, None if delta is None else int(delta))]
        lines.append(f"| {metric} | {setting} | {'–' if delta is None else f'{delta:g}'} | "
                     f"{cells['protected']} | {paper[0]:.1f}% | {cells['reference']} | {paper[1]:.1f}% |")
    return "\n".join(lines)


def table3_summary(workers: int = 2, time_limit: bool = True):
    """pba_summary of the Table 3 spec (``german_credit_pba_table3``), its model, the seconds
    and pba_inputs; ``workers`` 0: the engine's pieces in this process; ``time_limit`` False:
    the solver without the spec's time limit (the tests: a loaded machine cannot change it)."""
    import polars as pl

    from aequum.engines.core.engine import run_serial

    with tempfile.TemporaryDirectory() as tmp:
        data = _stage_spec(TABLE3_SPEC, Path(tmp))
        if workers:
            secs, out = _verify(data, workers)
        else:
            from aequum.engines.verification.engine import PBAEngine

            params = data.spec.engines.pba if time_limit else data.spec.engines.pba.model_copy(
                update={"time_limit": None})
            t0 = time.perf_counter()
            out = run_serial(PBAEngine(), data, params)
            secs = time.perf_counter() - t0
    return pl.from_arrow(out["pba_summary"]), data.model, secs, pl.from_arrow(out["pba_inputs"])


def table3() -> str:
    s, model, secs, _ = table3_summary()
    text = table3_markdown(s)
    print(f"German credit, the paper's Table 3 setup ({TABLE3_SPEC.name}): (100, 50) network fitted on "
          f"{int(model.fidelity['train_n'])} applicants, verified on the {int(model.fidelity['holdout_n'])} "
          f"held out (test accuracy {model.fidelity['holdout']:.3f}), δ = 1, 2, 3, {secs:.1f} s")
    print(text)
    return text


def run(quick: bool = False) -> dict:
    if not SPEC.exists() or not (REPO.parent / "shared" / "data" / "FGCE" / "GermanCredit.data").exists():
        raise FileNotFoundError("bench pba reads ../shared/data/FGCE/GermanCredit.data")
    res = {"throughput": throughput(60 if quick else 300)}
    res["table3"] = table3()
    return res
