"""Reason consistency: is a stated reason for an unfavourable decision applied alike to both groups?

A lender records why it denied (HMDA's denial_reason_1..4: 1 = debt-to-income ratio, 4 =
collateral, ...). When one group is denied *for the same reason* at markedly better values of the
variable the reason cites than the other group (Black applicants denied for their debt-to-income
ratio at a median DTI of 36%, White applicants at 45%), the variable is judged by a different
standard for them — disparate treatment that neither the outcome rates nor a model of the
decisions attributes to the variable (a penalty added to one input is, in the decisions alone,
indistinguishable from a group effect).

For each protected attribute and each reason code mapped to a feature (``decision.reasons``):
among the unfavourable decisions citing the code, the feature's values of the protected and the
reference group are compared by the two-sided Mann–Whitney U test (ordinal features by their
rank in the spec's order), with the groups' medians in raw units and the share of each group's
unfavourable decisions that cite the code. P-values are adjusted across every attribute × reason
of the run (Holm by default). Table ``reason_consistency``.

Which way is a penalty? A reason is cited at the variable's worse values (a debt-to-income
denial at a high DTI), so the worse side is read from the denials themselves: the mean value
(ordinal rank) of the denials citing the code against the denials not citing it, both groups
together (``worse_values``: "higher" or "lower"). The protected group's denials citing the code
at *better* values than the reference group's is the penalty direction (``penalty_direction``),
what a stricter standard for them produces; only that direction is flagged as a finding
(``sql/views/findings_reasons.sql``). The other direction and equal medians are reported.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.stats import mannwhitneyu

from aequum.engines.core.data import DECISION, record_columns
from aequum.engines.core.engine import Tables, concat_parts
from aequum.engines.outcome.stats import adjust_p_values

CONSISTENCY = pa.schema([
    ("attribute", pa.string()), ("reason_code", pa.string()), ("feature", pa.string()),
    ("protected_denied", pa.int64()), ("reference_denied", pa.int64()),
    ("protected_citing", pa.int64()), ("reference_citing", pa.int64()),
    ("protected_share_citing", pa.float64()), ("reference_share_citing", pa.float64()),
    ("protected_median", pa.string()), ("reference_median", pa.string()),
    ("protected_median_value", pa.float64()), ("reference_median_value", pa.float64()),
    ("p_value", pa.float64()), ("p_adjusted", pa.float64()), ("confidence", pa.float64()),
    ("significant", pa.bool_()), ("direction", pa.string()), ("worse_values", pa.string()),
    ("penalty_direction", pa.bool_()), ("note", pa.string()),
])


def worse_values(values: np.ndarray, citing: np.ndarray) -> str | None:
    """"higher" when the decisions citing a reason have the higher mean value of the variable
    it cites than the decisions not citing it, "lower" for the reverse, None when either set is
    empty or the means are equal (``values``: the variable over the unfavourable decisions,
    NaN where unknown; ``citing``: which of them cite the reason)."""
    known = ~np.isnan(values)
    a, b = values[known & citing], values[known & ~citing]
    if not len(a) or not len(b) or a.mean() == b.mean():
        return None
    return "higher" if a.mean() > b.mean() else "lower"


def _median_label(data, feature: str, value: float | None) -> str | None:
    if value is None:
        return None
    levels = data.levels(feature)
    if levels is not None:  # ordinal / categorical: the level at the (lower) median rank
        return levels[int(np.floor(value))]
    return f"{value:g}"


class ReasonsEngine:
    """Reason consistency of unfavourable decisions across groups (see the module docstring)."""

    name = "reasons"
    tables = {"reason_consistency": CONSISTENCY}

    def rows(self, spec, params) -> dict[str, int] | None:
        """Only unfavourable decisions are compared (when they are the recorded ones)."""
        if spec.decision is None or (spec.model is not None and spec.model.use_for_decisions):
            return None
        return {DECISION: 0}

    def columns(self, spec, params) -> list[str]:
        """Groups, decisions, the reason codes and the features they stand for."""
        reasons = spec.decision.reasons if spec.decision is not None else None
        if reasons is None:
            return record_columns(spec, [], ids=False)
        return [*record_columns(spec, list(reasons.codes.values()), ids=False), *reasons.columns]

    def prepare(self, data, params):
        reasons = data.spec.decision.reasons if data.spec.decision is not None else None
        if reasons is None:
            raise ValueError("reasons needs decision.reasons in the spec")
        if data.decision is None:
            raise ValueError("reasons needs decisions (a decision column)")
        return data, params

    def pieces(self, state) -> list[None]:
        return [None]

    def run_piece(self, state, piece) -> Tables:
        data, params = state
        reasons = data.spec.decision.reasons
        denied = data.decision == 0
        codes = [pc.fill_null(data.table[c].cast(pa.string()), "").to_numpy(zero_copy_only=False)
                 for c in reasons.columns]
        # per reason, whatever the attribute: who cites it, the values it cites, their worse side
        cited = {}
        for code, feature in reasons.codes.items():
            citing = np.logical_or.reduce([c == str(code) for c in codes])
            values = data.column_values(feature)
            cited[code] = (citing, values, worse_values(values[denied], citing[denied]))
        rows = []
        for attribute, groups in data.groups.items():
            prot, ref = denied & (groups == 1), denied & (groups == 0)
            for code, feature in reasons.codes.items():
                citing, values, worse = cited[code]
                vp, vr = values[prot & citing], values[ref & citing]
                vp, vr = vp[~np.isnan(vp)], vr[~np.isnan(vr)]
                mp = float(np.median(vp)) if len(vp) else None
                mr = float(np.median(vr)) if len(vr) else None
                small = min(len(vp), len(vr)) < params.min_group_size
                p = None if small else float(mannwhitneyu(vp, vr, alternative="two-sided").pvalue)
                rows.append({
                    "attribute": attribute, "reason_code": str(code), "feature": feature,
                    "protected_denied": int(prot.sum()), "reference_denied": int(ref.sum()),
                    "protected_citing": len(vp), "reference_citing": len(vr),
                    "protected_share_citing": len(vp) / prot.sum() if prot.sum() else None,
                    "reference_share_citing": len(vr) / ref.sum() if ref.sum() else None,
                    "protected_median": _median_label(data, feature, mp),
                    "reference_median": _median_label(data, feature, mr),
                    "protected_median_value": mp, "reference_median_value": mr,
                    "p_value": p, "confidence": params.confidence, "worse_values": worse,
                    "note": (f"fewer than {params.min_group_size} decisions citing it in a group: "
                             "not tested") if small else None})
        adjusted = adjust_p_values(np.array([np.nan if r["p_value"] is None else r["p_value"] for r in rows]),
                                   params.correction)
        for r, a in zip(rows, adjusted):
            r["p_adjusted"] = None if np.isnan(a) else float(a)
            r["significant"] = None if r["p_adjusted"] is None else r["p_adjusted"] < 1 - params.confidence
            mp, mr = r["protected_median_value"], r["reference_median_value"]
            r["direction"] = (None if mp is None or mr is None else
                              "cited at lower values for the protected group" if mp < mr else
                              "cited at higher values for the protected group" if mp > mr else "same median")
            r["penalty_direction"] = (None if mp is None or mr is None or r["worse_values"] is None else
                                      mp < mr if r["worse_values"] == "higher" else mp > mr)
        return {"reason_consistency": pa.Table.from_pylist(rows, schema=CONSISTENCY)}

    def combine(self, state, parts) -> Tables:
        return concat_parts(parts, self.tables)
