"""The audit spec's ``geography`` section (engines/core/spec.py's AuditSpec.geography): the
lender and market features and the tract columns by role (the geography engine)."""
from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field


class Geography(BaseModel):
    """Where each record was made and where its applicant lives, by role (the geography engine;
    docs/fair-lending.md, "Geography and peers"). ``lender`` and ``market`` name declared categorical
    features (their categories inferred from the data): other engines see them only where a
    spec names them (the regression engine's fixed effects). The tract columns are staged
    beside the features, never features themselves: a value that is not a number (the LAR's
    "NA") or is empty is staged as null and never quarantines a record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lender: str = Field(description="Declared categorical feature naming the lender (the LAR's lei).")
    market: str = Field(description="Declared categorical feature naming the market (derived_msa_md).")
    outside_markets: list[str] = Field(
        default_factory=lambda: ["99999"], description="Market values that are no market (the LAR's "
        "99999: outside any metropolitan area): their records have no peers and are left out.")
    tract: str | None = Field(None, description="Source column: the census tract (text, leading zeros).")
    county: str | None = Field(None, description="Source column: the county code (text).")
    minority_share: str | None = Field(None, description="Source column: the tract's minority population "
                                       "share, percent (tract_minority_population_percent).")
    black_share: str | None = Field(None, description="Source column: the tract's Black population share, "
                                    "percent (not in the public LAR).")
    hispanic_share: str | None = Field(None, description="Source column: the tract's Hispanic population "
                                       "share, percent (not in the public LAR).")
    income_ratio: str | None = Field(None, description="Source column: tract median family income as a "
                                     "percent of the MSA's (tract_to_msa_income_percentage).")
    market_income: str | None = Field(None, description="Source column: the MSA's median family income, USD "
                                      "(ffiec_msa_md_median_family_income).")
    population: str | None = Field(None, description="Source column: the tract's population (tract_population).")

    TEXT_ROLES: ClassVar[tuple[str, ...]] = ("tract", "county")
    NUMBER_ROLES: ClassVar[tuple[str, ...]] = ("minority_share", "black_share", "hispanic_share",
                                               "income_ratio", "market_income", "population")

    def staged(self) -> dict[str, str]:
        """The tract columns staged for this section: source column -> "text" or "number"."""
        out: dict[str, str] = {}
        for role in (*self.TEXT_ROLES, *self.NUMBER_ROLES):
            column = getattr(self, role)
            if column is not None:
                kind = "text" if role in self.TEXT_ROLES else "number"
                if out.get(column, kind) != kind:
                    raise ValueError(f"geography: column {column!r} named as both text and a number")
                out[column] = kind
        return out
