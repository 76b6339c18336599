"""How well the audited model reproduces the recorded decisions, overall and per group.

An audit whose counterfactual engines re-decide records with a model is only as good as that
model. The measures (``engines.core.models.decision_quality``: accuracy, balanced accuracy, AUC,
TPR/FPR, positive rates) are stored with every run (``audit.model_quality``), and a surrogate
that cannot stand in for the lender's model (a single predicted class, or balanced accuracy on
held-out rows below ``model.min_balanced_accuracy``) stops the engines that need a model.
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from aequum.engines.core.models import decision_quality, subset_order

QUALITY = pa.schema([
    ("attribute", pa.string()), ("group_name", pa.string()), ("split", pa.string()),
    ("n", pa.int64()), ("accuracy", pa.float64()), ("balanced_accuracy", pa.float64()),
    ("auc", pa.float64()), ("tpr", pa.float64()), ("fpr", pa.float64()),
    ("positive_rate", pa.float64()), ("target_positive_rate", pa.float64()),
    # the staged records a ``sample`` split's rows were drawn from (uniformly); null otherwise
    ("sampled_from", pa.int64()),
])
_MEASURES = ["accuracy", "balanced_accuracy", "auc", "tpr", "fpr", "positive_rate", "target_positive_rate"]


def _row(attribute: str, group: str, split: str, q: dict, sampled_from: int | None = None) -> dict:
    return {"attribute": attribute, "group_name": group, "split": split, "n": int(q["n"]),
            **{k: (None if q.get(k) is None or math.isnan(q[k]) else q[k]) for k in _MEASURES},
            "sampled_from": sampled_from}


def model_quality(score: np.ndarray, target: np.ndarray, groups: dict[str, np.ndarray],
                  fidelity: dict | None = None, sampled_from: int | None = None) -> pa.Table:
    """One row for a surrogate's held-out rows (``fidelity``, when it has them), one for all
    records, and one per protected attribute × group (``groups``: 1 protected, 0 reference):
    the decisions ``score > 0`` against ``target`` (the recorded decisions, or the label the
    model was fitted to). With ``sampled_from``, the records are a uniform sample of that many:
    their rows' split is ``sample``, not ``all``, and ``sampled_from`` says of how many."""
    rows = []
    fid = fidelity or {}
    if "holdout_accuracy" in fid:
        rows.append(_row("all", "all", "holdout", {k: fid.get(f"holdout_{k}") for k in ["n", *_MEASURES]}))
    split = "all" if sampled_from is None else "sample"
    order = np.argsort(score, kind="stable")  # once: each group's AUC ranks its rows in this order
    rows.append(_row("all", "all", split, decision_quality(target, score, order=order), sampled_from))
    for attr, group in groups.items():
        for g, name in ((1, "protected"), (0, "reference")):
            mask = group == g
            rows.append(_row(attr, name, split, decision_quality(target[mask], score[mask],
                                                                 order=subset_order(order, mask)), sampled_from))
    return pa.Table.from_pylist(rows, schema=QUALITY)


def degenerate(model, min_balanced_accuracy: float) -> str | None:
    """Why a fitted surrogate cannot stand in for the lender's model, or None."""
    fid = getattr(model, "fidelity", {}) or {}
    split = "holdout" if "holdout_balanced_accuracy" in fid else "train"
    rate = fid.get(f"{split}_positive_rate")
    balanced = fid.get(f"{split}_balanced_accuracy")
    if rate is not None and rate in (0.0, 1.0):
        return (f"the surrogate model decides every {split} record the same way "
                f"({'favourable' if rate == 1.0 else 'unfavourable'})")
    if balanced is not None and not math.isnan(balanced) and balanced < min_balanced_accuracy:
        return (f"the surrogate model's balanced accuracy on {split} rows is {balanced:.3f}, below "
                f"model.min_balanced_accuracy = {min_balanced_accuracy:g}: it cannot stand in for "
                "the model that made the decisions")
    return None
