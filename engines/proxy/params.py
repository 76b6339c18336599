"""Parameters of the proxy-disparity engine (``proxy``), with defaults."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ProxyParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    confidence: float = Field(0.95, gt=0.5, lt=1, description="Level of the two-sided intervals.")
    controls: list[str] | None = Field(
        None, description="Numeric features for the controlled corrected gap (default: every numeric "
        "feature of the spec; [] for none).")
    min_records: int = Field(30, ge=2, description="Fewer records (or expected group members) than this: "
                             "the gap is reported as too small, not estimated.")
    regression: bool = Field(True, description="The controlled regression with the probabilities as the group "
                             "(corrected_regression) and weighted by them (weighted_regression): the regression "
                             "engine's controls, fixed effects and cluster (engines.regression) for the unfavourable "
                             "decision, the pricing engine's over the originations for each pricing field.")
    per_lender: bool = Field(True, description="With a geography section: each lender's corrected gap "
                             "in its unfavourable-decision rate too.")

    def control_names(self, spec) -> list[str]:
        if self.controls is not None:
            return list(self.controls)
        return [f.name for f in spec.features if f.type == "numeric"]

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        if not running:
            return
        if not any(p.proxy is not None for p in spec.protected):
            raise ValueError("engines.run includes 'proxy', which needs a protected attribute with a proxy "
                             "(protected[].proxy: {method: bisg, surname: ..., geography: ..., ...})")
        numeric = {f.name for f in spec.features if f.type == "numeric"}
        bad = [c for c in self.control_names(spec) if c not in numeric]
        if bad:
            raise ValueError(f"engines.proxy.controls: {bad} are not numeric features of the spec")
