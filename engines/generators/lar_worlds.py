"""The worlds of the lending-market generator (``engines.generators.lar_market``): each world's
planted term (none; a denial penalty; a price add-on; lenders avoiding minority tracts; a DTI
cap), at every lender or at named ones, its size, and the description and lender table written
beside generated files (:func:`mechanism`).

A world's term applies to Black or African American (``derived_race``) and to Hispanic or
Latino (``derived_ethnicity``) applicants, as the LAR records them, at ``lenders``: "all" or a
role of ``engines.generators.lar_structure.ROLES`` (the named lenders). ``effect`` scales the
size (1: as listed); the DTI cap has no size.
"""
from __future__ import annotations

import numpy as np

from aequum.engines.generators import lar_structure

BLACK, HISPANIC = "Black or African American", "Hispanic or Latino"
DTI_WEIGHT = 0.06   # the denial score's weight per DTI point (the dti_penalty world's shift per point)
DEFAULT_WORLD = "dti_penalty"
GROUPS = {"derived_race": [BLACK], "derived_ethnicity": [HISPANIC]}
WORLDS: dict[str, dict] = {
    "null": {"kind": "none", "lenders": "all", "size": 0.0,
             "description": "fair: no discriminatory term at any lender; the denial score and the price read the "
                            "credit score (absent from the LAR), income, DTI, CLTV, the loan type and the lender's "
                            "own standard and price level only"},
    "dti_penalty": {"kind": "input", "lenders": "all", "size": 5.0,
                    "description": "disparate treatment at every lender: the debt-to-income ratio read 5 points "
                                   "higher for Black or African American and for Hispanic or Latino applicants "
                                   f"({DTI_WEIGHT * 5:g} on the denial score)"},
    "score_penalty": {"kind": "score", "lenders": "all", "size": 0.45,
                      "description": "disparate treatment at every lender: 0.45 added to the denial score of Black "
                                     "or African American and of Hispanic or Latino applicants, through no input"},
    "named_score_penalty": {"kind": "score", "lenders": "denial", "size": 0.45,
                             "description": "disparate treatment at three named lenders: 0.45 added to the denial "
                                            "score of their Black or African American and Hispanic or Latino "
                                            "applicants; every other lender fair"},
    "pricing_penalty": {"kind": "pricing", "lenders": "all", "size": 0.30,
                        "description": "pricing disparate treatment at every lender: 0.30 points added to the rate "
                                       "spread and interest rate of Black or African American and of Hispanic or "
                                       "Latino borrowers' loans; decisions fair"},
    "named_pricing_penalty": {"kind": "pricing", "lenders": "pricing", "size": 0.30,
                               "description": "pricing disparate treatment at three named lenders: 0.30 points "
                                              "added to the rate spread and interest rate of their Black or African "
                                              "American and Hispanic or Latino borrowers' loans; every other "
                                              "lender, and every decision, fair"},
    "lender_redlining": {"kind": "lender", "lenders": "redlining", "size": 0.85,
                         "description": "redlining by three named lenders: they take 85% fewer of the applications "
                                        "from census tracts over 50% minority (their footprint; the applications "
                                        "go to the market's other lenders); every decision and price fair"},
    "dti_cap": {"kind": "cap", "lenders": "dti_cap", "size": 50.0,
                "description": "a named lender denies every application whose debt-to-income ratio is 50% or more "
                               "(the LAR's bins '50%-60%' and '>60%'), whoever applies; everything else fair (a "
                               "facially neutral rule: no discriminatory term; a DTI-bin dummy separates its "
                               "denials)"},
}
SINGLE_WORLDS = ("null", "dti_penalty", "score_penalty", "pricing_penalty", "dti_cap")


