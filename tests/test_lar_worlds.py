"""The lending-market generator (engines.generators.lar_market): a credit score that the public
LAR lacks drives price and denial, so a fair lender's LAR shows LAR-controlled gaps that vanish
once the score (in the internal records) is controlled; the planted terms are recovered where
the score is controlled, per world and per named lender."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import statsmodels.api as sm
import yaml

from aequum.engines.generators import catalogue, lar_structure, lar_worlds
from aequum.engines.generators.hmda_lar import LAR_COLUMNS, VALUE_SETS
from aequum.engines.generators.lar_market import RECORDS, TRUTH, iter_lar_batches, iter_record_batches, market_truth

from conftest import REPO

ROWS, SEED = 40_000, 5
BLACK, HISPANIC = lar_worlds.BLACK, lar_worlds.HISPANIC


@lru_cache(maxsize=16)
def world(name: str, single: bool = False, rows: int = ROWS) -> pl.DataFrame:
    """The LAR with the records' credit score, rate spread and DTI beside it (same applications)."""
    lar = pa.Table.from_batches([b for b, _ in iter_lar_batches(rows, SEED, 15_000, world=name, single=single)])
    rec = pa.Table.from_batches([b for b, _ in iter_record_batches(rows, SEED, 15_000, world=name, single=single)])
    df = pl.from_arrow(lar).with_columns(pl.Series("credit_score", rec["credit_score"].to_numpy()),
                                         pl.Series("dti_true", rec["debt_to_income"].to_numpy()))

    def num(c):
        return pl.col(c).cast(pl.Float64, strict=False)

    return df.with_columns(
        log_income=num("income").log(), cltv=num("combined_loan_to_value_ratio"), value=num("property_value") / 1e5,
        rs=num("rate_spread"), ir=num("interest_rate"), denied=(pl.col("action_taken") == "3").cast(pl.Float64),
        black=(pl.col("derived_race") == BLACK).cast(pl.Float64),
        white=((pl.col("derived_race") == "White") & (pl.col("derived_ethnicity") == "Not Hispanic or Latino")),
        hispanic=(pl.col("derived_ethnicity") == HISPANIC).cast(pl.Float64))


def dummies(d: pl.DataFrame, column: str) -> np.ndarray:
    values = d[column].to_numpy()
    return (values[:, None] == np.unique(values)[1:][None, :]).astype(float)


def lar_controls(d: pl.DataFrame, fixed_effects: bool = True) -> np.ndarray:
    """The LAR's pricing controls: log income, CLTV, property value, DTI bins, loan type (and the
    lender and market fixed effects as dummies)."""
    x = [np.ones(d.height), d["log_income"].to_numpy(), d["cltv"].to_numpy(), d["value"].to_numpy(),
         dummies(d, "debt_to_income_ratio"), dummies(d, "loan_type")]
    if fixed_effects:
        x += [dummies(d, "lei"), dummies(d, "derived_msa_md")]
    return np.column_stack(x)


