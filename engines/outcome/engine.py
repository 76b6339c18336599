"""Outcome metrics: the classical group-fairness baseline every audit report shows.

Per protected attribute and per intersection the spec asks for (``engines.outcome.intersections``),
per group: favourable rate P(ŷ=1 | g) with its Wilson interval; with labels, TPR, FPR, accuracy,
precision, F1 and, with a model score, AUC (Mann–Whitney). Gaps of each group against the
reference group: statistical parity difference SPD = P(ŷ=1 | g) − P(ŷ=1 | ref) with a
two-proportion z-test (raw p-value, and adjusted across all the groups of the run by Holm or
Benjamini–Hochberg), disparate impact ratio DI = P(ŷ=1 | g) / P(ŷ=1 | ref) with its log-method
interval, equalized-odds gap max(|ΔTPR|, |ΔFPR|) (Hardt et al. 2016). The unadjusted measures
examiners read on unfavourable decisions (denials, in lending): the unfavourable-rate ratio
P(ŷ=0 | g) / P(ŷ=0 | ref) with its log-method interval, and the odds ratio of an unfavourable
decision [P(ŷ=0 | g)/P(ŷ=1 | g)] / [P(ŷ=0 | ref)/P(ŷ=1 | ref)] with Woolf's interval (Haldane's
0.5 added to every cell only when a cell is 0, and then said in ``note``):
:mod:`engines.outcome.stats`.

The four-fifths rule (EEOC Uniform Guidelines §1607.4D) is read both ways: a group is flagged
when its rate is under 4/5 of the reference's (DI < 0.8) and when it is under 4/5 of the
highest rate among the unit's groups that are large enough to judge (the Guidelines' reading,
which can flag the reference group itself). A group (or its reference) with fewer than
``min_group_size`` members is flagged "too small to judge": its figures are reported, but it
gets no verdict and is not part of the multiple-testing family.

A group with no members, or a rate undefined for lack of positives/negatives, gives nulls and
a ``note``; never a division by zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import numpy as np
import pyarrow as pa

from aequum.engines.core.data import record_columns
from aequum.engines.core.engine import Tables, concat_parts
from aequum.engines.core.models import auc
from aequum.engines.outcome.params import OutcomeParams
from aequum.engines.outcome.stats import adjust_p_values, odds_ratio_woolf, ratio_log_interval, wilson_interval

TOO_SMALL = "too small to judge"

METRICS = pa.schema([
    ("attribute", pa.string()), ("group_name", pa.string()), ("is_reference", pa.bool_()),
    ("n", pa.int64()), ("n_favourable", pa.int64()), ("favourable_rate", pa.float64()),
    ("n_labelled_positive", pa.int64()), ("tp", pa.int64()), ("fp", pa.int64()),
    ("tn", pa.int64()), ("fn", pa.int64()), ("tpr", pa.float64()), ("fpr", pa.float64()),
    ("accuracy", pa.float64()), ("precision", pa.float64()), ("f1", pa.float64()),
    ("auc", pa.float64()), ("note", pa.string()),
    ("rate_ci_low", pa.float64()), ("rate_ci_high", pa.float64()), ("too_small", pa.bool_()),
    ("highest_group", pa.string()), ("ratio_to_highest", pa.float64()),
    ("four_fifths_vs_highest", pa.bool_()),
])
GAPS = pa.schema([
    ("attribute", pa.string()), ("group_name", pa.string()), ("reference_group", pa.string()),
    ("n_group", pa.int64()), ("n_reference", pa.int64()),
    ("spd", pa.float64()), ("spd_p_value", pa.float64()), ("di_ratio", pa.float64()),
    ("four_fifths_violation", pa.bool_()), ("tpr_gap", pa.float64()), ("fpr_gap", pa.float64()),
    ("eo_gap", pa.float64()), ("note", pa.string()),
    ("favourable_rate", pa.float64()), ("reference_rate", pa.float64()),
    ("n_favourable", pa.int64()), ("n_reference_favourable", pa.int64()),
    ("confidence", pa.float64()), ("di_ci_low", pa.float64()), ("di_ci_high", pa.float64()),
    ("spd_p_adjusted", pa.float64()), ("correction", pa.string()), ("significant", pa.bool_()),
    ("too_small", pa.bool_()), ("highest_group", pa.string()), ("ratio_to_highest", pa.float64()),
    ("four_fifths_vs_highest", pa.bool_()), ("shortfall", pa.int64()), ("verdict", pa.string()),
    ("unfavourable_rate", pa.float64()), ("reference_unfavourable_rate", pa.float64()),
    ("unfavourable_rate_ratio", pa.float64()), ("unfavourable_ratio_ci_low", pa.float64()),
    ("unfavourable_ratio_ci_high", pa.float64()), ("odds_ratio", pa.float64()),
    ("odds_ratio_ci_low", pa.float64()), ("odds_ratio_ci_high", pa.float64()),
])


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


MAX_JOINT_CELLS = 1 << 20  # 4·3^n cells for n attributes: one joint count up to 11 attributes


def joint_counts(groups: list[np.ndarray], decision: np.ndarray, label: np.ndarray | None) -> np.ndarray:
    """The number of records with each combination of every attribute's group (−1 neither,
    0 reference, 1 protected), decision ŷ and label y (0 without labels): an int64 array of
    shape ``(3,) * len(groups) + (2, 2)``, indexed ``[g₁ + 1, …, ŷ, y]``. One pass of
    ``np.bincount`` over the records: every group's counts are sums over it (the same counts
    as SQL's GROUPING SETS)."""
    cells = 4 * 3 ** len(groups)
    kind = np.min_scalar_type(cells - 1)  # uint8 up to 3 attributes: a quarter of int32's memory traffic
    key = (decision == 1).astype(kind)
    key *= 2
    if label is not None:
        key += label == 1
    term = np.empty(len(key), kind)
    for i, g in enumerate(groups):
        np.add(g, 1, out=term, casting="unsafe")  # −1, 0, 1 → 0, 1, 2
        term *= kind.type(4 * 3 ** (len(groups) - 1 - i))
        key += term
    counts = np.bincount(key, minlength=cells)
    return counts.astype(np.int64).reshape((3,) * len(groups) + (2, 2))


