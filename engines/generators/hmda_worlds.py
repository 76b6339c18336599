"""The lender worlds of the HMDA generator (``engines.generators.hmda``): each world's planted
mechanism (none; an input read worse, a score penalty, an intersection, the tract's minority
share, lenders avoiding tracts, a price add-on), its size, who it applies to, and the
description written beside generated files (:func:`mechanism`)."""
from __future__ import annotations

import numpy as np

from aequum.engines.generators import hmda_lenders
from aequum.engines.generators import hmda_pricing

INTERVENTIONS = {"derived_race": "White", "derived_ethnicity": "Not Hispanic or Latino", "derived_sex": "Male"}
BLACK, HISPANIC, ASIAN = "Black or African American", "Hispanic or Latino", "Asian"
# the risk's weight on each input a world can penalise (the decision's coefficients)
INPUT_WEIGHTS = {"debt_to_income_ratio": 0.09, "combined_loan_to_value_ratio": 0.05}
TRACT_THRESHOLD = 50.0  # percent minority population above which the redlining world penalises
DEFAULT_WORLD = "dti_penalty"
# The planted mechanism of each world. kind: "none", "input" (``size`` points added to the input
# ``variable`` as the underwriter reads it), "score" (``size`` added to the risk) or "tract"
# (``size`` added to the risk where the tract's minority share exceeds ``threshold``);
# penalised: the groups it applies to, per column (``match`` "any": a record in any of them,
# "all": in every one of them).
WORLDS: dict[str, dict] = {
    "null": {
        "kind": "none",
        "description": "no discriminatory term: the decision reads income, DTI, LTV, the unobserved credit "
                       "quality and noise only (the groups still differ in those inputs)",
        "penalised": {}, "match": "any", "size": 0.0},
    "dti_penalty": {
        "kind": "input",
        "description": "disparate treatment: race/ethnicity-dependent penalty on one underwriting variable "
                       "(the debt-to-income ratio read 5 points higher for Black or African American and for "
                       "Hispanic or Latino applicants)",
        "variable": "debt_to_income_ratio",
        "penalised": {"derived_race": [BLACK], "derived_ethnicity": [HISPANIC]}, "match": "any", "size": 5.0},
    "score_penalty": {
        "kind": "score",
        "description": "disparate treatment: 0.45 added to the risk of Black or African American and of "
                       "Hispanic or Latino applicants directly, through no input",
        "penalised": {"derived_race": [BLACK], "derived_ethnicity": [HISPANIC]}, "match": "any", "size": 0.45},
    "intersection": {
        "kind": "score",
        "description": "intersectional disparate treatment: 0.45 added to the risk of Black or African "
                       "American women only (derived_race Black or African American and derived_sex Female)",
        "penalised": {"derived_race": [BLACK], "derived_sex": ["Female"]}, "match": "all", "size": 0.45},
    "redlining": {
        "kind": "tract",
        "description": "redlining: 0.45 added to the risk of applications from census tracts whose minority "
                       "population share exceeds 50%, whatever the applicant's race (the tract share is "
                       "higher for Black and for Hispanic applicants: race has a total effect through it, "
                       "no direct effect)",
        "variable": "tract_minority_population_percent", "threshold": TRACT_THRESHOLD,
        "penalised": {}, "match": "any", "size": 0.45},
    "input_penalty": {
        "kind": "input",
        "description": "disparate treatment: the combined loan-to-value ratio read 8 points higher for Asian "
                       "applicants (a penalty on one input for one group)",
        "variable": "combined_loan_to_value_ratio",
        "penalised": {"derived_race": [ASIAN]}, "match": "any", "size": 8.0},
    "lender_redlining": {
        "kind": "lender",
        "description": "redlining by lenders: five named lenders take 75% fewer of the applications from census "
                       "tracts whose minority population share exceeds 50% (fewer applications taken, and so "
                       "fewer loans made, there); every decision as in the null world",
        "threshold": hmda_lenders.THRESHOLD, "penalised": {}, "match": "any", "size": hmda_lenders.AVOIDANCE},
    "pricing_penalty": {
        "kind": "pricing",
        "description": "pricing disparate treatment: loans originated to Black or African American and to "
                       "Hispanic or Latino borrowers priced 0.25 points higher in rate spread (and interest "
                       "rate) than the risk-based pricer charges; the decisions are the null world's",
        "penalised": {"derived_race": [BLACK], "derived_ethnicity": [HISPANIC]}, "match": "any",
        "size": hmda_pricing.ADD_ON},
}


def check_world(world: str, effect: float = 1.0) -> dict:
    """The entry of :data:`WORLDS` named ``world`` with its penalty's size times ``effect`` (1:
    as listed; 0.5: half the points or half the shift; any non-negative number); a ValueError
    naming the known worlds, or the bad effect, otherwise."""
    if world not in WORLDS:
        raise ValueError(f"hmda generator: unknown world {world!r}; known worlds: {list(WORLDS)}")
    if not (isinstance(effect, (int, float)) and np.isfinite(effect) and effect >= 0):
        raise ValueError(f"hmda generator: effect must be a non-negative number, got {effect!r}")
    return {**WORLDS[world], "size": WORLDS[world]["size"] * float(effect), "effect": float(effect)}


