"""The pricing engine (``pricing``) on hand-made records: its OLS against statsmodels, the group
means, medians and higher-priced shares against a hand computation, the pricing fields' "NA" /
"Exempt" at staging, bad input, and row-order independence."""
from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pytest

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.core.validation import validate_batch
from aequum.engines.pricing.engine import PricingEngine, hpml_flags

FIELDS = ["rate_spread", "total_loan_costs", "lender_credits"]
RAW = {
    "name": "p", "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "race", "column": "race", "protected_values": ["B"], "reference_values": ["W"],
                   "unmapped": "exclude"},
                  {"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"],
                   "unmapped": "exclude"}],
    "decision": {"column": "action", "favourable": ["1", "2"], "unfavourable": ["3"]},
    "features": [{"name": "ltv"}, {"name": "loan_type", "type": "categorical", "categories": ["1", "2", "3"]}],
    "pricing": {"fields": FIELDS, "rate_spread": "rate_spread", "lien": "lien"},
    "engines": {"run": ["pricing"], "pricing": {"intersections": [], "controls": ["ltv", "loan_type"]},
                "regression": {"intersections": []}},
}


def source(n=4000, add_on=0.0, seed=0) -> pa.Table:
    """Raw records as a LAR holds them: prices as text, "NA" unless originated (action 1),
    "Exempt" for some; B borrowers pay ``add_on`` more rate spread."""
    rng = np.random.default_rng(seed)
    race = rng.choice(["B", "W", "J"], n, p=[0.3, 0.6, 0.1])
    sex = rng.choice(["F", "M", "X"], n, p=[0.4, 0.5, 0.1])
    ltv = rng.normal(80, 10, n)
    loan_type = rng.choice(["1", "2", "3"], n, p=[0.6, 0.3, 0.1])
    action = rng.choice(["1", "2", "3"], n, p=[0.7, 0.1, 0.2])
    lien = rng.choice(["1", "2"], n, p=[0.9, 0.1])
    spread = (0.2 + 0.03 * (ltv - 80) + 0.9 * (loan_type == "2") + add_on * (race == "B")
              + 0.1 * (sex == "F") + rng.normal(0, 0.3, n) * (1 + (loan_type == "2")))
    costs = 3000 + 40 * (ltv - 80) + rng.normal(0, 500, n)
    credits = np.where(rng.random(n) < 0.3, rng.uniform(100, 900, n), 0.0)

    def text(x, digits):
        out = np.char.mod(f"%.{digits}f", x).astype(object)
        out[action != "1"] = "NA"
        return out

    spread_s, costs_s, credits_s = text(spread, 3), text(costs, 2), text(credits, 2)
    credits_s[(action == "1") & (credits == 0)] = ""
    exempt = (action == "1") & (rng.random(n) < 0.03)
    for col in (spread_s, costs_s, credits_s):
        col[exempt] = "Exempt"
    return pa.table({"id": [str(i) for i in range(n)], "race": race, "sex": sex, "action": action,
                     "ltv": ltv, "loan_type": loan_type, "lien": lien, "rate_spread": spread_s.astype(str),
                     "total_loan_costs": costs_s.astype(str), "lender_credits": credits_s.astype(str)})


def staged(table: pa.Table, raw: dict | None = None) -> AuditData:
    spec = parse_spec(raw or RAW)
    res = validate_batch(table, spec, 0)
    assert res.bad.num_rows == 0, res.bad.to_pylist()[:3]
    return AuditData(spec, res.good)


def run(d: AuditData) -> dict[str, list[dict]]:
    out = run_serial(PricingEngine(), d, d.spec.engines.pricing)
    return {name: t.to_pylist() for name, t in out.items()}


def key(rows):
    return {(r["attribute"], r["field"]): r for r in rows}


