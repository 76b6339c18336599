"""The markets, census tracts and lenders of the generated lending markets
(``engines.generators.lar_market``): who applies where, and to whom.

**Markets** (:data:`METROS`): twelve metropolitan markets (the LAR's ``derived_msa_md``, MSA or
metropolitan division codes) and the outside-MSA market ``99999``, each with its share of the
applications, its state and counties, the FFIEC median family income, a house-price factor and
the minority composition of its population (share minority; of the minority, the Black,
Hispanic and Asian shares), as the large metros differ (Detroit's minority mostly Black, Miami's
and Phoenix's mostly Hispanic).

**Tracts** (:func:`tracts`): :data:`TRACTS` per market. A tract's minority share (percent) is
Beta-distributed around the market's (concentration :data:`SEGREGATION`: many tracts nearly all
white or nearly all minority, as segregated metros are), its composition Dirichlet around the
market's, its income ratio to the market falls with its minority share; applications come from
a tract in proportion to its population times ``1.2 - 0.5 share``.

**Lenders** (:func:`lenders`): ``n_lenders`` (default :data:`N_LENDERS`) lenders with the LAR's
LEI format and Zipf sizes (size ∝ 1/(rank+1): a few large lenders, a long tail). The
:data:`NATIONAL` largest operate in every market, the others in 1-4 markets drawn with the
markets' weights; a lender's volume in a market is its size spread over its markets by their
weights, times a log-normal local factor (sd 0.4). :data:`SPECIALISTS` small lenders (size
ranks 20 and below) tilt toward minority tracts (:data:`SPECIALIST_TILT`; every other lender has
no tilt: no lender avoids a tract in a fair world): they serve minority tracts and so minority
borrowers. Each lender has a risk standard (a shift of the denial score, N(0, 0.2)) and a price
level (N(0, 0.12) points), both fair: they depend on no applicant's group. An application's
lender is drawn among its market's lenders with probability ∝ volume × exp(tilt × 4 (share/100 −
0.5)) (× ``1 − avoidance`` for a redlining lender in a tract over 50 % minority) by the
Gumbel-max trick, so a world that changes the weights moves only the applications it must.

**Named lenders** (the worlds' planted lenders, by size rank, disjoint, none a specialist):
:data:`ROLES`. The single-lender market (``single=True``) is one lender (:data:`SINGLE_LEI`) in
:data:`SINGLE_MARKETS`, with standard and price level 0.

The structure is drawn once from :data:`STRUCTURE_SEED` (a year's market is one market whatever
sample of its applications is drawn). More than twelve metros (``n_markets``) is the national
shape (``engines.generators.lar_national``): generated metros after the twelve, tracts per
market by weight, 50 lenders in every market, and a lender drawn among its market's lenders only.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

# code, state, counties, weight, median family income, price factor, minority share, (black, hispanic, asian)
METROS = [
    ("35614", "36", ("36061", "36047", "36081"), 9, 118_000, 1.6, 0.60, (0.35, 0.40, 0.25)),
    ("31084", "06", ("06037", "06037", "06037"), 8, 98_200, 1.8, 0.72, (0.12, 0.68, 0.20)),
    ("16984", "17", ("17031", "17043", "17197"), 7, 111_300, 1.0, 0.50, (0.40, 0.42, 0.18)),
    ("19124", "48", ("48113", "48085", "48121"), 7, 102_800, 1.0, 0.52, (0.30, 0.52, 0.18)),
    ("26420", "48", ("48201", "48157", "48339"), 7, 93_100, 0.9, 0.63, (0.28, 0.58, 0.14)),
    ("33124", "12", ("12086", "12086", "12086"), 5, 80_600, 1.3, 0.85, (0.20, 0.78, 0.02)),
    ("12060", "13", ("13121", "13089", "13135"), 7, 100_600, 0.9, 0.52, (0.66, 0.20, 0.14)),
    ("47894", "51", ("51059", "51013", "51107"), 6, 152_100, 1.5, 0.55, (0.50, 0.27, 0.23)),
    ("37964", "42", ("42101", "42045", "42091"), 5, 101_500, 0.9, 0.45, (0.60, 0.25, 0.15)),
    ("38060", "04", ("04013", "04021", "04013"), 7, 95_500, 1.0, 0.45, (0.12, 0.75, 0.13)),
    ("14454", "25", ("25025", "25021", "25017"), 5, 140_300, 1.5, 0.33, (0.30, 0.35, 0.35)),
    ("19804", "26", ("26163", "26163", "26163"), 4, 75_300, 0.6, 0.55, (0.85, 0.08, 0.07)),
]
OUTSIDE = ("99999", "37", ("37001", "37035", "37191"), 6, 75_000, 0.7, 0.22, (0.45, 0.45, 0.10))
N_LENDERS = 60
N_MARKETS = 12
NATIONAL = 8
SPECIALISTS = 5
SPECIALIST_TILT = 1.0
TRACTS = 250
SEGREGATION = 1.6
STRUCTURE_SEED = 2024
THRESHOLD = 50.0  # percent minority above which a redlining lender avoids a tract
# the planted lenders of the worlds, by size rank (0 = largest)
ROLES = {"pricing": (3, 6, 11), "denial": (4, 8, 13), "redlining": (5, 9, 14), "dti_cap": (7,)}
SINGLE_MARKETS = ("19124", "26420", "12060")
SINGLE_LEI = "5493001SINGLE0LENDER23"


def lei(i: int) -> str:
    """A 20-character LEI of the LAR's form for lender ``i`` (0-9999)."""
    return f"{'54930' if i < 1000 else '5493'}{i:03d}{(i * 7919 + 1234) % 10**10:010d}XX"