def group_metrics(counts: np.ndarray, labelled: bool, auc_value: float | None = None) -> dict:
    """The per-group row (counts and rates) from one group's counts
    (``counts[2·ŷ + y]``); ``auc_value`` is the group's AUC when labels and scores exist."""
    tn, fn, fp, tp = (int(c) for c in counts)  # (ŷ, y) = (0, 0), (0, 1), (1, 0), (1, 1)
    n = tn + fn + fp + tp
    row: dict = {"n": n, "n_favourable": fp + tp, "note": None}
    row["favourable_rate"] = _div(row["n_favourable"], n)
    notes = [] if n else ["group has no members"]
    if labelled:
        prec, tpr = _div(tp, tp + fp), _div(tp, tp + fn)
        row.update(n_labelled_positive=tp + fn, tp=tp, fp=fp, tn=tn, fn=fn, tpr=tpr,
                   fpr=_div(fp, fp + tn), accuracy=_div(tp + tn, n), precision=prec,
                   f1=_div(2 * tp, 2 * tp + fp + fn))
        if n and (tp + fn == 0 or fp + tn == 0):
            notes.append("single label class: TPR or FPR undefined")
        row["auc"] = auc_value if n else None
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


def gap_row(attribute: str, group: str, g: dict, reference: str, r: dict,
            params: OutcomeParams | None = None) -> dict:
    """Gaps of group ``g`` against reference ``r``: SPD with its raw p-value, DI with its
    log-method interval, the four-fifths rule against the reference, EO, and the unfavourable
    decisions' rate ratio and odds ratio (:func:`unfavourable_ratios`); the run-wide
    adjustment, the highest-rate reading and the verdict are added by :func:`judge`."""
    params = params or OutcomeParams()
    notes = []
    rate_g, rate_r = g["favourable_rate"], r["favourable_rate"]
    spd = None if rate_g is None or rate_r is None else rate_g - rate_r
    di = None if rate_g is None or not rate_r else rate_g / rate_r
    if rate_r == 0:
        notes.append("reference group has no favourable decisions: DI undefined")
    if not g["n"] or not r["n"]:
        notes.append("a compared group has no members")
    too_small = min(g["n"], r["n"]) < params.min_group_size
    if too_small:
        notes.append(f"{TOO_SMALL}: fewer than {params.min_group_size} members")

    def diff(key):
        a, b = g.get(key), r.get(key)
        return None if a is None or b is None else a - b

    tpr_gap, fpr_gap = diff("tpr"), diff("fpr")
    eo = None if tpr_gap is None or fpr_gap is None else max(abs(tpr_gap), abs(fpr_gap))
    low, high = ratio_log_interval(g["n_favourable"], g["n"], r["n_favourable"], r["n"], params.confidence)
    shortfall = None if rate_r is None else max(0, round(g["n"] * rate_r - g["n_favourable"]))
    unfavourable = unfavourable_ratios(g, r, params.confidence)
    if unfavourable.pop("haldane"):
        notes.append("odds ratio with 0.5 added to every cell (Haldane): a cell of the 2x2 table is 0")
    return {**unfavourable, "attribute": attribute, "group_name": group, "reference_group": reference,
            "n_group": g["n"], "n_reference": r["n"], "spd": spd,
            "spd_p_value": two_proportion_p(g["n_favourable"], g["n"], r["n_favourable"], r["n"]),
            "di_ratio": di,
            "four_fifths_violation": None if di is None or too_small else bool(di < params.four_fifths),
            "tpr_gap": tpr_gap, "fpr_gap": fpr_gap, "eo_gap": eo, "note": "; ".join(notes) or None,
            "favourable_rate": rate_g, "reference_rate": rate_r, "n_favourable": g["n_favourable"],
            "n_reference_favourable": r["n_favourable"], "confidence": params.confidence,
            "di_ci_low": low, "di_ci_high": high, "too_small": too_small,
            "highest_group": g["highest_group"], "ratio_to_highest": g["ratio_to_highest"],
            "four_fifths_vs_highest": g["four_fifths_vs_highest"], "shortfall": shortfall}


