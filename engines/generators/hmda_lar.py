"""The public HMDA LAR as the generator writes it (``engines.generators.hmda``): its 99 columns,
value sets and sentinels, the two spellings of its column names (the snapshot's and the Data
Browser's), and the small helpers that format drawn values as the LAR's text."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


LAR_COLUMNS = [
    "activity_year", "lei", "derived_msa_md", "state_code", "county_code", "census_tract",
    "conforming_loan_limit", "derived_loan_product_type", "derived_dwelling_category", "derived_ethnicity",
    "derived_race", "derived_sex", "action_taken", "purchaser_type", "preapproval", "loan_type",
    "loan_purpose", "lien_status", "reverse_mortgage", "open_end_line_of_credit",
    "business_or_commercial_purpose", "loan_amount", "combined_loan_to_value_ratio", "interest_rate",
    "rate_spread", "hoepa_status", "total_loan_costs", "total_points_and_fees", "origination_charges",
    "discount_points", "lender_credits", "loan_term", "prepayment_penalty_term", "intro_rate_period",
    "negative_amortization", "interest_only_payment", "balloon_payment", "other_nonamortizing_features",
    "property_value", "construction_method", "occupancy_type", "manufactured_home_secured_property_type",
    "manufactured_home_land_property_interest", "total_units", "multifamily_affordable_units", "income",
    "debt_to_income_ratio", "applicant_credit_score_type", "co_applicant_credit_score_type",
    *[f"applicant_ethnicity_{i}" for i in range(1, 6)], *[f"co_applicant_ethnicity_{i}" for i in range(1, 6)],
    "applicant_ethnicity_observed", "co_applicant_ethnicity_observed",
    *[f"applicant_race_{i}" for i in range(1, 6)], *[f"co_applicant_race_{i}" for i in range(1, 6)],
    "applicant_race_observed", "co_applicant_race_observed", "applicant_sex", "co_applicant_sex",
    "applicant_sex_observed", "co_applicant_sex_observed", "applicant_age", "co_applicant_age",
    "applicant_age_above_62", "co_applicant_age_above_62", "submission_of_application",
    "initially_payable_to_institution", *[f"aus_{i}" for i in range(1, 6)],
    *[f"denial_reason_{i}" for i in range(1, 5)], "tract_population", "tract_minority_population_percent",
    "ffiec_msa_md_median_family_income", "tract_to_msa_income_percentage", "tract_owner_occupied_units",
    "tract_one_to_four_family_homes", "tract_median_age_of_housing_units",
]
assert len(LAR_COLUMNS) == 99

DTI_BINS = ["<20%", "20%-<30%", "30%-<36%", *[str(v) for v in range(36, 50)], "50%-60%", ">60%"]
AGE_BINS = ["<25", "25-34", "35-44", "45-54", "55-64", "65-74", ">74"]
VALUE_SETS = {
    "derived_race": ["American Indian or Alaska Native", "Asian", "Black or African American",
                     "Native Hawaiian or Other Pacific Islander", "White", "2 or more minority races", "Joint",
                     "Free Form Text Only", "Race Not Available"],
    "derived_ethnicity": ["Hispanic or Latino", "Not Hispanic or Latino", "Joint", "Ethnicity Not Available",
                          "Free Form Text Only"],
    "derived_sex": ["Male", "Female", "Joint", "Sex Not Available"],
    "action_taken": [str(v) for v in range(1, 9)],
    "debt_to_income_ratio": DTI_BINS + ["NA", "Exempt"],
    "applicant_age": AGE_BINS + ["8888"],
    "loan_type": ["1", "2", "3", "4"],
    "loan_purpose": ["1", "2", "31", "32", "4", "5"],
}
NUMERIC_SENTINELS = {
    "income": ["NA", ""], "property_value": ["NA", "Exempt", ""], "combined_loan_to_value_ratio": ["NA", "Exempt", ""],
    "interest_rate": ["NA", "Exempt", ""], "rate_spread": ["NA", "Exempt", ""], "loan_term": ["NA", "Exempt", ""],
}
_HYPHENATED = {"derived_msa_md": "derived_msa-md", "open_end_line_of_credit": "open-end_line_of_credit"}
# the reference value each protected attribute is set to for the total-effect truth


def normalise_column_name(name: str) -> str:
    """LAR column names to one spelling: lower case, '-' -> '_', the LTV names as one."""
    n = name.strip().lower().replace("-", "_")
    return "combined_loan_to_value_ratio" if n == "loan_to_value_ratio" else n


def data_browser_name(name: str) -> str:
    """The Data Browser CSV's spelling of a column (hyphens, ``loan_to_value_ratio``)."""
    if name == "combined_loan_to_value_ratio":
        return "loan_to_value_ratio"
    if name in _HYPHENATED:
        return _HYPHENATED[name]
    for prefix in ("co_applicant_",):
        if name.startswith(prefix):
            name = "co-applicant_" + name[len(prefix):]
    for stem in ("applicant_race_", "applicant_ethnicity_", "aus_", "denial_reason_"):
        if name.endswith(tuple(f"{stem}{i}" for i in range(1, 6))):
            return name[:-2] + "-" + name[-1]
    return name


def _pick(rng, values, p, n) -> tuple[np.ndarray, pa.Array]:
    """Draw indices with probabilities ``p``; return them and the values as an Arrow string array."""
    p = np.asarray(p, float)
    idx = rng.choice(len(values), size=n, p=p / p.sum())
    return idx, pc.take(pa.array([str(v) for v in values]), pa.array(idx))


def _text(x: np.ndarray, decimals: int | None = None) -> pa.Array:
    """Numbers as the LAR prints them (integers, or rounded decimals)."""
    if decimals is None:
        return pa.array(x.astype(np.int64)).cast(pa.string())
    return pc.round(pa.array(x, pa.float64()), decimals).cast(pa.string())


def _where(mask: np.ndarray, a, b) -> pa.Array:
    return pc.if_else(pa.array(mask), a, b)


def _zfill(x: np.ndarray, width: int) -> pa.Array:
    return pc.utf8_lpad(pa.array(x.astype(np.int64)).cast(pa.string()), width, "0")


# The structural equations (one applicant's exogenous noise u_* fixed; group indicators as bools).
# Group means encode the wealth gaps that drive the published denial-rate gaps.


def text_makers(n: int, has_co: np.ndarray):
    """The three ways a generator writes a LAR column of ``n`` rows as text: ``const(v)`` (one
    value everywhere), ``co(a, alone)`` (the co-applicant's value, ``alone`` without one) and
    ``codes(index, mapping)`` (coded values by index)."""
    zeros = pa.array(np.zeros(n, np.int32))

    def const(v):
        return pc.take(pa.array([v], pa.string()), zeros)

    def co(a, alone):
        return _where(has_co, a, pa.scalar(alone))

    def codes(index, mapping):
        return pc.take(pa.array(mapping), pa.array(index))

    return const, co, codes
