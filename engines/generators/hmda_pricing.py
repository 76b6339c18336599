"""What the HMDA generator's loans cost: a risk-based pricer, and the pricing world's planted
add-on (``engines.generators.hmda``, world ``pricing_penalty``).

A lender prices a loan by its risk, as a rate sheet's loan-level price adjustments do: a worse
credit score, a higher combined loan-to-value ratio, a higher debt-to-income ratio cost more,
and government loans carry their insurance premium in the APR. One application's rate premium
over the average prime offer rate (APOR, one for the generated year), in points:

    premium = 0.10 + TYPE[loan type] − 0.25·credit + 0.02·(CLTV − 80) + 0.012·(DTI − 36)
              + add-on + ε,   ε ~ N(0, 0.25)

``credit`` is the applicant's latent credit quality (sd 1; the score the pricer reads, which the
public LAR lacks), CLTV and DTI the true ratios before the LAR bins them, TYPE 0 conventional,
0.9 FHA, −0.1 VA, 0.4 USDA/RHS. ``add-on``: in the ``pricing_penalty`` world,
:data:`ADD_ON` points times the world's ``effect`` for Black or African American and for
Hispanic or Latino borrowers (the decisions are the null world's), else 0.

Some borrowers buy the rate down: 30% pay discount points of U(0.25, 1.5)% of the loan, 0.25
points of rate each; 20% get lender credits of U(0.1, 0.75)% of the loan. Then (Reg Z's APR
counts the financed charges, here as a fixed 0.12 plus 0.2 per point paid):

    interest_rate = APOR − 0.05 + premium − 0.25·points
    rate_spread   = interest_rate + 0.12 + 0.2·points − APOR
    origination_charges = 0.5% of the loan + $600 + discount points
    total_loan_costs    = origination_charges + 0.8% of the loan + $1,200

As the LAR publishes them (``../shared/data/HMDA_LAR.md``): the interest rate and rate spread
for loans originated and approved but not accepted (action taken 1, 2), the costs, points and
credits for originations only, "NA" elsewhere; points and credits empty where none were paid;
2% of loans from partially exempt lenders, "Exempt" in every pricing field. The draws come from
a stream of their own, so no other column, and no decision, moves with them.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

APOR = 6.45
ADD_ON = 0.25  # points on the rate spread of the penalised borrowers (pricing_penalty, effect 1)
TYPE = np.array([0.0, 0.9, -0.1, 0.4])  # loan_type 1 conventional, 2 FHA, 3 VA, 4 USDA/RHS
FIELDS = ["interest_rate", "rate_spread", "total_loan_costs", "origination_charges", "discount_points",
          "lender_credits"]


def add_on(w: dict, penalised: np.ndarray) -> np.ndarray:
    """The points the world (``hmda.check_world``'s entry) adds to each application's price:
    :data:`ADD_ON` times its effect where the pricing world's penalty applies, else 0."""
    return np.where(penalised, ADD_ON * w["effect"], 0.0) if w["kind"] == "pricing" else np.zeros(len(penalised))


def overcharge(added: np.ndarray, originated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The truth of the pricing world: (overcharged, rate_spread_overcharge) per record — an
    originated loan whose rate spread carries the add-on (``added`` points), and the points it
    adds (0 for other originations, NaN for applications not originated)."""
    return originated & (added > 0), np.where(originated, added, np.nan)


def prices(seed: int, block: int, credit: np.ndarray, ltv: np.ndarray, dti: np.ndarray, loan: np.ndarray,
           loan_type: np.ndarray, add_on: np.ndarray) -> dict[str, np.ndarray]:
    """Each application's prices as numbers (module docstring), from the stream ``[seed, block,
    3]``; ``loan_type`` the LAR's loan type as an index 0-3, ``add_on`` the points the world adds."""
    rng = np.random.default_rng([seed, block, 3])
    n = len(credit)
    eps = rng.standard_normal(n) * 0.25
    points = np.where(rng.random(n) < 0.30, rng.uniform(0.25, 1.5, n), 0.0)
    credits = np.where(rng.random(n) < 0.20, rng.uniform(0.1, 0.75, n), 0.0)
    exempt = rng.random(n) < 0.02
    premium = (0.10 + TYPE[loan_type] - 0.25 * credit + 0.02 * (ltv - 80) + 0.012 * (dti - 36)
               + add_on + eps)
    rate = APOR - 0.05 + premium - 0.25 * points
    origination = 0.005 * loan + 600 + loan * points / 100
    return {"interest_rate": rate, "rate_spread": rate + 0.12 + 0.2 * points - APOR,
            "origination_charges": origination, "total_loan_costs": origination + 0.008 * loan + 1200,
            "discount_points": loan * points / 100, "lender_credits": loan * credits / 100, "exempt": exempt}


def columns(p: dict[str, np.ndarray], action: np.ndarray) -> dict[str, pa.Array]:
    """The pricing fields as the LAR prints them, for the action taken (index 0 originated, 1
    approved but not accepted, other: no loan)."""
    exempt, originated, priced = p["exempt"], action == 0, action <= 1

    def text(x, decimals, reported, blank=None):
        values = pc.round(pa.array(x, pa.float64()), decimals).cast(pa.string())
        if blank is not None:
            values = pc.if_else(pa.array(blank), pa.scalar(""), values)
        out = pc.if_else(pa.array(reported), values, pa.scalar("NA"))
        return pc.if_else(pa.array(exempt & reported), pa.scalar("Exempt"), out)

    return {"interest_rate": text(p["interest_rate"], 3, priced), "rate_spread": text(p["rate_spread"], 3, priced),
            "total_loan_costs": text(p["total_loan_costs"], 2, originated),
            "origination_charges": text(p["origination_charges"], 2, originated),
            "discount_points": text(p["discount_points"], 2, originated, p["discount_points"] == 0),
            "lender_credits": text(p["lender_credits"], 2, originated, p["lender_credits"] == 0)}