def test_na_exempt_and_empty_are_null_and_never_quarantine():
    table = source(600)
    d = staged(table)
    action = np.asarray(table["action"])
    assert d.table.num_rows == 600  # nothing quarantined, nothing out of scope
    spread = np.asarray(d.table["rate_spread"].to_numpy(zero_copy_only=False), np.float64)
    text = np.asarray(table["rate_spread"])
    assert d.table.schema.field("rate_spread").type == pa.float64()
    assert np.isnan(spread[(text == "NA") | (text == "Exempt")]).all() and (action[text == "NA"] != "1").all()
    assert np.allclose(spread[text == "0.200"], 0.2) if (text == "0.200").any() else True
    reported = ~np.isin(text, ["NA", "Exempt"])
    assert np.allclose(spread[reported], text[reported].astype(float))
    credits = np.asarray(d.table["lender_credits"].to_numpy(zero_copy_only=False), np.float64)
    assert np.isnan(credits[np.asarray(table["lender_credits"]) == ""]).all()
    assert d.table["action"].to_pylist() == table["action"].to_pylist()  # the recorded decision, as text
    # a reported value that is no number is staged as null and counted; the record is kept for
    # every other engine (an optional outcome field never quarantines its application)
    bad = table.set_column(table.schema.get_field_index("rate_spread"), "rate_spread",
                           pa.array(["abc", "inf"] + table["rate_spread"].to_pylist()[2:]))
    res = validate_batch(bad, parse_spec(RAW), 0)
    assert res.bad.num_rows == 0 and res.good.num_rows == 600
    assert res.nulled == {"rate_spread": 2, "total_loan_costs": 0, "lender_credits": 0}
    assert res.good["rate_spread"][:2].to_pylist() == [None, None]
    assert res.good["rate_spread"][2:].equals(d.table["rate_spread"][2:])


def test_the_spec_checks_the_pricing_section():
    for edit, message in (
            (lambda r: r["pricing"].update(rate_spread="apr"), "not among pricing.fields"),
            (lambda r: r["pricing"].update(fields=["ltv"], rate_spread=None), "already other columns"),
            (lambda r: r.pop("pricing"), "needs a `pricing` section"),
            (lambda r: r["engines"]["pricing"].update(originated=["3"]), "not favourable decisions"),
            (lambda r: r["engines"]["pricing"].update(fields=["apr"]), "not pricing.fields"),
            (lambda r: r["pricing"].update(lien="rate_spread"), "is a pricing field")):
        raw = copy.deepcopy(RAW)
        edit(raw)
        with pytest.raises(SpecError, match=message):
            parse_spec(raw)


def test_means_medians_and_hpml_shares_by_hand():
    table = source(3000, add_on=0.4)
    d = staged(table)
    out = run(d)
    race, sex, action = (np.asarray(table[c]) for c in ("race", "sex", "action"))
    lien = np.asarray(table["lien"])
    for field in FIELDS:
        text = np.asarray(table[field])
        value = np.where(np.isin(text, ["NA", "Exempt", ""]), "nan", text).astype(float)
        ok = (action == "1") & ~np.isnan(value)
        row = key(out["pricing_estimates"])[("race", field)]
        b, w = value[ok & (race == "B")], value[ok & (race == "W")]
        assert (row["n_protected"], row["n_reference"]) == (len(b), len(w))
        assert row["mean_protected"] == pytest.approx(b.mean(), rel=1e-12)
        assert row["mean_reference"] == pytest.approx(w.mean(), rel=1e-12)
        assert row["median_protected"] == pytest.approx(np.median(b), rel=1e-12)
        assert row["median_reference"] == pytest.approx(np.median(w), rel=1e-12)
        assert row["raw_difference"] == pytest.approx(b.mean() - w.mean(), rel=1e-10)
        assert row["unreported"] == int(((action == "1") & np.isin(race, ["B", "W"]) & np.isnan(value)).sum())
    # higher-priced: >= 1.5 points on a first lien, >= 3.5 on a subordinate one
    spread = np.where(np.isin(np.asarray(table["rate_spread"]), ["NA", "Exempt"]), "nan",
                      np.asarray(table["rate_spread"])).astype(float)
    high = np.where(lien == "1", spread >= 1.5, spread >= 3.5)
    ok = (action == "1") & ~np.isnan(spread)
    (h,) = [r for r in out["pricing_hpml"] if r["attribute"] == "race"]
    kb, nb = int(high[ok & (race == "B")].sum()), int((ok & (race == "B")).sum())
    kw, nw = int(high[ok & (race == "W")].sum()), int((ok & (race == "W")).sum())
    assert (h["hpml_protected"], h["n_protected"], h["hpml_reference"], h["n_reference"]) == (kb, nb, kw, nw)
    assert h["ratio"] == pytest.approx((kb / nb) / (kw / nw), rel=1e-12) and h["ratio"] > 1
    from statsmodels.stats.proportion import proportions_ztest
    assert h["p_value"] == pytest.approx(proportions_ztest([kb, kw], [nb, nw])[1], rel=1e-6)
    assert h["significant"] and key(out["pricing_estimates"])[("race", "rate_spread")]["significant"]
    assert hpml_flags(np.array([1.49, 1.5, 3.4, 3.5, np.nan, 2.0]), np.array([1, 1, 0, 0, 1, 0], bool),
                      np.array([0, 0, 1, 1, 0, 0], bool), d.spec.engines.pricing).tolist()[:4] == [0, 1, 0, 1]


