"""A simulated many-lender world for the lenders engine's tests: lenders of Zipf sizes in several
markets, race tied to the lender and the market, an unobserved credit score that drives denials
and prices and is lower for the protected group (the same gap at every lender: comparable
applicants), and planted lender-level penalties of known size on the B group.

Denials follow a linear probability (so a group gap in the score moves every lender's denial
rate by the same points: the lender-vs-peers difference removes it exactly in expectation);
prices a linear model among originations."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from aequum.engines.core.data import AuditData
from aequum.engines.core.spec import parse_spec
from aequum.engines.core.validation import validate_batch

SCORE_GAP = 0.5        # the B and A groups' mean score is this many sd lower
DENIAL_PER_SD = 0.06   # denial probability per sd of score (the omitted input)
SPREAD_PER_SD = 0.30   # rate spread per sd of score

RAW = {
    "name": "lenders-world", "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "race", "column": "race", "protected_values": ["B", "A"], "reference_values": ["W"],
                   "unmapped": "exclude", "compare": "both"}],
    "decision": {"column": "action", "favourable": ["1", "2"], "unfavourable": ["3"]},
    "features": [{"name": "income"}, {"name": "ltv"},
                 {"name": "loan_type", "type": "categorical", "categories": ["1", "2"]},
                 {"name": "lei", "type": "categorical", "mutability": "immutable"},
                 {"name": "msa", "type": "categorical", "mutability": "immutable"}],
    "geography": {"lender": "lei", "market": "msa", "outside_markets": ["99999"]},
    "pricing": {"fields": ["rate_spread"], "rate_spread": "rate_spread"},
    "engines": {"run": ["lenders"],
                "regression": {"controls": ["income", "ltv", "loan_type"], "log_controls": ["income"],
                               "fixed_effects": ["msa", "lei"], "segments": ["loan_type"], "intersections": []},
                "pricing": {"controls": ["income", "ltv", "loan_type"], "intersections": []},
                "lenders": {}},
}


def world(n=60_000, lenders=40, markets=8, seed=0, denial=None, pricing=None) -> pa.Table:
    """Raw records. ``denial``/``pricing``: lender index -> the points of denial probability /
    rate spread its B applicants are charged on top (planted; lender 0 is the largest)."""
    denial, pricing = denial or {}, pricing or {}
    rng = np.random.default_rng(seed)
    size = 1 / np.arange(1, lenders + 1)                       # Zipf sizes
    present = np.zeros((lenders, markets), bool)
    present[:5] = True                                          # the five largest everywhere
    for k in range(5, lenders):
        present[k, rng.choice(markets, rng.integers(1, 4), replace=False)] = True
    volume = present * size[:, None] * np.exp(rng.normal(0, 0.3, (lenders, markets)))
    market = rng.choice(markets, n, p=volume.sum(0) / volume.sum())
    cum = np.cumsum(volume / volume.sum(0), axis=0)             # lender within market
    lender = (rng.random(n)[:, None] > cum[:, market].T).sum(1)
    lender = np.minimum(lender, lenders - 1)
    # race tied to the market and the lender (log-odds)
    logit = -1.2 + np.linspace(-0.8, 0.8, markets)[market] + rng.normal(0, 0.7, lenders)[lender]
    u = rng.random(n)
    p_b = 1 / (1 + np.exp(-logit))
    race = np.where(u < p_b, "B", np.where(u < p_b + 0.08, "A", "W"))
    protected = race != "W"
    score = np.clip(rng.normal(0, 1, n), -2.5, 2.5) - SCORE_GAP * protected   # unobserved
    log_income = 4.3 + 0.25 * score + 0.4 * np.clip(rng.normal(0, 1, n), -2, 2) - 0.1 * protected
    ltv = 80 + 8 * np.clip(rng.normal(0, 1, n), -2, 2) - 2 * score
    loan_type = np.where(rng.random(n) < 0.25 + 0.1 * protected, "2", "1")
    lender_eff = np.clip(rng.normal(0, 0.04, lenders), -0.06, 0.06)
    market_eff = np.clip(rng.normal(0, 0.03, markets), -0.06, 0.06)
    planted_d = np.array([denial.get(k, 0.0) for k in range(lenders)])
    p_deny = (0.34 + lender_eff[lender] + market_eff[market] - DENIAL_PER_SD * score
              - 0.04 * (log_income - 4.3) + 0.0015 * (ltv - 80) + 0.04 * (loan_type == "2")
              + planted_d[lender] * (race == "B"))
    assert 0 < p_deny.min() and p_deny.max() < 1, (p_deny.min(), p_deny.max())  # linear: no planted point clipped
    denied = rng.random(n) < p_deny
    action = np.where(denied, "3", np.where(rng.random(n) < 0.93, "1", "2"))
    planted_p = np.array([pricing.get(k, 0.0) for k in range(lenders)])
    spread = (0.6 + 4 * lender_eff[lender] + 3 * market_eff[market] - SPREAD_PER_SD * score
              + 0.01 * (ltv - 80) + 0.5 * (loan_type == "2") + planted_p[lender] * (race == "B")
              + rng.normal(0, 0.35, n))
    spread_s = np.char.mod("%.3f", spread).astype(object)
    spread_s[action != "1"] = "NA"
    msa = np.array([f"{10000 + 10 * m}" for m in range(markets)])[market]
    return pa.table({"id": [str(i) for i in range(n)], "race": race, "action": action,
                     "income": np.round(np.exp(log_income), 1), "ltv": np.round(ltv, 2), "loan_type": loan_type,
                     "lei": np.array([f"LEI{k:03d}" for k in range(lenders)])[lender], "msa": msa,
                     "rate_spread": spread_s.astype(str)})


def staged(table: pa.Table, raw: dict | None = None) -> AuditData:
    spec = parse_spec(raw or RAW)
    res = validate_batch(table, spec, 0)
    assert res.bad.num_rows == 0, res.bad.to_pylist()[:3]
    categories = {f.name: sorted(set(res.good[f.name].to_pylist())) for f in spec.features
                  if f.type == "categorical" and not f.categories}  # as ingest records them
    return AuditData(spec, res.good, categories)


def market_data(world: str, rows: int = 60_000, seed: int = 3, lenders: dict | None = None) -> AuditData:
    """The generated lending market's LAR (generator ``hmda_market``, spec hmda_market.yaml) of
    ``world``, staged as ingest stages it, with ``engines.lenders`` set to ``lenders`` (default:
    the engine's defaults, race (Black against White and pooled) and ethnicity)."""
    from pathlib import Path

    import yaml

    from aequum.engines.generators.lar_market import iter_lar_batches

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "specs" / "hmda_market.yaml").read_text())
    raw["source"].update(rows=rows, seed=seed, world=world)
    raw["engines"]["run"] = ["lenders"]
    raw["engines"]["lenders"] = {"attributes": ["race", "race=Black or African American", "ethnicity"],
                                 **(lenders or {})}
    spec = parse_spec(raw)
    good, offset, categories = [], 0, {}
    for lar, _ in iter_lar_batches(rows, seed, 50_000, world=world):
        res = validate_batch(pa.Table.from_batches([lar]), spec, offset)
        offset += res.rows
        good.append(res.good)
        for name, seen in res.categories.items():
            categories.setdefault(name, set()).update(seen)
    return AuditData(spec, pa.concat_tables(good), {k: sorted(v) for k, v in categories.items()})