def unfavourable_ratios(g: dict, r: dict, confidence: float) -> dict:
    """Group ``g`` against reference ``r`` on unfavourable decisions (denials, in lending): each
    one's unfavourable rate, their ratio with its log-method interval (Katz et al. 1978; None
    when the reference has none or a group no members) and the odds ratio of an unfavourable
    decision with Woolf's interval (``stats.odds_ratio_woolf``; ``haldane``: 0.5 was
    added to every cell because one was 0). Unadjusted: no controls."""
    u_g, u_r = g["n"] - g["n_favourable"], r["n"] - r["n_favourable"]
    rate_g, rate_r = _div(u_g, g["n"]), _div(u_r, r["n"])
    low, high = ratio_log_interval(u_g, g["n"], u_r, r["n"], confidence)
    odds, or_low, or_high, haldane = odds_ratio_woolf(u_g, g["n_favourable"], u_r, r["n_favourable"], confidence)
    return {"unfavourable_rate": rate_g, "reference_unfavourable_rate": rate_r,
            "unfavourable_rate_ratio": None if rate_g is None or not rate_r else rate_g / rate_r,
            "unfavourable_ratio_ci_low": low, "unfavourable_ratio_ci_high": high,
            "odds_ratio": odds, "odds_ratio_ci_low": or_low, "odds_ratio_ci_high": or_high, "haldane": haldane}


def highest_rate(by_group: dict[str, dict], params: OutcomeParams) -> None:
    """The EEOC reading of the four-fifths rule, in place: each group's rate over the highest
    rate among the groups large enough to judge (Uniform Guidelines §1607.4D)."""
    judged = {name: m["favourable_rate"] for name, m in by_group.items()
              if m["n"] >= params.min_group_size and m["favourable_rate"] is not None}
    top = max(judged, key=lambda name: (judged[name], name), default=None)
    for m in by_group.values():
        ratio = None
        if top is not None and judged[top] > 0 and m["favourable_rate"] is not None:
            ratio = m["favourable_rate"] / judged[top]
        m["highest_group"] = top
        m["ratio_to_highest"] = ratio
        m["four_fifths_vs_highest"] = None if ratio is None or m["too_small"] else bool(ratio < params.four_fifths)


def verdict(row: dict) -> str:
    """One word for a gap row: too small to judge / undefined / adverse impact (four-fifths
    rule violated in either reading) / significant difference (adjusted test only) / no finding."""
    if row["too_small"]:
        return TOO_SMALL
    if row["di_ratio"] is None:
        return "undefined"
    if row["four_fifths_violation"] or row["four_fifths_vs_highest"]:
        return "adverse impact"
    if row["significant"]:
        return "significant difference"
    return "no finding"


def judge(gaps: pa.Table, params: OutcomeParams) -> pa.Table:
    """Adjust the p-values of all judged gap rows of a run as one family (``params.correction``),
    mark the significant ones at level 1 − confidence and give each row its verdict."""
    rows = gaps.to_pylist()
    p = np.array([np.nan if r["too_small"] or r["spd_p_value"] is None else r["spd_p_value"]
                  for r in rows], dtype=np.float64)
    adjusted = adjust_p_values(p, params.correction)
    for r, a in zip(rows, adjusted):
        r["spd_p_adjusted"] = None if np.isnan(a) else float(a)
        r["correction"] = params.correction
        r["significant"] = None if np.isnan(a) else bool(a < 1 - params.confidence)
        r["verdict"] = verdict(r)
    return pa.Table.from_pylist(rows, schema=GAPS)


@dataclass
class Unit:
    """One attribute or intersection: its attributes, its groups (each the group, 0 or 1, of
    every attribute in ``names``), the groups' names and the reference group's."""

    attribute: str
    names: tuple[str, ...]
    members: list[tuple[int, ...]]
    groups: list[str]
    reference: str


