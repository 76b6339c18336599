"""Parameters of the FGCE engine (seed 001). Owned by the FGCE engine's author."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FGCEParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    eps: float = Field(3.0, gt=0)
    factuals: Literal["false_negatives", "negatives"] = "false_negatives"