@lru_cache(maxsize=8)
def markets(single: bool = False, n_markets: int = N_MARKETS) -> list[tuple]:
    """The markets: the single lender's three, or the first ``n_markets`` metros (1-12) and 99999;
    above twelve, the twelve, generated metros (``lar_national.metros``) and 99999."""
    if single:
        return [m for m in METROS if m[0] in SINGLE_MARKETS]
    if n_markets > len(METROS):
        from aequum.engines.generators.lar_national import NATIONAL_METROS, metros

        if n_markets > NATIONAL_METROS:
            raise ValueError(f"n_markets must be at most {NATIONAL_METROS}, got {n_markets!r}")
        extra = metros(n_markets - len(METROS), len(METROS), tuple(m[0] for m in [*METROS, OUTSIDE]))
        return [*METROS, *extra, OUTSIDE]
    if not 1 <= n_markets <= len(METROS):
        raise ValueError(f"n_markets must be 1-{len(METROS)}, got {n_markets!r}")
    return [*METROS[:n_markets], OUTSIDE]


def tract_counts(single: bool = False, n_markets: int = N_MARKETS) -> np.ndarray:
    """Tracts per market: :data:`TRACTS` each, or in the national shape ``lar_national.tract_counts``."""
    ms = markets(single, n_markets)
    if single or n_markets <= len(METROS):
        return np.full(len(ms), TRACTS)
    from aequum.engines.generators.lar_national import tract_counts as national

    return national(np.array([m[3] for m in ms], float))


