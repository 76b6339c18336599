"""Parameters of the reason-consistency engine (``reasons``), with defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ReasonsParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    confidence: float = Field(0.95, gt=0.5, lt=1, description="1 − confidence is the significance "
                              "level of the (adjusted) rank tests.")
    correction: Literal["holm", "bh", "none"] = Field(
        "holm", description="Multiple-testing correction across every attribute × reason of a run.")
    min_group_size: int = Field(
        20, ge=1, description="Fewer decisions citing a reason in a group: reported, not tested.")

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        if running and (spec.decision is None or spec.decision.reasons is None):
            raise ValueError("engines.run includes 'reasons', which needs decision.reasons "
                             "(the reason-code columns and the feature each code cites)")