def check_world(world: str, effect: float = 1.0, single: bool = False) -> dict:
    """The entry of :data:`WORLDS` named ``world``, its size times ``effect``; a ValueError naming
    the known worlds (a single lender's market has no named lenders among others: the worlds of
    :data:`SINGLE_WORLDS`), or the bad effect, otherwise."""
    known = SINGLE_WORLDS if single else tuple(WORLDS)
    who = "hmda_single" if single else "hmda_market"
    if world not in known:
        raise ValueError(f"{who} generator: unknown world {world!r}; known worlds: {list(known)}")
    if not (isinstance(effect, (int, float)) and np.isfinite(effect) and effect >= 0):
        raise ValueError(f"{who} generator: effect must be a non-negative number, got {effect!r}")
    w = WORLDS[world]
    if w["kind"] == "cap" and effect != 1.0:
        raise ValueError(f"{who} generator: world dti_cap has no size to scale (effect {effect!r})")
    size = w["size"] * float(effect)
    if w["kind"] == "lender":
        size = min(1.0, size)
    return {**w, "name": world, "size": size, "effect": float(effect)}


def at_lender(w: dict, universe: dict) -> np.ndarray:
    """Whether the world's term is in force at each lender of ``universe``."""
    n = len(universe["lei"])
    if w["kind"] == "none":
        return np.zeros(n, bool)
    if w["lenders"] == "all":
        return np.ones(n, bool)
    out = np.zeros(n, bool)
    out[list(universe["roles"][w["lenders"]])] = True
    return out


def lender_terms(w: dict, universe: dict) -> dict[str, np.ndarray]:
    """Per lender, the planted terms of world ``w``: ``denial_penalty`` (on the denial score, for
    Black and Hispanic applicants), ``pricing_add_on`` (points), ``avoidance`` (share of tracts over
    50 % minority not taken), ``dti_cap`` (percent; NaN: none)."""
    on = at_lender(w, universe)
    shift = w["size"] * (DTI_WEIGHT if w["kind"] == "input" else 1.0)
    return {"denial_penalty": np.where(on & (w["kind"] in ("score", "input")), shift, 0.0),
            "pricing_add_on": np.where(on & (w["kind"] == "pricing"), w["size"], 0.0),
            "avoidance": np.where(on & (w["kind"] == "lender"), w["size"], 0.0),
            "dti_cap": np.where(on & (w["kind"] == "cap"), w["size"], np.nan)}


def lender_table(world: str, effect: float = 1.0, single: bool = False, n_lenders: int = lar_structure.N_LENDERS,
                 n_markets: int = lar_structure.N_MARKETS) -> list[dict]:
    """One row per lender: ``lei``, ``rank`` (0 largest), ``share`` (expected share of the
    applications), ``markets`` (derived_msa_md codes it operates in), ``specialist`` (serves
    minority tracts), its fair ``tilt``, ``standard`` and ``price_level``, ``planted`` (any term of
    the world) and the terms of :func:`lender_terms`."""
    w = check_world(world, effect, single)
    u = lar_structure.lenders(single, n_lenders, n_markets)
    codes = [m[0] for m in lar_structure.markets(single, n_markets)]
    terms = lender_terms(w, u)
    rows = []
    for i, code in enumerate(u["lei"]):
        t = {k: float(v[i]) for k, v in terms.items()}
        rows.append({"lei": code, "rank": i, "share": round(float(u["share"][i]), 5),
                     "markets": [c for c, v in zip(codes, u["volume"][i]) if v > 0],
                     "specialist": i in u["specialists"], "tilt": round(float(u["tilt"][i]), 4),
                     "standard": round(float(u["standard"][i]), 4), "price_level": round(float(u["price_level"][i]), 4),
                     "planted": bool(t["denial_penalty"] or t["pricing_add_on"] or t["avoidance"]
                                     or not np.isnan(t["dti_cap"])),
                     **{k: (None if np.isnan(v) else v) for k, v in t.items()}})
    return rows


