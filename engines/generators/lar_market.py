"""A lending market of many lenders (or one), generated as the public HMDA LAR and as the
lenders' internal records, in which a credit score that the LAR lacks drives denial and price.

The public LAR omits the credit score, and in real lending the score dominates both the
decision and the price: a fair lender's LAR then shows raw and LAR-controlled gaps between
groups whose scores differ. This generator writes such worlds, fair and unfair (worlds:
``engines.generators.lar_worlds``; markets, tracts, lenders: ``lar_structure``; the LAR's
columns and text: ``hmda_lar``, the same 99 columns and quirks as ``engines.generators.hmda``).

Per application (one row; groups as the LAR records them, b Black, h Hispanic, a Asian, f female):

    market, tract           by the markets' weights, the tracts' populations (lar_structure)
    origin                  White, Black, Hispanic, Asian with the tract's composition (minority
                            applicants 0.85 times as likely as their population share); the LAR's
                            derived race and ethnicity from the origin ("Race Not Available" ...)
    z     = 0.25 u_inc + 0.968 u_c − 0.55 b − 0.40 h + 0.05 a            (sd 1 within a group)
    credit_score = clip(round(735 + 60 z), 300, 850);  s = (credit_score − 735)/60
    income = exp(log 95 + 0.8 log(MFI/100000) − 0.30 b − 0.22 h + 0.12 a − 0.10 f + 0.55 u_inc)
    DTI   = clip(35 + 2 b + 1.5 h + 9 u_dti, 5, 75);  CLTV = clip(82 + 3 b + 2 h + 12 u_ltv, 10, 115)
    loan type: FHA with p = logistic(−1.9 − 0.8 s + 0.04 (CLTV − 80)), else VA 8 %, USDA 2 %, conventional
    lender: lar_structure.assign (market, the tract's minority share; redlining lenders avoid)
    risk  = 0.06 (DTI − 36) + 0.03 (CLTV − 80) − 0.5 log(income/80) − 1.5 s + standard[lender]
            + 0.5 u_risk + penalty;   denied iff risk > CUTOFF, or DTI ≥ cap at a capping lender
    price = 0.30 + TYPE[loan type] − 0.40 s + 0.012 (CLTV − 80) + 0.008 (DTI − 36)
            + price_level[lender] + 0.1 (price factor[market] − 1) + add_on + 0.20 ε

The score is 1.5 of the risk's 1.75 sd and, among originations given the LAR's pricing
controls, most of the price's unexplained variance (tests/test_lar_worlds.py measures its
partial R²). Rate spread, interest rate, points and costs follow the price as in
``hmda_pricing`` (points bought down, 2 % exempt lenders). Action taken: approved → originated
(93 %) or approved not accepted; denied; 14 % withdrawn, incomplete or purchased whatever the
decision.

Outputs per world: the LAR (:func:`iter_lar_batches`), the internal records of the same
applications (:func:`iter_record_batches`, schema :data:`RECORDS`: the credit score and every
other input of the decision and price), the ground truth (:data:`TRUTH`, per record) and the
lender table (``lar_worlds.lender_table``). Blocks of :data:`BLOCK` rows, each with random
streams of its own (``[seed, block, SALT, k]``): output identical for any batch size and
memory flat in ``n``; the worlds change the decision, the price or the lender only, never the
applicants' draws.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.generators import hmda_pricing, lar_structure as st, lar_worlds
from aequum.engines.generators.hmda_lar import AGE_BINS, LAR_COLUMNS, VALUE_SETS, _pick, _text, _where, text_makers

DEFAULT_ROWS = 100_000
BLOCK = 50_000
SALT = 7
CUTOFF = 2.4
APOR = hmda_pricing.APOR
TYPE = np.array([0.0, 0.9, -0.1, 0.4])
INTERVENTIONS = {"derived_race": "White", "derived_ethnicity": "Not Hispanic or Latino", "derived_sex": "Male"}
RACES, ETHS = VALUE_SETS["derived_race"], VALUE_SETS["derived_ethnicity"]
# origin (White, Black, Hispanic, Asian) -> probabilities of the LAR's derived race / ethnicity
RACE_GIVEN_ORIGIN = np.array([
    [0.008, 0, 0, 0.003, 0.80, 0.004, 0.025, 0.002, 0.158],
    [0, 0, 0.88, 0, 0, 0.005, 0.03, 0, 0.085],
    [0.01, 0, 0.02, 0, 0.66, 0.03, 0.02, 0.01, 0.25],
    [0, 0.88, 0, 0.005, 0, 0, 0.03, 0, 0.085]])
ETH_GIVEN_ORIGIN = np.array([[0, 0.86, 0.02, 0.12, 0], [0, 0.90, 0, 0.10, 0],
                             [0.90, 0, 0.02, 0.08, 0], [0, 0.90, 0, 0.10, 0]])

TRUTH = pa.schema([("id", pa.string()), ("lei", pa.string()), ("penalised", pa.bool_()), ("decision", pa.int8()),
                   ("decision_without_mechanism", pa.int8()), ("harmed", pa.bool_()),
                   *[f for c in INTERVENTIONS for f in (pa.field(f"decision_do_{c}", pa.int8()),
                                                        pa.field(f"harmed_total_{c}", pa.bool_()))],
                   *[pa.field(f"harmed_direct_{c}", pa.bool_()) for c in INTERVENTIONS],
                   ("overcharged", pa.bool_()), ("rate_spread_overcharge", pa.float64()),
                   ("capped", pa.bool_()), ("diverted", pa.bool_()), ("lei_without_mechanism", pa.string())])
RECORDS = pa.schema([
    ("lei", pa.string()), ("derived_msa_md", pa.string()), ("census_tract", pa.string()),
    ("derived_race", pa.string()), ("derived_ethnicity", pa.string()), ("derived_sex", pa.string()),
    ("action_taken", pa.string()), ("credit_score", pa.float64()), ("log_income", pa.float64()),
    ("debt_to_income", pa.float64()), ("cltv", pa.float64()), ("log_property_value", pa.float64()),
    ("loan_amount", pa.float64()), ("loan_type", pa.string()), ("lien_status", pa.string()),
    ("lender_standard", pa.float64()), ("underwriting_adjustment", pa.float64()),
    ("lender_price_level", pa.float64()), ("price_adjustment", pa.float64()), ("discount_points", pa.float64()),
    ("rate_spread", pa.float64()), ("interest_rate", pa.float64()), ("tract_minority_share", pa.float64())])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _inputs(g: dict, u: dict, mfi: np.ndarray) -> dict[str, np.ndarray]:
    """The structural equations (module docstring) for groups ``g`` (b, h, a, f) and noise ``u``."""
    b, h, a, f = g["b"], g["h"], g["a"], g["f"]
    z = 0.25 * u["inc"] + 0.968 * u["c"] - 0.55 * b - 0.40 * h + 0.05 * a
    score = np.clip(np.round(735 + 60 * z), 300, 850)
    s = (score - 735) / 60
    income = np.exp(np.log(95) + 0.8 * np.log(mfi / 100_000) - 0.30 * b - 0.22 * h + 0.12 * a - 0.10 * f
                    + 0.55 * u["inc"])
    dti = np.clip(35 + 2.0 * b + 1.5 * h + 9.0 * u["dti"], 5, 75)
    ltv = np.clip(82 + 3.0 * b + 2.0 * h + 12.0 * u["ltv"], 10, 115)
    fha = _sigmoid(-1.9 - 0.8 * s + 0.04 * (ltv - 80))
    lt = np.select([u["lt"] < fha, u["lt"] < fha + 0.08 * (1 - fha), u["lt"] < fha + 0.10 * (1 - fha)], [1, 2, 3], 0)
    return {"score": score, "s": s, "income": income, "dti": dti, "ltv": ltv, "lt": lt}


def _risk(x: dict, standard: np.ndarray, u_risk: np.ndarray) -> np.ndarray:
    """The fair denial score (higher is worse) of inputs ``x``."""
    return (0.06 * (x["dti"] - 36) + 0.03 * (x["ltv"] - 80) - 0.5 * np.log(x["income"] / 80) - 1.5 * x["s"]
            + standard + 0.5 * u_risk)


def _approved(x, g, lender, terms, universe, u_risk):
    """(approved, approved without the discriminatory penalty, penalised, denied by a cap)."""
    fair = _risk(x, universe["standard"][lender], u_risk)
    shift = terms["denial_penalty"][lender]
    penalised = (g["b"] | g["h"]) & (shift > 0)
    capped = x["dti"] >= np.nan_to_num(terms["dti_cap"][lender], nan=np.inf)
    return (fair + shift * penalised <= CUTOFF) & ~capped, (fair <= CUTOFF) & ~capped, penalised, capped


def _block(n: int, seed: int, block: int, first: int, w: dict, single: bool, n_lenders: int, n_markets: int,
           lar: bool) -> tuple[dict, dict]:
    """One block's applications: (LAR columns, or the internal records if not ``lar``; truth)."""
    ms, tr = st.markets(single, n_markets), st.tracts(single, n_markets)
    universe = st.lenders(single, n_lenders, n_markets)
    terms = lar_worlds.lender_terms(w, universe)
    rng = [np.random.default_rng([seed, block, SALT, k]) for k in range(6)]
    weights = np.array([m[3] for m in ms], float)
    market = rng[0].choice(len(ms), n, p=weights / weights.sum())
    cum = np.cumsum(tr["weight"]) + tr["market"]  # market-major: each market's tracts span (j, j + 1]
    tract = np.minimum(np.searchsorted(cum, market + rng[0].random(n)), len(cum) - 1)
    share, comp = tr["share"][tract], tr["composition"][tract]
    p = np.column_stack([1 - share / 100, 0.85 * share[:, None] / 100 * comp])
    origin = ((rng[0].random(n) * p.sum(1))[:, None] > np.cumsum(p, 1)).sum(1)
    race_i = (rng[0].random(n)[:, None] > np.cumsum(RACE_GIVEN_ORIGIN, 1)[origin]).sum(1).clip(0, 8)
    eth_i = (rng[0].random(n)[:, None] > np.cumsum(ETH_GIVEN_ORIGIN, 1)[origin]).sum(1).clip(0, 4)
    eth_i[race_i == RACES.index("Joint")] = ETHS.index("Joint")
    sex_i = rng[0].choice(4, n, p=np.array([42, 26, 24, 8]) / 100)
    g = {"b": race_i == RACES.index(lar_worlds.BLACK), "h": eth_i == ETHS.index(lar_worlds.HISPANIC),
         "a": race_i == RACES.index("Asian"), "f": sex_i == 1}
    u = {k: rng[1].standard_normal(n) for k in ("c", "inc", "dti", "ltv")}
    u["lt"], u_risk, multiple = rng[1].random(n), rng[1].standard_normal(n), rng[1].lognormal(np.log(3.8), 0.35, n)
    mfi = np.array([m[4] for m in ms], float)[market]
    price_factor = np.array([m[5] for m in ms])[market]
    x = _inputs(g, u, mfi)
    lender = st.assign(rng[2], market, share, universe, terms["avoidance"])
    fair_lender = st.assign(np.random.default_rng([seed, block, SALT, 2]), market, share, universe,
                            np.zeros(len(universe["lei"]))) if w["kind"] == "lender" else lender
    approved, approved_fair, penalised, capped = _approved(x, g, lender, terms, universe, u_risk)
    # action taken: out-of-scope outcomes (withdrawn, incomplete, purchased) independent of merit
    action_i = np.where(approved, np.where(rng[4].random(n) < 0.93, 0, 1), 2)
    out = rng[4].random(n) < 0.14
    action_i[out] = rng[4].choice([3, 4, 5], int(out.sum()), p=[5 / 14, 3 / 14, 6 / 14])
    in_scope = ~out
    prop = np.clip(x["income"] * 1000 * multiple * np.sqrt(price_factor), 40_000, 5_000_000)
    loan = np.clip(prop * x["ltv"] / 100, 10_000, None)
    add_on = np.where((g["b"] | g["h"]), terms["pricing_add_on"][lender], 0.0)
    level = universe["price_level"][lender] + 0.1 * (price_factor - 1)
    prices = _prices(rng[3], x, loan, level, add_on)
    if w["kind"] == "pricing":
        penalised = (g["b"] | g["h"]) & (terms["pricing_add_on"][lender] > 0)
    truth = _truth(n, first, w, x, g, u, mfi, lender, terms, universe, u_risk, approved, approved_fair, penalised,
                   capped, in_scope, add_on, action_i, fair_lender)
    leis = pc.take(pa.array(universe["lei"]), pa.array(lender))
    codes = pa.array([m[0] for m in ms])
    msa = pc.take(codes, pa.array(market))
    action = pc.take(pa.array(["1", "2", "3", "4", "5", "6"]), pa.array(action_i))
    race, eth = pc.take(pa.array(RACES), pa.array(race_i)), pc.take(pa.array(ETHS), pa.array(eth_i))
    sex = pc.take(pa.array(VALUE_SETS["derived_sex"]), pa.array(sex_i))
    priced = action_i <= 1
    if not lar:
        return {"lei": leis, "derived_msa_md": msa, "census_tract": pa.array(tr["tract"][tract]),
                "derived_race": race, "derived_ethnicity": eth, "derived_sex": sex, "action_taken": action,
                "credit_score": x["score"], "log_income": np.log(x["income"]), "debt_to_income": x["dti"],
                "cltv": x["ltv"], "log_property_value": np.log(prop), "loan_amount": loan,
                "loan_type": pa.array((x["lt"] + 1).astype(str)), "lien_status": pa.array(np.full(n, "1")),
                "lender_standard": universe["standard"][lender], "underwriting_adjustment": 0.5 * u_risk,
                "lender_price_level": level, "price_adjustment": prices["eps"],
                "discount_points": np.where(priced, prices["points"], np.nan),
                "rate_spread": np.where(priced, prices["rate_spread"], np.nan),
                "interest_rate": np.where(priced, prices["interest_rate"], np.nan),
                "tract_minority_share": share}, truth
    dti_read = x["dti"] + (w["size"] * penalised if w["kind"] == "input" else 0.0)  # as the underwriter read it
    return _lar(rng[5], n, x, dti_read, tract, tr, race_i, eth_i, sex_i, race, eth, sex, action_i, action, leis, msa,
                mfi, prop, loan, prices), truth


