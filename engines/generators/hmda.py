"""A generator of HMDA Loan Application Register rows with a planted, known discrimination.

The output has the public LAR's 99 columns in order (snapshot spelling: underscores), all as
text exactly as published, with the LAR's quirks: "NA" and "Exempt" in numeric fields, 1111
for exempt codes, binned debt-to-income ratios and ages, loan amounts and property values at
the midpoints of $10,000 bins, income in thousands, census tracts with leading zeros
(``../shared/data/HMDA_LAR.md``). Marginals follow the FFIEC's published denial-rate gaps.

Decision process (one row = one application):

    credit  ~ N(0, 1) latent credit quality, lower on average for groups with less wealth
    DTI, LTV, income from group-dependent distributions
    tract   minority population share (percent) of the applicant's census tract, higher for
            Black and for Hispanic applicants
    risk    = 0.09·(DTI − 36) + 0.05·(LTV − 80) − 0.45·log(income/80) − 1.2·credit
    denied  iff risk + penalty + ε > c,  ε ~ N(0, 0.5)

**Planted mechanism** (:data:`WORLDS`, one entry per *world*; ``world`` parameter of every
entry point, default :data:`DEFAULT_WORLD`): the same applicants (the same draws) decided with
one known discriminatory term, or none. Each term is a constant shift of the risk for the
records it applies to:

* ``null``: no discriminatory term; the decision reads income, DTI, LTV, the unobserved credit
  quality and noise only. The groups still differ in those inputs (and in the unobserved credit
  quality: 0.25 sd lower for Black applicants), so raw outcome gaps remain without any treatment.
* ``dti_penalty`` (default): for Black or African American and for Hispanic or Latino applicants
  the underwriter adds 5 points to the debt-to-income ratio it evaluates (a race/ethnicity-
  dependent penalty on one underwriting variable: 0.45 on the risk).
* ``score_penalty``: 0.45 added to the risk of Black or African American and of Hispanic or
  Latino applicants directly, through no input. The shift equals dti_penalty's (0.09 × 5), so
  the two worlds decide alike (up to rounding in the last bit) and differ in the denial reasons,
  which here cite the inputs as they are.
* ``intersection``: the same 0.45 only for Black or African American women (derived_race Black
  and derived_sex Female); nobody else.
* ``redlining``: 0.45 for applications from census tracts whose minority population share
  exceeds 50%, whatever the applicant's race. The tract share is a structural equation of the
  applicant's groups (higher for Black and for Hispanic applicants) with its own noise, so race
  moves it (a total effect) but has no direct effect in this world.
* ``input_penalty``: LTV read 8 points higher for Asian applicants (0.4 on the risk).
* ``lender_redlining``: no decision changes (the null world's); five named lenders take 75% fewer
  of the applications from tracts more than half minority (``engines/generators/hmda_lenders.py``,
  which also gives every world its lenders: market shares, the markets each operates in).
* ``pricing_penalty``: the null world's decisions; the loans originated to Black or African
  American and to Hispanic or Latino borrowers cost 0.25 points more in rate spread (and
  interest rate) than the risk-based pricer charges (``engines.generators.hmda_pricing``).

:data:`MECHANISM` is the default world's description (:func:`mechanism` any world's). The
denial reason of a refused application cites the inputs as the underwriter read them: "1"
(debt-to-income) if the DTI read exceeds 43, else "4" (collateral) if the LTV read exceeds 95,
else "3" (credit history).

**Ground truth** (:data:`TRUTH`, one row per record) of two kinds:

* ``penalised``: the world's penalty applies to the record;
* direct effect: the decision without the penalty, everything else as drawn, and ``harmed``
  (denied, but approved without the penalty); per protected column, ``harmed_direct_<column>``:
  the controlled direct effect of that attribute alone (the penalty follows do(column :=
  reference), every other variable — the other attribute included — as drawn);
* total effect, per protected column: the decision of the same applicant — the same exogenous
  noise ``u`` of every structural equation below — under do(column := reference value)
  (:data:`INTERVENTIONS`: race := White, ethnicity := Not Hispanic or Latino, sex := Male),
  which moves credit, income, DTI, LTV and the tract share with the group, and the penalty
  with them; ``harmed_total_<column>``: denied, but approved under the intervention.
  This is the quantity counterfactual fairness and CST estimate (Kusner et al. 2017;
  Alvarez & Ruggieri 2023, Def. 3.2), whereas ``harmed`` is what a ceteris-paribus comparison
  of the same observed features targets.
* detectability: for refused applicants, the Bayes posterior of each kind of harm given the
  exact underwriting variables, the tract share and the groups (``p_harmed``,
  ``p_harmed_total_<column>``, ``p_harmed_direct_<column>``), knowing the generator — the best
  any audit reading the LAR's variables can do. The latent credit term carries most of the
  risk's variance (sd 1.3 of 1.67), so it is far from 0/1.

The same applications as the lender holds them (:func:`iter_lender_batches`, generator
``hmda_lender``): every input of its decision, including the credit score, the underwriter's
adjustment and the tract share, and its rule (:func:`lender_rule`; :data:`LENDER_RULE` the
default world's): a linear model on those columns and the Black and Hispanic indicators where
the world's penalty is linear in them, else the rule without the penalty and the penalty's
description — the faithful model of an internal audit, with which each counterfactual decision
is identifiable.

Rows are generated in fixed blocks of :data:`BLOCK` with one random stream per block (and
streams of their own for the price-to-income multiple and the tract share), so the output is
identical for any ``batch_rows`` and memory stays flat in ``n``; the worlds differ only in the
decision (and what follows from it: action taken, denial reason, truth), never in the draws.

The LAR's columns, value sets and text formatting are in ``engines.generators.hmda_lar``, the
worlds in ``hmda_worlds``, the lenders and markets in ``hmda_lenders``, the prices in
``hmda_pricing``; this module draws the applications and decides them, and re-exports the
names used elsewhere.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.generators import hmda_lenders
from aequum.engines.generators import hmda_pricing
from aequum.engines.generators.hmda_lar import (  # noqa: F401  (the LAR's names, importable from here)
    LAR_COLUMNS,
    DTI_BINS,
    AGE_BINS,
    VALUE_SETS,
    NUMERIC_SENTINELS,
    normalise_column_name,
    data_browser_name,
    _pick,
    _text,
    _where,
    _zfill,
    text_makers,
)
from aequum.engines.generators.hmda_worlds import (  # noqa: F401
    INTERVENTIONS,
    BLACK,
    HISPANIC,
    ASIAN,
    INPUT_WEIGHTS,
    TRACT_THRESHOLD,
    DEFAULT_WORLD,
    WORLDS,
    check_world,
    score_shift,
    _shift,
    mechanism,
    MECHANISM,
)

DEFAULT_ROWS = 100_000
BLOCK = 50_000
CUTOFF = 2.6  # risk above which an application is denied

TRUTH = pa.schema([("id", pa.string()), ("penalised", pa.bool_()), ("decision", pa.int8()),
                   ("decision_without_mechanism", pa.int8()), ("harmed", pa.bool_()),
                   *[f for column in INTERVENTIONS for f in (pa.field(f"decision_do_{column}", pa.int8()),
                                                             pa.field(f"harmed_total_{column}", pa.bool_()))],
                   *[pa.field(f"harmed_direct_{column}", pa.bool_()) for column in INTERVENTIONS],
                   ("p_harmed", pa.float64()), *[(f"p_harmed_total_{column}", pa.float64()) for column in INTERVENTIONS],
                   *[(f"p_harmed_direct_{column}", pa.float64()) for column in INTERVENTIONS],
                   ("overcharged", pa.bool_()), ("rate_spread_overcharge", pa.float64())])


def _credit(black, hisp, asian, u):
    """Latent credit quality (not in the LAR)."""
    return u - 0.25 * black - 0.1 * hisp - 0.1 * asian


def _income(black, hisp, asian, female, u):
    """Income in thousands (log-normal)."""
    return np.exp((np.log(95) - 0.25 * black - 0.2 * hisp + 0.15 * asian - 0.1 * female) + 0.55 * u)


def _dti(black, hisp, u):
    """The true debt-to-income ratio (percent) before binning."""
    return np.clip((35 + 2.0 * black + 1.5 * hisp) + 9.0 * u, 5, 75)


def _ltv(black, hisp, u):
    """Combined loan-to-value ratio (percent)."""
    return np.clip((80 + 3 * black + 2 * hisp) + 12.0 * u, 10, 115)


def _tract_share(black, hisp, u):
    """The minority population share (percent) of the applicant's census tract (in the LAR)."""
    return np.clip(35 + 30 * (black | hisp) + 20.0 * u, 0, 100)


