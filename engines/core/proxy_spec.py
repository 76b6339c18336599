"""The spec of a protected attribute inferred by a proxy (``protected[].proxy``): BISG from a
surname and where the person lives (``engines.proxy``, docs/proxies.md)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Race = Literal["white", "black", "hispanic", "asian", "other"]
DEFAULT_VALUES = {"white": "White", "black": "Black or African American", "hispanic": "Hispanic or Latino",
                  "asian": "Asian", "other": "Other race"}
BELOW_THRESHOLD = "Not inferred (below the proxy threshold)"
# the columns the proxy step stages (engines.proxy.stage documents them)
PROB_COLUMNS = ("p_white", "p_black", "p_hispanic", "p_asian", "p_other")
PROXY_COLUMNS = (*PROB_COLUMNS, "_proxy_surname", "_proxy_geography", "_proxy_inferred")
NO_PROXY = "Not inferred (no surname or geography found)"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NamesFile(_Model):
    """Surnames kept apart from the decision records (the public HMDA LAR has none): a CSV or
    Parquet file joined to the records by their id (the source's id, or its 0-based row number
    when source.id_column is null)."""

    path: str = Field(description="CSV or Parquet file; a relative path is read from the spec's folder.")
    id_column: str = Field("id", description="Its column of record ids.")
    surname: str = Field("surname", description="Its column of surnames.")


class Composition(_Model):
    """Counts of people per race by geography (block groups, or a later vintage than the
    bundled 2010 tables): columns for the geography and white, black, hispanic, asian, other."""

    path: str = Field(description="CSV or Parquet file; a relative path is read from the spec's folder.")
    geography_column: str = Field("geography", description="Its column of geography codes.")


class Proxy(_Model):
    """Race inferred by Bayesian Improved Surname Geocoding (Elliott et al. 2009; the CFPB's
    proxy method): each record's probabilities of five races from the Census surname list and its
    geography's composition, staged as p_white, p_black, p_hispanic, p_asian, p_other. Records
    whose recorded value is missing (all of them with recorded: false) get the race of their
    largest probability where it reaches ``threshold``, in the attribute's column, for the engines
    that need a hard group; the rest stay outside both groups."""

    method: Literal["bisg"] = Field("bisg", description="The proxy: bisg (surname and geography).")
    surname: str = Field(description="Column of surnames (in the source, or in `names`).")
    geography: Literal["tract", "zip", "block_group"] = Field(
        description="tract (11-digit state-county-tract FIPS), zip (5-digit ZIP code, read as its ZCTA) or "
        "block_group (needs `composition`).")
    geography_column: str = Field(description="Source column holding the geography code.")
    threshold: float = Field(0.8, gt=0.2, le=1, description="Smallest largest-probability at which a "
                             "record is assigned a hard group (for CST, CEC, FGCE, RAGUEL, PBA, ...).")
    recorded: bool = Field(True, description="The attribute's column is in the source and the proxy "
                           "fills only its missing values (`fill`, empty, null); false: race is never "
                           "recorded and the column is made by the proxy.")
    fill: list[str | int | float] = Field(default_factory=lambda: ["Race Not Available"], description=
                                          "Recorded values meaning not provided, which the proxy fills.")
    values: dict[Race, str] = Field(default_factory=lambda: dict(DEFAULT_VALUES), description="The value "
                                    "written for each inferred race, as the attribute's lists name them.")
    names: NamesFile | None = Field(None, description="Surnames in a file of their own, joined by record id.")
    composition: Composition | None = Field(None, description="The geography's composition from a file "
                                            "(needed for block_group) instead of the bundled Census 2010 "
                                            "tables.")

    @model_validator(mode="after")
    def _complete(self) -> "Proxy":
        if self.geography == "block_group" and self.composition is None:
            raise ValueError("proxy.geography: block_group needs proxy.composition (counts per race and block "
                             "group): the bundled Census tables are for tract and zip")
        missing = [r for r in DEFAULT_VALUES if r not in self.values]
        if missing:
            raise ValueError(f"proxy.values: give the value of every race, missing {missing}")
        return self

    def source_columns(self, column: str) -> list[str]:
        """The source columns the proxy reads (with the attribute's ``column`` when recorded)."""
        return [*([column] if self.recorded else []), *([] if self.names else [self.surname]),
                self.geography_column]
