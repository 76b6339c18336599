"""The run's model step: the spec's model built, or a surrogate fitted on (a stratified sample of)
the staged records, its quality measured on every record, or on a uniform sample of
``QUALITY_ROWS`` of them above that (``audit.model_quality``), in a process of its own for a
large audit (:func:`prepare_model`)."""
from __future__ import annotations

import pickle
import time
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.core.data import DECISION, ID, LABEL, ROW, AuditData, group_column, record_columns
from aequum.engines.core.model_quality import degenerate, model_quality
from aequum.engines.core.models import ModelError
from aequum.engines.core.sampling import record_order, stratified_sample
from aequum.engines.core.spec import AuditSpec
from aequum.flows.child_process import run_in_child
from aequum.flows.store.counterfactuals import load_counterfactuals
from aequum.flows.store.lake_reading import lake_blocks, load_lake, release_memory
from aequum.flows.store.staging import DatasetRef


# staged records above which the model step runs in a process of its own: it then costs the
# start of a process (3-5 s) and the flow's process keeps nothing of its reads (0.45-0.53 GB at
# 8.4M records, held through every engine after it: flows.child_process)
OWN_PROCESS_ROWS = 500_000

# staged records above which the model's quality is measured on a uniform sample of this many
# (:func:`quality_sample`), not on every record: scoring and ranking 8.4M records took 17 s of
# the 10M audit, growing with the records while the fit (on ``model.fit_rows``) does not
QUALITY_ROWS = 1_000_000


@dataclass(frozen=True)
class PackedModel:
    """A model as the pickle its own process made and its fingerprint. The flow's process hands
    it to the engines, which unpack it where they run (:func:`aequum.flows.engine_tasks._prepare`), and records its
    fingerprint, without unpickling it itself: unpickled, the surrogate imports torch into a
    process with no use for it (0.15 GB of the flow's process at 1M HMDA records, held through
    every engine and the write). The pickle is the run's own, passed between its processes as
    Dask passes every task's arguments; it is never written to or read from a file."""

    payload: bytes
    fingerprint: str

    def unpack(self) -> Any:
        from aequum.engines.core.imports import unpickle

        return unpickle(self.payload)  # (it imports torch: one import at a time in a worker)


def unpacked(model: Any) -> Any:
    """The model itself, whether packed (:class:`PackedModel`) or not."""
    return model.unpack() if isinstance(model, PackedModel) else model


def model_readers(spec: AuditSpec, engines: Iterable[str]) -> list[str]:
    """The engines of ``engines`` that read the run's model (each declares it on its
    parameters: ``engines.core.engine.declared_reads_model``; no engine module is imported);
    every engine when the model makes the run's decisions (``model.use_for_decisions``); none
    without a model."""
    from aequum.engines.core.engine import declared_reads_model

    if spec.model is None:
        return []
    if spec.model.use_for_decisions:
        return list(engines)
    return [n for n in engines if declared_reads_model(spec.engines.params(n), spec)]


def prepare_model(spec: AuditSpec, spec_dir: Path, ref: DatasetRef, say, packed: bool = False,
                  engines: Iterable[str] | None = None) -> tuple[Any, pa.Table | None, str | None]:
    """The run's model, its quality (``audit.model_quality``) and why it cannot stand in for
    the lender's, if it cannot (:func:`model_step`); in a process of its own when more than
    ``OWN_PROCESS_ROWS`` records were staged, and then, with ``packed``, as a
    :class:`PackedModel`. With ``engines`` (the run's), nothing is built, fitted or measured
    when none of them reads the model (:func:`model_readers`)."""
    if spec.model is None:
        return None, None, None
    if engines is not None and not model_readers(spec, engines):
        say(f"no engine of the run ({', '.join(engines) or 'none'}) reads the model: it is not "
            f"{'fitted' if spec.model.kind == 'surrogate' else 'built'}")
        return None, None, None
    if ref.rows_staged > OWN_PROCESS_ROWS:
        model, quality, problem = run_in_child(_packed_model_step, (spec, spec_dir, ref), say)
        return (model if packed else unpacked(model)), quality, problem
    return model_step(spec, spec_dir, ref, say)


def _packed_model_step(spec: AuditSpec, spec_dir: Path, ref: DatasetRef, say) -> tuple[Any, pa.Table | None, str | None]:
    """:func:`model_step` with its model packed (:class:`PackedModel`), in the child process."""
    from aequum.engines.core.models import model_fingerprint

    model, quality, problem = model_step(spec, spec_dir, ref, say)
    if model is not None:
        model = PackedModel(pickle.dumps(model), model_fingerprint(model))
    return model, quality, problem