def _applies(w, black, hisp, asian, female, tract):
    """Whether the world's penalty (``w``: :func:`check_world`'s entry) applies to each record."""
    if w["kind"] in ("none", "lender"):
        return np.zeros(black.shape, bool)
    if w["kind"] == "tract":
        return tract > w["threshold"]
    indicator = {("derived_race", BLACK): black, ("derived_race", ASIAN): asian,
                 ("derived_ethnicity", HISPANIC): hisp, ("derived_sex", "Female"): female}
    per_column = [np.logical_or.reduce([indicator[(c, v)] for v in values]) for c, values in w["penalised"].items()]
    return (np.logical_or if w["match"] == "any" else np.logical_and).reduce(per_column)


def penalised_after(world: str, records: pa.Table, intervened: set[str], effect: float = 1.0) -> np.ndarray:
    """Whether ``world``'s penalty still applies to each of the lender's ``records`` (:data:`LENDER`
    columns) after do(column := reference) for each column in ``intervened`` — derived_race :=
    White, derived_ethnicity := Not Hispanic or Latino, derived_sex := Male, and
    ``tract_minority_share`` := a share below every threshold. A harmed record the intervention
    frees is harmed through those columns jointly: the truth of an intersection's direct effect
    (Black and Hispanic applicants keep the dti world's penalty under do(race := White) alone,
    and lose it under both)."""
    def value(column):
        return np.asarray(records[column].to_numpy(zero_copy_only=False))

    race, eth, sex = value("derived_race"), value("derived_ethnicity"), value("derived_sex")
    keep = {c: c not in intervened for c in ("derived_race", "derived_ethnicity", "derived_sex")}
    tract = value("tract_minority_share") if "tract_minority_share" not in intervened else np.zeros(len(race))
    return _applies(check_world(world, effect), (race == BLACK) & keep["derived_race"], (eth == HISPANIC) &
                    keep["derived_ethnicity"], (race == ASIAN) & keep["derived_race"],
                    (sex == "Female") & keep["derived_sex"], tract)