def test_the_adjusted_difference_equals_statsmodels_ols():
    """The same rows and design: price ~ 1 + group + ltv + loan type dummies + the other
    attribute's groups (protected / reference / neither); coefficient, classical and HC1
    standard errors to 1e-6 relative."""
    import statsmodels.api as sm

    table = source(4000, add_on=0.25, seed=3)
    d = staged(table)
    out = key(run(d)["pricing_estimates"])
    race, sex, action = (np.asarray(table[c]) for c in ("race", "sex", "action"))
    for field in FIELDS:
        text = np.asarray(table[field])
        y = np.where(np.isin(text, ["NA", "Exempt", ""]), "nan", text).astype(float)
        rows = (action == "1") & np.isin(race, ["B", "W"]) & ~np.isnan(y)
        lt = np.asarray(table["loan_type"])[rows]
        cells = np.where(sex == "F", 1, np.where(sex == "M", 0, 2))[rows]
        x = np.column_stack([(race[rows] == "B").astype(float), np.asarray(table["ltv"])[rows],
                             *[(lt == v).astype(float) for v in ("2", "3")],
                             *[(cells == v).astype(float) for v in (0, 2)]])
        fit = sm.OLS(y[rows], sm.add_constant(x)).fit()
        robust = sm.OLS(y[rows], sm.add_constant(x)).fit(cov_type="HC1")
        row = out[("race", field)]
        assert row["n"] == rows.sum() and row["controls"] == "ltv, loan_type"
        assert row["estimate"] == pytest.approx(fit.params[1], rel=1e-6)
        assert row["se"] == pytest.approx(fit.bse[1], rel=1e-6)
        assert row["se_robust"] == pytest.approx(robust.bse[1], rel=1e-6)
        assert row["p_value"] == pytest.approx(fit.pvalues[1], rel=1e-6)
        lo, hi = fit.conf_int(0.05)[1]
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(lo, rel=1e-6), pytest.approx(hi, rel=1e-6))
    # the planted add-on is found where it is, and lower credits would be the adverse direction
    assert out[("race", "rate_spread")]["adverse"] and out[("race", "rate_spread")]["significant"]
    assert out[("race", "rate_spread")]["ci_low"] < 0.25 < out[("race", "rate_spread")]["ci_high"]


def test_bad_input_gives_notes_and_empty_results():
    table = source(1500)
    n = table.num_rows
    race, action = np.asarray(table["race"]), np.asarray(table["action"])
    # every rate spread Exempt; lender credits one value; no originated B borrower among women
    table = table.set_column(table.schema.get_field_index("rate_spread"), "rate_spread", pa.array(["Exempt"] * n))
    table = table.set_column(table.schema.get_field_index("lender_credits"), "lender_credits",
                             pa.array(np.where(action == "1", "250.00", "NA")))
    sex = np.asarray(table["sex"]).copy()
    sex[(race == "B") & (action == "1")] = "M"
    table = table.set_column(table.schema.get_field_index("sex"), "sex", pa.array(sex))
    raw = copy.deepcopy(RAW)
    raw["engines"]["pricing"]["intersections"] = [["race", "sex"]]
    raw["engines"]["pricing"]["min_group_size"] = 350  # about 300 B borrowers originated
    out = run(staged(table, raw))
    est = key(out["pricing_estimates"])
    spread = est[("race", "rate_spread")]
    assert spread["estimate"] is None and spread["n"] == 0 and "reports rate_spread" in spread["note"]
    credits = est[("race", "lender_credits")]
    assert credits["estimate"] is None and "takes one value" in credits["note"]
    assert credits["mean_protected"] == credits["mean_reference"] == 250.0
    assert est[("race&sex", "total_loan_costs")]["estimate"] is None
    assert "no originated loan of the protected group" in est[("race&sex", "total_loan_costs")]["note"]
    # a group under min_group_size: reported, not tested
    small = [r for r in out["pricing_estimates"] if r["estimate"] is not None and r["p_value"] is None]
    assert small and all("reported, not tested" in r["note"] for r in small)
    hpml = {r["attribute"]: r for r in out["pricing_hpml"]}
    assert hpml["race"]["ratio"] is None and "nothing to compare" in hpml["race"]["note"]
    # no originations at all
    none = table.set_column(table.schema.get_field_index("action"), "action", pa.array(["3"] * n))
    out = run(staged(none))
    assert all(r["estimate"] is None and "no originated loans" in r["note"] for r in out["pricing_estimates"])
    assert all(r["p_adjusted"] is None for r in out["pricing_estimates"])