def national_count(n_lenders: int) -> int:
    """The lenders in every market: :data:`NATIONAL`, or one in a hundred of a larger universe."""
    return max(NATIONAL, n_lenders // 100)


@lru_cache(maxsize=8)
def tracts(single: bool = False, n_markets: int = N_MARKETS) -> dict[str, np.ndarray]:
    """Every market's tracts (:func:`tract_counts`; rows market-major): ``market`` index, ``state``,
    ``county``, ``tract`` (11-digit code), ``share`` (minority percent), ``composition`` (n × 3:
    Black, Hispanic, Asian shares of the minority), ``weight`` (application weight within the
    market, summing to 1), ``population``, ``income_ratio``, ``owner_units``, ``homes``, ``age``."""
    ms = markets(single, n_markets)
    counts = tract_counts(single, n_markets)
    rng = np.random.default_rng([STRUCTURE_SEED, 1])
    out: dict[str, list] = {k: [] for k in ("market", "state", "county", "tract", "share", "composition", "weight",
                                            "population", "income_ratio", "owner_units", "homes", "age")}
    for j, (_code, state, counties, _w, _mfi, _price, minority, comp) in enumerate(ms):
        TRACTS = int(counts[j])  # noqa: N806 - the count of this market's tracts
        share = rng.beta(minority * SEGREGATION, (1 - minority) * SEGREGATION, TRACTS)
        composition = rng.dirichlet(4.0 * np.asarray(comp), TRACTS)
        county = np.asarray(counties)[rng.integers(0, len(counties), TRACTS)]
        number = np.sort(rng.choice(np.arange(100, 990_000), TRACTS, replace=False))
        population = rng.integers(1500, 9000, TRACTS)
        weight = population * (1.2 - 0.5 * share)
        out["market"].append(np.full(TRACTS, j))
        out["state"].append(np.full(TRACTS, state))
        out["county"].append(county)
        out["tract"].append(np.char.add(county.astype(str), np.char.zfill(number.astype(str), 6)))
        out["share"].append(np.round(100 * share, 2))
        out["composition"].append(composition)
        out["weight"].append(weight / weight.sum())
        out["population"].append(population)
        out["income_ratio"].append(np.round(np.clip(125 - 60 * share + rng.normal(0, 20, TRACTS), 20, 300), 2))
        out["owner_units"].append(rng.integers(300, 2500, TRACTS))
        out["homes"].append(rng.integers(400, 3000, TRACTS))
        out["age"].append(rng.integers(5, 80, TRACTS))
    return {k: np.concatenate(v) for k, v in out.items()}


@lru_cache(maxsize=8)
def lenders(single: bool = False, n_lenders: int = N_LENDERS, n_markets: int = N_MARKETS) -> dict:
    """The lender universe: ``lei`` (list), ``volume`` (lenders × markets, 0 where absent),
    ``tilt``, ``standard``, ``price_level`` (arrays), ``roles`` (role -> lender indices, the
    single lender in every role of a single-lender market), ``specialists`` (indices)."""
    ms = markets(single, n_markets)
    m = len(ms)
    if single:
        z = np.zeros(1)
        return {"lei": [SINGLE_LEI], "volume": np.ones((1, m)), "tilt": z, "standard": z, "price_level": z,
                "share": np.ones(1), "roles": {role: (0,) for role in ROLES}, "specialists": ()}
    if n_lenders < 20:
        raise ValueError(f"n_lenders must be at least 20 (the named lenders are ranks up to 14), got {n_lenders!r}")
    rng = np.random.default_rng([STRUCTURE_SEED, 2])
    size = 1.0 / (np.arange(n_lenders) + 1.0)
    weights = np.array([mk[3] for mk in ms], float)
    keys = rng.random((n_lenders, m)) ** (1.0 / weights)   # weighted sampling without replacement
    count = 1 + rng.binomial(3, 0.3, n_lenders)
    count[:national_count(n_lenders)] = m
    present = np.argsort(np.argsort(-keys, axis=1), axis=1) < count[:, None]
    spread = present * weights[None, :]  # a lender's size spread over its markets by their weights
    volume = (size / spread.sum(1))[:, None] * spread * rng.lognormal(0.0, 0.4, (n_lenders, m))
    tilt = np.zeros(n_lenders)
    standard = rng.normal(0.0, 0.2, n_lenders)
    price_level = rng.normal(0.0, 0.12, n_lenders)
    named = sorted(i for ranks in ROLES.values() for i in ranks)
    candidates = np.setdiff1d(np.arange(20, n_lenders), named)
    specialists = tuple(int(i) for i in np.sort(rng.choice(candidates, SPECIALISTS, replace=False)))
    tilt[list(specialists)] = SPECIALIST_TILT
    # every redlining lender operates in the metros with the most majority-minority tracts
    for i in ROLES["redlining"]:
        volume[i, :3] = np.maximum(volume[i, :3], size[i] * weights[:3] / weights.sum())
    # the expected share of the applications each lender takes (fair assignment, tilt ignored)
    market_p = weights / weights.sum()
    share = (volume / np.where(volume.sum(0) > 0, volume.sum(0), 1.0)) @ market_p
    return {"lei": [lei(i) for i in range(n_lenders)], "volume": volume, "tilt": tilt, "standard": standard,
            "price_level": price_level, "share": share, "roles": {k: tuple(v) for k, v in ROLES.items()},
            "specialists": specialists}


DENSE_LENDERS = 200  # above: each market's lenders drawn among themselves (assign)


def assign(rng: np.random.Generator, market: np.ndarray, share: np.ndarray, universe: dict,
           avoid: np.ndarray) -> np.ndarray:
    """The lender of each application (Gumbel-max over its market's lenders): log volume +
    tilt × 4 (share/100 − 0.5) + log(1 − avoid[lender]) where the tract is over
    :data:`THRESHOLD` percent minority; ``avoid`` per lender, 0 but for redlining lenders.
    Above :data:`DENSE_LENDERS` lenders, the same draw market by market over that market's
    lenders only (:func:`_assign_by_market`)."""
    volume = universe["volume"]
    n, n_lenders = len(market), volume.shape[0]
    if n_lenders > DENSE_LENDERS:
        return _assign_by_market(rng, market, share, universe, avoid)
    with np.errstate(divide="ignore"):
        log_volume, log_keep = np.log(volume.T), np.log(1.0 - avoid)
    gumbel = -np.log(-np.log(rng.random((n, n_lenders))))
    score = log_volume[market] + np.outer(4.0 * (share / 100.0 - 0.5), universe["tilt"]) + gumbel
    score += np.where((share > THRESHOLD)[:, None], log_keep[None, :], 0.0)
    return np.argmax(score, axis=1)


def _assign_by_market(rng: np.random.Generator, market: np.ndarray, share: np.ndarray, universe: dict,
                      avoid: np.ndarray) -> np.ndarray:
    """:func:`assign`'s Gumbel-max, one market at a time (in market order) over the lenders
    present in it: memory rows × (the market's lenders), not rows × every lender."""
    volume, tilt = universe["volume"], universe["tilt"]
    with np.errstate(divide="ignore"):
        log_keep = np.log(1.0 - avoid)
    order = np.argsort(market, kind="stable")
    bounds = np.searchsorted(market[order], np.arange(volume.shape[1] + 1))
    out = np.empty(len(market), np.int64)
    for j in range(volume.shape[1]):
        rows = order[bounds[j]:bounds[j + 1]]
        if not len(rows):
            continue
        ks = np.flatnonzero(volume[:, j] > 0)
        s = share[rows]
        score = (np.log(volume[ks, j])[None, :] + np.outer(4.0 * (s / 100.0 - 0.5), tilt[ks])
                 - np.log(-np.log(rng.random((len(rows), len(ks))))))
        score += np.where((s > THRESHOLD)[:, None], log_keep[ks][None, :], 0.0)
        out[rows] = ks[np.argmax(score, axis=1)]
    return out
