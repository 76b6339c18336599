"""Outcome metrics: the classical group-fairness baseline every audit report shows.

Per protected attribute (and the intersection of all of them), per group:
favourable rate P(ŷ=1 | g); with labels, TPR, FPR, accuracy, precision, F1 and, with a model
score, AUC (Mann–Whitney). Gaps of each group against the reference group:
statistical parity difference SPD = P(ŷ=1 | g) − P(ŷ=1 | ref) with a two-proportion z-test,
disparate impact ratio DI = P(ŷ=1 | g) / P(ŷ=1 | ref) and the four-fifths rule (DI < 0.8,
EEOC Uniform Guidelines §1607.4D), equalized-odds gap max(|ΔTPR|, |ΔFPR|) (Hardt et al. 2016).

A group with no members, or a rate undefined for lack of positives/negatives, gives nulls and
a ``note``; never a division by zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import numpy as np
import pyarrow as pa
from scipy.stats import rankdata

from engines.core.engine import Tables, concat_parts
from engines.outcome_params import OutcomeParams

METRICS = pa.schema([
    ("attribute", pa.string()), ("group_name", pa.string()), ("is_reference", pa.bool_()),
    ("n", pa.int64()), ("n_favourable", pa.int64()), ("favourable_rate", pa.float64()),
    ("n_labelled_positive", pa.int64()), ("tp", pa.int64()), ("fp", pa.int64()),
    ("tn", pa.int64()), ("fn", pa.int64()), ("tpr", pa.float64()), ("fpr", pa.float64()),
    ("accuracy", pa.float64()), ("precision", pa.float64()), ("f1", pa.float64()),
    ("auc", pa.float64()), ("note", pa.string()),
])
GAPS = pa.schema([
    ("attribute", pa.string()), ("group_name", pa.string()), ("reference_group", pa.string()),
    ("n_group", pa.int64()), ("n_reference", pa.int64()),
    ("spd", pa.float64()), ("spd_p_value", pa.float64()), ("di_ratio", pa.float64()),
    ("four_fifths_violation", pa.bool_()), ("tpr_gap", pa.float64()), ("fpr_gap", pa.float64()),
    ("eo_gap", pa.float64()), ("note", pa.string()),
])


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


def auc(score: np.ndarray, label: np.ndarray) -> float | None:
    """Area under the ROC curve by the Mann–Whitney U statistic (ties count one half)."""
    pos = label == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(score)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def group_metrics(decision: np.ndarray, label: np.ndarray | None, score: np.ndarray | None) -> dict:
    """The per-group row (counts and rates) for the records of one group."""
    n = int(len(decision))
    row: dict = {"n": n, "n_favourable": int(decision.sum()), "note": None}
    row["favourable_rate"] = _div(row["n_favourable"], n)
    notes = [] if n else ["group has no members"]
    if label is not None:
        y, d = label == 1, decision == 1
        tp, fp = int((y & d).sum()), int((~y & d).sum())
        tn, fn = int((~y & ~d).sum()), int((y & ~d).sum())
        prec, tpr = _div(tp, tp + fp), _div(tp, tp + fn)
        row.update(n_labelled_positive=int(y.sum()), tp=tp, fp=fp, tn=tn, fn=fn, tpr=tpr,
                   fpr=_div(fp, fp + tn), accuracy=_div(tp + tn, n), precision=prec,
                   f1=_div(2 * tp, 2 * tp + fp + fn))
        if n and (tp + fn == 0 or fp + tn == 0):
            notes.append("single label class: TPR or FPR undefined")
        row["auc"] = auc(score, label) if score is not None and n else None
    row["note"] = "; ".join(notes) or None
    return row


def two_proportion_p(k1: int, n1: int, k0: int, n0: int) -> float | None:
    """Two-sided p-value of H0: equal favourable rates (pooled two-proportion z-test)."""
    if not n1 or not n0:
        return None
    p = (k1 + k0) / (n1 + n0)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n0))
    if se == 0:
        return 1.0
    z = (k1 / n1 - k0 / n0) / se
    return math.erfc(abs(z) / math.sqrt(2))


def gap_row(attribute: str, group: str, g: dict, reference: str, r: dict) -> dict:
    """Gaps of group ``g`` against reference ``r`` (SPD, DI and the four-fifths rule, EO)."""
    notes = []
    rate_g, rate_r = g["favourable_rate"], r["favourable_rate"]
    spd = None if rate_g is None or rate_r is None else rate_g - rate_r
    di = None if rate_g is None or not rate_r else rate_g / rate_r
    if rate_r == 0:
        notes.append("reference group has no favourable decisions: DI undefined")
    if not g["n"] or not r["n"]:
        notes.append("a compared group has no members")

    def diff(key):
        a, b = g.get(key), r.get(key)
        return None if a is None or b is None else a - b

    tpr_gap, fpr_gap = diff("tpr"), diff("fpr")
    eo = None if tpr_gap is None or fpr_gap is None else max(abs(tpr_gap), abs(fpr_gap))
    return {"attribute": attribute, "group_name": group, "reference_group": reference,
            "n_group": g["n"], "n_reference": r["n"], "spd": spd,
            "spd_p_value": two_proportion_p(g["n_favourable"], g["n"], r["n_favourable"], r["n"]),
            "di_ratio": di, "four_fifths_violation": None if di is None else bool(di < 0.8),
            "tpr_gap": tpr_gap, "fpr_gap": fpr_gap, "eo_gap": eo, "note": "; ".join(notes) or None}


@dataclass
class Unit:
    """One attribute or intersection: its name, its groups' masks, the reference group."""

    attribute: str
    groups: dict[str, np.ndarray]
    reference: str