def model_step(spec: AuditSpec, spec_dir: Path, ref: DatasetRef, say) -> tuple[Any, pa.Table | None, str | None]:
    """:func:`prepare_model`'s work. A surrogate is fitted on the staged records, or on a
    sample of ``model.fit_rows`` of them (:func:`fit_sample`); the model's quality is measured
    on every record, read in blocks, or above ``QUALITY_ROWS`` records on a uniform sample of
    that many (:func:`quality_sample`, :func:`assess_model`), so the step takes the memory and
    time of about ``fit_rows`` + ``QUALITY_ROWS`` records however many were staged."""
    columns = record_columns(spec, list(spec.model.features), ids=needs_holdout_ids(spec))  # inputs, targets
    if spec.model.kind != "surrogate":
        model = fit_model(spec, spec_dir, None, ref.categories)
    elif (single := _single_class(spec, ref)) is not None:  # nothing to fit: as a degenerate surrogate
        if spec.model.use_for_decisions:
            raise ModelError(f"{single}; it makes this audit's decisions (model.use_for_decisions)")
        say(f"WARNING: {single}; the engines that need a model are not run")
        return None, None, single
    else:
        picked = fit_sample(spec, ref)
        release_memory()  # every record's keys, read to draw it (0.3 GB kept by the allocators at 8.4M)
        table = load_lake(ref.lake_path, columns, rows=picked)
        say(f"fitting the surrogate model on {table.num_rows:,} rows" +
            (f" (a sample of the {ref.rows_staged:,} staged, stratified by target and groups: model.fit_rows)"
             if picked is not None else ""))
        t_fit = time.perf_counter()
        model = fit_model(spec, spec_dir, table, ref.categories)
        del table
        release_memory()
        say(f"model ready in {time.perf_counter() - t_fit:.1f} s")
    measured = quality_sample(spec, ref)
    release_memory()
    read = columns if measured is None or ROW in columns else [*columns, ROW]
    with closing(lake_blocks(ref.lake_path, read)) as blocks:  # its lock is let go on an error too
        if measured is None:
            quality, problem = assess_model(spec, blocks, ref.categories, model, say)
        else:
            quality, problem = assess_model(spec, _records_of(blocks, measured), ref.categories, model, say,
                                            sampled_from=ref.rows_staged)
    release_memory()  # the blocks read, kept by the allocators, go back for the rest of the run
    return model, quality, problem


def _single_class(spec: AuditSpec, ref: DatasetRef) -> str | None:
    """Why a surrogate cannot be fitted when its target has one class among the staged records."""
    target = LABEL if spec.model.target == "label" else DECISION
    values = pc.unique(load_lake(ref.lake_path, [target], ordered=False)[target].drop_null())
    if len(values) < 2:
        return f"surrogate: the target ({spec.model.target}) has a single class {values.to_pylist()}; nothing to fit"
    return None


def fit_sample(spec: AuditSpec, ref: DatasetRef) -> pa.Array | None:
    """The source row numbers of the records a surrogate is fitted on: ``model.fit_rows`` of
    them, stratified by its target and every protected attribute's group, drawn in record order
    (:mod:`engines.core.sampling`: the same records and seed give the same sample whatever the
    rows' order); None (all records) when there are no more than that."""
    limit = spec.model.fit_rows
    if limit is None or ref.rows_staged <= limit:
        return None
    target = LABEL if spec.model.target == "label" else DECISION
    groups = [group_column(p.name) for p in spec.protected]
    keys = load_lake(ref.lake_path, [ID, ROW, target, *groups], ordered=False)
    order = record_order(keys[ID])
    stratum = keys[target].to_numpy(zero_copy_only=False).astype(np.int64)
    for g in groups:  # target x (group + 1) of each attribute, in base 3
        stratum = stratum * 3 + keys[g].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    picked = stratified_sample(order, stratum[order], limit, spec.model.seed)
    return keys[ROW].take(pa.array(picked))


def quality_sample(spec: AuditSpec, ref: DatasetRef) -> pa.Array | None:
    """The source row numbers of the records the model's quality is measured on above
    ``QUALITY_ROWS`` staged records: a uniform sample of ``QUALITY_ROWS`` of them, drawn in
    record order with ``model.seed`` (the same records and seed give the same sample whatever
    the rows' order); None (every record) when there are no more than that."""
    if ref.rows_staged <= QUALITY_ROWS:
        return None
    keys = load_lake(ref.lake_path, [ID, ROW], ordered=False)
    order = record_order(keys[ID])
    picked = stratified_sample(order, np.zeros(len(order), np.int8), QUALITY_ROWS, spec.model.seed)
    return keys[ROW].take(pa.array(picked))