def residual(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    return y - x @ np.linalg.lstsq(x, y, rcond=None)[0]


def partial_r2(y: np.ndarray, x: np.ndarray, v: np.ndarray) -> float:
    """Partial R² of ``v`` with ``y`` given ``x`` (Frisch–Waugh: the squared correlation of residuals)."""
    return float(np.corrcoef(residual(y, x), residual(v, x))[0, 1] ** 2)


def usable(d: pl.DataFrame) -> pl.DataFrame:
    return d.drop_nulls(["log_income", "cltv", "value"]).filter(
        ~pl.col("debt_to_income_ratio").is_in(["NA", "Exempt"]))


def originations(d: pl.DataFrame) -> pl.DataFrame:
    return usable(d).filter(pl.col("action_taken") == "1").drop_nulls(["rs", "ir"])


def gap(d: pl.DataFrame, y: str, score: bool, fixed_effects: bool = True):
    """Black − White coefficient of ``y`` by OLS on the LAR's controls (and the credit score), HC1."""
    d = d.filter((pl.col("black") == 1) | pl.col("white"))
    x = np.column_stack([d["black"].to_numpy(), lar_controls(d, fixed_effects)]
                        + ([d["credit_score"].to_numpy()] if score else []))
    return ols_hc1(d[y].to_numpy(), x)


def ols_hc1(y: np.ndarray, x: np.ndarray, z: float = 1.96):
    """OLS coefficient of the first column of ``x`` with its HC1 interval (White 1980;
    statsmodels' ``cov_type="HC1"``, computed here without its n × k pseudo-inverse)."""
    inv = np.linalg.pinv(x.T @ x)
    b = inv @ (x.T @ y)
    r = y - x @ b
    n, k = x.shape
    row = inv[0] @ x.T                      # the first row of (X'X)^-1 X'
    se = np.sqrt((row ** 2 * r ** 2).sum() * n / (n - k))
    return b[0], b[0] - z * se, b[0] + z * se


@pytest.mark.parametrize("single", [False, True])
def test_the_credit_score_explains_most_of_the_price_the_lar_leaves_unexplained(single):
    o = originations(world("null", single))
    x = lar_controls(o, fixed_effects=not single) if not single else np.column_stack(
        [lar_controls(o, False), dummies(o, "derived_msa_md")])
    for price in ("rs", "ir"):
        assert partial_r2(o[price].to_numpy(), x, o["credit_score"].to_numpy()) >= 0.6, price


def test_the_credit_score_dominates_denial():
    """Partial R² with denial (LPM, in-scope applications) given the other inputs: the score's
    several times that of income, CLTV, or the DTI bins together."""
    s = usable(world("null")).filter(pl.col("action_taken").is_in(["1", "2", "3"]))
    y, score = s["denied"].to_numpy(), s["credit_score"].to_numpy()
    base = [np.ones(s.height), dummies(s, "loan_type"), s["value"].to_numpy()]
    controls = {"log_income": s["log_income"].to_numpy(), "cltv": s["cltv"].to_numpy(),
                "dti": dummies(s, "debt_to_income_ratio")}
    r2_score = partial_r2(y, np.column_stack([*base, *controls.values()]), score)
    for name, v in controls.items():
        x = np.column_stack([*base, *(c for k, c in controls.items() if k != name), score])
        ry, rv = residual(y, x), residual(v.reshape(len(y), -1), x)
        fitted = rv @ np.linalg.lstsq(rv, ry, rcond=None)[0]
        r2 = 1 - ((ry - fitted) ** 2).sum() / (ry ** 2).sum()
        assert r2_score > 3 * r2, (name, r2_score, r2)
    assert r2_score > 0.2


def test_the_groups_differ_in_the_score_as_in_real_data():
    s = world("null")
    mean = {g: s.filter(c)["credit_score"].mean() for g, c in
            (("white", pl.col("white")), ("black", pl.col("black") == 1), ("hispanic", pl.col("hispanic") == 1))}
    assert mean["black"] < mean["hispanic"] < mean["white"] and mean["white"] - mean["black"] > 25


@pytest.mark.parametrize("single", [False, True])
def test_a_fair_lender_shows_a_lar_controlled_gap_that_the_score_removes(single):
    """Fair world: raw and LAR-controlled Black − White rate-spread gaps of +0.1 to +0.2 points,
    significant; with the credit score controlled the gap's interval holds 0. The denial gap too is
    positive on the LAR's controls."""
    d = world("null", single)
    o = originations(d)
    raw = o.filter(pl.col("black") == 1)["rs"].mean() - o.filter(pl.col("white"))["rs"].mean()
    est, low, _ = gap(o, "rs", score=False, fixed_effects=not single)
    assert 0.1 <= raw <= 0.3 and 0.07 <= est <= 0.2 and low > 0
    est, low, high = gap(o, "rs", score=True, fixed_effects=not single)
    assert low < 0 < high and abs(est) < 0.02
    s = usable(d).filter(pl.col("action_taken").is_in(["1", "2", "3"]))
    est, low, _ = gap(s, "denied", score=False, fixed_effects=not single)
    assert low > 0.03


def test_the_add_on_is_recovered_with_the_score_controlled():
    o = originations(world("pricing_penalty"))
    for price in ("rs", "ir"):
        est, low, high = gap(o, price, score=True)
        assert low < 0.30 < high and abs(est - 0.30) < 0.03, (price, est)
        assert gap(o, price, score=False)[0] > 0.35  # on the LAR the add-on and the score's gap add up


def records(name: str) -> pl.DataFrame:
    rec = pa.Table.from_batches([b for b, _ in iter_record_batches(60_000, SEED, 60_000, world=name)])
    return pl.from_arrow(rec).with_columns(
        group=((pl.col("derived_race") == BLACK) | (pl.col("derived_ethnicity") == HISPANIC)).cast(pl.Float64),
        denied=(pl.col("action_taken") == "3").cast(pl.Float64), s=(pl.col("credit_score") - 735) / 60)


def per_lender(d: pl.DataFrame, i: int, fit, price: bool = True):
    """``fit`` on lender ``i``'s records: the Black-or-Hispanic indicator first, then the inputs
    of the decision (and of the price: the loan type and the market's price level as dummies)."""
    one = d.filter(pl.col("lei") == lar_structure.lei(i))
    x = np.column_stack([one["group"].to_numpy(), np.ones(one.height), one["s"].to_numpy(),
                         one["log_income"].to_numpy(), one["debt_to_income"].to_numpy(), one["cltv"].to_numpy()]
                        + ([dummies(one, "loan_type"), dummies(one, "derived_msa_md")] if price else []))
    return fit(one, x)


def test_named_lenders_planted_add_on_is_recovered_per_lender():
    """named_pricing_penalty: per-lender OLS of the rate spread on the records' inputs (the score
    among them) and the Black-or-Hispanic indicator: 0.30 at the named lenders, 0 elsewhere."""
    d = records("named_pricing_penalty").filter(pl.col("action_taken") == "1")

    def ols(one, x):
        fit = sm.OLS(one["rate_spread"].to_numpy(), x).fit(cov_type="HC1")
        return fit.params[0], *fit.conf_int(alpha=0.001)[0]

    named = lar_structure.ROLES["pricing"]
    for i in named:
        est, low, high = per_lender(d, i, ols)
        assert low < 0.30 < high and abs(est - 0.30) < 0.08, (i, est)
    for i in (0, 1, 2, 4, 5):
        est, low, high = per_lender(d, i, ols)
        assert low < 0 < high, (i, est)


def test_named_lenders_planted_denial_penalty_is_recovered_per_lender():
    """named_score_penalty: per-lender probit of denial on the records' inputs but the
    underwriting adjustment (the decision's N(0, 0.5²) noise): coefficient × 0.5 is the penalty
    on the denial score, 0.45 at the named lenders, 0 elsewhere."""
    d = records("named_score_penalty").filter(pl.col("action_taken").is_in(["1", "2", "3"]))

    def probit(one, x):
        fit = sm.Probit(one["denied"].to_numpy(), x).fit(disp=0)
        low, high = fit.conf_int(alpha=0.001)[0]
        return 0.5 * fit.params[0], 0.5 * low, 0.5 * high

    for i in lar_structure.ROLES["denial"]:
        est, low, high = per_lender(d, i, probit, price=False)
        assert low < 0.45 < high and low > 0, (i, est)
    for i in (0, 1, 2):
        est, low, high = per_lender(d, i, probit, price=False)
        assert low < 0 < high, (i, est)


def test_the_dti_cap_lender_denies_every_application_in_the_capped_bins():
    d = world("dti_cap")
    capped = pl.col("debt_to_income_ratio").is_in(["50%-60%", ">60%"])
    decided = d.filter(capped & pl.col("action_taken").is_in(["1", "2", "3"]))
    (cap_lender,) = lar_structure.ROLES["dti_cap"]
    at_cap = decided.filter(pl.col("lei") == lar_structure.lei(cap_lender))
    assert at_cap.height > 30 and (at_cap["action_taken"] == "3").all()     # separation on the bin dummies
    assert (decided.filter(pl.col("lei") != lar_structure.lei(cap_lender))["action_taken"] != "3").mean() > 0.5
    single = world("dti_cap", True).filter(capped & pl.col("action_taken").is_in(["1", "2", "3"]))
    assert single.height > 100 and (single["action_taken"] == "3").all()
    # and nothing else changes: below the cap, the null world's decisions
    below = ~capped & pl.col("debt_to_income_ratio").is_in(VALUE_SETS["debt_to_income_ratio"][:17])
    null = world("null").filter(below)["action_taken"]
    assert (world("dti_cap").filter(below)["action_taken"] == null).all()
    truth = market_truth(ROWS, SEED, "dti_cap")
    assert pc_sum(truth["capped"]) > 0 and pc_sum(truth["harmed"]) == 0


def pc_sum(column) -> int:
    return int(np.asarray(column.to_numpy(zero_copy_only=False)).sum())


def test_redlining_lenders_take_far_fewer_applications_from_minority_tracts():
    """The named lenders take 85 % fewer of the applications from tracts over 50 % minority (the
    rest go to their markets' other lenders); elsewhere every application keeps its lender."""
    count = {}
    for name in ("null", "lender_redlining"):
        d = world(name).with_columns(high=pl.col("tract_minority_population_percent").cast(pl.Float64) > 50)
        count[name] = {(i, high): d.filter((pl.col("lei") == lar_structure.lei(i)) & (pl.col("high") == high)).height
                       for i in (*lar_structure.ROLES["redlining"], 0, 1) for high in (False, True)}
    for i in lar_structure.ROLES["redlining"]:
        assert count["null"][i, True] > 50 and count["lender_redlining"][i, True] < 0.3 * count["null"][i, True], i
        assert count["lender_redlining"][i, False] == count["null"][i, False]
    for i in (0, 1):  # the others take what the named lenders leave
        assert count["lender_redlining"][i, True] > count["null"][i, True]
    truth = market_truth(ROWS, SEED, "lender_redlining")
    assert pc_sum(truth["diverted"]) > 0 and pc_sum(truth["harmed"]) == 0 and pc_sum(truth["penalised"]) == 0


def test_the_truth_names_who_was_penalised_and_overcharged():
    t = pl.from_arrow(market_truth(ROWS, SEED, "named_pricing_penalty"))
    named = {lar_structure.lei(i) for i in lar_structure.ROLES["pricing"]}
    over = t.filter(pl.col("overcharged"))
    assert over.height > 100 and set(over["lei"].unique()) == named
    assert (over["rate_spread_overcharge"] == 0.30).all()
    t = pl.from_arrow(market_truth(ROWS, SEED, "score_penalty"))
    assert t.filter(pl.col("harmed")).height > 50 and t.filter(pl.col("harmed"))["penalised"].all()
    m = catalogue.mechanism("hmda_market", "named_score_penalty")
    planted = [r for r in m["lenders"] if r["planted"]]
    assert [r["lei"] for r in planted] == m["planted_lenders"] == [lar_structure.lei(i)
                                                                   for i in lar_structure.ROLES["denial"]]
    assert all(r["denial_penalty"] == 0.45 and r["pricing_add_on"] == 0 for r in planted)
    assert sum(r["share"] for r in m["lenders"]) == pytest.approx(1, abs=1e-3) and len(m["lenders"]) == 60
    assert catalogue.mechanism("hmda_market", "null")["planted_lenders"] == []


def test_one_lender_world_has_one_lei_in_a_few_markets():
    d = world("null", True)
    assert d["lei"].unique().to_list() == [lar_structure.SINGLE_LEI]
    assert set(d["derived_msa_md"].unique()) == set(lar_structure.SINGLE_MARKETS)
    with pytest.raises(ValueError, match="unknown world 'named_score_penalty'"):
        catalogue.check_world("hmda_single", "named_score_penalty")


def test_many_lenders_markets_and_tracts_correlate_with_race():
    d = world("null")
    assert d["lei"].n_unique() == 60 and d["derived_msa_md"].n_unique() == 13
    by_market = d.group_by("derived_msa_md").agg(pl.col("black").mean())["black"]
    assert by_market.max() > 3 * by_market.min()
    u = lar_structure.lenders()
    by_lender = d.group_by("lei").agg((pl.col("black") + pl.col("hispanic")).mean().alias("m"), pl.len())
    specialists = by_lender.filter(pl.col("lei").is_in([lar_structure.lei(i) for i in u["specialists"]]))
    assert specialists["m"].mean() > 1.3 * (d["black"] + d["hispanic"]).mean()
    minority = d.with_columns(m=pl.col("tract_minority_population_percent").cast(pl.Float64))
    assert minority.filter(pl.col("black") == 1)["m"].mean() > minority.filter(pl.col("white"))["m"].mean() + 20
    assert d["census_tract"].n_unique() < d.height / 5  # tracts repeat


def test_schemas_row_counts_and_determinism(tmp_path):
    from aequum.flows.commands.generate import generate_to_file

    for n in (1, 50_001):
        lar = pa.Table.from_batches([b for b, _ in iter_lar_batches(n, 3, 20_000, world="score_penalty")])
        assert lar.num_rows == n and lar.column_names == LAR_COLUMNS
        rec = pa.Table.from_batches([b for b, _ in iter_record_batches(n, 3, 7_000, world="score_penalty")])
        assert rec.num_rows == n and rec.schema == RECORDS
        assert market_truth(n, 3, "score_penalty").num_rows == n
    assert market_truth(50_001, 3, "score_penalty").schema == TRUTH
    one = pa.Table.from_batches([b for b, _ in iter_lar_batches(60_000, 3, 60_000)])
    many = pa.Table.from_batches([b for b, _ in iter_lar_batches(60_000, 3, 11_000)])
    assert one.equals(many)
    paths = [generate_to_file("hmda_market", tmp_path / f"{k}.csv", rows=30_000, seed=2, fmt="csv",
                              world="named_pricing_penalty") for k in "ab"]
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert (tmp_path / "a_truth.parquet").read_bytes() == (tmp_path / "b_truth.parquet").read_bytes()
    assert (tmp_path / "a_mechanism.json").exists()
    other = generate_to_file("hmda_market", tmp_path / "c.csv", rows=30_000, seed=3, fmt="csv")
    assert other.read_bytes() != paths[0].read_bytes()


def test_the_worlds_share_the_applicants():
    """A world changes the decision, the price or the lender; never the applicants' draws."""
    base = world("null")
    for name in ("score_penalty", "pricing_penalty", "lender_redlining"):
        other = world(name)
        for column in ("derived_race", "census_tract", "income", "debt_to_income_ratio", "credit_score"):
            assert (other[column] == base[column]).all(), (name, column)


def test_the_specs_parse_and_read_the_generator():
    from aequum.engines.core.spec import parse_spec
    from aequum.engines.core.validation import validate_batch

    for name, generator in (("hmda_market.yaml", "hmda_market"), ("hmda_single.yaml", "hmda_single"),
                            ("hmda_market_lender.yaml", "hmda_market_lender")):
        raw = yaml.safe_load((REPO / "data" / "specs" / name).read_text())
        assert raw["source"]["generator"] == generator
        raw["source"]["rows"] = 3_000
        spec = parse_spec(raw)
        (batch,) = list(catalogue.batches(generator, 3_000, spec.source.seed, 3_000, spec.source.world))
        res = validate_batch(batch, spec, 0)
        assert res.bad.num_rows < 0.05 * 3_000 and res.good.num_rows > 0.8 * 3_000, name  # LAR quirks; out of scope


def test_the_catalogue_serves_one_truth_for_the_lar_and_the_records():
    truths = [pa.Table.from_batches([t for _, t in catalogue.stream(name, 12_000, 4, 5_000, "named_score_penalty")])
              for name in ("hmda_market", "hmda_market_lender")]
    assert truths[0].equals(truths[1]) and truths[0].equals(catalogue.truth("hmda_market", 12_000, 4,
                                                                            "named_score_penalty"))
    assert catalogue.module_file("hmda_single_lender").endswith("lar_market.py")
    with pytest.raises(ValueError, match="no size to scale"):
        catalogue.check_world("hmda_market", "dti_cap", 2.0)
    half = catalogue.mechanism("hmda_market", "named_pricing_penalty", 0.5)
    assert {r["pricing_add_on"] for r in half["lenders"] if r["planted"]} == {0.15}
