"""The national shape of the lending-market generator (``engines.generators.lar_market``): a
year's LAR of the whole country rather than of twelve metros, for the benchmarks of a national
audit (``aequum generate hmda_market --national``, ``aequum bench national``).

    markets   NATIONAL_METROS + 1 = 400: the twelve metros of ``lar_structure.METROS``, then
              387 generated ones (:func:`metros`), then 99999 (outside any MSA). A generated
              metro of size rank r (the real ones are ranks 0-11) weighs 9 / (1 + r/4)^1.1 of
              the applications (a Zipf-like tail), has its own state (of the 50 states and DC)
              and three counties of its own (county numbers from 501, none a real metro's),
              a median family income ~ lognormal(log 90,000, 0.18), a house-price factor
              ~ lognormal(0, 0.3) clipped to 0.5-2, a minority share ~ Beta(2, 3.5) clipped to
              0.05-0.9 and a Black / Hispanic / Asian composition ~ Dirichlet(2, 2, 1).
    tracts    NATIONAL_TRACTS = 70,000, each market's share ∝ its weight^0.5, at least
              :data:`MIN_TRACTS` (:func:`tract_counts`); drawn as ``lar_structure.tracts``.
    lenders   NATIONAL_LENDERS = 5,000 of Zipf sizes (∝ 1/(rank+1)), the 50 largest in every
              market (``lar_structure.national_count``), the others in 1-4; an application's
              lender drawn among its own market's lenders only (``lar_structure.assign``'s
              sparse form), so a block's draw is rows × (lenders of the market), not rows × 5,000.

Everything is drawn from fixed seeds: the same structure whatever rows are generated.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

NATIONAL_LENDERS = 5000
NATIONAL_METROS = 399           # with 99999: 400 markets
NATIONAL_TRACTS = 70_000
MIN_TRACTS = 40
SEED = 2024                     # lar_structure.STRUCTURE_SEED
# the 50 states and DC (FIPS)
STATES = ("01", "02", "04", "05", "06", "08", "09", "10", "11", "12", "13", "15", "16", "17", "18", "19", "20",
          "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33", "34", "35", "36", "37",
          "38", "39", "40", "41", "42", "44", "45", "46", "47", "48", "49", "50", "51", "53", "54", "55", "56")


@lru_cache(maxsize=4)
def metros(k: int, first_rank: int, taken: tuple[str, ...]) -> tuple[tuple, ...]:
    """``k`` generated metros of ranks ``first_rank``… in ``lar_structure.METROS``' form (code,
    state, counties, weight, median family income, price factor, minority share, composition),
    none with a code in ``taken``."""
    rng = np.random.default_rng([SEED, 3])
    codes = [str(c) for c in range(10180, 49999, 40) if str(c) not in taken][:k]
    if len(codes) < k:
        raise ValueError(f"at most {len(codes)} generated metros, asked for {k}")
    counties_used: dict[str, int] = {}
    out = []
    for r, code in enumerate(codes):
        state = STATES[int(rng.integers(len(STATES)))]
        first = counties_used.get(state, 0)
        counties_used[state] = first + 3
        counties = tuple(f"{state}{501 + 2 * ((first + i) % 249):03d}" for i in range(3))
        weight = 9.0 / (1.0 + (first_rank + r) / 4.0) ** 1.1
        mfi = float(round(rng.lognormal(np.log(90_000), 0.18), -2))
        price = float(round(np.clip(rng.lognormal(0.0, 0.3), 0.5, 2.0), 2))
        minority = float(round(np.clip(rng.beta(2.0, 3.5), 0.05, 0.9), 2))
        comp = tuple(float(c) for c in np.round(rng.dirichlet([2.0, 2.0, 1.0]), 3))
        out.append((code, state, counties, weight, mfi, price, minority, comp))
    return tuple(out)


def tract_counts(weights: np.ndarray, total: int = NATIONAL_TRACTS) -> np.ndarray:
    """Tracts per market summing to ``total``: ∝ weight^0.5, at least :data:`MIN_TRACTS` each
    (largest remainders)."""
    w = np.sqrt(np.asarray(weights, float))
    spare = total - MIN_TRACTS * len(w)
    if spare < 0:
        raise ValueError(f"{total} tracts cannot give {len(w)} markets {MIN_TRACTS} each")
    exact = spare * w / w.sum()
    counts = np.floor(exact).astype(int)
    left = spare - counts.sum()
    counts[np.argsort(-(exact - counts), kind="stable")[:left]] += 1
    return counts + MIN_TRACTS