def _prices(rng, x, loan, level, add_on) -> dict[str, np.ndarray]:
    """The price of each application (module docstring) and its costs, as ``hmda_pricing``."""
    n = len(loan)
    eps = rng.standard_normal(n)
    points = np.where(rng.random(n) < 0.30, rng.uniform(0.25, 1.5, n), 0.0)
    credits = np.where(rng.random(n) < 0.20, rng.uniform(0.1, 0.75, n), 0.0)
    exempt = rng.random(n) < 0.02
    premium = (0.30 + TYPE[x["lt"]] - 0.40 * x["s"] + 0.012 * (x["ltv"] - 80) + 0.008 * (x["dti"] - 36) + level
               + add_on + 0.20 * eps)
    rate = APOR - 0.05 + premium - 0.25 * points
    origination = 0.005 * loan + 600 + loan * points / 100
    return {"interest_rate": rate, "rate_spread": rate + 0.12 + 0.2 * points - APOR, "eps": 0.20 * eps,
            "points": points, "origination_charges": origination, "total_loan_costs": origination + 0.008 * loan + 1200,
            "discount_points": loan * points / 100, "lender_credits": loan * credits / 100, "exempt": exempt}


def _truth(n, first, w, x, g, u, mfi, lender, terms, universe, u_risk, approved, approved_fair, penalised, capped,
           in_scope, add_on, action_i, fair_lender) -> dict:
    """The block's ground truth (:data:`TRUTH`; meanings in ``lar_worlds.mechanism``)."""
    none = np.zeros(n, bool)
    do = {"derived_race": {**g, "b": none, "a": none}, "derived_ethnicity": {**g, "h": none},
          "derived_sex": {**g, "f": none}}
    truth = {"id": pa.array(np.arange(first, first + n)).cast(pa.string()),
             "lei": pc.take(pa.array(universe["lei"]), pa.array(lender)),
             "penalised": penalised, "decision": np.where(in_scope, approved.astype(np.int8), -1),
             "decision_without_mechanism": np.where(in_scope, approved_fair.astype(np.int8), -1),
             "harmed": in_scope & ~approved & approved_fair}
    for c, gd in do.items():
        total = _approved(_inputs(gd, u, mfi), gd, lender, terms, universe, u_risk)[0]
        direct = _approved(x, gd, lender, terms, universe, u_risk)[0]
        truth[f"decision_do_{c}"] = np.where(in_scope, total.astype(np.int8), -1)
        truth[f"harmed_total_{c}"] = in_scope & ~approved & total
        truth[f"harmed_direct_{c}"] = in_scope & ~approved & direct
    originated = action_i == 0
    truth["overcharged"] = originated & (add_on > 0)
    truth["rate_spread_overcharge"] = np.where(originated, add_on, np.nan)
    truth["capped"] = in_scope & capped & (_risk(x, universe["standard"][lender], u_risk) <= CUTOFF)
    truth["diverted"] = lender != fair_lender
    truth["lei_without_mechanism"] = pc.take(pa.array(universe["lei"]), pa.array(fair_lender))
    return truth