def units(groups: dict[str, np.ndarray], intersections: bool) -> list[Unit]:
    """Per attribute (protected vs reference) and, with ≥ 2 attributes, their intersection."""
    out = [Unit(a, {"protected": g == 1, "reference": g == 0}, "reference") for a, g in groups.items()]
    if intersections and len(groups) >= 2:
        names = list(groups)
        combos: dict[str, np.ndarray] = {}
        for values in product([1, 0], repeat=len(names)):
            label = ",".join(f"{a}={'protected' if v else 'reference'}" for a, v in zip(names, values))
            mask = np.logical_and.reduce([groups[a] == v for a, v in zip(names, values)])
            combos[label] = mask
        ref = ",".join(f"{a}=reference" for a in names)
        out.append(Unit("&".join(names), combos, ref))
    return out


class OutcomeEngine:
    """Outcome metrics as an engine: one piece per attribute / intersection."""

    name = "outcome"
    tables = {"outcome_metrics": METRICS, "outcome_gaps": GAPS}

    def prepare(self, data, params: OutcomeParams) -> dict:
        if data.decision is None:
            raise ValueError("outcome metrics need decisions (a decision column or a model)")
        return {"units": units(data.groups, params.intersections), "decision": data.decision,
                "label": data.label, "score": data.scores()}

    def pieces(self, state: dict) -> list[int]:
        return list(range(len(state["units"])))

    def run_piece(self, state: dict, piece: int) -> Tables:
        unit: Unit = state["units"][piece]
        d, y, s = state["decision"], state["label"], state["score"]
        rows, by_group = [], {}
        for name, mask in unit.groups.items():
            m = group_metrics(d[mask], None if y is None else y[mask], None if s is None else s[mask])
            by_group[name] = m
            rows.append({"attribute": unit.attribute, "group_name": name,
                         "is_reference": name == unit.reference, **m})
        gaps = [gap_row(unit.attribute, name, m, unit.reference, by_group[unit.reference])
                for name, m in by_group.items() if name != unit.reference]
        return {"outcome_metrics": pa.Table.from_pylist(rows, schema=METRICS),
                "outcome_gaps": pa.Table.from_pylist(gaps, schema=GAPS)}

    def combine(self, state: dict, parts) -> Tables:
        return concat_parts(parts, self.tables)
