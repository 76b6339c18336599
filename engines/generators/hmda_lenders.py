"""The lenders of the generated HMDA applications (engines/generators/hmda.py): who takes each
application, in which market, and the ``lender_redlining`` world's lenders that avoid
high-minority tracts.

**Structure** (:func:`structure`; the same lender universe for every seed, as a year's market
is one market whatever sample is drawn of it): :data:`N_LENDERS` lenders with the LAR's LEI
format. A lender's size is log-normal (sd 1.4 on the log scale: a few national lenders with
several percent of all applications each, a long tail of small ones, as HMDA's 4,000-5,000
reporters are); the :data:`NATIONAL` largest operate in every market, every other lender in
1-4 markets drawn without replacement with the markets' weights (Efraimidis-Spirakis keys
``u^(1/w)``); its volume in a market it operates in is its size times a log-normal local
factor (sd 0.5). An application's market is drawn with :data:`MARKET_WEIGHTS`, then its lender
with probability proportional to those volumes among the market's lenders.

**Planted redlining** (world ``lender_redlining``): :data:`PLANTED` lenders of middle size
(ranked :data:`PLANTED_RANKS` by size) that operate in a metropolitan market take a share
``avoidance`` (:data:`AVOIDANCE`: 0.75, times the world's effect, at most 1) fewer of the
applications from tracts whose minority population share exceeds :data:`THRESHOLD` percent:
their weight in those tracts' draws is multiplied by ``1 - avoidance``. Those applications go
to the market's other lenders instead; no decision changes. :func:`planted_leis` names them
(the world's truth); in every other world nobody avoids anything and the same draws give the
same lenders.

Each block of applications draws its markets and lenders from a stream of its own
(``[seed, block, 3]``), so the decisions and every other column keep their draws.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

MARKETS = ["31084", "35614", "16984", "19124", "99999"]  # 99999: outside any MSA
MARKET_WEIGHTS = np.array([5, 6, 4, 4, 3], float)
N_LENDERS = 500
NATIONAL = 25                 # the largest lenders operate in every market
STRUCTURE_SEED = 2023         # the lender universe (the same for every seed of the applications)
PLANTED = 5
PLANTED_RANKS = (10, 40)      # planted lenders are drawn among these size ranks (0 = largest)
AVOIDANCE = 0.75              # share of its high-minority-tract applications a planted lender does not take
THRESHOLD = 50.0              # percent minority population above which a planted lender avoids the tract
LEIS = [f"{i:04d}00{(i * 7919) % 10**12:012d}XX" for i in range(N_LENDERS)]


@lru_cache(maxsize=1)
def structure() -> tuple[np.ndarray, np.ndarray]:
    """(volumes, planted): ``volumes[l, m]`` lender l's weight in market m (0 where it does not
    operate), ``planted`` the indices of the planted lenders, in LEI order."""
    rng = np.random.default_rng(STRUCTURE_SEED)
    size = np.sort(rng.lognormal(0.0, 1.4, N_LENDERS))[::-1]  # lender i is the i-th largest
    m = len(MARKETS)
    keys = rng.random((N_LENDERS, m)) ** (1.0 / MARKET_WEIGHTS)  # weighted sampling without replacement
    count = 1 + rng.binomial(3, 0.25, N_LENDERS)
    count[:NATIONAL] = m
    rank = np.argsort(np.argsort(-keys, axis=1), axis=1)
    present = rank < count[:, None]
    volumes = size[:, None] * present * rng.lognormal(0.0, 0.5, (N_LENDERS, m))
    metro = present[:, :-1].any(axis=1)
    candidates = np.flatnonzero(metro & (np.arange(N_LENDERS) >= PLANTED_RANKS[0])
                                & (np.arange(N_LENDERS) < PLANTED_RANKS[1]))
    planted = np.sort(rng.choice(candidates, PLANTED, replace=False))
    return volumes, planted


def planted_leis() -> list[str]:
    """The LEIs of the lenders that avoid high-minority tracts in the lender_redlining world."""
    return [LEIS[i] for i in structure()[1]]


def assign(seed: int, block: int, minority_share: np.ndarray, avoidance: float = 0.0
           ) -> tuple[np.ndarray, np.ndarray]:
    """(lender index, market index) of each application of a block, given its tract's minority
    share (percent); ``avoidance`` in [0, 1]: how much of their high-minority-tract volume the
    planted lenders give up (0: none, every world but lender_redlining)."""
    if not 0.0 <= avoidance <= 1.0:
        raise ValueError(f"avoidance must be in [0, 1], got {avoidance!r}")
    volumes, planted = structure()
    n = len(minority_share)
    rng = np.random.default_rng([seed, block, 3])
    market = rng.choice(len(MARKETS), n, p=MARKET_WEIGHTS / MARKET_WEIGHTS.sum())
    u = rng.random(n)
    high = np.asarray(minority_share) > THRESHOLD
    keep = np.ones(N_LENDERS)
    keep[planted] = 1.0 - avoidance
    lender = np.empty(n, np.int64)
    for j in range(len(MARKETS)):  # ten draws of a whole block each: (market, tract above the threshold)
        for avoided in (False, True):
            rows = (market == j) & (high == avoided)
            cum = np.cumsum(volumes[:, j] * (keep if avoided else 1.0))
            lender[rows] = np.minimum(np.searchsorted(cum, u[rows] * cum[-1], side="right"), N_LENDERS - 1)
    return lender, market
