"""The geography and peers engine (``geography``): the redlining screen — each lender's share of
applications from majority-minority (and low-income) tracts against the spread of its market's
lenders' shares — and per-lender denial disparities against volume-matched peers in the same
markets (docs/fair-lending.md, "Geography and peers"; :mod:`engines.geography.screen`,
:mod:`engines.geography.benchmark`, :mod:`engines.geography.disparities`).

It reads the spec's ``geography`` section: the lender and market features (categorical), the
tract's minority share, Black and Hispanic shares where the data has them, and its income as a
percent of the MSA's, staged as numbers (null where the LAR says "NA"). Records of the
``outside_markets`` (the LAR's 99999: no MSA) are left out: outside an MSA there is no market to
compare lenders in. The records are the staged ones: applications with a decision that passed
validation (withdrawn, incomplete and purchased loans are out of scope at staging).

What it cannot see: why a lender's applications come from where they do (branch locations,
marketing, brokers, the lender's product mix), whether its peers are comparable beyond volume,
and any underwriting variable: its rows are raw disparities against peers, a screening that
says where to look, never by itself evidence of redlining or of disparate treatment.

Tables ``geography_lenders`` (per lender × market × measure × basis) and
``geography_disparities`` (per attribute × lender).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.core.data import one_array, record_columns
from aequum.engines.geography.disparities import DISPARITIES, disparities
from aequum.engines.geography.peers import peer_runs, units
from aequum.engines.geography.screen import LENDERS, screen


@dataclass
class State:
    params: object
    unit: np.ndarray            # each in-market record's unit (lender × market)
    unit_lender: np.ndarray     # per unit: lender code
    unit_market: np.ndarray     # per unit: market code
    volume: np.ndarray          # per unit: its records
    tracts: pa.Array            # per unit: distinct tracts (null without a tract column)
    order: np.ndarray           # peer runs (engines.geography.peers.peer_runs)
    start: np.ndarray
    stop: np.ndarray
    peers: np.ndarray           # per unit: its peers
    market_lenders: np.ndarray  # per market code: lenders with records there
    lender_levels: list[str]
    market_levels: list[str]
    fields: dict[str, np.ndarray]   # geography role -> per-record values (NaN: not reported)
    approved: np.ndarray
    groups: dict[str, np.ndarray]
    attributes: list[str]


def text_codes(column: pa.ChunkedArray) -> np.ndarray:
    """Each record's code among the distinct values of a text column (−1: null), from its
    dictionary (a staged text column comes dictionary-encoded) without a string per record."""
    col = one_array(column)  # several chunks: combined, their dictionaries unified
    if not pa.types.is_dictionary(col.type):  # plain text (nearly all distinct: lake_reading)
        return np.asarray(pc.dictionary_encode(col).indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
    # a value twice in the dictionary gets the code of its first entry
    remap = np.asarray(pc.dictionary_encode(col.dictionary.cast(pa.string())).indices.fill_null(-1)
                       .to_numpy(zero_copy_only=False), np.int64)
    index = np.asarray(col.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
    return np.where(index >= 0, remap[np.maximum(index, 0)], -1)


def distinct_per_unit(unit: np.ndarray, codes: np.ndarray, n_units: int) -> np.ndarray:
    """Per unit, the distinct non-negative ``codes`` among its records (a null, −1, not counted)."""
    known = codes >= 0
    width = int(codes.max()) + 1 if known.any() else 1
    # sorted, each pair once (np.unique of 8.4M mostly distinct int64 took 18 s in numpy 2.4;
    # a sort 0.1 s)
    key = np.sort(unit[known].astype(np.int64) * width + codes[known])
    pairs = key[np.r_[True, key[1:] != key[:-1]]] if len(key) else key
    return np.bincount(pairs // width, minlength=n_units).astype(np.int64)


TRACT_BLOCK = 1 << 20  # records of a run of units whose tracts are encoded together (tracts_per_unit)


def tracts_per_unit(column: pa.ChunkedArray, rows: np.ndarray, unit: np.ndarray, volume: np.ndarray,
                    block: int = TRACT_BLOCK) -> np.ndarray:
    """Per unit, the distinct tracts of its records (``rows`` of ``column``, ``unit`` each;
    :func:`distinct_per_unit`), the units taken in runs of about ``block`` records, each run's
    tracts encoded on their own: a tract's code need only be the same within a unit. One
    encoding of every record's tract held the hash table of 8.4M distinct values at 10M
    generated records (1 GB of Arrow's memory at once: the engine's peak)."""
    n_units = len(volume)
    out = np.zeros(n_units, np.int64)
    ends = np.cumsum(volume)
    cuts = np.searchsorted(ends, np.arange(block, int(ends[-1]) if n_units else 0, block), side="right")
    bounds = np.unique(np.r_[0, cuts, n_units])
    for u0, u1 in zip(bounds[:-1], bounds[1:]):
        sel = np.flatnonzero((unit >= u0) & (unit < u1))
        if len(sel):
            codes = text_codes(column.take(pa.array(rows[sel], pa.int64())))
            out[u0:u1] = distinct_per_unit(unit[sel] - u0, codes, int(u1 - u0))
    return out


def _geography_columns(spec) -> list[str]:
    return list(spec.geography.staged())


class GeographyEngine:
    """The redlining screen and per-lender disparities against peers (module docstring)."""

    name = "geography"
    tables = {"geography_lenders": LENDERS, "geography_disparities": DISPARITIES}
    row_order = False  # counts by key: the same for any order of the records

    def columns(self, spec, params) -> list[str]:
        """Groups, decisions, the lender and market features and the tract columns."""
        if spec.geography is None:
            return record_columns(spec, [], ids=False)
        g = spec.geography
        return record_columns(spec, [g.lender, g.market], ids=False) + _geography_columns(spec)

    def prepare(self, data, params) -> State:
        spec = data.spec
        g = spec.geography
        if g is None:
            raise ValueError("geography needs the spec's `geography` section (lender, market, tract columns)")
        if data.decision is None:
            raise ValueError("geography needs decisions (a decision column)")
        lender_levels, market_levels = data.levels(g.lender), data.levels(g.market)
        lender = data.column_values(g.lender)
        market = data.column_values(g.market)
        outside = [i for i, v in enumerate(market_levels) if v in set(g.outside_markets)]
        keep = ~np.isnan(lender) & ~np.isnan(market) & ~np.isin(market, outside)
        rows = np.flatnonzero(keep)
        lender, market = lender[rows].astype(np.int64), market[rows].astype(np.int64)
        unit, unit_lender, unit_market = units(lender, market, len(market_levels))
        del lender, market, keep  # the units say them from here
        volume = np.bincount(unit, minlength=len(unit_lender))
        low, high = params.peer_volume
        order, start, stop = peer_runs(unit_market, volume, low, high)
        fields = {}
        for role in ("minority_share", "black_share", "hispanic_share", "income_ratio"):
            column = getattr(g, role)
            if column is not None:
                values = data.column(column).to_numpy(zero_copy_only=False)
                fields[role] = np.asarray(values, np.float64)[rows]
        tracts = pa.nulls(len(unit_lender), pa.int64())
        if g.tract is not None and len(rows):
            tracts = pa.array(tracts_per_unit(data.column(g.tract), rows, unit, volume), pa.int64())
        attributes = params.attributes if params.attributes is not None else [p.name for p in spec.protected]
        return State(params=params, unit=unit, unit_lender=unit_lender, unit_market=unit_market, volume=volume,
                     tracts=tracts, order=order, start=start, stop=stop, peers=stop - start - 1,
                     market_lenders=np.bincount(unit_market, minlength=len(market_levels)),
                     lender_levels=list(lender_levels), market_levels=list(market_levels), fields=fields,
                     approved=data.decision[rows] == 1,
                     groups={a: data.groups[a][rows] for a in attributes}, attributes=list(attributes))

    def pieces(self, state: State) -> list[str]:
        return ["geography_lenders", "geography_disparities"]

    def run_piece(self, state: State, piece: str) -> dict[str, pa.Table]:
        if piece == "geography_lenders":
            return {piece: screen(state, state.params)}
        return {piece: disparities(state, state.params)}

    def combine(self, state: State, parts) -> dict[str, pa.Table]:
        out = {}
        for part in parts:
            out.update(part)
        keys = {"geography_lenders": ["measure", "basis", "market", "lender"],
                "geography_disparities": ["attribute", "lender"]}
        return {name: out[name].sort_by([(k, "ascending") for k in keys[name]]) for name in self.tables}
