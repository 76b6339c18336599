"""``aequum bench lenders``: the lenders engine on a national-shape synthetic LAR, against the
pooled regression engine on the same records.

A LAR of ``--rows`` applications (default 1M; ``--quick``: 200k) is drawn in memory with numpy:
5,000 lenders of Zipf sizes (the 50 largest in every market, the others in 1-3), 400 markets of
Zipf sizes, race tied to market and lender, the hmda spec's controls (income, loan amount,
property value, CLTV, the DTI bins, loan type and purpose), denials and rate spreads driven by an
unobserved score. In a fresh process each (so that its peak memory is its own): the lenders
engine (every lender and market, denial and rate spread, the pooled race comparison; strata
market × loan type) and the regression engine's pooled race test with market and lender fixed
effects and lender clusters (its linear model, sensitivity and logit) — seconds and peak RSS,
and the ratio of the two. The issue's target: 16M applications, 5,000 lenders, 400 markets in
at most 5 minutes and 6 GB on 2 cores.
"""
from __future__ import annotations

import time

import numpy as np

from aequum.flows.bench.measure import in_fresh_process, peak_rss_mb

LENDERS, MARKETS, NATIONAL = 5000, 400, 50
DTI = ["<20%", "20%-<30%", "30%-<36%", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46",
       "47", "48", "49", "50%-60%", ">60%"]


