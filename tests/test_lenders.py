"""The lenders engine: its per-lender and per-market estimates against a brute-force loop of
statsmodels OLS fits, its shrinkage against the normal-normal formula, and a simulated world of
40 lenders in 8 markets (tests/lenders_world.py: an omitted credit score lower for the protected
group, race tied to lender and market): no lender flagged in the fair world, every planted
lender named with an interval covering its planted size, no peer of theirs flagged."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from aequum.engines.core.engine import run_serial
from aequum.engines.lenders.engine import LendersEngine
from aequum.engines.lenders.inference import shrink
from aequum.engines.registry import get_engine
from lenders_world import world, staged

DENIAL = {0: 0.08, 4: 0.10}       # lender index -> planted points of denial on the B group
PRICING = {2: 0.25, 7: 0.30}      # lender index -> planted rate spread on the B group


def run(data):
    out = run_serial(get_engine("lenders"), data, data.spec.engines.lenders)
    return out["lender_disparities"].to_pandas(), out["market_disparities"].to_pandas()


def brute_force(data, field: str, unit: str):
    """Per lender and per market, by statsmodels: the pooled fit with dummies for every fixed
    effect, then one OLS per lender, per stratum of its peers, and per market."""
    st = LendersEngine().prepare(data, data.spec.engines.lenders)
    y = st["outcomes"][field]
    df = pd.DataFrame({"y": y, "li": np.log(data.column_values("income")), "ltv": data.column_values("ltv"),
                       "lt": data.column_values("loan_type").astype(int), "m": st["fixed"][0], "l": st["fixed"][1],
                       "g": st["fixed"][2], "d": st["units"][unit]})
    df = df[df.y.notna()].copy()
    formula = "y ~ li + ltv + C(lt) + C(m) + C(l) + C(g)" if field == "denial" else \
        "y ~ np.exp(li) + ltv + C(lt) + C(m) + C(l) + C(g)"
    pooled = smf.ols(formula, df).fit()
    xb = pooled.params.filter(regex=r"^(li|np\.exp\(li\)|ltv|C\(lt\))").reindex(pooled.model.exog_names, fill_value=0.0)
    df["r"] = df.y - pooled.model.exog @ xb.values
    df = df[df.d >= 0]
    df["s"] = df.m.astype(str) + "/" + df["lt"].astype(str)
    lenders, markets = {}, {}
    both = df.groupby(["s", "l"]).d.agg(lambda d: d.min() == 0 and d.max() == 1)
    for lender, own in df.groupby("l"):
        strata = [s for s in own.s.unique() if both.get((s, lender), False)
                  and both.loc[s].drop(lender, errors="ignore").any()]
        own = own[own.s.isin(strata)]
        if not strata or own.d.nunique() < 2:
            continue
        gap = smf.ols("r ~ d + C(s)", own).fit().params["d"] if len(strata) > 1 else smf.ols("r ~ d", own).fit().params["d"]
        bench = wsum = 0.0
        for s, cell in own.groupby("s"):
            n1, n0 = (cell.d == 1).sum(), (cell.d == 0).sum()
            w = n1 * n0 / (n1 + n0)
            peers = df[(df.s == s) & (df.l != lender)]
            fit = smf.ols("r ~ d + C(l)", peers).fit() if peers.l.nunique() > 1 else smf.ols("r ~ d", peers).fit()
            bench += w * fit.params["d"]
            wsum += w
        lenders[lender] = (gap, bench / wsum)
    for market, rows in df.groupby("m"):
        rows = rows.assign(c=rows.l.astype(str) + "|" + rows.s)
        markets[market] = smf.ols("r ~ d + C(c)", rows).fit().params["d"]
    return lenders, markets, st


@pytest.mark.parametrize("field", ["denial", "rate_spread"])
def test_estimates_equal_a_brute_force_loop_of_ols_fits(field):
    data = staged(world(n=5000, lenders=8, markets=3, seed=1))
    lenders, markets, st = brute_force(data, field, "race=B")
    got, got_m = run(data)
    got = got[(got.attribute == "race=B") & (got.field == field)].set_index("lei")
    assert got.in_benchmark.all()  # no lender flagged: every one is in its peers' benchmarks
    assert len(lenders) >= 6
    for code, (gap, bench) in lenders.items():
        row = got.loc[st["lender_levels"][code]]
        assert row.lender_gap == pytest.approx(gap, abs=1e-9)
        assert row.peer_benchmark == pytest.approx(bench, abs=1e-9)
        assert row.estimate == pytest.approx(gap - bench, abs=1e-9)
    got_m = got_m[(got_m.attribute == "race=B") & (got_m.field == field)].set_index("market")
    for code, est in markets.items():
        assert got_m.loc[st["market_levels"][code]].estimate == pytest.approx(est, abs=1e-9)


def test_standard_errors_equal_the_difference_of_means_formula():
    """Var θ_L = Σ_c w_c² (σ²_L1/n_c1 + σ²_L0/n_c0 + Var b_c) / (Σ w_c)², σ²_Lg the lender's
    within-cell variance of r pooled over its cells, computed here with pandas from the records
    (in a one-cell lender, σ²_L1/n_1 + σ²_L0/n_0 is HC2 of ``r ~ d``: MacKinnon & White 1985)."""
    data = staged(world(n=5000, lenders=8, markets=3, seed=1))
    st = LendersEngine().prepare(data, data.spec.engines.lenders)
    got, _ = run(data)
    got = got[(got.attribute == "race=B") & (got.field == "denial")].set_index("lei")
    from aequum.engines.lenders.fit import adjust
    y = st["outcomes"]["denial"]
    names, logs = st["spec_controls"]["denial"]
    r = adjust(y, [st["blocks"][(n, n in logs)] for n in names], names, st["fixed"], st["fixed_names"],
               np.flatnonzero(~np.isnan(y))).r
    lay = st["layout"]
    df = pd.DataFrame({"r": r, "d": st["units"]["race=B"], "c": lay.cell})
    df = df[(df.d >= 0) & (df.c >= 0) & df.r.notna()]
    df["l"], df["s"] = lay.cell_lender[df.c], lay.cell_stratum[df.c]
    cells = df.groupby(["c", "d"]).r.agg(["size", "var"]).unstack("d")
    cells.columns = [f"{a}{b}" for a, b in cells.columns]
    cells = cells[(cells.size0 > 0) & (cells.size1 > 0)].dropna(subset=["size0", "size1"]).copy()
    cells["l"], cells["s"] = lay.cell_lender[cells.index], lay.cell_stratum[cells.index]
    n1, n0 = cells.size1, cells.size0
    cells["w"] = n1 * n0 / (n1 + n0)
    ss = {g: ((cells[f"size{g}"] - 1) * cells[f"var{g}"].fillna(0)).groupby(cells.l).sum()
          / (cells[f"size{g}"].groupby(cells.l).sum() - cells[f"size{g}"].groupby(cells.l).size()) for g in (0, 1)}
    cells["v"] = ss[1].reindex(cells.l).values / n1 + ss[0].reindex(cells.l).values / n0
    checked = 0
    for lender, own in cells.groupby("l"):
        total = 0.0
        w = 0.0
        for c, row in own.iterrows():
            peers = cells[(cells.s == row.s) & (cells.index != c)]
            if peers.empty:
                continue
            var_b = (peers.w ** 2 * peers.v).sum() / peers.w.sum() ** 2
            total += row.w ** 2 * (row.v + var_b)
            w += row.w
        assert got.loc[st["lender_levels"][lender]].se == pytest.approx(np.sqrt(total) / w, rel=1e-9)
        checked += 1
    assert checked >= 6


def test_shrinkage_is_the_normal_normal_posterior_mean():
    est = np.array([0.10, -0.02, 0.01, 0.04, 0.30])
    se = np.array([0.02, 0.03, 0.05, 0.01, 0.20])
    tested = np.ones(5, bool)
    shrunk, low, high, mu, tau2 = shrink(est, se, tested, 1.96)
    w = 1 / se ** 2
    q = (w * (est - (w * est).sum() / w.sum()) ** 2).sum()
    t2 = max(0.0, (q - 4) / (w.sum() - (w ** 2).sum() / w.sum()))
    m = ((est / (se ** 2 + t2)).sum()) / (1 / (se ** 2 + t2)).sum()
    b = t2 / (t2 + se ** 2)
    assert tau2 == pytest.approx(t2) and mu == pytest.approx(m)
    np.testing.assert_allclose(shrunk, m + b * (est - m))
    np.testing.assert_allclose(high - low, 2 * 1.96 * np.sqrt(b * se ** 2))
    assert abs(shrunk[4] - m) < abs(est[4] - m) * 0.2  # the noisy one is pulled most of the way


def test_fair_world_flags_no_lender():
    lenders, markets = run(staged(world(seed=0)))
    tested = lenders[lenders.p_value.notna()]
    assert len(tested) > 100
    for _, fam in tested.groupby(["attribute", "field"]):
        assert fam.flagged.sum() <= 0.05 * len(fam)
    assert not lenders.flagged.any()
    # the notes speak the screeners' words
    assert set(lenders.note) <= {"statistically significant disparity", "no significant disparity",
                                 "not enough applications", "not enough variance in variables",
                                 "no peer lenders in its markets",
                                 "statistically significant difference in the protected group's favour"}
    assert (lenders.note == "not enough applications").any()
    # every market shows the omitted score's gap (an unexplained disparity), not a lender's
    assert markets[(markets.attribute == "race=B") & (markets.field == "denial")].estimate.mean() > 0


def test_planted_lenders_are_named_with_intervals_covering_their_size():
    lenders, _ = run(staged(world(seed=0, denial=DENIAL, pricing=PRICING)))
    b = lenders[lenders.attribute == "race=B"].set_index(["field", "lei"])
    for field, planted in (("denial", DENIAL), ("rate_spread", PRICING)):
        for k, size in planted.items():
            row = b.loc[(field, f"LEI{k:03d}")]
            assert row.flagged and row.ci_low <= size <= row.ci_high, (field, k, size, row.estimate)
            assert row.shrunk_estimate > 0 and not row.in_benchmark
    named = {(f"LEI{k:03d}", f) for f, planted in (("denial", DENIAL), ("rate_spread", PRICING)) for k in planted}
    flagged = lenders[lenders.flagged]
    # no peer of a planted lender is flagged (race pools B with A: the planted lenders show there too)
    assert {(r.lei, r.field) for r in flagged.itertuples()} <= named
    assert set(flagged.attribute) <= {"race", "race=B"}


def test_results_do_not_depend_on_row_order():
    table = world(n=5000, lenders=8, markets=3, seed=2, denial={1: 0.1})
    a, am = run(staged(table))
    order = np.random.default_rng(0).permutation(table.num_rows)
    b, bm = run(staged(table.take(order)))
    pd.testing.assert_frame_equal(a, b, rtol=1e-9)
    pd.testing.assert_frame_equal(am, bm, rtol=1e-9)


def test_findings_and_report_section(tmp_path):
    """The planted world written as a run: audit.findings_lenders has the findings contract's
    columns, one row per flagged lender x comparison x outcome (its LEI, N, interval, adjusted p and
    'unexplained disparity' on the public LAR's partial inputs, never evidence) and one headline per
    comparison x outcome; the report's section draws the funnels and ranks the flagged lenders."""
    from test_findings import CONTRACT, columns
    from test_report import figures, sections

    from aequum.flows.commands.report import write_report
    from aequum.flows.store.warehouse import Warehouse

    data = staged(world(seed=0, denial=DENIAL, pricing=PRICING))
    spec = data.spec
    engine = get_engine("lenders")
    tables = run_serial(engine, data, spec.engines.lenders)
    path = tmp_path / "wh.duckdb"
    with Warehouse(path) as wh:
        wh.start_run("lw", spec.name, spec.digest(), "test", spec.run_parameters())
        wh.write_results("lw", {t: (engine.tables[t], v) for t, v in tables.items()})
        wh.record_engine("lw", "lenders", "succeeded", 0.1, 1, {t: v.num_rows for t, v in tables.items()}, None)
        wh.finish_run("lw", "succeeded", "0123456789abcdef", "x", None)
        wh.create_views()
    with Warehouse(path, read_only=True) as wh:
        assert [c for c, _ in columns(wh, "findings_lenders")] == CONTRACT
        found = wh.con.sql("SELECT * FROM audit.findings WHERE engine = 'lenders'").to_arrow_table().to_pylist()
    lenders = tables["lender_disparities"].to_pylist()
    flagged = [r for r in lenders if r["flagged"]]
    rows = [f for f in found if not f["headline"]]
    assert len(rows) == len(flagged) and not any(f["evidence"] for f in found)
    assert len([f for f in found if f["headline"]]) == len({(r["attribute"], r["field"]) for r in lenders})
    for f in rows:
        (r,) = [r for r in flagged if r["lei"] == f["group_name"] and r["attribute"] == f["attribute"]
                and f["finding"].endswith(r["field"])]
        assert f["value"] == pytest.approx(r["estimate"]) and f["p_value"] == pytest.approx(r["p_adjusted"])
        assert r["lei"] in f["statement"] and f"N = {r['n']:,}" in f["statement"]
        assert "unexplained disparity" in f["statement"] and "lacks the credit score" in f["statement"]
    text = write_report(path, "lw", tmp_path / "r.html").read_text()
    assert "engine-lenders" in sections(text) and figures(text, "engine-lenders") == 4
    assert all(r["lei"] in text for r in flagged)


def test_ranks_are_numpys_unique():
    """The layout's ``ranks`` gives ``np.unique(keys, return_inverse=True)``: the same distinct
    values and each key's rank, whether the keys span few values (counted) or many (np.unique)."""
    from aequum.engines.lenders.cells import ranks

    rng = np.random.default_rng(3)
    for keys in (rng.integers(0, 50, 10_000), rng.integers(0, 2 ** 40, 10_000), np.zeros(0, np.int64),
                 np.array([7, 7, 7], np.int64)):
        values, inverse = ranks(keys)
        want_values, want_inverse = np.unique(keys, return_inverse=True)
        assert np.array_equal(values, want_values) and values.dtype == want_values.dtype
        assert np.array_equal(inverse, want_inverse.reshape(-1)) and inverse.dtype == np.int64