def test_results_do_not_depend_on_row_order():
    table = source(3000, add_on=0.2, seed=5)
    first = run(staged(table))
    order = np.random.default_rng(1).permutation(table.num_rows)
    second = run(staged(table.take(pa.array(order))))
    for name in ("pricing_estimates", "pricing_hpml"):
        a = sorted(first[name], key=lambda r: (r["attribute"], r["field"]))
        b = sorted(second[name], key=lambda r: (r["attribute"], r["field"]))
        assert len(a) == len(b) > 0
        for ra, rb in zip(a, b):
            for c, v in ra.items():
                if isinstance(v, float):
                    assert rb[c] == pytest.approx(v, rel=1e-9, abs=1e-12), (name, c)
                else:
                    assert rb[c] == v, (name, c)


@pytest.mark.parametrize("lenders", [1, 10, 40])
def test_the_inference_follows_the_clusters(lenders):
    """cluster: lender — one lender: HC1 (its p and interval equal statsmodels' HC1 fit; no
    cluster-robust claim); 10 lenders: the wild cluster restricted bootstrap's p beside the CR1
    interval with t(9); 40 (min_clusters): CR1 with t(39). p, adjusted p and significant are
    never null."""
    import statsmodels.api as sm

    table = source(4000, add_on=0.25, seed=4)
    rng = np.random.default_rng(5)
    names = [f"L{i}" for i in range(lenders)]
    table = table.append_column("lender", pa.array(np.array(names, dtype=object)[rng.integers(0, lenders, len(table))]))
    raw = copy.deepcopy(RAW)
    raw["features"].append({"name": "lender", "type": "categorical", "categories": names, "mutability": "immutable"})
    raw["engines"]["pricing"] = {**raw["engines"]["pricing"], "fixed_effects": [], "cluster": "lender",
                                 "fields": ["rate_spread"]}
    rows = run(staged(table, raw))["pricing_estimates"]
    expected = {1: "HC1", 10: "WCR-bootstrap", 40: "CR1"}[lenders]
    for r in rows:
        assert r["inference"] == expected and r["clusters"] == lenders
        assert r["p_value"] is not None and r["p_adjusted"] is not None and r["significant"] is not None
        assert (r["bootstrap_draws"], r["bootstrap_weights"]) == (
            (9999, "webb") if lenders == 10 else (None, None))
    race = key(rows)[("race", "rate_spread")]
    if lenders == 1:
        race_c, sex_c, action = (np.asarray(table[c]) for c in ("race", "sex", "action"))
        text = np.asarray(table["rate_spread"])
        y = np.where(np.isin(text, ["NA", "Exempt", ""]), "nan", text).astype(float)
        keep = (action == "1") & np.isin(race_c, ["B", "W"]) & ~np.isnan(y)
        lt = np.asarray(table["loan_type"])[keep]
        cells = np.where(sex_c == "F", 1, np.where(sex_c == "M", 0, 2))[keep]
        x = np.column_stack([(race_c[keep] == "B").astype(float), np.asarray(table["ltv"])[keep],
                             *[(lt == v).astype(float) for v in ("2", "3")], *[(cells == v).astype(float) for v in (0, 2)]])
        hc1 = sm.OLS(y[keep], sm.add_constant(x)).fit(cov_type="HC1", use_t=True)
        assert race["p_value"] == pytest.approx(hc1.pvalues[1], rel=1e-6)
        assert (race["ci_low"], race["ci_high"]) == tuple(pytest.approx(v, rel=1e-6) for v in hc1.conf_int()[1])
        assert race["se_cluster"] is None
    else:
        from scipy.stats import t as student_t
        crit = student_t.ppf(0.975, lenders - 1)
        assert race["ci_low"] == pytest.approx(race["estimate"] - crit * race["se_cluster"], rel=1e-12)
    assert race["significant"] and race["adverse"]


