"""``aequum train``: fair training with the CEC loss (Algorithm 2), k-fold compared, models saved.

Orchestration only: stage the spec's records, hand the model inputs, merit features, labels
and groups to ``engines.matching.cec.training``, write the comparison table ``cec_training``
under a run record in the warehouse, and save one model file per objective (trained on every
record) in ``TorchMLP.save`` format, so that a spec's ``model: {kind: mlp, path: ...,
hidden: [128, 64]}`` with the same ``features`` loads it (``weights_only=True``).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from aequum.engines.core.data import AuditData
from aequum.engines.core.models import model_fingerprint
from aequum.engines.core.spec import SpecError, load_spec
from aequum.engines.matching.cec.lambda_choice import SEARCH, search_table
from aequum.engines.matching.cec.training import (OBJECTIVES, TRAINED, TRAINING, TrainConfig, cross_validate,
                                           make_pairs, train, training_table)
from aequum.flows.audit import new_run_id
from aequum.flows.store.staging import DEFAULT_LAKE, stage
from aequum.flows.store.versioning import code_version
from aequum.flows.store.warehouse import DEFAULT_WAREHOUSE, Warehouse

DEFAULT_MODELS = Path("data/models")


def _inputs(spec, data: AuditData, attribute: str | None):
    """Model inputs, merit features, labels and groups of the records in either group."""
    if spec.label is None:
        raise SpecError("aequum train fits to the label: the spec needs a `label` section")
    if spec.model is None:
        raise SpecError("aequum train takes the model's inputs from `model.features`: the spec needs a `model`")
    names = [p.name for p in spec.protected]
    attribute = attribute or names[0]
    if attribute not in names:
        raise SpecError(f"--attribute {attribute!r} is not a protected attribute ({names})")
    merit_names = spec.engines.cec.merit_features(spec)
    if not merit_names:
        raise SpecError("engines.cec.features: no feature is marked `financial: true`; CEC training "
                        "matches on the financial features")
    keep = data.groups[attribute] >= 0
    X = data.feature_values(list(spec.model.features))[keep]
    merit = data.feature_values(merit_names)[keep]
    bad = np.isnan(X).any(axis=1) | np.isnan(merit).any(axis=1)
    if bad.any():
        raise SpecError(f"{int(bad.sum())} record(s) have missing model inputs or merit features "
                        f"(e.g. record {np.asarray(data.ids)[keep][bad][0]!r})")
    return attribute, X, merit, data.label[keep], data.groups[attribute][keep].astype(np.int8)


def _sample(y: np.ndarray, a: np.ndarray, records: int | None, seed: int) -> np.ndarray:
    """Positions of a ``records`` sample stratified by label and group (all: every position)."""
    from aequum.engines.core.sampling import stratified_sample

    everyone = np.arange(len(y))
    return everyone if records is None else stratified_sample(everyone, y * 2 + a, records, seed)


def _budget(spec, max_f1_loss: float | None, lambdas: list[float] | None, spec_budget: bool = True):
    """The λ search's budget: the command line's, else (``spec_budget``) the spec's
    engines.cec.training; None."""
    from aequum.engines.matching.cec.lambda_choice import Budget

    t = spec.engines.cec.training
    loss = max_f1_loss if max_f1_loss is not None else (t.max_f1_loss if spec_budget else None)
    if loss is None:
        return None
    try:
        return Budget(float(loss), tuple(sorted(lambdas or t.lambdas)), t.validation)
    except ValueError as exc:
        raise SpecError(f"--max-f1-loss / --lambdas: {exc}") from None


def run_train(spec_path: str, objectives: list[str], folds: int = 5, config: TrainConfig = TrainConfig(),
              attribute: str | None = None, warehouse: str = str(DEFAULT_WAREHOUSE),
              lake: str = str(DEFAULT_LAKE), out_dir: str | Path = DEFAULT_MODELS,
              run_id: str | None = None, progress: Callable[[str], None] = print,
              max_f1_loss: float | None = None, lambdas: list[float] | None = None,
              records: int | None = None, spec_budget: bool = True) -> tuple[str, object]:
    """Cross-validate each objective, train its final model on every record, write the table.

    With an F1 budget (``max_f1_loss`` or the spec's ``engines.cec.training.max_f1_loss``) the
    cec objective's λ_CEC is chosen per fold by validation (``engines.matching.cec.lambda_choice``),
    every λ tried is written to ``cec_lambda_search``, and the final model takes the folds'
    median λ; ``spec_budget`` False ignores the spec's budget (a fixed λ_CEC asked for).
    ``records`` (or the spec's ``training.records``): a stratified sample.

    Returns the run id and the ``cec_training`` table.
    """
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown or not objectives:
        raise SpecError(f"--objective must name some of {sorted(OBJECTIVES)}, got {objectives}")
    spec_file = Path(spec_path).resolve()
    spec = load_spec(spec_file)
    budget = _budget(spec, max_f1_loss, lambdas, spec_budget)
    records = records if records is not None else spec.engines.cec.training.records
    run_id = run_id or new_run_id(f"{spec.name}-train")
    params = {"objectives": objectives, "folds": folds, "attribute": attribute, "records": records,
              "max_f1_loss": None if budget is None else budget.max_f1_loss,
              "lambdas": None if budget is None else list(budget.lambdas),
              **{k: (list(v) if isinstance(v, tuple) else v) for k, v in config.__dict__.items()}}
    with Warehouse(warehouse) as wh:
        wh.start_run(run_id, spec.name, spec.digest(), code_version(), {"train": params})
        try:
            ref = stage(spec, spec_file.parent, wh, Path(lake), progress=progress)
            data = AuditData(spec, wh.staged(ref.version), ref.categories)
            attribute, X, merit, y, a = _inputs(spec, data, attribute)
            keep = _sample(y, a, records, config.seed)
            X, merit, y, a = X[keep], merit[keep], y[keep], a[keep]
            progress(f"training on {len(y):,} records ({attribute}: {int(a.sum()):,} protected), "
                     f"{len(spec.model.features)} inputs, F = {spec.engines.cec.merit_features(spec)}"
                     + ("" if budget is None else f"; λ_CEC chosen per fold within an F1 loss of "
                        f"{budget.max_f1_loss:g} from {list(budget.lambdas)}"))
            t0 = time.perf_counter()
            rows = cross_validate(X, merit, y, a, list(spec.model.features), objectives, folds, config,
                                  progress=lambda e: progress(_epoch_line(e)), budget=budget)
            for r in rows:
                if r.get("budget_met") is False:
                    progress(f"fold {r['fold']}: no λ_CEC of {list(budget.lambdas)} keeps the validation F1 "
                             f"within {budget.max_f1_loss:g} of the plain model's; the fold's cec model "
                             "trains with λ_CEC = 0")
                elif r.get("budget_met"):
                    progress(f"fold {r['fold']}: λ_CEC = {r['lambda_cec']:g} (validation F1 within "
                             f"{budget.max_f1_loss:g} of plain)")
            paths, model = {}, None
            out = Path(out_dir)
            out.mkdir(parents=True, exist_ok=True)
            chosen = [r["lambda_cec"] for r in rows if r["objective"] == "cec"]
            for objective in objectives:
                cfg = config.for_objective(objective)
                if objective == "cec" and budget is not None:
                    cfg = replace(cfg, lambda_cec=float(np.median(chosen)))
                model = train(X, y, a, make_pairs(X, merit, y, a), list(spec.model.features), cfg,
                              lambda e, o=objective: progress(_epoch_line({"objective": o, "fold": "all", **e})))
                path = out / f"{spec.name}_{objective}.pt"
                model.save(path)
                paths[objective] = str(path)
            table = training_table(rows, attribute, config.epochs, paths)
            results = {TRAINED[0]: (TRAINING, table)}
            if budget is not None and "cec" in objectives:
                searches = [(r["fold"], r["search"]) for r in rows if "search" in r]
                results[TRAINED[1]] = (SEARCH, search_table(searches, attribute, budget))
            counts = wh.write_results(run_id, results)
            with wh.transaction():
                wh.record_engine(run_id, "train", "succeeded", round(time.perf_counter() - t0, 3),
                                 len(rows), counts, None)
                wh.finish_run(run_id, "succeeded", ref.version, ref.fingerprint, model_fingerprint(model))
        except BaseException as exc:
            with wh.transaction():
                wh.finish_run(run_id, "failed", error=f"{type(exc).__name__}: {exc}")
            raise
        wh.create_views()
    return run_id, table


def _epoch_line(e: dict) -> str:
    if e["objective"] == "lambda":
        return (f"[λ search fold {e['fold']}/{e['folds']}] λ_CEC {e['lambda_cec']:g}: validation F1 "
                f"{e['f1']:.3f} (loss {e['f1_loss']:+.3f}), CEC {e['cec']:.3f}"
                + ("" if e["within_budget"] else ": over the budget"))
    fold = e["fold"] if e["fold"] == "all" else f"{e['fold']}/{e['folds']}"
    return (f"[{e['objective']} fold {fold}] epoch {e['epoch']:>3}/{e['epochs']}: loss {e['loss']:.4f} "
            f"(bce {e['bce']:.4f}, eo {e['eo']:.4f}, cec {e['cec']:.4f}) {e['seconds']:.2f} s")