def mechanism(world: str = DEFAULT_WORLD, effect: float = 1.0, single: bool = False,
              n_lenders: int = lar_structure.N_LENDERS, n_markets: int = lar_structure.N_MARKETS) -> dict:
    """The planted mechanism of ``world`` (its term times ``effect``), the lender table with each
    lender's planted terms (``lenders``; ``planted_lenders``: the LEIs with any), and the meaning
    of the ground truth's columns: the JSON written beside generated files."""
    w = check_world(world, effect, single)
    table = lender_table(world, effect, single, n_lenders, n_markets)
    who = "Black or African American (derived_race) or Hispanic or Latino (derived_ethnicity)"
    where = "every lender" if w["lenders"] == "all" else f"the named lenders ({w['lenders']} role)"
    columns = {
        "id": "0-based row number (the LAR has no record id)",
        "lei": "the lender of the application",
        "penalised": f"the world's discriminatory term (denial penalty or price add-on) applies: {who} at {where}"
                     if w["kind"] in ("score", "input", "pricing")
                     else "the world has no discriminatory term: all false",
        "decision": "1 approved, 0 denied, null out of scope (withdrawn, incomplete, purchased)",
        "decision_without_mechanism": "the same applicant's decision without the denial penalty (a DTI cap, which "
                                      "is no discriminatory term, still applies)",
        "harmed": "denied with the denial penalty, approved without it",
        **{f"decision_do_{c}": f"the same applicant (same exogenous noise, same tract and lender) under do({c} := "
                               f"{v}): credit score, income, DTI, CLTV, loan type and the penalty follow the group"
           for c, v in (("derived_race", "White"), ("derived_ethnicity", "Not Hispanic or Latino"),
                        ("derived_sex", "Male"))},
        **{f"harmed_total_{c}": f"denied factually, approved under do({c} := reference)"
           for c in ("derived_race", "derived_ethnicity", "derived_sex")},
        **{f"harmed_direct_{c}": f"denied factually, approved when only the penalty follows do({c} := reference)"
           for c in ("derived_race", "derived_ethnicity", "derived_sex")},
        "overcharged": "an originated loan whose rate spread and interest rate carry the add-on",
        "rate_spread_overcharge": "originated loans: the add-on's points (0 where none); null otherwise",
        "capped": "in scope, denied by a lender's DTI cap, approved by its score",
        "diverted": "taken by another lender because a redlining lender avoided the tract",
        "lei_without_mechanism": "the lender that would have taken the application had no lender avoided any tract",
    }
    size = {"score": {"denial_penalty": w["size"]},
            "input": {"variable": "debt_to_income", "penalty_points": w["size"],
                      "denial_penalty": w["size"] * DTI_WEIGHT},
            "pricing": {"variables": ["rate_spread", "interest_rate"], "add_on_points": w["size"]},
            "lender": {"threshold": lar_structure.THRESHOLD, "avoidance": w["size"]},
            "cap": {"variable": "debt_to_income", "dti_cap": w["size"], "capped_bins": ["50%-60%", ">60%"]},
            "none": {}}[w["kind"]]
    return {"world": world, "effect": w["effect"], "kind": w["kind"], "description": w["description"], **size,
            "lenders_with_term": w["lenders"],
            "penalised": GROUPS if w["kind"] in ("score", "input", "pricing") else {},
            "match": "any",
            "market": ("one lender (one LEI) in markets " + ", ".join(lar_structure.SINGLE_MARKETS)) if single else
                      f"{n_lenders} lenders in {n_markets} metropolitan markets and 99999 (outside any MSA)",
            "credit_score": "in the internal records only (the LAR lacks it): clip(round(735 + 60 z), 300, 850), "
                            "z ~ N(-0.55 Black, -0.40 Hispanic, +0.05 Asian, 1)",
            "decision": "denied iff 0.06(DTI-36) + 0.03(CLTV-80) - 0.5 log(income/80) - 1.5 (score-735)/60 "
                        "+ standard[lender] + 0.5 u + penalty > 2.4, or DTI >= cap at a capping lender",
            "price": "rate spread premium = 0.30 + type + (-0.40)(score-735)/60 + 0.012(CLTV-80) + 0.008(DTI-36) "
                     "+ price_level[lender] + market level + add_on + 0.20 e",
            "planted_lenders": [r["lei"] for r in table if r["planted"]],
            "lenders": table, "ground_truth_columns": columns}