def test_fields_fitted_together_and_alone_agree():
    """A piece fits the fields reported on the same rows on one shared design (rate spread and
    total loan costs here; lender credits, empty for some loans, alone, first): each field's row
    equals the row of a run of that field alone (to 1e-9: the same fit, its sums in another
    order), and the fields reported on the same rows hold one array of those rows and one of
    their held cells, in a small integer type."""
    table = source(3000, add_on=0.2, seed=7)
    raw = copy.deepcopy(RAW)
    raw["engines"]["pricing"]["intersections"] = [["race", "sex"]]
    d = staged(table, raw)
    together = key(run(d)["pricing_estimates"])
    adjusted = {"p_adjusted", "significant", "bounded_p_adjusted", "survives_bound"}  # one family per run
    for field in FIELDS:
        one = copy.deepcopy(raw)
        one["engines"]["pricing"]["fields"] = [field]
        alone = key(run(staged(table, one))["pricing_estimates"])
        assert {k for k in together if k[1] == field} == set(alone)
        for k, row in alone.items():
            for c, v in row.items():
                if c in adjusted:
                    continue
                if isinstance(v, float):
                    assert together[k][c] == pytest.approx(v, rel=1e-9, abs=1e-12), (k, c)
                else:
                    assert together[k][c] == v, (k, c)
    engine = PricingEngine()
    state = engine.prepare(d, d.spec.engines.pricing)
    rows = np.flatnonzero((state["groups"]["race"] == 0) | (state["groups"]["race"] == 1))
    joint: list = []
    inputs = {f: engine._inputs(state, "race", y, rows, ["sex"], joint)
              for f, y in state["fields"].items()}
    spread, costs, credits = (inputs[f] for f in FIELDS)
    assert spread["reported"] is costs["reported"] and spread["blocks"][-1] is costs["blocks"][-1]
    assert len(credits["reported"]) < len(spread["reported"])
    assert spread["blocks"][-1].codes.dtype == np.int8


@pytest.mark.parametrize("lenders", [12, 60])
def test_fitted_is_linear_fits_bit_for_bit(lenders):
    """The pricing pieces' fits (``fitted``: ``linear_fits``, then the gathered arrays let go) give the designs
    the very fits ``linear_fits`` gives — equal bits in every sum, solve and centred outcome —
    and ``controlled_lpm`` the same results from them, with the wild bootstrap (12 lenders:
    the gathered rows it reads are kept) and without it (60: they go)."""
    from aequum.engines.pricing.engine import fitted
    from aequum.engines.pricing.params import PricingParams
    from aequum.engines.regression.design import Categorical, design, with_outcome
    from aequum.engines.regression.linear import linear_fits
    from aequum.engines.regression.sensitivity import controlled_lpm

    rng = np.random.default_rng(11)
    n = 6000
    lender, market = rng.integers(0, lenders, n), rng.integers(0, 7, n)
    d = (rng.random(n) < 0.35).astype(float)
    x = rng.normal(size=n)
    cat = Categorical(rng.integers(0, 5, n).astype(np.int8), list("abcde"))
    ys = [0.3 * d + x + 0.2 * lender % 3 + rng.normal(size=n) * s for s in (1.0, 2.0, 0.5)]
    ys[1][rng.random(n) < 0.1] = np.nan  # the same rows for all three: nulls in x instead
    ys = [np.where(np.isnan(ys[1]), np.nan, y) for y in ys]
    fixed = [Categorical(market.astype(np.int8), list(range(7))), Categorical(lender.astype(np.int16), list(range(lenders)))]
    cluster = fixed[1]
    params = PricingParams()

    def designs():
        base = design(ys[0], d, [x, cat], ["x", "cat"], None, None, fixed, ["m", "l"], cluster)
        return [base, *(with_outcome(base, y) for y in ys[1:])]

    old, new = designs(), designs()
    linear_fits(old)
    fitted(new, params, True)
    wild = lenders < params.min_clusters
    assert (new[0].d is not None) == wild
    for a, b in zip(old, new):
        fa, fb = a.within, b.within
        assert fa.tss == fb.tss and fa.yy == fb.yy and fa.singular == fb.singular
        for name in ("centred", "gram", "zy", "scale", "g", "g_inv", "coef"):
            assert np.array_equal(getattr(fa, name), getattr(fb, name)), name
        ra = controlled_lpm(ys[0], d, [x, cat], ["x", "cat"], fixed=fixed, fixed_names=["m", "l"], cluster=cluster,
                            bootstrap=params.bootstrap(), prepared=a)
        rb = controlled_lpm(ys[0], d, [x, cat], ["x", "cat"], fixed=fixed, fixed_names=["m", "l"], cluster=cluster,
                            bootstrap=params.bootstrap(), prepared=b)
        assert ra.inference == rb.inference == ("WCR-bootstrap" if wild else "CR1")
        for name in ("estimate", "se", "se_robust", "se_cluster", "test_p_value", "test_ci_low", "r_squared", "rv_q"):
            assert getattr(ra, name) == getattr(rb, name), name
        assert ra.sensitivity == rb.sensitivity
