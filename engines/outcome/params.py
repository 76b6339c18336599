"""Parameters of the outcome metrics. Owned by the outcome metrics' author."""
from __future__ import annotations

from itertools import combinations
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class OutcomeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    intersections: bool | Literal["all_pairs", "all"] | list[list[str]] = Field(
        True, description="Intersections of protected attributes to report besides each attribute: "
        "true = the intersection of all of them, false = none, 'all_pairs' = every pair, 'all' = "
        "every combination of two or more, or a list of attribute lists such as "
        "[[race, sex], [race, ethnicity, sex]]. A subgroup of an intersection needs only its own "
        "attributes mapped, so a record with an unmapped third attribute still counts in race × sex.")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Confidence level of the intervals "
                              "(Wilson for rates, log method for DI ratios); 1 − confidence is the "
                              "significance level of the (adjusted) two-proportion tests.")
    min_group_size: int = Field(30, ge=1, description="A group (or its reference) with fewer members "
                                "is flagged 'too small to judge': reported, but given no verdict and "
                                "left out of the multiple-testing family.")
    correction: Literal["holm", "bh", "none"] = Field(
        "holm", description="Multiple-testing correction of the two-proportion p-values across all "
        "groups of a run: holm (Holm 1979, controls the family-wise error rate), bh "
        "(Benjamini–Hochberg 1995, controls the false discovery rate) or none.")
    four_fifths: float = Field(0.8, gt=0, lt=1, description="The four-fifths threshold (EEOC Uniform "
                               "Guidelines §1607.4D): adverse impact when a group's favourable rate "
                               "is under this fraction of the reference's or of the highest rate.")

    @field_validator("intersections")
    @classmethod
    def _lists(cls, v):
        if isinstance(v, list):
            for group in v:
                if len(group) < 2 or len(set(group)) != len(group):
                    raise ValueError(f"each intersection needs two or more distinct attributes, got {group}")
        return v

    def combinations(self, spec) -> list[tuple[str, ...]]:
        """The intersections to report, as tuples of the spec's attribute names in its order. A
        combination never joins two comparisons of one column; ``true`` joins the attributes
        that are not per-value comparisons (``protected[].compare``)."""
        names = [p.name for p in spec.protected]
        column = {p.name: p.column for p in spec.protected}

        def distinct(combo) -> bool:
            return len({column[a] for a in combo}) == len(combo)

        if self.intersections is False or len(names) < 2:
            return []
        if self.intersections is True:
            written = tuple(p.name for p in spec.protected if p.of is None)
            return [written] if len(written) >= 2 and distinct(written) else []
        if self.intersections == "all_pairs":
            return [c for c in combinations(names, 2) if distinct(c)]
        if self.intersections == "all":
            return [c for r in range(2, len(names) + 1) for c in combinations(names, r) if distinct(c)]
        out: list[tuple[str, ...]] = []
        for group in self.intersections:
            combo = tuple(n for n in names if n in group)
            if combo not in out:
                out.append(combo)
        return out

    def reads_model(self, spec) -> bool:
        """The metrics read the run's model only for the AUC of its scores, which needs labels."""
        return spec.model is not None and spec.label is not None

    def check_spec(self, spec, running: bool) -> None:
        """Cross-checks against the rest of the spec (called by the spec's validation)."""
        if isinstance(self.intersections, list):
            spec.check_intersections("engines.outcome.intersections", *self.intersections)