def score_shift(world: str, effect: float = 1.0) -> float:
    """What the world's penalty adds to the risk of a record it applies to."""
    return _shift(check_world(world, effect))


def _shift(w: dict) -> float:
    if w["kind"] in ("lender", "pricing"):  # where applications go or what loans cost, not how they are decided
        return 0.0
    return INPUT_WEIGHTS[w["variable"]] * w["size"] if w["kind"] == "input" else w["size"]


def _who(w: dict) -> str:
    """The records a world's penalty applies to, in words."""
    if w["kind"] == "none":
        return "nobody (no penalty in this world)"
    if w["kind"] == "lender":
        return "nobody's decision (the named lenders take fewer applications from high-minority tracts)"
    if w["kind"] == "tract":
        return f"the tract's minority population share exceeds {w['threshold']:g}%"
    return (" or " if w["match"] == "any" else " and ").join(
        f"{column} {' / '.join(values)}" for column, values in w["penalised"].items())


def mechanism(world: str = DEFAULT_WORLD, effect: float = 1.0) -> dict:
    """The planted mechanism of ``world`` (its penalty times ``effect``) and the meaning of the
    ground truth's columns (the JSON written beside generated files)."""
    w = check_world(world, effect)
    fair = {"DTI": "0.09(DTI-36)", "LTV": "0.05(LTV-80)"}
    if w["kind"] == "input":
        read = {"debt_to_income_ratio": "DTI", "combined_loan_to_value_ratio": "LTV"}[w["variable"]]
        fair[read] = fair[read].replace(f"({read}", f"({read}+penalty")
    decision = (f"denied iff {fair['DTI']} + {fair['LTV']} - 0.45 log(income/80) - 1.2 credit + e"
                f"{' + penalty' if w['kind'] in ('score', 'tract') else ''} > c")
    size = ({"variable": w["variable"], "penalty_points": w["size"]} if w["kind"] == "input" else
            {"variable": w["variable"], "threshold": w["threshold"], "penalty": w["size"]} if w["kind"] == "tract" else
            {"threshold": w["threshold"], "avoidance": min(1.0, w["size"]), "lenders": hmda_lenders.planted_leis()}
            if w["kind"] == "lender" else
            {"variable": "rate_spread", "add_on_points": w["size"]} if w["kind"] == "pricing" else
            {"penalty": w["size"]})
    columns = {
        "id": "0-based row number (the LAR has no record id)",
        "penalised": f"the penalty applies: {_who(w)}",
        "decision": "1 approved, 0 denied, null out of scope",
        "decision_without_mechanism": "1 approved, 0 denied, null out of scope: the same applicant "
                                      "without the penalty (everything else as drawn)",
        "harmed": "direct effect: denied with the penalty, approved without it",
        **{f"decision_do_{c}": f"1 approved, 0 denied, null out of scope: the same applicant (same "
                               f"exogenous noise) under do({c} := {v}) through the generator's structural "
                               "equations — credit, income, DTI, LTV, the tract share and the penalty move "
                               "with the group"
           for c, v in INTERVENTIONS.items()},
        **{f"harmed_total_{c}": f"total effect: denied factually, approved under do({c} := {v})"
           for c, v in INTERVENTIONS.items()},
        **{f"harmed_direct_{c}": f"controlled direct effect of {c}: denied factually, approved when only the "
                                 f"penalty follows do({c} := {v}) (every other variable, the tract share "
                                 "included, as drawn); differs from `harmed` where the penalty does not follow "
                                 "this attribute alone (applicants both Black and Hispanic, whose other "
                                 "attribute keeps it; in the redlining world, where it follows the tract share "
                                 "only, it is all false)"
           for c, v in INTERVENTIONS.items()},
        "p_harmed": "for refused in-scope applicants (null otherwise): the Bayes posterior of `harmed` given "
                    "the exact underwriting variables (income, DTI, LTV), the tract's minority share and the "
                    "groups, knowing the generator; flagging by it is the best any audit reading those "
                    "columns can do",
        **{f"p_harmed_{kind}_{c}": f"the same for harmed_{kind}_{c}" for kind in ("total", "direct")
           for c in INTERVENTIONS},
        "overcharged": "an originated loan whose rate spread carries the pricing world's add-on",
        "rate_spread_overcharge": "for originated loans (null otherwise): the points the add-on adds to the rate "
                                  "spread and interest rate (0 where none)",
    }
    return {"world": world, "effect": w["effect"], "kind": w["kind"], "description": w["description"], **size,
            "score_shift": _shift(w), "penalised": w["penalised"], "match": w["match"],
            "decision": decision,
            "denial_reason_1": "for denied applications: 1 (debt-to-income) if the DTI as the underwriter read it "
                               "exceeds 43, else 4 (collateral) if the LTV as read exceeds 95, else 3 (credit history)",
            "ground_truth_columns": columns}


MECHANISM = mechanism(DEFAULT_WORLD)  # the default world's (dti_penalty)