def _lar(rng, n, x, dti_read, tract, tr, race_i, eth_i, sex_i, race, eth, sex, action_i, action, leis, msa, mfi,
         prop, loan, prices) -> dict[str, pa.Array]:
    """The LAR's 99 columns as text, with its quirks (``engines.generators.hmda``'s formatting)."""
    dti = x["dti"]
    dti_i = np.select([dti < 20, dti < 30, dti < 36, dti < 50, dti <= 60],
                      [0, 1, 2, np.floor(dti).astype(int) - 33, 17], 18)
    dti_i[rng.random(n) < 0.006] = 19   # "NA"
    dti_i[rng.random(n) < 0.003] = 20   # "Exempt"
    exempt_prop = rng.random(n) < 0.004
    originated = action_i == 0
    has_co = (sex_i == 2) | (rng.random(n) < 0.35)
    age_i, age = _pick(rng, AGE_BINS, [5, 24, 24, 19, 15, 10, 3], n)
    const, co, codes = text_makers(n, has_co)

    def tract_text(column, decimals=None):
        return _text(tr[column][tract], decimals)

    reason = np.where(dti_read > 43, "1", np.where(x["ltv"] > 95, "4", "3"))  # DTI, collateral, credit history
    race_code = codes(race_i, ["1", "2", "3", "4", "5", "3", "5", "", "6"])
    eth_code = codes(eth_i, ["1", "2", "1", "3", ""])
    age_above = _where(age_i >= 5, pa.scalar("Yes"), pa.scalar("No"))
    cols = {
        "activity_year": const("2023"), "lei": leis, "derived_msa_md": msa,
        "state_code": pa.array(tr["state"][tract]), "county_code": pa.array(tr["county"][tract]),
        "census_tract": pa.array(tr["tract"][tract]),
        "conforming_loan_limit": _where(loan > 726_200, pa.scalar("NC"), pa.scalar("C")),
        "derived_loan_product_type": codes(x["lt"], ["Conventional:First Lien", "FHA:First Lien", "VA:First Lien",
                                                     "FSA/RHS:First Lien"]),
        "derived_dwelling_category": const("Single Family (1-4 Units):Site-Built"),
        "derived_ethnicity": eth, "derived_race": race, "derived_sex": sex, "action_taken": action,
        "purchaser_type": _where(originated, _pick(rng, ["0", "1", "3", "71"], [40, 30, 20, 10], n)[1], pa.scalar("0")),
        "preapproval": const("2"), "loan_type": codes(x["lt"], ["1", "2", "3", "4"]),
        "loan_purpose": _pick(rng, ["1", "2", "31", "32", "4"], [50, 5, 20, 18, 7], n)[1], "lien_status": const("1"),
        "reverse_mortgage": const("2"), "open_end_line_of_credit": const("2"),
        "business_or_commercial_purpose": const("2"), "loan_amount": _text(10_000 * np.floor(loan / 10_000) + 5_000),
        "combined_loan_to_value_ratio": _where(exempt_prop, pa.scalar("Exempt"), _text(x["ltv"], 3)),
        **hmda_pricing.columns(prices, action_i),
        "hoepa_status": _where(originated, pa.scalar("2"), pa.scalar("3")), "total_points_and_fees": const("NA"),
        "loan_term": const("360"), "prepayment_penalty_term": const("NA"), "intro_rate_period": const("NA"),
        "negative_amortization": const("2"), "interest_only_payment": const("2"), "balloon_payment": const("2"),
        "other_nonamortizing_features": const("2"),
        "property_value": _where(exempt_prop, pa.scalar("Exempt"), _text(10_000 * np.floor(prop / 10_000) + 5_000)),
        "construction_method": const("1"), "occupancy_type": _pick(rng, ["1", "2", "3"], [90, 3, 7], n)[1],
        "manufactured_home_secured_property_type": const("3"), "manufactured_home_land_property_interest": const("5"),
        "total_units": const("1"), "multifamily_affordable_units": const("NA"),
        "income": _where(rng.random(n) < 0.01, pa.scalar("NA"), _text(np.round(x["income"]))),
        "debt_to_income_ratio": codes(dti_i, VALUE_SETS["debt_to_income_ratio"]),
        "applicant_credit_score_type": _pick(rng, ["1", "2", "3", "9"], [40, 20, 30, 10], n)[1],
        "co_applicant_credit_score_type": co(const("1"), "10"),
        "applicant_ethnicity_1": eth_code, "co_applicant_ethnicity_1": co(eth_code, "5"),
        "applicant_ethnicity_observed": const("2"), "co_applicant_ethnicity_observed": co(const("2"), "4"),
        "applicant_race_1": race_code, "co_applicant_race_1": co(race_code, "8"),
        "applicant_race_observed": const("2"), "co_applicant_race_observed": co(const("2"), "4"),
        "applicant_sex": codes(sex_i, ["1", "2", "1", "3"]),
        "co_applicant_sex": co(_where(sex_i == 2, pa.scalar("2"), pa.scalar("1")), "5"),
        "applicant_sex_observed": const("2"), "co_applicant_sex_observed": co(const("2"), "4"),
        "applicant_age": age, "co_applicant_age": co(age, "9999"),
        "applicant_age_above_62": age_above, "co_applicant_age_above_62": co(age_above, "NA"),
        "submission_of_application": const("1"), "initially_payable_to_institution": const("1"),
        "aus_1": _pick(rng, ["1", "2", "6"], [60, 30, 10], n)[1],
        "denial_reason_1": _where(action_i == 2, pa.array(reason, pa.string()), pa.scalar("10")),
        "tract_population": tract_text("population"), "tract_minority_population_percent": tract_text("share", 2),
        "ffiec_msa_md_median_family_income": _text(mfi),
        "tract_to_msa_income_percentage": tract_text("income_ratio", 2),
        "tract_owner_occupied_units": tract_text("owner_units"), "tract_one_to_four_family_homes": tract_text("homes"),
        "tract_median_age_of_housing_units": tract_text("age"),
    }
    empty = const("")
    return {c: cols.get(c, empty) for c in LAR_COLUMNS}


