"""The complainants' counterfactual points as values an examiner can read (``cst_counterfactuals``).

CST's test group is searched around the complainant's counterfactual x_c^CF (Alvarez & Ruggieri
2023, Def. 3.3: the k reference records nearest the counterfactual), the complainant in the
world do(A := reference) by abduction, action and prediction on the spec's SCM (Def. 3.2;
mediators held at their factual values: ``engines.cst.mediators``). The distances CST stores
(``cst_evidence``) are to that point; these rows give the point itself, one row per complainant
× distance feature (long form: the features differ from spec to spec), raw — in the spec's
units, not normalised:

* numeric: the value;
* ordinal: its position on the spec's ``order`` (0 the first level; a linear SCM moves it
  between levels), with ``level`` the level there, or "between <a> and <b>";
* categorical: the category's code, ``level`` the category (an additive SCM never moves one;
  a supplied counterfactual table may);

and ŷ^CF, the counterfactual's decision (the claims' ``decision_counterfactual``) on each row.

The complainants are those whose comparison groups ``cst_evidence`` keeps
(:func:`situation_testing.evidence_depth`), and, unless ``evidence: none``, those CF finds
discriminated (their counterfactual decision is CF's whole comparison): the counterfactual
explains every stored case.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from aequum.engines.core.data import id_array

COUNTERFACTUALS = pa.schema([
    ("record_id", pa.string()), ("protected_attribute", pa.string()), ("feature", pa.string()),
    ("value", pa.float64()), ("level", pa.string()), ("decision_counterfactual", pa.int8()),
])


def kept(claims_table: pa.Table, depth: dict[tuple[str, str], np.ndarray], n: int, mode: str) -> np.ndarray:
    """Which of the piece's ``n`` complainants get their counterfactual stored: those with any
    comparison group kept (``depth``: :func:`situation_testing.evidence_depth`), and, unless
    ``mode`` is none, those CF finds discriminated (``claims_table``: their claims, blocks of n
    rows, the CF block last)."""
    keep = np.logical_or.reduce([d > 0 for d in depth.values()])
    if mode != "none" and n:
        cf = claims_table.slice(claims_table.num_rows - n, n)
        keep |= cf["discriminated"].fill_null(False).to_numpy(zero_copy_only=False)
    return keep


def level_names(values: np.ndarray, levels: list[str]) -> pa.Array:
    """The level at each position of an ordinal (or code of a categorical): the level where the
    position is whole, "between <a> and <b>" between two, null outside the levels or NaN."""
    names = pa.array(levels + [f"between {a} and {b}" for a, b in zip(levels, levels[1:])], pa.string())
    whole = np.isfinite(values) & (values == np.rint(values)) & (values >= 0) & (values <= len(levels) - 1)
    inside = np.isfinite(values) & (values > 0) & (values < len(levels) - 1) & ~whole
    index = np.where(whole, np.rint(np.nan_to_num(values)),
                     len(levels) + np.floor(np.nan_to_num(values))).astype(np.int64)
    return names.take(pa.array(index, mask=~(whole | inside)))


def counterfactual_rows(ids: pa.Array | np.ndarray, attribute: str, complainants: np.ndarray,
                        values: np.ndarray, features: list[str], levels: list[list[str] | None],
                        decision_cf: np.ndarray) -> pa.Table:
    """One row per complainant × feature, complainants in the given order, features in the
    distance's: ``values`` (complainants × features) the raw counterfactual values, ``levels``
    each feature's ordered levels (None for numeric), ``decision_cf`` ŷ^CF of each complainant."""
    m, f = values.shape
    if m == 0:
        return COUNTERFACTUALS.empty_table()
    flat = np.ascontiguousarray(values).ravel()  # complainant-major: row i * f + j
    level = pa.nulls(m * f, pa.string())
    if any(lv is not None for lv in levels):
        parts = [level_names(values[:, j], lv) if lv is not None else pa.nulls(m, pa.string())
                 for j, lv in enumerate(levels)]
        order = (np.arange(m)[:, None] + m * np.arange(f)[None, :]).ravel()  # feature-major -> complainant-major
        level = pa.concat_arrays(parts).take(pa.array(order))
    return pa.table({
        "record_id": id_array(ids, np.repeat(complainants, f)),
        "protected_attribute": pa.repeat(pa.scalar(attribute, pa.string()), m * f),
        "feature": pa.array(features, pa.string()).take(pa.array(np.tile(np.arange(f), m))),
        "value": pa.array(flat, pa.float64(), from_pandas=True),
        "level": level,
        "decision_counterfactual": pa.array(np.repeat(np.asarray(decision_cf, np.int8), f), pa.int8()),
    }, schema=COUNTERFACTUALS)
