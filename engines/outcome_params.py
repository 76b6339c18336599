"""Parameters of the outcome metrics. Owned by the outcome metrics' author."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class OutcomeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    intersections: bool = Field(True, description="Also report intersections of protected attributes.")