def _penalty(w, black, hisp, asian, female, tract):
    """What the world's penalty adds to each record's risk (0 where it does not apply)."""
    return _shift(w) * _applies(w, black, hisp, asian, female, tract)


# sd of the risk's unobserved part, -1.2 credit + 0.5 u_risk (credit's own noise is N(0, 1))
LATENT_SD = float(np.hypot(1.2, 0.5))


def _observed_risk(black, hisp, asian, female, u_income, u_dti, u_ltv):
    """The part of the (fair) risk that the underwriting variables in the LAR determine."""
    income, dti, ltv = _income(black, hisp, asian, female, u_income), _dti(black, hisp, u_dti), _ltv(black, hisp, u_ltv)
    return 0.05 * (ltv - 80) - 0.45 * np.log(income / 80) + 0.09 * (dti - 36)


def _latent_mean(black, hisp, asian):
    """The group mean of the risk's unobserved part (-1.2 credit + 0.5 u_risk)."""
    return -1.2 * (-0.25 * black - 0.1 * hisp - 0.1 * asian)


def _posterior(low, high, mean):
    """P(low < W <= high | W > low) for the unobserved part W ~ N(mean, LATENT_SD²): the
    probability that a refused applicant (W > low) would have been approved had the risk's
    threshold for W been ``high`` (survival functions, exact in the upper tail)."""
    from scipy.special import ndtr

    sf_low, sf_high = ndtr((mean - low) / LATENT_SD), ndtr((mean - np.maximum(high, low)) / LATENT_SD)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sf_low > 0, (sf_low - sf_high) / sf_low, 1.0)


def _risk(w, black, hisp, asian, female, u_credit, u_income, u_dti, u_ltv, u_risk, u_tract):
    """(risk the underwriter evaluates, the same without the planted penalty); denied iff risk > CUTOFF."""
    income, dti, ltv = _income(black, hisp, asian, female, u_income), _dti(black, hisp, u_dti), _ltv(black, hisp, u_ltv)
    base = 0.05 * (ltv - 80) - 0.45 * np.log(income / 80) - 1.2 * _credit(black, hisp, asian, u_credit) + 0.5 * u_risk
    risk_fair = base + 0.09 * (dti - 36)
    return risk_fair + _penalty(w, black, hisp, asian, female, _tract_share(black, hisp, u_tract)), risk_fair


