"""A world where race is never recorded but is known: surnames and census tracts drawn so that
each person's true race is the one the BISG proxy's Census tables describe, and decisions with
a known racial disparity (``docs/proxies.md``).

How people are drawn (the joint distribution BISG assumes, Elliott et al. 2009):

1. surnames get weights ``w_s`` (the Census surname list, tilted towards a target mix of races
   so that every group is well represented): ``P(s) = w_s / sum w``;
2. race ``c`` (the six Census categories) is drawn from ``P(c) = sum_s P(c | s) P(s)``, with
   ``P(c | s)`` the Census table's;
3. the surname from ``P(s | c) = P(c | s) P(s) / P(c)``, and the census tract, independently
   of the surname, from the Census table's ``P(tract | c)`` (the 2010 tracts as they are,
   with their real segregation).

In this world ``P(c | s, tract)`` is exactly BISG's posterior with the package's tables, so the
proxy is calibrated and its errors are only those any proxy makes. Decisions depend on race
(a denial penalty for Black and Hispanic applicants) and on income and debt-to-income, which
depend on race only: the outcome says nothing about surname or tract once race and the inputs
are known, the assumption of the corrected estimator (``engines.proxy.estimates``).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa

from aequum.engines.proxy.census import CENSUS, RACES, fold, geography_tables, surname_table

DEFAULT_ROWS = 100_000
TARGET = {"white": 0.55, "black": 0.17, "hispanic": 0.17, "api": 0.07, "native": 0.01, "multiple": 0.03}
PENALTY = {"black": 0.7, "hispanic": 0.5}  # added to the denial logit of these races (the planted harm)
FOLDED = np.array([RACES.index(fold(c)) for c in CENSUS])  # Census category -> index in RACES


@dataclass(frozen=True)
class Tables:
    surnames: np.ndarray        # the Census list's surnames
    race_given_surname: np.ndarray   # surnames x 6
    tracts: np.ndarray          # 11-digit tract codes
    tract_given_race: np.ndarray     # tracts x 6
    p_surname: np.ndarray       # P(s)
    p_race: np.ndarray          # P(c), 6


@lru_cache(maxsize=1)
def tables() -> Tables:
    """The package's tables as arrays, with the world's P(s) and P(c)."""
    s = surname_table()
    g = geography_tables("tract")[0]
    rs = s.select(CENSUS).to_numpy()
    rs = rs / rs.sum(axis=1, keepdims=True)  # rows rounded to 4 decimals: made to sum to one
    tilt = np.array([TARGET[c] for c in CENSUS]) / rs.mean(axis=0)
    w = rs @ tilt
    p_s = w / w.sum()
    return Tables(s["surname"].to_numpy(), rs, g["geo"].to_numpy(), g.select(CENSUS).to_numpy(), p_s, p_s @ rs)


def _draw(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1)


@lru_cache(maxsize=1)
def _cdfs() -> tuple[list[np.ndarray], list[np.ndarray]]:
    t = tables()
    joint = t.race_given_surname * t.p_surname[:, None]
    return ([np.cumsum(joint[:, c]) for c in range(len(CENSUS))],
            [np.cumsum(t.tract_given_race[:, c]) for c in range(len(CENSUS))])


def draw_people(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` people: their Census category (index into ``CENSUS``), surname and tract (indices
    into :func:`tables`' arrays)."""
    t = tables()
    surname_cdf, tract_cdf = _cdfs()
    race = rng.choice(len(CENSUS), size=n, p=t.p_race)
    u_s, u_g = rng.random(n), rng.random(n)
    surname, tract = np.empty(n, np.int64), np.empty(n, np.int64)
    for c in range(len(CENSUS)):  # six categories, each drawn vectorised
        rows = race == c
        surname[rows] = _draw(surname_cdf[c], u_s[rows])
        tract[rows] = _draw(tract_cdf[c], u_g[rows])
    return race, surname, tract


def posterior(surname: np.ndarray, tract: np.ndarray) -> np.ndarray:
    """BISG's posterior over the five races (rows x 5) for drawn people, in numpy: the world's
    own, which ``engines.proxy.bisg`` must reproduce from the names and tract codes."""
    t = tables()
    u = t.race_given_surname[surname] * t.tract_given_race[tract]
    u = u / u.sum(axis=1, keepdims=True)
    out = np.zeros((len(surname), len(RACES)))
    for c in range(len(CENSUS)):
        out[:, FOLDED[c]] += u[:, c]
    return out


def decide(race5: np.ndarray, rng: np.random.Generator, effect: float = 1.0):
    """Income (thousands), debt-to-income (%) and the decision (1 approved): the denial logit
    rises with DTI and falls with income, plus ``PENALTY`` times ``effect`` for the penalised
    races. Income and DTI differ by race (and by nothing else)."""
    n = len(race5)
    shift = np.array([0.0, -0.25, -0.2, 0.1, -0.2])[race5]  # log-income by race
    income = np.round(np.exp(np.log(75) + shift + 0.45 * rng.standard_normal(n)), 1)
    dti = np.clip(np.round(36 + 4 * (shift < 0) + 9 * rng.standard_normal(n), 1), 5, 65)
    penalty = np.zeros(n)
    for race, size in PENALTY.items():
        penalty[race5 == RACES.index(race)] = size * effect
    logit = -1.7 + 0.06 * (dti - 36) - 0.8 * np.log(income / 75) + penalty
    p_deny = 1 / (1 + np.exp(-logit))
    denied = rng.random(n) < p_deny
    return income, dti, (~denied).astype(np.int8), p_deny