def _records_of(blocks: Iterable[pa.Table], rows: pa.Array) -> Iterator[pa.Table]:
    """The records of ``blocks`` whose source row numbers (``_row``) are among ``rows``: one
    pass over the blocks, each filtered by a binary search of its row numbers in the sorted
    ``rows`` (at 8.4M staged records, a read of every block with a set-membership filter of 1M
    row numbers took 4.0 CPU-s)."""
    wanted = np.sort(rows.to_numpy(zero_copy_only=False))
    for block in blocks:
        at = block[ROW].to_numpy(zero_copy_only=False)
        i = np.minimum(np.searchsorted(wanted, at), len(wanted) - 1)
        yield block.filter(pa.array(wanted[i] == at))


def supplied_counterfactuals(spec: AuditSpec, spec_dir: Path, ref: DatasetRef) -> dict[str, pa.Table] | None:
    """The counterfactual tables the spec supplies (``scm.counterfactuals``), aligned with the
    staged records (read for that only)."""
    if spec.scm is None or spec.scm.counterfactuals is None:
        return None
    return load_counterfactuals(spec, spec_dir, load_lake(ref.lake_path, record_columns(spec)))


def fit_model(spec: AuditSpec, spec_dir: Path, table: pa.Table, categories: dict):
    """Build the spec's model (fitting a surrogate on the staged records when asked)."""
    if spec.model is None:
        return None
    from aequum.engines.core.models import build_model

    if spec.model.kind != "surrogate":
        return build_model(spec.model, base_dir=spec_dir)
    data = AuditData(spec, table, categories)
    # fitted to the recorded decisions (never to its own), or to the label
    y = data.label if spec.model.target == "label" else table["_decision"].to_numpy()
    model = build_model(spec.model, X_train=data.feature_values(spec.model.features), y_train=y,
                        base_dir=spec_dir)
    if ID in table.column_names:  # the records held out of the fit, by id (PBA's test split)
        model.holdout_ids = data.id_text.take(pa.array(model.holdout_index))
    return model


def needs_holdout_ids(spec: AuditSpec) -> bool:
    """Whether an engine of the run verifies only the surrogate's held-out records (their ids
    are then read with the fitting rows)."""
    pba = spec.engines.params("pba") if "pba" in spec.engines.run else None
    return pba is not None and pba.inputs == "holdout"


def assess_model(spec: AuditSpec, blocks: Iterable[pa.Table], categories: dict, model, say,
                 sampled_from: int | None = None) -> tuple[pa.Table | None, str | None]:
    """The model's agreement with what it stands for (``audit.model_quality``), over the
    staged records in ``blocks`` (with ``sampled_from``: a uniform sample of that many staged
    records, the rows' split ``sample``), and, for a surrogate that cannot stand in for the
    lender's model, why (the engines that need a model are then not run). A degenerate model
    that makes the decisions fails the run."""
    if model is None:
        return None, None
    fitted_to_label = spec.model.kind == "surrogate" and spec.model.target == "label"
    use_label = fitted_to_label or spec.decision is None
    if use_label and spec.label is None:
        return None, None
    scores, targets, groups = [], [], {p.name: [] for p in spec.protected}
    for block in blocks:
        data = AuditData(spec, block, categories, model)
        scores.append(data.scores())
        targets.append(data.label if use_label else block[DECISION].to_numpy())
        for name, g in data.groups.items():
            groups[name].append(g)
    quality = model_quality(np.concatenate(scores), np.concatenate(targets),
                            {name: np.concatenate(g) for name, g in groups.items()},
                            getattr(model, "fidelity", None), sampled_from)
    overall = {r["split"]: r for r in quality.to_pylist() if r["attribute"] == "all"}
    for split, r in overall.items():
        what = (f"a uniform sample of {r['n']:,} of the {sampled_from:,} records" if split == "sample"
                else f"{split}, {r['n']:,} rows")
        say(f"model vs {'label' if fitted_to_label else 'recorded decisions'} ({what}): "
            f"accuracy {r['accuracy']:.3f}, balanced accuracy {r['balanced_accuracy']:.3f}, "
            f"AUC {r['auc'] if r['auc'] is not None else float('nan'):.3f}, "
            f"positive rate {r['positive_rate']:.3f} (target {r['target_positive_rate']:.3f})")
    problem = degenerate(model, spec.model.min_balanced_accuracy) if spec.model.kind == "surrogate" else None
    if problem:
        if spec.model.use_for_decisions:
            raise ModelError(f"{problem}; it makes this audit's decisions (model.use_for_decisions)")
        say(f"WARNING: {problem}; the engines that need a model are not run")
    return quality, problem