def _block(n: int, seed: int, block: int, first_row: int, lar: bool = True,
           world: str = DEFAULT_WORLD, effect: float = 1.0) -> tuple[dict[str, pa.Array] | None, dict[str, np.ndarray]]:
    w = check_world(world, effect)
    rng = np.random.default_rng([seed, block])
    races = VALUE_SETS["derived_race"]
    race_i, race = _pick(rng, races, [0.6, 5.5, 8.0, 0.2, 61.0, 0.4, 4.0, 0.3, 20.0], n)
    eth_i = np.where(rng.random(n) < 0.13, 0, 1)
    eth_i[rng.random(n) < 0.12] = 3
    eth_i[race_i == races.index("Joint")] = 2
    eth = pc.take(pa.array(VALUE_SETS["derived_ethnicity"]), pa.array(eth_i))
    sex_i, sex = _pick(rng, VALUE_SETS["derived_sex"], [42, 26, 24, 8], n)
    black, hisp = race_i == races.index("Black or African American"), eth_i == 0
    asian = race_i == races.index("Asian")
    female = sex_i == 1
    # exogenous noise of the structural equations, drawn in the order (and with the values)
    # rng.normal(mean, sd) / rng.lognormal would draw them
    u_credit, u_income, u_dti, u_ltv = (rng.standard_normal(n) for _ in range(4))
    income, ltv = _income(black, hisp, asian, female, u_income), _ltv(black, hisp, u_ltv)
    # a price-to-income multiple per application, from a stream of its own (the decision's
    # draws below do not move with it)
    multiple = np.random.default_rng([seed, block, 1]).lognormal(np.log(3.8), 0.35, n)
    prop = np.clip(income * 1000 * multiple, 40_000, 5_000_000)
    loan = np.clip(prop * ltv / 100, 10_000, None)
    u_risk = rng.standard_normal(n)
    # the tract's minority share, from a stream of its own (drawn before the decision, which
    # reads it in the redlining world; no other draw moves with it)
    u_tract = np.random.default_rng([seed, block, 2]).standard_normal(n)
    dti, minority_share = _dti(black, hisp, u_dti), _tract_share(black, hisp, u_tract)
    groups = (black, hisp, asian, female)
    risk, risk_fair = _risk(w, *groups, u_credit, u_income, u_dti, u_ltv, u_risk, u_tract)
    penalised, pen = _applies(w, *groups, minority_share), _penalty(w, *groups, minority_share)
    approved, approved_fair = risk <= CUTOFF, risk_fair <= CUTOFF
    # the inputs as the underwriter read them (the denial reason cites these)
    planted = w
    dti_read = dti + planted["size"] * penalised if planted.get("variable") == "debt_to_income_ratio" else dti
    ltv_read = ltv + planted["size"] * penalised if planted.get("variable") == "combined_loan_to_value_ratio" else ltv
    # total effects: the same applicant (same noise) under do(attribute := reference value)
    none = np.zeros(n, bool)
    groups_do = {"derived_race": (none, hisp, none, female), "derived_ethnicity": (black, none, asian, female),
                 "derived_sex": (black, hisp, asian, none)}
    approved_do = {c: _risk(w, *g, u_credit, u_income, u_dti, u_ltv, u_risk, u_tract)[0] <= CUTOFF
                   for c, g in groups_do.items()}
    # what the observable variables can tell (the Bayes posterior of harm given them): every
    # world's penalty is a known function of the groups and the tract share, so given those the
    # risk's unobserved part W (independent of them) alone decides; refused: W > low
    observed = _observed_risk(*groups, u_income, u_dti, u_ltv)
    mean = _latent_mean(black, hisp, asian)
    low = CUTOFF - observed - pen
    posterior = {"p_harmed": _posterior(low, CUTOFF - observed, mean)}
    approved_direct = {}
    for c, g in groups_do.items():
        # controlled direct effect: only the penalty follows the intervention (the tract share as drawn)
        pen_do = _penalty(w, *g, minority_share)
        approved_direct[c] = risk_fair + pen_do <= CUTOFF
        posterior[f"p_harmed_direct_{c}"] = _posterior(low, CUTOFF - observed - pen_do, mean)
        # total effect: every structural equation follows it (W shifts with the group's mean)
        shift = mean - _latent_mean(g[0], g[1], g[2])
        high = CUTOFF - _observed_risk(*g, u_income, u_dti, u_ltv) \
            - _penalty(w, *g, _tract_share(g[0], g[1], u_tract)) + shift
        posterior[f"p_harmed_total_{c}"] = _posterior(low, high, mean)
    # action taken: out-of-scope outcomes (withdrawn, incomplete, purchased) independent of merit
    action_i = np.where(approved, np.where(rng.random(n) < 0.93, 0, 1), 2)
    out_of_scope = rng.random(n) < 0.14
    action_i[out_of_scope] = rng.choice([3, 4, 5], size=int(out_of_scope.sum()), p=[5 / 14, 3 / 14, 6 / 14])
    in_scope = ~out_of_scope
    action = pc.take(pa.array(["1", "2", "3", "4", "5", "6"]), pa.array(action_i))
    truth = {"id": pa.array(np.arange(first_row, first_row + n)).cast(pa.string()), "penalised": penalised,
             "decision": np.where(in_scope, approved.astype(np.int8), -1),
             "decision_without_mechanism": np.where(in_scope, approved_fair.astype(np.int8), -1),
             "harmed": in_scope & ~approved & approved_fair}
    for column, ok in approved_do.items():
        truth[f"decision_do_{column}"] = np.where(in_scope, ok.astype(np.int8), -1)
        truth[f"harmed_total_{column}"] = in_scope & ~approved & ok
        truth[f"harmed_direct_{column}"] = in_scope & ~approved & approved_direct[column]
    denied_in_scope = in_scope & ~approved
    truth.update({name: np.where(denied_in_scope, p, np.nan) for name, p in posterior.items()})
    lender_i, market_i = hmda_lenders.assign(seed, block, minority_share,
                                             min(1.0, w["size"]) if w["kind"] == "lender" else 0.0)
    lei, msa = (pc.take(pa.array(v), pa.array(i)) for v, i in ((hmda_lenders.LEIS, lender_i),
                                                              (hmda_lenders.MARKETS, market_i)))
    add_on = hmda_pricing.add_on(w, penalised)
    truth["overcharged"], truth["rate_spread_overcharge"] = hmda_pricing.overcharge(add_on, action_i == 0)
    if not lar:  # the rest of the block's stream only formats the LAR
        return {"derived_race": race, "derived_ethnicity": eth, "derived_sex": sex, "action_taken": action,
                "log_income": np.log(income), "debt_to_income": dti, "ltv": ltv,
                "credit_score": _credit(black, hisp, asian, u_credit), "underwriting_adjustment": 0.5 * u_risk,
                "tract_minority_share": minority_share, "lei": lei, "derived_msa_md": msa}, truth

    # binned / formatted fields with the LAR's quirks
    dti_i = np.select([dti < 20, dti < 30, dti < 36, dti < 50, dti <= 60],
                      [0, 1, 2, np.floor(dti).astype(int) - 33, 17], 18)
    dti_i[rng.random(n) < 0.006] = 19   # "NA"
    dti_i[rng.random(n) < 0.003] = 20   # "Exempt"
    dti_bin = pc.take(pa.array(VALUE_SETS["debt_to_income_ratio"]), pa.array(dti_i))
    income_s = _where(rng.random(n) < 0.01, pa.scalar("NA"), _text(np.round(income)))
    exempt_prop = rng.random(n) < 0.004
    prop_s = _where(exempt_prop, pa.scalar("Exempt"), _text(10_000 * np.floor(prop / 10_000) + 5_000))
    loan_s = _text(10_000 * np.floor(loan / 10_000) + 5_000)
    ltv_s = _where(exempt_prop, pa.scalar("Exempt"), _text(ltv, 3))
    age_i, age = _pick(rng, AGE_BINS, [5, 24, 24, 19, 15, 10, 3], n)
    age_above = _where(age_i >= 5, pa.scalar("Yes"), pa.scalar("No"))
    lt_i, loan_type = _pick(rng, ["1", "2", "3", "4"], [72, 17, 9, 2], n)
    _, purpose = _pick(rng, ["1", "2", "31", "32", "4"], [50, 5, 20, 18, 7], n)
    states = np.array([6, 48, 12, 36, 17, 13, 39, 37, 26, 42])
    state_n = states[rng.choice(len(states), n, p=np.array([12, 9, 7, 6, 4, 4, 4, 4, 3, 4]) / 57)]
    county_n = state_n * 1000 + rng.integers(1, 200, n)
    state, county = _zfill(state_n, 2), _zfill(county_n, 5)
    tract = pc.binary_join_element_wise(county, _zfill(rng.integers(100, 990_000, n), 6), "")
    rng.standard_normal(n)  # the draw the interest rate once took: the later columns keep their values
    reason = np.where(dti_read > 43, "1", np.where(ltv_read > 95, "4", "3"))  # DTI, collateral, credit history
    denial1 = _where(action_i == 2, pa.array(reason, pa.string()), pa.scalar("10"))
    has_co = (sex_i == 2) | (rng.random(n) < 0.35)
    originated = action_i == 0
    pricing = hmda_pricing.columns(hmda_pricing.prices(seed, block, _credit(black, hisp, asian, u_credit), ltv, dti,
                                                       loan, lt_i, add_on), action_i)

    const, co, codes = text_makers(n, has_co)

    def skip_draw(value):
        """``value``, after the draw this column once took from the stream (the tract share,
        now drawn from its own stream before the decision): the later columns keep their values."""
        rng.standard_normal(n)
        return value

    def skip_lender_draws(value):
        """``value``, after the draws the lender and the market once took from the stream (both
        now from hmda_lenders' stream of their own): the later columns keep their values."""
        rng.integers(0, 500, n)
        _pick(rng, hmda_lenders.MARKETS, [5, 6, 4, 4, 3], n)
        return value

    race_code = codes(race_i, ["1", "2", "3", "4", "5", "3", "5", "", "6"])
    eth_code = codes(eth_i, ["1", "2", "1", "3", ""])
    sex_code = codes(sex_i, ["1", "2", "1", "3"])
    empty = const("")
    cols = {
        # the lender and market (hmda_lenders), after the draws they once took from the stream
        "activity_year": const("2023"), "lei": skip_lender_draws(lei),
        "derived_msa_md": msa,
        "state_code": state, "county_code": county, "census_tract": tract,
        "conforming_loan_limit": _where(loan > 726_200, pa.scalar("NC"), pa.scalar("C")),
        "derived_loan_product_type": codes(lt_i, ["Conventional:First Lien", "FHA:First Lien",
                                                   "VA:First Lien", "FSA/RHS:First Lien"]),
        "derived_dwelling_category": const("Single Family (1-4 Units):Site-Built"),
        "derived_ethnicity": eth, "derived_race": race, "derived_sex": sex, "action_taken": action,
        "purchaser_type": _where(originated, _pick(rng, ["0", "1", "3", "71"], [40, 30, 20, 10], n)[1], pa.scalar("0")),
        "preapproval": const("2"), "loan_type": loan_type, "loan_purpose": purpose, "lien_status": const("1"),
        "reverse_mortgage": const("2"), "open_end_line_of_credit": const("2"),
        "business_or_commercial_purpose": const("2"), "loan_amount": loan_s,
        "combined_loan_to_value_ratio": ltv_s, **pricing, "rate_spread": skip_draw(pricing["rate_spread"]),
        "hoepa_status": _where(originated, pa.scalar("2"), pa.scalar("3")), "total_points_and_fees": const("NA"),
        "loan_term": const("360"),
        "prepayment_penalty_term": const("NA"), "intro_rate_period": const("NA"),
        "negative_amortization": const("2"), "interest_only_payment": const("2"), "balloon_payment": const("2"),
        "other_nonamortizing_features": const("2"), "property_value": prop_s, "construction_method": const("1"),
        "occupancy_type": _pick(rng, ["1", "2", "3"], [90, 3, 7], n)[1],
        "manufactured_home_secured_property_type": const("3"),
        "manufactured_home_land_property_interest": const("5"), "total_units": const("1"),
        "multifamily_affordable_units": const("NA"), "income": income_s, "debt_to_income_ratio": dti_bin,
        "applicant_credit_score_type": _pick(rng, ["1", "2", "3", "9"], [40, 20, 30, 10], n)[1],
        "co_applicant_credit_score_type": co(const("1"), "10"),
        "applicant_ethnicity_1": eth_code, "co_applicant_ethnicity_1": co(eth_code, "5"),
        "applicant_ethnicity_observed": const("2"), "co_applicant_ethnicity_observed": co(const("2"), "4"),
        "applicant_race_1": race_code, "co_applicant_race_1": co(race_code, "8"),
        "applicant_race_observed": const("2"), "co_applicant_race_observed": co(const("2"), "4"),
        "applicant_sex": sex_code, "co_applicant_sex": co(_where(sex_i == 2, pa.scalar("2"), pa.scalar("1")), "5"),
        "applicant_sex_observed": const("2"), "co_applicant_sex_observed": co(const("2"), "4"),
        "applicant_age": age, "co_applicant_age": co(age, "9999"),
        "applicant_age_above_62": age_above, "co_applicant_age_above_62": co(age_above, "NA"),
        "submission_of_application": const("1"), "initially_payable_to_institution": const("1"),
        "aus_1": _pick(rng, ["1", "2", "6"], [60, 30, 10], n)[1], "denial_reason_1": denial1,
        "tract_population": _text(rng.integers(1500, 9000, n)),
        "tract_minority_population_percent": skip_draw(_text(minority_share, 2)),
        "ffiec_msa_md_median_family_income": _pick(rng, ["97300", "110600", "89100", "102400"], [1, 1, 1, 1], n)[1],
        "tract_to_msa_income_percentage": _text(np.clip(rng.normal(105 - 20 * (black | hisp), 25, n), 20, 300), 2),
        "tract_owner_occupied_units": _text(rng.integers(300, 2500, n)),
        "tract_one_to_four_family_homes": _text(rng.integers(400, 3000, n)),
        "tract_median_age_of_housing_units": _text(rng.integers(5, 80, n)),
    }
    for c in LAR_COLUMNS:
        cols.setdefault(c, empty)  # unused race/ethnicity slots 2-5, aus-2..5, denial_reason-2..4
    return cols, truth