def planted_sizes(data: AuditData, world: str, rows: int, seed: int, field: str, attribute: str,
                  leis: list[str]) -> dict[str, float]:
    """The planted term of ``world`` on the engine's scale, per lender of ``leis``: its effect on
    ``field`` (denial: the truth's ``harmed``, denied with the penalty and approved without it;
    a price: the truth's ``rate_spread_overcharge``, the add-on's points) averaged as the engine
    averages a lender's gap — the protected group's mean minus the reference group's within each
    market × loan type stratum where the lender has both groups, weighted by n₁n₀/(n₁ + n₀)
    (engines.lenders.cells). The add-on applies to Black and to Hispanic borrowers alike, so a
    comparison whose reference group holds penalised borrowers (Hispanic White applicants
    against Black ones) measures less than the add-on's 0.30 points, and a denial penalty of
    0.45 on the score moves only the applicants near the cut-off: this is the size the
    interval must cover."""
    import pandas as pd

    from aequum.engines.generators.lar_market import market_truth

    truth = market_truth(rows, seed, world).to_pandas()
    effect = (truth.harmed.astype(float) if field == "denial" else truth.rate_spread_overcharge).to_numpy()
    ids = data.column("_row").to_numpy()
    st = data.spec
    text = lambda name: data.column(name).cast(pa.string()).to_numpy(zero_copy_only=False)  # noqa: E731
    df = pd.DataFrame({"lei": text(st.geography.lender), "m": text(st.geography.market), "lt": text("loan_type"),
                       "g": data.groups[attribute], "e": effect[ids]})
    if field == "denial":
        df = df[(data.decision == 0) | (data.decision == 1)]
    else:
        df = df[truth.rate_spread_overcharge.notna().to_numpy()[ids] & data.column(field).is_valid().to_numpy(
            zero_copy_only=False)]
    df = df[df.g.isin([0, 1]) & (df.m != "99999")]
    out = {}
    for lei in leis:
        own = df[df.lei == lei]
        cells = own.groupby(["m", "lt", "g"]).e.agg(["mean", "size"]).unstack("g").dropna()
        n1, n0 = cells[("size", 1)], cells[("size", 0)]
        w = n1 * n0 / (n1 + n0)
        out[lei] = float((w * (cells[("mean", 1)] - cells[("mean", 0)])).sum() / w.sum())
    return out
