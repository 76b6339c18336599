"""λ_CEC chosen by validation within a utility budget (Popoola & Sheppard, Algorithm 2's λ).

The loss L = L_pred + λ_EO·L_EO + λ_CEC·L_CEC (Eq. of Algorithm 2, line 18) trades F1 for
explanation consistency, and how much F1 one unit of λ_CEC costs depends on the data: the
paper's λ_CEC = 1 costs German credit 0.008 of F1 and Adult 0.29. Given the F1 the user will
give up (``max_f1_loss``), :func:`choose_lambda` holds out a stratified ``validation`` share of
the training records, trains the plain model (λ's = 0) and the cec model at each λ_CEC of the
grid, in increasing order, on the rest, and keeps the λ of lowest validation CEC among those
whose validation F1 is within the budget of the plain model's. F1 falls as λ grows, so the
search stops at the first λ over the budget. None meets it: ``lambda_cec`` is None and the
caller says so (the fold's model is then the λ_CEC = 0 one).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from aequum.engines.matching.cec.training import TrainConfig, evaluate, make_pairs, train

DEFAULT_LAMBDAS = (0.01, 0.03, 0.1, 0.3, 1.0)


@dataclass(frozen=True)
class Budget:
    """The utility budget of the λ search: F1 lost against the plain model, at most."""

    max_f1_loss: float
    lambdas: tuple[float, ...] = DEFAULT_LAMBDAS
    validation: float = 0.2

    def __post_init__(self):
        if not 0 <= self.max_f1_loss < 1:
            raise ValueError(f"max_f1_loss must be in [0, 1), got {self.max_f1_loss}")
        if not self.lambdas or any(not (v > 0 and np.isfinite(v)) for v in self.lambdas):
            raise ValueError(f"the λ grid must list positive finite values, got {list(self.lambdas)}")
        if not 0 < self.validation < 1:
            raise ValueError(f"the validation share must be in (0, 1), got {self.validation}")


def validation_split(label: np.ndarray, group: np.ndarray, share: float, seed: int) -> np.ndarray:
    """A validation mask holding ``share`` of every (label, group) cell (at least one record of
    a cell of two or more), drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    out = np.zeros(len(label), bool)
    for y in np.unique(label):
        for a in np.unique(group):
            rows = np.flatnonzero((label == y) & (group == a))
            take = int(round(share * len(rows))) if len(rows) > 1 else 0
            out[rows[rng.permutation(len(rows))[:max(take, 1 if len(rows) > 1 else 0)]]] = True
    return out


def choose_lambda(inputs: np.ndarray, merit: np.ndarray, label: np.ndarray, group: np.ndarray, names,
                  config: TrainConfig, budget: Budget,
                  progress: Callable[[dict], None] | None = None) -> dict:
    """The λ_CEC of lowest validation CEC whose validation F1 is within ``budget.max_f1_loss``
    of the plain model's (module docstring). Returns ``lambda_cec`` (None: no λ of the grid
    meets the budget), the plain model's validation F1 and CEC, and one trial per λ tried
    (validation F1, its loss, CEC, within the budget)."""
    val = validation_split(label, group, budget.validation, config.seed)
    fit = ~val
    pool = (inputs[fit], merit[fit], label[fit], group[fit])
    pairs = make_pairs(*pool[:2], pool[2], pool[3])

    def score(cfg: TrainConfig) -> dict:
        model = train(inputs[fit], label[fit], group[fit], pairs, names, cfg)
        return evaluate(model, inputs[val], merit[val], label[val], group[val], cfg.threshold, pool=pool)

    plain = score(config.for_objective("plain"))
    trials = []
    for lam in sorted(budget.lambdas):
        r = score(replace(config.for_objective("cec"), lambda_cec=float(lam)))
        loss = plain["f1"] - r["f1"]
        trials.append({"lambda_cec": float(lam), "f1": r["f1"], "f1_loss": loss, "auc": r["auc"],
                       "cec": r["cec"], "within_budget": bool(loss <= budget.max_f1_loss)})
        if progress is not None:
            progress(trials[-1])
        if loss > budget.max_f1_loss:
            break
    within = [t for t in trials if t["within_budget"]]
    best = min(within, key=lambda t: t["cec"]) if within else None
    return {"lambda_cec": None if best is None else best["lambda_cec"], "plain_f1": plain["f1"],
            "plain_cec": plain["cec"], "trials": trials}


SEARCH = pa.schema([
    ("attribute", pa.string()), ("fold", pa.int32()), ("lambda_cec", pa.float64()),
    ("validation_f1", pa.float64()), ("validation_f1_loss", pa.float64()), ("validation_auc", pa.float64()),
    ("validation_cec", pa.float64()), ("plain_validation_f1", pa.float64()),
    ("plain_validation_cec", pa.float64()), ("max_f1_loss", pa.float64()),
    ("within_budget", pa.bool_()), ("chosen", pa.bool_()),
])


def search_table(searches: list[tuple[int, dict]], attribute: str, budget: Budget) -> pa.Table:
    """cec_lambda_search: one row per fold and λ tried (fold 0: the search on every record)."""
    rows = []
    for fold, s in searches:
        for t in s["trials"]:
            rows.append({"attribute": attribute, "fold": fold, "lambda_cec": t["lambda_cec"],
                         "validation_f1": t["f1"], "validation_f1_loss": t["f1_loss"],
                         "validation_auc": t["auc"], "validation_cec": t["cec"],
                         "plain_validation_f1": s["plain_f1"], "plain_validation_cec": s["plain_cec"],
                         "max_f1_loss": budget.max_f1_loss, "within_budget": t["within_budget"],
                         "chosen": t["lambda_cec"] == s["lambda_cec"]})
    return pa.Table.from_pylist(rows, schema=SEARCH)