def _truth_batch(truth: dict) -> pa.RecordBatch:
    def column(f):
        v = truth[f.name]
        if isinstance(v, pa.Array):
            return v
        if f.type == pa.int8():
            return pa.array(np.where(v < 0, 0, v).astype(np.int8), pa.int8(), mask=v < 0)
        return pa.array(v, f.type, from_pandas=True)  # NaN -> null

    return pa.RecordBatch.from_arrays([column(f) for f in TRUTH], schema=TRUTH)


def _records_batch(cols: dict) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type, from_pandas=True)
                                       if not isinstance(cols[f.name], pa.Array) else cols[f.name] for f in RECORDS],
                                      schema=RECORDS)


def _stream(kind: str, n: int, seed: int, batch_rows: int, world: str, effect: float, single: bool,
            n_lenders: int, n_markets: int) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch]]:
    if n <= 0:
        raise ValueError(f"{'hmda_single' if single else 'hmda_market'} generator: rows must be positive, got {n}")
    if batch_rows <= 0:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    w = lar_worlds.check_world(world, effect, single)
    pending: list[tuple[pa.Table, pa.Table]] = []
    held = 0
    for b, start in enumerate(range(0, n, BLOCK)):
        data, truth = _block(min(BLOCK, n - start), seed, b, start, w, single, n_lenders, n_markets, kind == "lar")
        if kind == "truth":
            yield None, _truth_batch(truth)
            continue
        batch = (pa.RecordBatch.from_arrays(list(data.values()), names=LAR_COLUMNS) if kind == "lar"
                 else _records_batch(data))
        pending.append((pa.Table.from_batches([batch]), pa.Table.from_batches([_truth_batch(truth)])))
        held += batch.num_rows
        last = start + BLOCK >= n
        while held >= batch_rows or (last and held):
            d, t = (pa.concat_tables([p[i] for p in pending]) for i in (0, 1))
            take = min(batch_rows, held)
            yield d.slice(0, take).combine_chunks().to_batches()[0], t.slice(0, take).combine_chunks().to_batches()[0]
            pending = [(d.slice(take), t.slice(take))] if held > take else []
            held -= take