def _to_batches(cols: dict, truth: dict, spelling: str) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    names = LAR_COLUMNS if spelling == "snapshot" else [data_browser_name(c) for c in LAR_COLUMNS]
    return pa.RecordBatch.from_arrays([cols[c] for c in LAR_COLUMNS], names=names), _truth_batch(truth)


def _truth_batch(truth: dict) -> pa.RecordBatch:
    def int8(v):
        return pa.array(np.where(v < 0, 0, v).astype(np.int8), pa.int8(), mask=v < 0)

    return pa.RecordBatch.from_arrays([truth[f.name] if f.name == "id" else
                                       int8(truth[f.name]) if f.type == pa.int8() else
                                       pa.array(truth[f.name], f.type, from_pandas=True)  # NaN -> null
                                       for f in TRUTH], schema=TRUTH)


def hmda_truth(n: int = DEFAULT_ROWS, seed: int = 0, world: str = DEFAULT_WORLD, effect: float = 1.0) -> pa.Table:
    """The ground truth of ``n`` generated rows alone (the same as :func:`iter_hmda_batches`
    writes beside the LAR), without formatting the LAR: a few seconds per million rows."""
    _check(n, world, effect)
    return pa.Table.from_batches([_truth_batch(_block(min(BLOCK, n - start), seed, b, start, lar=False, world=world,
                                                      effect=effect)[1])
                                  for b, start in enumerate(range(0, n, BLOCK))], schema=TRUTH)


