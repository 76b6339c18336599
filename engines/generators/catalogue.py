"""The built-in generators by name, as streams of Arrow record batches.

``stream`` yields (data batch, ground-truth batch or None); ``batches`` only the data.
``world`` names the planted mechanism and ``effect`` scales its size (1: as listed): for hmda
and hmda_lender ``hmda.WORLDS``; for the lending markets ``lar_worlds.WORLDS`` — hmda_market (the
public LAR of 60 lenders in 12 metros and 99999), hmda_single (one lender's LAR) and their
``_lender`` twins (the same applications as the lenders' internal records, with the credit
score: ``engines.generators.lar_market``). The other generators take only the defaults.
``national``: hmda_market and hmda_market_lender in the national shape (5,000 lenders, 400
markets, 70,000 tracts: ``engines.generators.lar_national``).
"""
from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

MARKETS = ("hmda_market", "hmda_market_lender", "hmda_single", "hmda_single_lender")  # lar_market
NAMES = ("loan", "cec_synthetic", "hmda", "hmda_lender", *MARKETS, "bisg")
WORLD_GENERATORS = ("hmda", "hmda_lender", *MARKETS)  # the generators with a planted mechanism to choose
DEFAULT_WORLD = "dti_penalty"  # hmda.DEFAULT_WORLD, lar_worlds.DEFAULT_WORLD
NATIONAL = ("hmda_market", "hmda_market_lender")  # the generators with a national shape


def shape(name: str, national: bool = False) -> dict:
    """The lending market's size arguments of ``lar_market`` for ``national`` (none otherwise);
    a ValueError for a generator without a national shape."""
    if not national:
        return {}
    if name not in NATIONAL:
        raise ValueError(f"the national shape is for the {' and '.join(NATIONAL)} generators, not {name!r}")
    from aequum.engines.generators.lar_national import NATIONAL_LENDERS, NATIONAL_METROS

    return {"n_lenders": NATIONAL_LENDERS, "n_markets": NATIONAL_METROS}


def check_world(name: str, world: str, effect: float = 1.0) -> None:
    """A ValueError unless ``world`` is one of the generator's worlds and ``effect`` a size."""
    if name in MARKETS:
        from aequum.engines.generators.lar_worlds import check_world as known_market

        known_market(world, effect, single=name.startswith("hmda_single"))
    elif name in WORLD_GENERATORS:
        from aequum.engines.generators.hmda import check_world as known

        known(world, effect)
    elif world != DEFAULT_WORLD or effect != 1.0:
        raise ValueError(f"generator {name!r} has no worlds (world={world!r}, effect={effect!r}): worlds are "
                         f"for {' and '.join(WORLD_GENERATORS)}")


def stream(name: str, rows: int | None = None, seed: int = 0, batch_rows: int = 250_000,
           world: str = DEFAULT_WORLD, effect: float = 1.0,
           national: bool = False) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch | None]]:
    if name not in NAMES:
        raise ValueError(f"unknown generator {name!r}; known: {list(NAMES)}")
    check_world(name, world, effect)
    size = shape(name, national)
    if name == "loan":
        from aequum.engines.generators.loan import DEFAULT_ROWS, iter_loan_batches

        for b in iter_loan_batches(rows or DEFAULT_ROWS, seed, batch_rows):
            yield b, None
    elif name == "bisg":  # race never recorded, known: the BISG proxy's world (engines.generators.bisg)
        from aequum.engines.generators.bisg import DEFAULT_ROWS, iter_bisg_batches

        for b in iter_bisg_batches(rows or DEFAULT_ROWS, seed, batch_rows):
            yield b, None
    elif name == "cec_synthetic":
        from aequum.engines.generators.cec_synthetic import DEFAULT_ROWS, iter_cec_batches

        for b in iter_cec_batches(rows or DEFAULT_ROWS, seed, batch_rows):
            yield b, None
    elif name in MARKETS:
        from aequum.engines.generators import lar_market

        lar = lar_market.iter_record_batches if name.endswith("_lender") else lar_market.iter_lar_batches
        yield from lar(rows or lar_market.DEFAULT_ROWS, seed, batch_rows, world=world, effect=effect,
                       single=name.startswith("hmda_single"), **size)
    elif name == "hmda":
        from aequum.engines.generators.hmda import DEFAULT_ROWS, iter_hmda_batches

        yield from iter_hmda_batches(rows or DEFAULT_ROWS, seed, batch_rows, world=world, effect=effect)
    else:  # hmda_lender
        from aequum.engines.generators.hmda import DEFAULT_ROWS, iter_lender_batches

        yield from iter_lender_batches(rows or DEFAULT_ROWS, seed, batch_rows, world=world, effect=effect)


def batches(name: str, rows: int | None = None, seed: int = 0, batch_rows: int = 250_000,
            world: str = DEFAULT_WORLD, effect: float = 1.0) -> Iterator[pa.RecordBatch]:
    for data, _truth in stream(name, rows, seed, batch_rows, world, effect):
        yield data


def module_file(name: str) -> str:
    """The source file of a generator (its code is part of what a generated dataset is)."""
    if name not in NAMES:
        raise ValueError(f"unknown generator {name!r}; known: {list(NAMES)}")
    from importlib import import_module

    return import_module("aequum.engines.generators." + ("lar_market" if name in MARKETS
                                                          else name.removesuffix("_lender"))).__file__


def mechanism(name: str, world: str = DEFAULT_WORLD, effect: float = 1.0, national: bool = False) -> dict | None:
    """The planted discrimination mechanism of a generator (in ``world``), where it has one."""
    check_world(name, world, effect)
    if name in MARKETS:
        from aequum.engines.generators.lar_worlds import mechanism as market_mechanism

        return market_mechanism(world, effect, single=name.startswith("hmda_single"), **shape(name, national))
    if name in WORLD_GENERATORS:
        from aequum.engines.generators.hmda import mechanism as hmda_mechanism

        return hmda_mechanism(world, effect)
    return None


def truth(name: str, rows: int | None = None, seed: int = 0, world: str = DEFAULT_WORLD,
          effect: float = 1.0, national: bool = False) -> pa.Table | None:
    """A generator's ground truth of harm (the table written beside its files), where it has one."""
    check_world(name, world, effect)
    if name in MARKETS:  # the LAR and the records: the same applications, so the same truth
        from aequum.engines.generators.lar_market import DEFAULT_ROWS as MARKET_ROWS, market_truth

        return market_truth(rows or MARKET_ROWS, seed, world, effect, single=name.startswith("hmda_single"),
                            **shape(name, national))
    if name in WORLD_GENERATORS:  # the same applications, so the same truth
        from aequum.engines.generators.hmda import DEFAULT_ROWS, hmda_truth

        return hmda_truth(rows or DEFAULT_ROWS, seed, world, effect)
    return None