def iter_lar_batches(n: int = DEFAULT_ROWS, seed: int = 0, batch_rows: int = 250_000,
                     world: str = lar_worlds.DEFAULT_WORLD, effect: float = 1.0, single: bool = False,
                     n_lenders: int = st.N_LENDERS, n_markets: int = st.N_MARKETS
                     ) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch]]:
    """(LAR batch, truth batch) pairs covering ``n`` applications: the public LAR's 99 columns as
    text (snapshot spelling). ``single``: one lender in three markets (generator hmda_single),
    else ``n_lenders`` lenders in ``n_markets`` metros and 99999 (hmda_market)."""
    yield from _stream("lar", n, seed, batch_rows, world, effect, single, n_lenders, n_markets)


def iter_record_batches(n: int = DEFAULT_ROWS, seed: int = 0, batch_rows: int = 250_000,
                        world: str = lar_worlds.DEFAULT_WORLD, effect: float = 1.0, single: bool = False,
                        n_lenders: int = st.N_LENDERS, n_markets: int = st.N_MARKETS
                        ) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch]]:
    """(records batch, truth batch) pairs: the same applications as :func:`iter_lar_batches` as
    the lenders hold them (:data:`RECORDS`): the credit score and every other input of the
    decision (log income, DTI and CLTV unbinned, the loan type, the lender's standard, the
    underwriting adjustment: approved iff the denial score ≤ CUTOFF and the DTI under the
    lender's cap) and of the price (the lender's price level, the price adjustment, the points
    bought), the rate spread and interest rate where priced (action taken 1 or 2; else null)."""
    yield from _stream("records", n, seed, batch_rows, world, effect, single, n_lenders, n_markets)


def market_truth(n: int = DEFAULT_ROWS, seed: int = 0, world: str = lar_worlds.DEFAULT_WORLD, effect: float = 1.0,
                 single: bool = False, n_lenders: int = st.N_LENDERS, n_markets: int = st.N_MARKETS) -> pa.Table:
    """The ground truth of ``n`` applications alone (as :func:`iter_lar_batches` writes beside the LAR)."""
    return pa.Table.from_batches([t for _, t in _stream("truth", n, seed, BLOCK, world, effect, single, n_lenders,
                                                        n_markets)], schema=TRUTH)