def _check(n: int, world: str, effect: float = 1.0) -> None:
    if n <= 0:
        raise ValueError(f"hmda generator: rows must be positive, got {n}")
    check_world(world, effect)


LENDER = pa.schema([("derived_race", pa.string()), ("derived_ethnicity", pa.string()), ("derived_sex", pa.string()),
                    ("action_taken", pa.string()), ("log_income", pa.float64()), ("debt_to_income", pa.float64()),
                    ("ltv", pa.float64()), ("credit_score", pa.float64()), ("underwriting_adjustment", pa.float64()),
                    ("tract_minority_share", pa.float64()), ("lei", pa.string()), ("derived_msa_md", pa.string())])


def lender_rule(world: str = DEFAULT_WORLD, effect: float = 1.0) -> dict:
    """The lender's decision function in ``world`` (the generator's: approved iff score >= 0,
    score = CUTOFF - risk) as a linear rule on LENDER's columns and the group indicators ``race``
    (Black or African American) and ``ethnicity`` (Hispanic or Latino): ``coefficients``,
    ``intercept`` and ``penalty``.

    Where the world's penalty is linear in those (null: none; dti_penalty and score_penalty: the
    same shift per indicator) the rule is the decision and ``penalty`` is None — save that the
    penalty is counted once per indicator, so for the few applicants both Black and Hispanic
    the rule counts it twice (the generator once). Where it is not — intersection (Black women:
    a product of race and sex), redlining (a threshold on ``tract_minority_share``),
    input_penalty (Asian applicants, for whom there is no indicator) — the coefficients are the
    decision without the penalty (race and ethnicity 0) and ``penalty`` says, in words, what the
    score loses and for whom."""
    w = check_world(world, effect)
    shift = _shift(w)
    linear = w["kind"] in ("none", "lender", "pricing") or (w["match"] == "any" and w["kind"] in ("input", "score")
                                     and set(w["penalised"]) == {"derived_race", "derived_ethnicity"}
                                     and w["penalised"]["derived_race"] == [BLACK]
                                     and w["penalised"]["derived_ethnicity"] == [HISPANIC])
    on_groups = -shift if linear and w["kind"] not in ("none", "lender", "pricing") else 0.0
    penalty = None
    if not linear:
        who = (f"tract_minority_share > {w['threshold']:g}" if w["kind"] == "tract" else
               (" and " if w["match"] == "all" else " or ").join(
                   f"{c} is {' or '.join(repr(v) for v in vs)}" for c, vs in w["penalised"].items()))
        penalty = (f"{shift:g} subtracted from the score where {who} ({w['description']}); not linear in "
                   "LENDER's columns and the race/ethnicity indicators, so not in the coefficients")
    return {"coefficients": {"log_income": 0.45, "debt_to_income": -0.09, "ltv": -0.05, "credit_score": 1.2,
                             "underwriting_adjustment": -1.0, "race": on_groups, "ethnicity": on_groups},
            "intercept": CUTOFF + 0.05 * 80 - 0.45 * float(np.log(80)) + 0.09 * 36,
            "penalty": penalty}


