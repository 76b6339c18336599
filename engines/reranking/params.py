"""Parameters of the RAGUEL engine (seed 002). Owned by the RAGUEL engine's author."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RaguelParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tolerance: float = Field(1 / 3, gt=0)