def national_lar(rows: int, seed: int = 0):
    """The records as staged (group and decision columns, features in raw values, dictionary
    text for the categorical ones) and their categories."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    m_size = 1 / np.arange(1, MARKETS + 1) ** 0.9
    market = rng.choice(MARKETS, rows, p=m_size / m_size.sum())
    l_size = 1 / np.arange(1, LENDERS + 1) ** 1.1
    lender = np.empty(rows, np.int64)
    home = [rng.choice(MARKETS, rng.integers(1, 4), replace=False) for _ in range(LENDERS - NATIONAL)]
    serving: list[list[int]] = [list(range(NATIONAL)) for _ in range(MARKETS)]
    for k, ms in enumerate(home, start=NATIONAL):
        for m in ms:
            serving[m].append(k)
    order = np.argsort(market, kind="stable")
    bounds = np.searchsorted(market[order], np.arange(MARKETS + 1))
    for m in range(MARKETS):
        ks = np.array(serving[m])
        w = l_size[ks] * np.exp(rng.normal(0, 0.5, len(ks)))
        lender[order[bounds[m]:bounds[m + 1]]] = rng.choice(ks, bounds[m + 1] - bounds[m], p=w / w.sum())
    logit = -1.3 + rng.normal(0, 0.6, MARKETS)[market] + rng.normal(0, 0.5, LENDERS)[lender]
    u = rng.random(rows)
    prot = u < 1 / (1 + np.exp(-logit))
    group = np.where(prot, 1, np.where(rng.random(rows) < 0.85, 0, -1)).astype(np.int8)
    score = rng.normal(0, 1, rows) - 0.5 * prot
    income = np.exp(4.4 + 0.25 * score + rng.normal(0, 0.4, rows))
    amount = np.round(income * rng.uniform(2, 5, rows), 0) * 1000
    value = amount / rng.uniform(0.6, 0.97, rows)
    cltv = 100 * amount / value
    dti = np.clip((rng.normal(8, 4, rows) - 1.5 * score).astype(int), 0, len(DTI) - 1)
    loan_type = rng.choice(4, rows, p=[0.7, 0.2, 0.08, 0.02])
    purpose = rng.choice(6, rows, p=[0.5, 0.05, 0.2, 0.15, 0.05, 0.05])
    p_deny = np.clip(0.15 + 0.05 * rng.normal(0, 1, LENDERS)[lender] - 0.06 * score + 0.01 * (dti - 8)
                     + 0.03 * (loan_type > 0), 0.01, 0.9)
    denied = rng.random(rows) < p_deny
    action = np.where(denied, 2, np.where(rng.random(rows) < 0.95, 0, 1))  # "1", "2", "3" below
    spread = np.where(action == 0, 0.4 - 0.3 * score + 0.5 * (loan_type > 0) + rng.normal(0, 0.4, rows), np.nan)

    def text(codes, levels):
        return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(levels))

    leis = [f"{k:020d}" for k in range(LENDERS)]
    msas = [f"{10000 + 10 * m}" for m in range(MARKETS)]
    table = pa.table({
        "_g_race": pa.array(np.where(group >= 0, group, 0).astype(np.int8), mask=group < 0),
        "_decision": pa.array((~denied).astype(np.int8)),
        "action_taken": text(action, ["1", "2", "3"]), "income": income, "loan_amount": amount,
        "property_value": value, "combined_loan_to_value_ratio": cltv, "debt_to_income_ratio": text(dti, DTI),
        "loan_type": text(loan_type, ["1", "2", "3", "4"]), "loan_purpose": text(purpose, ["1", "2", "31", "32", "4", "5"]),
        "lei": text(lender, leis), "derived_msa_md": text(market, msas), "rate_spread": spread,
    })
    return table, {"lei": leis, "derived_msa_md": msas}


def _spec():
    import yaml

    from aequum.engines.core.spec import parse_spec
    from aequum.flows.bench.fairlending import REPO

    raw = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    raw["protected"] = [dict(raw["protected"][0], compare="pooled")]  # race: one comparison
    raw.pop("model", None)
    raw.pop("scm", None)
    raw["engines"] = {"run": ["lenders"], "regression": dict(raw["engines"]["regression"], segments=[],
                                                             intersections=[]),
                      "pricing": dict(raw["engines"]["pricing"], intersections=[]),
                      "lenders": {"fields": ["denial", "rate_spread"], "products": ["loan_type"]}}
    return parse_spec(raw)


def measure(engine: str, rows: str) -> dict:
    """One engine on the national LAR: seconds (the engine alone) and the process's peak RSS."""
    from aequum.engines.core.data import AuditData
    from aequum.engines.core.engine import run_serial
    from aequum.engines.registry import get_engine

    spec = _spec()
    table, categories = national_lar(int(rows))
    data = AuditData(spec, table, categories)
    params = spec.engines.params(engine)
    t0 = time.perf_counter()
    if engine == "lenders":
        out = run_serial(get_engine("lenders"), data, params)
        lenders = out["lender_disparities"]
        detail = {"lender_rows": lenders.num_rows, "tested": int(lenders["p_value"].is_valid().to_numpy(
            zero_copy_only=False).sum()), "markets": out["market_disparities"].num_rows}
    else:
        eng = get_engine("regression")
        state = eng.prepare(data, params)
        row = eng.run_piece(state, "race")["regression_estimates"].to_pylist()[0]
        detail = {"odds_ratio": row["odds_ratio"], "n": row["n"]}
    return {"seconds": time.perf_counter() - t0, "peak_mb": peak_rss_mb(), **detail}


def run(quick: bool = False, rows: list[int] | None = None) -> None:
    n = (rows or [200_000 if quick else 1_000_000])[0]
    print(f"aequum bench lenders: {n:,} applications, {LENDERS:,} lenders, {MARKETS} markets (national shape)")
    ours = in_fresh_process("aequum.flows.bench.lenders", "measure", "lenders", str(n))
    pooled = in_fresh_process("aequum.flows.bench.lenders", "measure", "regression", str(n))
    print(f"  lenders engine (denial and rate spread, every lender and market): {ours['seconds']:.1f} s, "
          f"peak {ours['peak_mb'] / 1024:.2f} GB; {ours['lender_rows']:,} lender rows "
          f"({ours['tested']:,} tested), {ours['markets']:,} market rows")
    print(f"  regression engine (pooled race test, market + lender fixed effects, lender clusters): "
          f"{pooled['seconds']:.1f} s, peak {pooled['peak_mb'] / 1024:.2f} GB")
    print(f"  ratio: time x{ours['seconds'] / pooled['seconds']:.2f}, peak memory "
          f"x{ours['peak_mb'] / pooled['peak_mb']:.2f}")