# the default world's rule (data/specs/hmda_lender.yaml's model)
LENDER_RULE = lender_rule(DEFAULT_WORLD)


def iter_lender_batches(n: int = DEFAULT_ROWS, seed: int = 0, batch_rows: int = 250_000,
                        world: str = DEFAULT_WORLD, effect: float = 1.0) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch]]:
    """(lender batch, ground-truth batch) pairs: the same applications as :func:`iter_hmda_batches`
    (same seed, same world, same row numbers) as the lender's own records hold them — the group
    columns, the action taken, and every input of its decision (:func:`lender_rule`) unbinned:
    log income, DTI, LTV, the credit score (the latent credit quality, which the LAR lacks), the
    underwriter's adjustment (the decision's noise term), the tract's minority share (percent,
    as the LAR's tract_minority_population_percent before rounding), and the lender (lei) and
    market (derived_msa_md) as the LAR has them. An internal audit with the
    lender's model: the one setting in which an individual's counterfactual decision is
    identifiable."""
    _check(n, world, effect)
    for start in range(0, n, batch_rows):
        take = min(batch_rows, n - start)
        blocks = range(start // BLOCK, (start + take - 1) // BLOCK + 1)
        parts = [_block(min(BLOCK, n - b * BLOCK), seed, b, b * BLOCK, lar=False, world=world, effect=effect)
                 for b in blocks]
        lender = pa.Table.from_batches([pa.RecordBatch.from_pydict(c, schema=LENDER) for c, _ in parts])
        truth = pa.Table.from_batches([_truth_batch(t) for _, t in parts])
        offset = start - blocks[0] * BLOCK
        yield (lender.slice(offset, take).combine_chunks().to_batches()[0],
               truth.slice(offset, take).combine_chunks().to_batches()[0])


def iter_hmda_batches(n: int = DEFAULT_ROWS, seed: int = 0, batch_rows: int = 250_000,
                      spelling: str = "snapshot",
                      world: str = DEFAULT_WORLD, effect: float = 1.0) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch]]:
    """(LAR batch, ground-truth batch) pairs covering ``n`` rows; identical for any batch_rows.

    ``spelling``: "snapshot" (underscores) or "data_browser" (hyphens, loan_to_value_ratio);
    ``world``: the planted mechanism (:data:`WORLDS`); ``effect``: its size, times the listed one.
    """
    _check(n, world, effect)
    if spelling not in ("snapshot", "data_browser"):
        raise ValueError(f"hmda generator: spelling must be 'snapshot' or 'data_browser', got {spelling!r}")
    pending_lar: list[pa.RecordBatch] = []
    pending_truth: list[pa.RecordBatch] = []
    pending = 0
    for b, start in enumerate(range(0, n, BLOCK)):
        size = min(BLOCK, n - start)
        lar, truth = _to_batches(*_block(size, seed, b, start, world=world, effect=effect), spelling)
        pending_lar.append(lar)
        pending_truth.append(truth)
        pending += size
        while pending >= batch_rows or (start + size == n and pending):
            lt = pa.Table.from_batches(pending_lar)
            tt = pa.Table.from_batches(pending_truth)
            take = min(batch_rows, pending)
            yield (lt.slice(0, take).combine_chunks().to_batches()[0],
                   tt.slice(0, take).combine_chunks().to_batches()[0])
            rest_l, rest_t = lt.slice(take), tt.slice(take)
            pending_lar = rest_l.to_batches() if rest_l.num_rows else []
            pending_truth = rest_t.to_batches() if rest_t.num_rows else []
            pending -= take
