"""``aequum bench fairlending``: the controlled denial regression at HMDA scale, against the
logit a fair-lending screen on the registry runs and against statsmodels.

For each size (default 1M and 10M rows; ``--quick``: 200k) generated HMDA LAR rows
(``engines.generators.hmda``, the default world) are staged under ``data/specs/hmda.yaml``
(its model left out: the regression reads the recorded decisions), then, each in a fresh
process so that its peak memory is its own:

- **aequum, examiner's design**: the regression engine's test of the pooled race comparison
  (Black, Asian, … against White applicants) as the spec sets it — log income, log loan amount,
  log property value, CLTV, the DTI bins, loan type and purpose as controls, market
  (``derived_msa_md``) and lender (``lei``) fixed effects absorbed, intervals clustered by
  lender, the other attributes' groups held, and the linear model with its sensitivity beside
  the logit: seconds and peak RSS of the process (which holds the staged records the engine
  declares, read from the warehouse first: that read is timed apart);
- the same **without the fixed effects** (the market and lender as nothing), the cost of
  absorbing them.

At the first size (up to 1M rows), the **controls ladder**: the pooled race odds ratio with no controls, with
the recorded inputs (the other groups held), within market and lender, and with the credit
score the LAR lacks added (the generator's lender records, joined by row number): how much of
the raw disparity the controls explain and what the omitted factor leaves, with the linear
model's difference in points and robustness value at each step (the odds ratio is not
collapsible: adding a strong predictor of denial that is unrelated to the group moves it away
from 1 even with nothing confounded; the difference in points is collapsible).

At the first size up to 1M rows, on the same LAR rows:

- **fair-lending-screener 0.2.2** (``adjusted_denial_disparity``: statsmodels' Logit with
  its FFIEC-style controls and MSA dummies, after its ``prepare_for_analysis`` filters:
  conventional, home purchase, first lien, principal residence). The bench corrects its
  column names (the snapshot's ``combined_loan_to_value_ratio`` is its ``loan_to_value_ratio``,
  ``derived_msa_md`` its ``msa_md``); its DTI parsing is left as it is (the published ranges
  "<20%", "20%-<30%", "30%-<36%", "50%-60%", ">60%" become its "missing" dummy). Then aequum's
  ``controlled_logit`` on exactly its design matrix: the same odds ratio (relative difference
  printed) and the time of the same fit. Its design is rank-deficient on the LAR (with the
  published ranges parsed to "missing", its DTI dummies sum to its constant; statsmodels'
  Newton step is a pseudo-inverse): aequum's fit leaves out the redundant ``dti_missing``,
  which changes no other coefficient.
  Skipped with a note when the package is not installed (``pip install fair-lending-screener``).
- **statsmodels** ``Logit`` with the market and lender effects as dummy columns and
  ``cov_type="cluster"`` on a 100,000-row sample of the examiner's design (the full design's
  dummy matrix does not fit in memory at 1M rows): the odds ratio and its cluster-robust
  standard error against aequum's on the same sample, and the time ratio.

Goal: 10M rows in under 2 minutes and 4 GB for the examiner's design (measured: docs/benchmarks.md).
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from aequum.flows.bench.measure import in_fresh_process, peak_rss_mb

REPO = Path(__file__).resolve().parents[2]
SAMPLE = 100_000


def _spec(rows: int):
    import yaml

    from aequum.engines.core.spec import parse_spec

    raw = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    raw["source"].update({"rows": rows, "seed": 0})
    raw.pop("model", None)
    raw["engines"]["run"] = ["regression"]
    raw["engines"].pop("pba", None)
    raw["engines"]["regression"]["segments"] = []
    return raw, parse_spec(raw)


def stage_world(rows: str, tmp: str) -> dict:
    """Stage ``rows`` generated LAR rows into ``tmp`` (its warehouse and lake)."""
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    _, spec = _spec(int(rows))
    t0 = time.perf_counter()
    with Warehouse(Path(tmp) / "wh.duckdb") as wh:
        ref = stage(spec, REPO / "data" / "specs", wh, Path(tmp) / "lake")
    return {"version": ref.version, "categories": ref.categories, "seconds": time.perf_counter() - t0}


def _data(rows: int, tmp: str, staged: dict):
    from aequum.engines.core.data import AuditData
    from aequum.flows.store.warehouse import Warehouse

    _, spec = _spec(rows)
    params = spec.engines.params("regression")
    from aequum.engines.regression.engine import RegressionEngine

    from aequum.flows.store.warehouse import quote_ident, staged_table

    columns = set(RegressionEngine().columns(spec, params))
    with Warehouse(Path(tmp) / "wh.duckdb", read_only=True) as wh:
        table = staged_table(staged["version"])
        names = [r[0] for r in wh.con.execute(f"DESCRIBE {table}").fetchall()]
        wanted = ", ".join(quote_ident(c) for c in names if c.startswith("_") or c in columns)
        records = wh.con.sql(f"SELECT {wanted} FROM {table} ORDER BY _row").to_arrow_table()
    return AuditData(spec, records, staged["categories"]), params


def measure_ours(rows: str, tmp: str, staged_json: str, fixed: str) -> dict:
    """The pooled race test of the regression engine, with or without the fixed effects."""
    from aequum.engines.regression.engine import RegressionEngine

    staged = json.loads(staged_json)
    t0 = time.perf_counter()
    data, params = _data(int(rows), tmp, staged)
    read = time.perf_counter() - t0
    if fixed != "yes":
        params = params.model_copy(update={"fixed_effects": [], "cluster": None})
    engine = RegressionEngine()
    t0 = time.perf_counter()
    state = engine.prepare(data, params)
    row = engine.run_piece(state, "race")["regression_estimates"].to_pylist()[0]
    seconds = time.perf_counter() - t0
    return {"read_seconds": read, "seconds": seconds, "peak_mb": peak_rss_mb(), "n": row["n"],
            "odds_ratio": row["odds_ratio"], "or_ci": [row["or_ci_low"], row["or_ci_high"]],
            "clusters": row["clusters"], "note": row["note"]}


def measure_ladder(rows: str, tmp: str, staged_json: str) -> dict:
    """The pooled race odds ratio as the design grows: none; the recorded inputs (and the other
    groups held); the market and lender effects (lender clusters); and the credit score the LAR
    lacks (the generator's lender records, joined by row number): what the controls take away
    and what remains. Beside each, the linear model's robustness value and ``robust``."""
    import pyarrow as pa

    from aequum.engines.generators.hmda import iter_lender_batches
    from aequum.engines.regression.engine import RegressionEngine, held_cells
    from aequum.engines.regression.logit import controlled_logit
    from aequum.engines.regression.sensitivity import controlled_lpm

    data, params = _data(int(rows), tmp, json.loads(staged_json))
    state = RegressionEngine().prepare(data, params)
    groups, y = state["groups"]["race"], state["y"]
    fit_rows = np.flatnonzero(((groups == 0) | (groups == 1)) & ~np.isnan(y))
    held = state["others"]["race"]
    cells = [held_cells([state["groups"][a] for a in held], params.min_group_size, y, fit_rows)]
    lender = pa.Table.from_batches([b for b, _ in iter_lender_batches(int(rows), seed=0)])
    score = lender["credit_score"].to_numpy()[data.table["_row"].to_numpy()]  # the staged rows' own
    inputs = [*state["controls"], *cells]
    names = [*state["names"], "other groups"]
    grouping = dict(fixed=state["fixed"], fixed_names=params.fixed_effects, cluster=state["cluster"])
    steps = [("no controls", [], [], {}), ("the recorded inputs, other groups held", inputs, names, {}),
             ("... within market and lender (fixed effects, lender clusters)", inputs, names, grouping),
             ("... and the credit score the LAR lacks", [*inputs, score], [*names, "credit score"], grouping)]
    out = []
    for label, blocks, block_names, kw in steps:
        logit = controlled_logit(y, groups, blocks, block_names, rows=fit_rows, **kw)
        lpm = controlled_lpm(y, groups, blocks, block_names, rows=fit_rows, held=1 if "other groups" in block_names
                             else 0, robust_multiplier=params.robust_multiplier, **kw)
        out.append({"step": label, "n": logit.n, "odds_ratio": logit.odds_ratio,
                    "or_ci": [logit.or_ci_low, logit.or_ci_high], "rv": lpm.rv_qa, "robust": lpm.robust,
                    "points": lpm.estimate, "points_ci": [lpm.ci_low, lpm.ci_high]})
    return {"steps": out}


def measure_statsmodels(rows: str, tmp: str, staged_json: str) -> dict:
    """statsmodels' Logit with the effects as dummies and lender clusters, on a sample, against
    aequum's ``controlled_logit`` on the same sample and design."""
    import pandas as pd
    import statsmodels.api as sm

    from aequum.engines.regression.design import Categorical
    from aequum.engines.regression.engine import RegressionEngine
    from aequum.engines.regression.logit import controlled_logit

    data, params = _data(int(rows), tmp, json.loads(staged_json))
    state = RegressionEngine().prepare(data, params)
    groups, y = state["groups"]["race"], state["y"]
    candidates = np.flatnonzero(((groups == 0) | (groups == 1)) & ~np.isnan(y))
    rows_ = np.sort(np.random.default_rng(0).choice(candidates, min(SAMPLE, len(candidates)), replace=False))
    blocks, names = state["controls"], state["names"]
    kw = dict(fixed=state["fixed"], fixed_names=params.fixed_effects, cluster=state["cluster"])
    t0 = time.perf_counter()
    ours = controlled_logit(y, groups, blocks, names, rows=rows_, **kw)
    t_ours = time.perf_counter() - t0
    # the same rows (ours drops the levels with one outcome) and design as dummy columns
    fit_rows = np.sort(rows_[np.isin(rows_, _kept_rows(y, groups, blocks, names, rows_, kw))])
    frame = {"d": groups[fit_rows].astype(float)}
    dummies = []
    for name, block in [*zip(names, blocks), *zip(params.fixed_effects, state["fixed"])]:
        if isinstance(block, Categorical):
            codes = pd.Series(np.asarray(block.codes)[fit_rows].astype(int))
            dm = pd.get_dummies(codes, prefix=name).astype(float)
            dummies.append(dm.drop(columns=dm.sum().idxmax()))
        else:
            frame[name] = np.asarray(block)[fit_rows]
    X = sm.add_constant(pd.concat([pd.DataFrame(frame), *dummies], axis=1))
    X = X.loc[:, X.std() > 0].assign(const=1.0)
    t0 = time.perf_counter()
    theirs = sm.Logit(y[fit_rows], X).fit(disp=0, method="newton", tol=1e-10, maxiter=100, cov_type="cluster",
                                           cov_kwds={"groups": np.asarray(state["cluster"].codes)[fit_rows]})
    t_theirs = time.perf_counter() - t0
    return {"n": len(fit_rows), "columns": X.shape[1], "ours_seconds": t_ours, "statsmodels_seconds": t_theirs,
            "ours_or": ours.odds_ratio, "statsmodels_or": float(np.exp(theirs.params["d"])),
            "ours_se": ours.se, "statsmodels_se": float(theirs.bse["d"])}


def _kept_rows(y, groups, blocks, names, rows, kw):
    from aequum.engines.regression.design import design

    return design(y, groups, blocks, names, rows, None, kw["fixed"], kw["fixed_names"], kw["cluster"]).keep


def measure_screener(rows: str, tmp: str) -> dict:
    """fair-lending-screener's adjusted disparity on the LAR, then aequum's logit on its design."""
    import warnings

    import pandas as pd

    try:
        from fair_lending_screener import disparity
        from fair_lending_screener.data import prepare_for_analysis
    except ImportError:
        return {"skipped": "fair-lending-screener is not installed (pip install fair-lending-screener==0.2.2)"}
    from aequum.engines.generators.hmda import iter_hmda_batches
    from aequum.engines.regression.logit import controlled_logit

    import pyarrow as pa

    lar = pa.Table.from_batches([b for b, _ in iter_hmda_batches(int(rows), seed=0)]).to_pandas()
    lar = lar.rename(columns={"combined_loan_to_value_ratio": "loan_to_value_ratio", "derived_msa_md": "msa_md"})
    captured: dict = {}
    fit = disparity._fit_logit

    def keep_design(X, y):  # the design matrix it fits, for ours on the same
        captured["X"], captured["y"] = X, y
        return fit(X, y)

    disparity._fit_logit = keep_design
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        prepared = prepare_for_analysis(lar)
        result = disparity.adjusted_denial_disparity(prepared, data_year=2023)
        t_theirs = time.perf_counter() - t0
    disparity._fit_logit = fit
    X, y = captured["X"], captured["y"].to_numpy(np.float64)
    names = [c for c in X.columns if c not in ("const", "protected_class_ind")]
    dti_missing = float(X["dti_missing"].mean()) if "dti_missing" in X else 0.0
    # its DTI dummies cover every row once the published ranges are "missing": with the constant
    # the design is rank-deficient (statsmodels' pseudo-inverse fits it); the group's coefficient
    # does not depend on which redundant column goes, so aequum's fit leaves out dti_missing
    redundant = [c for c in ("dti_missing",) if c in names and
                 np.allclose(X[[n for n in names if n.startswith("dti_")]].sum(axis=1), 1)]
    names = [c for c in names if c not in redundant]
    t0 = time.perf_counter()
    ours = controlled_logit(y, X["protected_class_ind"].to_numpy(np.float64),
                            [X[c].to_numpy(np.float64) for c in names], names)
    t_ours = time.perf_counter() - t0
    return {"n": int(len(y)), "columns": int(X.shape[1]), "screener_seconds": t_theirs, "ours_seconds": t_ours,
            "screener_or": float(result.adjusted_odds_ratio), "ours_or": ours.odds_ratio,
            "screener_p": float(result.p_value), "dti_missing_share": dti_missing, "ours_note": ours.note,
            "left_out": redundant}


def run(quick: bool = False, rows: list[int] | None = None) -> None:
    sizes = rows or ([200_000] if quick else [1_000_000, 10_000_000])
    print("aequum bench fairlending: the controlled denial regression (pooled race against White)")
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="aequum-fairlending-") as tmp:
            staged = in_fresh_process("aequum.flows.bench.fairlending", "stage_world", str(n), tmp)
            print(f"\n{n:,} generated LAR rows (staged in {staged['seconds']:.1f} s)")
            blob = json.dumps({k: staged[k] for k in ("version", "categories")})
            for fixed, what in (("yes", "market + lender fixed effects, lender clusters"), ("no", "no fixed effects")):
                r = in_fresh_process("aequum.flows.bench.fairlending", "measure_ours", str(n), tmp, blob, fixed)
                print(f"  aequum, {what}: {r['seconds']:.1f} s for {r['n']:,} applications "
                      f"(records read in {r['read_seconds']:.1f} s), peak {r['peak_mb'] / 1024:.2f} GB; "
                      f"odds ratio {r['odds_ratio']:.4f} ({r['or_ci'][0]:.4f} to {r['or_ci'][1]:.4f})"
                      + (f", {r['clusters']} clusters" if r["clusters"] else ""))
            if n == min(sizes) and n <= 1_000_000:
                ladder = in_fresh_process("aequum.flows.bench.fairlending", "measure_ladder", str(n), tmp, blob)
                print("  the pooled race odds ratio of denial (Black, Asian, ... against White) as the design grows "
                      "(the world plants a DTI penalty on Black and Hispanic applicants):")
                for st in ladder["steps"]:
                    rv = "n/a" if st["rv"] is None else f"{100 * st['rv']:.1f}%"
                    print(f"    {st['step']}: odds ratio {st['odds_ratio']:.3f} ({st['or_ci'][0]:.3f} to "
                          f"{st['or_ci'][1]:.3f}); linear model {100 * st['points']:+.2f} points ({100 * st['points_ci'][0]:+.2f} "
                          f"to {100 * st['points_ci'][1]:+.2f}), robustness value {rv}, robust {st['robust']}; N = {st['n']:,}")
            if n <= 1_000_000:
                s = in_fresh_process("aequum.flows.bench.fairlending", "measure_statsmodels", str(n), tmp, blob)
                print(f"  statsmodels Logit, {s['columns']} dummy-expanded columns, lender clusters, on a "
                      f"{s['n']:,}-row sample: {s['statsmodels_seconds']:.1f} s against aequum's "
                      f"{s['ours_seconds']:.1f} s on the same rows (x{s['ours_seconds'] / s['statsmodels_seconds']:.2f}); "
                      f"odds ratio {s['statsmodels_or']:.6f} vs {s['ours_or']:.6f} (relative difference "
                      f"{abs(s['ours_or'] / s['statsmodels_or'] - 1):.1e}), cluster SE {s['statsmodels_se']:.6f} vs "
                      f"{s['ours_se']:.6f}")
        if n <= 1_000_000 and n == min(sizes):
            f = in_fresh_process("aequum.flows.bench.fairlending", "measure_screener", str(n), "")
            if "skipped" in f:
                print(f"  fair-lending-screener: skipped: {f['skipped']}")
            else:
                print(f"  fair-lending-screener 0.2.2 on the same LAR ({f['n']:,} rows after its filters, "
                      f"{f['columns']} columns; {100 * f['dti_missing_share']:.0f}% of its rows in its DTI 'missing' "
                      f"dummy): {f['screener_seconds']:.1f} s including its preparation; aequum's logit on its "
                      f"design {f['ours_seconds']:.1f} s; odds ratio {f['screener_or']:.6f} vs {f['ours_or']:.6f} "
                      f"(relative difference {abs(f['ours_or'] / f['screener_or'] - 1):.1e})"
                      + (f"; its design is rank-deficient (its DTI dummies sum to the constant), so aequum's fit "
                         f"leaves out {', '.join(f['left_out'])}, which changes no other coefficient" if f["left_out"] else ""))