def iter_bisg_batches(rows: int = DEFAULT_ROWS, seed: int = 0, batch_rows: int = 250_000,
                      effect: float = 1.0) -> Iterator[pa.RecordBatch]:
    """The world's applications: ``id``, ``surname`` (as a person writes it: mixed case), ``tract``
    (11-digit FIPS), ``income``, ``debt_to_income_ratio``, ``action`` (approved / denied) and
    the truth an auditor never has: ``true_race`` and ``p_denied`` (the denial probability)."""
    t = tables()
    rng = np.random.default_rng(seed)
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        race, surname, tract = draw_people(n, rng)
        race5 = FOLDED[race]
        income, dti, approved, p_deny = decide(race5, rng, effect)
        yield pa.record_batch({
            "id": pa.array([f"A{start + i:09d}" for i in range(n)]),
            "surname": pa.array(np.char.capitalize(t.surnames[surname].astype(str))),
            "tract": pa.array(t.tracts[tract]),
            "income": pa.array(income), "debt_to_income_ratio": pa.array(dti),
            "action": pa.array(np.where(approved == 1, "approved", "denied")),
            "true_race": pa.array(np.array(RACES)[race5]), "p_denied": pa.array(p_deny)})


# the controlled world's true denial-probability gaps against White (a linear probability model)
CONTROLLED_GAP = {"black": 0.10, "hispanic": 0.06}


@dataclass(frozen=True)
class ControlledWorld:
    """People of :func:`draw_people` applying to lenders in markets, with a loan type: arrays per
    person (``race5`` index into RACES, ``posterior`` BISG's rows x 5, ``surname``/``tract``
    indices into :func:`tables`' arrays, ``market`` (10), ``lender``, ``loan_type`` (3),
    ``p_deny``, ``denied``)."""

    race5: np.ndarray
    surname: np.ndarray
    tract: np.ndarray
    posterior: np.ndarray
    market: np.ndarray
    lender: np.ndarray
    loan_type: np.ndarray
    p_deny: np.ndarray
    denied: np.ndarray


@lru_cache(maxsize=1)
def _market_black_share() -> np.ndarray:
    """Each of the ten markets' Black share of its people drawn in this world (P(black | market)
    from the 2010 tracts' P(tract | race) and the world's P(race)), scaled to 0 … 1."""
    t = tables()
    market = np.minimum(np.array([int(str(g)[:2]) for g in t.tracts]) // 6, 9)
    people = t.tract_given_race * t.p_race  # tracts x 6: P(tract, race)
    by_market = np.stack([np.bincount(market, weights=people[:, c], minlength=10) for c in range(len(CENSUS))], 1)
    share = by_market[:, CENSUS.index("black")] / by_market.sum(axis=1)
    return (share - share.min()) / (share.max() - share.min())


def controlled_world(n: int, rng: np.random.Generator, lenders: int = 50) -> ControlledWorld:
    """A world for the controlled regression with inferred race: the market is the state's group
    (its FIPS code // 6: ten markets), the lender one of four serving the applicant's state, the
    loan type drawn by market, so all three correlate with race through where people live (the
    2010 tracts' segregation) and tell nothing about race beyond the tract. The denial
    probability is linear: 0.12 + ``CONTROLLED_GAP`` of the race + the lender's effect (±0.04)
    + the market's (0.2 times its scaled Black share: 0 to 0.2 in the ten markets) + the loan
    type's (0, 0.05, 0.10), so the true controlled gap of each race against White is
    ``CONTROLLED_GAP``'s, and the outcome depends on surname and tract only through race, market
    and lender (the corrected estimator's assumption)."""
    race, surname, tract = draw_people(n, rng)
    race5 = FOLDED[race]
    state = np.array([int(str(t)[:2]) for t in tables().tracts[np.unique(tract)]])
    state = state[np.searchsorted(np.unique(tract), tract)]
    market = np.minimum(state // 6, 9)
    lender = (state * 3 + rng.integers(0, 4, n)) % lenders
    share = np.column_stack([0.5 - 0.04 * (market % 5), 0.3 + 0.02 * (market % 5), 0.2 + 0.02 * (market % 5)])
    loan_type = (rng.random(n)[:, None] > np.cumsum(share, axis=1)).sum(axis=1)
    effects = np.random.default_rng(2026)
    lender_effect = effects.uniform(-0.04, 0.04, lenders)
    market_effect = 0.2 * _market_black_share()  # higher where more Black people live: the raw gap overstates
    gap = np.zeros(len(RACES))
    for r, g in CONTROLLED_GAP.items():
        gap[RACES.index(r)] = g
    p_deny = 0.12 + gap[race5] + lender_effect[lender] + market_effect[market] + np.array([0, 0.05, 0.10])[loan_type]
    denied = (rng.random(n) < p_deny).astype(np.float64)
    return ControlledWorld(race5, surname, tract, posterior(surname, tract), market, lender, loan_type, p_deny, denied)