def units(attributes: list[str], combos: list[tuple[str, ...]]) -> list[Unit]:
    """Per attribute (protected vs reference) and per intersection in ``combos``. A subgroup of
    an intersection holds the records mapped in the intersection's attributes only (an
    unmapped attribute outside it does not drop a record)."""
    out = [Unit(a, (a,), [(1,), (0,)], ["protected", "reference"], "reference") for a in attributes]
    for names in combos:
        members = list(product([1, 0], repeat=len(names)))
        labels = [",".join(f"{a}={'protected' if v else 'reference'}" for a, v in zip(names, values))
                  for values in members]
        out.append(Unit("&".join(names), names, members, labels, ",".join(f"{a}=reference" for a in names)))
    return out


def unit_counts(unit: Unit, attributes: list[str], joint: np.ndarray) -> list[np.ndarray]:
    """Per group of ``unit``: its records' counts ``[2·ŷ + y]`` (a sum over ``joint``)."""
    out = []
    for values in unit.members:
        index = [slice(None)] * len(attributes)
        for a, v in zip(unit.names, values):
            index[attributes.index(a)] = v + 1
        cell = joint[tuple(index)]
        out.append(cell.reshape(-1, 4).sum(axis=0))
    return out


def unit_mask(unit: Unit, groups: dict[str, np.ndarray], values: tuple[int, ...]) -> np.ndarray:
    """The records of one group of ``unit``."""
    return np.logical_and.reduce([groups[a] == v for a, v in zip(unit.names, values)])


class OutcomeEngine:
    """Outcome metrics as an engine: one pass over the records counts every combination of
    groups, decision and label (``prepare``); one piece per attribute / intersection turns its
    groups' sums into metrics; the run-wide multiple-testing correction is applied when the
    pieces are combined. Counts do not depend on the order of the records, so they are read
    in storage order (``row_order = False``), and only the groups, decisions and labels (and,
    for the AUC, the model's inputs)."""

    name = "outcome"
    tables = {"outcome_metrics": METRICS, "outcome_gaps": GAPS}
    row_order = False

    @staticmethod
    def columns(spec, params: OutcomeParams) -> list[str]:
        scored = spec.model is not None and spec.label is not None
        return record_columns(spec, spec.model.features if scored else [], ids=False)

    def prepare(self, data, params: OutcomeParams) -> dict:
        if data.decision is None:
            raise ValueError("outcome metrics need decisions (a decision column or a model)")
        names = [p.name for p in data.spec.protected]
        combos = params.combinations(data.spec)
        scored = data.label is not None and data.model is not None
        todo = units(names, combos)
        if 4 * 3 ** len(names) <= MAX_JOINT_CELLS:  # one pass over the records for every unit
            every = (names, joint_counts([data.groups[a] for a in names], data.decision, data.label))
            joints = [every] * len(todo)
        else:  # many attributes (e.g. a column compared value by value): a pass per unit
            joints = [(list(u.names), joint_counts([data.groups[a] for a in u.names], data.decision, data.label))
                      for u in todo]
        return {"units": todo, "joints": joints,
                "labelled": data.label is not None, "params": params,
                # the AUC needs each group's records (only with labels and a model)
                "groups": data.groups if scored else None, "label": data.label if scored else None,
                "score": data.scores() if scored else None}

    def pieces(self, state: dict) -> list[int]:
        return list(range(len(state["units"])))

    def run_piece(self, state: dict, piece: int) -> Tables:
        unit: Unit = state["units"][piece]
        params: OutcomeParams = state["params"]
        y, s = state["label"], state["score"]
        by_group = {}
        for name, values, counts in zip(unit.groups, unit.members,
                                        unit_counts(unit, *state["joints"][piece])):
            mask = unit_mask(unit, state["groups"], values) if s is not None else None
            m = group_metrics(counts, state["labelled"], auc(y[mask], s[mask]) if s is not None else None)
            m["rate_ci_low"], m["rate_ci_high"] = wilson_interval(m["n_favourable"], m["n"], params.confidence)
            m["too_small"] = m["n"] < params.min_group_size
            by_group[name] = m
        highest_rate(by_group, params)
        rows = [{"attribute": unit.attribute, "group_name": name, "is_reference": name == unit.reference, **m}
                for name, m in by_group.items()]
        gaps = [gap_row(unit.attribute, name, m, unit.reference, by_group[unit.reference], params)
                for name, m in by_group.items() if name != unit.reference]
        return {"outcome_metrics": pa.Table.from_pylist(rows, schema=METRICS),
                "outcome_gaps": pa.Table.from_pylist(gaps, schema=GAPS)}

    def combine(self, state: dict, parts) -> Tables:
        tables = concat_parts(parts, self.tables)
        tables["outcome_gaps"] = judge(tables["outcome_gaps"], state["params"])
        return tables
