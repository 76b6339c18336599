"""Bayesian Improved Surname Geocoding (BISG): each record's posterior probabilities of race
from its surname and where it lives, as one vectorised join (no loop over records).

Elliott et al. (2009), "Using the Census Bureau's surname list to improve estimates of
race/ethnicity and associated disparities", Health Serv. Outcomes Res. Method. 9: 69-83; the
CFPB's proxy methodology (2014) applies it to credit. With surname s and geography g, assuming
that where a person lives tells nothing about their surname once their race is known,

    P(r | s, g) = P(r | s) P(g | r) / sum_r' P(r' | s) P(g | r')                     (Elliott eq. 1)

A surname not on the Census list leaves the geography alone, ``P(r | g)``; a geography not in
the table leaves the surname alone, ``P(r | s)``; with neither the record has no proxy (nulls).
The tables are :mod:`aequum.engines.proxy.census`'s.
"""
from __future__ import annotations

import polars as pl

from aequum.engines.proxy.census import (CENSUS, PROB_COLUMNS, RACES, composition_tables, fold,
                                         geography_tables, normalize_surnames, surname_table)

SURNAME_FOUND, GEOGRAPHY_FOUND = "_proxy_surname", "_proxy_geography"


def geography_key(values: pl.Expr, level: str) -> pl.Expr:
    """A geography as the tables key it: text without spaces (and a tract's or ZIP code's
    decimal point or dash dropped), a ZIP code's first five digits, zero-filled."""
    text = values.cast(pl.Utf8).str.strip_chars().str.replace_all(r"[\s.\-]", "")
    if level == "zip":
        return text.str.slice(0, 5).str.zfill(5)
    if level == "tract":
        return text.str.zfill(11)
    return text


def tables(level: str, composition: pl.DataFrame | None = None, composition_key: str = "geography"):
    """The categories, the surname table and the geography's two tables: the package's on the
    six Census categories, or a composition's on the five races."""
    if composition is not None:
        return (RACES, surname_table(folded=True), *composition_tables(composition, composition_key))
    return (CENSUS, surname_table(), *geography_tables(level))


def bisg_probabilities(frame: pl.LazyFrame | pl.DataFrame, surname: str, geography: str, level: str,
                       composition: pl.DataFrame | None = None,
                       composition_key: str = "geography") -> pl.LazyFrame:
    """``frame`` with the five posterior columns (``p_white`` ... ``p_other``, summing to one,
    null where neither input is found) and whether each record's surname and geography were
    found (``_proxy_surname``, ``_proxy_geography``). Rows keep their order."""
    cats, by_surname, geo_given_race, race_given_geo = tables(level, composition, composition_key)
    lf = frame.lazy().with_row_index("_proxy_order")
    lf = lf.with_columns(normalize_surnames(pl.col(surname)).alias("_proxy_s"),
                         geography_key(pl.col(geography), level).alias("_proxy_g"))
    s = by_surname.lazy().select(pl.col("surname").alias("_proxy_s"), *[pl.col(r).alias(f"_s_{r}") for r in cats])
    gr = geo_given_race.lazy().select(pl.col("geo").alias("_proxy_g"), *[pl.col(r).alias(f"_gr_{r}") for r in cats])
    rg = race_given_geo.lazy().select(pl.col("geo").alias("_proxy_g"), *[pl.col(r).alias(f"_rg_{r}") for r in cats])
    lf = (lf.join(s, on="_proxy_s", how="left").join(gr, on="_proxy_g", how="left")
          .join(rg, on="_proxy_g", how="left"))
    has_s = pl.col("_s_white").is_not_null()
    has_g = pl.col("_gr_white").is_not_null() & pl.col("_rg_white").is_not_null()
    numerators = [pl.when(has_s & has_g).then(pl.col(f"_s_{r}") * pl.col(f"_gr_{r}"))
                  .when(has_s).then(pl.col(f"_s_{r}"))
                  .when(has_g).then(pl.col(f"_rg_{r}")).alias(f"_u_{r}") for r in cats]
    total = pl.sum_horizontal([pl.col(f"_u_{r}") for r in cats])
    folded = [pl.sum_horizontal([pl.col(f"_u_{c}") for c in cats if fold(c) == r]) for r in RACES]
    lf = lf.with_columns(numerators).with_columns(
        [pl.when(total > 0).then(u / total).alias(p) for u, p in zip(folded, PROB_COLUMNS)]
        + [has_s.alias(SURNAME_FOUND), has_g.alias(GEOGRAPHY_FOUND)])
    helpers = ["_proxy_s", "_proxy_g", *[f"_{k}_{r}" for k in ("s", "gr", "rg", "u") for r in cats]]
    return lf.sort("_proxy_order").drop(["_proxy_order", *helpers])


def assign(threshold: float) -> pl.Expr:
    """The race of the largest posterior where it is at least ``threshold`` (null below it,
    or without a proxy): the hard group that engines needing one read."""
    best = pl.max_horizontal([pl.col(p) for p in PROB_COLUMNS])
    which = pl.coalesce([pl.when(pl.col(p) == best).then(pl.lit(r)) for r, p in zip(RACES, PROB_COLUMNS)])
    return pl.when(best >= threshold).then(which)
