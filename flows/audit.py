"""The audit flow: stage the records, build the model, fan the engines out on Dask, write results.

Orchestration only. Staging and all warehouse writes happen in the flow's process (DuckDB has
one writer); engines run as Prefect tasks on a Dask cluster (a LocalCluster by default, or any
scheduler address), and each engine's pieces fan out again on the same cluster. Engine tasks
read the dataset version from the Parquet lake, never from the warehouse file.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import threading
import time
import traceback
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field, fields, is_dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import TerminationSignal

from aequum.engines.core.data import DECISION, ID, LABEL, ROW, AuditData, group_column, is_text, record_columns
from aequum.engines.core.engine import (Section, assemble, conform, declared_columns, declared_rows, run_piece,
                                        run_rounds, spill)
from aequum.engines.core.model_quality import QUALITY, degenerate, model_quality
from aequum.engines.core.models import ModelError
from aequum.engines.core.sampling import record_order, stratified_sample
from aequum.engines.core.spec import AuditSpec, load_spec
from aequum.engines.detection import DETECTION
from aequum.engines.registry import engine_params, get_engine
from aequum.flows.child_process import run_in_child
from aequum.flows.counterfactuals import load_counterfactuals
from aequum.flows.ground_truth import score_run
from aequum.flows.preflight import staged_group_problems
from aequum.flows import run_control
from aequum.flows.run_control import (INTERRUPTED, close_cluster, drain_worker, drain_workers, flow_api, flow_result,
                                     user_failure)
from aequum.flows.staging import DEFAULT_LAKE, DatasetRef, stage
from aequum.flows.versioning import code_version
from aequum.flows.warehouse import DEFAULT_WAREHOUSE, Warehouse, WarehouseError


@dataclass
class EngineOutcome:
    """One engine's run: its result tables in ``tables``, or, once :meth:`spool` has written
    them to Parquet files (``files``, with their ``rows``), there: the worker that ran the
    engine then hands the flow a few paths instead of its results (CST's evidence: 7M rows at
    1M HMDA records, 12.5M at 10M), which the flow held all at once, as pickled bytes and as
    tables, until the end of the run (1.9 GB of its 2.5 GB peak at 1M)."""

    engine: str
    status: str
    seconds: float
    pieces: int
    tables: dict[str, pa.Table]
    schemas: dict[str, pa.Schema]
    error: str | None = None
    files: dict[str, list[str]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    def spool(self, folder: Path) -> EngineOutcome:
        """The outcome with its tables in memory written to ``folder/<engine>/<table>.parquet``
        (a streamed table's pieces are already in files: ``files``)."""
        if not self.tables:
            return self
        where = Path(folder) / self.engine
        where.mkdir(parents=True, exist_ok=True)
        files, rows = dict(self.files), dict(self.rows)
        for name, table in self.tables.items():
            files[name] = [str(where / f"{name}.parquet")]
            pq.write_table(table, files[name][0])
            rows[name] = table.num_rows
        return EngineOutcome(self.engine, self.status, self.seconds, self.pieces, {}, self.schemas,
                             self.error, files, rows)

    def row_counts(self) -> dict[str, int]:
        return {**{t: v.num_rows for t, v in self.tables.items()}, **self.rows}

    def results(self) -> Mapping[str, pa.Table]:
        """Its tables by name, each read from its files when asked for (if spooled)."""
        return self.tables if not self.files else _SpooledTables(self.tables, self.files)

    def result(self, name: str) -> pa.Table | list[str]:
        """A table to insert: in memory, or the paths of its Parquet files (rows in file order)."""
        return self.files[name] if name in self.files else self.tables[name]


class _SpooledTables(Mapping):
    def __init__(self, tables: dict[str, pa.Table], files: dict[str, list[str]]):
        self.tables, self.files = tables, files

    def __getitem__(self, name: str) -> pa.Table:
        if name in self.tables:
            return self.tables[name]
        return pa.concat_tables([pq.read_table(f) for f in self.files[name]])

    def __contains__(self, name: object) -> bool:  # without reading the table
        return name in self.tables or name in self.files

    def column(self, name: str, column: str) -> pa.ChunkedArray:
        """One column of a table, only that column read from its files."""
        if name in self.tables:
            return self.tables[name][column]
        return pa.chunked_array([c for f in self.files[name] for c in pq.read_table(f, columns=[column])[column].chunks],
                                pq.read_schema(self.files[name][0]).field(column).type)

    def __iter__(self):
        return iter({**self.tables, **self.files})

    def __len__(self) -> int:
        return len({**self.tables, **self.files})


# Arrow's default allocator (mimalloc) keeps what its reading threads freed in their own heaps,
# out of reach of release_memory: after the model step's reads the flow's process held 0.24 GB
# more with it than with the system allocator (0.11 GB), and CST's preparation at 10M peaked
# 0.3 GB higher. The flow's process and its workers (which import this module) use malloc.
pa.set_memory_pool(pa.system_memory_pool())


def release_memory() -> None:
    """Give the memory freed by a large step back to the system: Arrow's allocator keeps freed
    blocks for reuse and glibc's heap keeps its top, so a worker that once held a 10M-record
    engine would otherwise stay that large through every later task (and the flow's process
    through the whole run after the model fit)."""
    import ctypes

    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


_LAKE_READS = threading.Lock()  # a process's reads of the lake, one at a time: each may hold GBs
_KEEP_BYTES = 64 * 2 ** 20  # a read larger than this gives back the memory of its steps


def _lake_files(lake_path: str, wanted: Iterable[str]) -> tuple[list[str], pa.Schema]:
    """A dataset version's Parquet files and their schema; a column in ``wanted`` that the
    records lack is an error naming it."""
    files = sorted(str(p) for p in Path(lake_path).rglob("*.parquet"))
    if not files:
        raise ValueError(f"no staged records at {lake_path}")
    schema = pq.read_schema(files[0])
    missing = [c for c in dict.fromkeys(wanted) if c not in schema.names]
    if missing:
        raise ValueError(f"the staged records at {lake_path} lack column(s) {missing}")
    return files, schema


def load_lake(lake_path: str, columns: list[str] | None = None, ordered: bool = True,
              where: dict[str, int] | None = None, rows: pa.Array | None = None) -> pa.Table:
    """A dataset version's staged records from the lake: only ``columns`` (default all) of the
    records whose columns have the values in ``where`` and whose source row numbers (``_row``)
    are in ``rows`` (default all records), in record order (by id,
    :func:`~aequum.engines.core.sampling.record_order`: the same records come in the same order
    however the source's rows were ordered, so no engine's result depends on it), or in
    storage order when ``ordered`` is false. Text columns other than the ids come dictionary-encoded, as Parquet
    stores them (a staged text column is a category, a grade, a code: at 10M HMDA records the
    three recorded protected values took 409 MB as strings, 101 MB so).

    Read with Arrow's Parquet reader into Arrow's memory, and put in record order a column at a
    time, each column let go (and its memory given back) once its copy in that order is made.
    Through DuckDB, whose allocator kept what it had freed, the CST read at 10M HMDA records
    (0.58 GB) peaked at 1.85 GB; so, at 1.1 GB."""
    files, schema = _lake_files(lake_path, [*(columns or []), *(where or {})])
    names = list(dict.fromkeys(columns)) if columns is not None else list(schema.names)
    read = list(dict.fromkeys([*names, *([ID] if ordered else [])]))
    text = [f.name for f in schema if _encoded(f)]
    dataset = ds.dataset(files, schema=_read_schema(schema), format=ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(dictionary_columns=text)))
    condition = None
    for column, value in (where or {}).items():  # each file holds one partition: most are skipped
        term = ds.field(column) == value
        condition = term if condition is None else condition & term
    if rows is not None:
        term = ds.field(ROW).isin(pa.array(rows, pa.int64()))
        condition = term if condition is None else condition & term
    pool = pa.default_memory_pool()
    with _LAKE_READS:
        table = dataset.to_table(columns=read, filter=condition)
        if ordered:
            fields = {f.name: f for f in table.schema}
            order = pa.array(record_order(table[ID]))
            columns_in_order = []
            for name in names:  # each column is let go as soon as its copy in record order is made
                # combining unifies a column's row groups' dictionaries; a chunked take is 1.3x slower
                columns_in_order.append(table[name].combine_chunks().take(order))
                table = table.drop_columns([name])
                pool.release_unused()  # else the freed columns stay with the allocator
            table = pa.table(columns_in_order, schema=pa.schema([fields[n] for n in names]))
            del columns_in_order
        if table.nbytes > _KEEP_BYTES:
            release_memory()
    return table


def _read_schema(stored: pa.Schema) -> pa.Schema:
    """The columns as read: every column nullable (the staged files mark some required; the
    tables of one engine are put together whatever they were read from) and text other than
    the ids dictionary-encoded."""
    return pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type) if _encoded(f) else f.type)
                      for f in stored])


def _encoded(field: pa.Field) -> bool:
    """Whether :func:`load_lake` reads a staged column dictionary-encoded: text other than the ids."""
    return field.name != ID and is_text(field.type)


def lake_blocks(lake_path: str, columns: list[str], rows: int = 1_000_000) -> Iterator[pa.Table]:
    """``columns`` of every staged record in blocks of about ``rows`` records, in storage order:
    for a pass over all records in the memory of one block (files read one after another, a
    row group at a time)."""
    files, schema = _lake_files(lake_path, columns)
    plain = pa.schema([schema.field(c).with_nullable(True) for c in columns])  # as load_lake's, text as stored
    with _LAKE_READS:
        held: list[pa.RecordBatch] = []
        for path in files:
            with pq.ParquetFile(path) as file:
                for batch in file.iter_batches(batch_size=rows, columns=list(columns)):
                    held.append(batch)
                    if sum(b.num_rows for b in held) >= rows:
                        yield pa.Table.from_batches(held).cast(plain)
                        held = []
        if held:
            yield pa.Table.from_batches(held).cast(plain)


# staged records above which the model step runs in a process of its own: it then costs the
# start of a process (3-5 s) and the flow's process keeps nothing of its reads (0.45-0.53 GB at
# 8.4M records, held through every engine after it: flows.child_process)
OWN_PROCESS_ROWS = 500_000
# staged records above which each engine runs on fresh workers of the run's own cluster
# (renew_workers). The four renewals of an HMDA audit take 25-29 s, and the new workers import
# torch again: at 8.4M records that saved 0.61 GB (3.70 -> 3.09 GB) in a 10-11 min run; at 0.84M,
# 0.34 GB (2.54 -> 2.20), but the run took 228-258 s against 176-183 s without renewals
RENEW_WORKERS_ROWS = 2_000_000


@dataclass(frozen=True)
class PackedModel:
    """A model as the pickle its own process made and its fingerprint. The flow's process hands
    it to the engines, which unpack it where they run (:func:`_prepare`), and records its
    fingerprint, without unpickling it itself: unpickled, the surrogate imports torch into a
    process with no use for it (0.15 GB of the flow's process at 1M HMDA records, held through
    every engine and the write). The pickle is the run's own, passed between its processes as
    Dask passes every task's arguments; it is never written to or read from a file."""

    payload: bytes
    fingerprint: str

    def unpack(self) -> Any:
        return pickle.loads(self.payload)


def unpacked(model: Any) -> Any:
    """The model itself, whether packed (:class:`PackedModel`) or not."""
    return model.unpack() if isinstance(model, PackedModel) else model


def prepare_model(spec: AuditSpec, spec_dir: Path, ref: DatasetRef, say,
                  packed: bool = False) -> tuple[Any, pa.Table | None, str | None]:
    """The run's model, its quality (``audit.model_quality``) and why it cannot stand in for
    the lender's, if it cannot (:func:`model_step`); in a process of its own when more than
    ``OWN_PROCESS_ROWS`` records were staged, and then, with ``packed``, as a
    :class:`PackedModel`."""
    if spec.model is None:
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
    sample of ``model.fit_rows`` of them (:func:`fit_sample`); its quality is measured on every
    record, read in blocks (:func:`assess_model`), so the step takes the memory and time of
    ``fit_rows`` records however many were staged."""
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
        table = load_lake(ref.lake_path, columns, rows=picked)
        say(f"fitting the surrogate model on {table.num_rows:,} rows" +
            (f" (a sample of the {ref.rows_staged:,} staged, stratified by target and groups: model.fit_rows)"
             if picked is not None else ""))
        t_fit = time.perf_counter()
        model = fit_model(spec, spec_dir, table, ref.categories)
        del table
        release_memory()
        say(f"model ready in {time.perf_counter() - t_fit:.1f} s")
    with closing(lake_blocks(ref.lake_path, columns)) as blocks:  # its lock is let go on an error too
        quality, problem = assess_model(spec, blocks, ref.categories, model, say)
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


def assess_model(spec: AuditSpec, blocks: Iterable[pa.Table], categories: dict, model, say
                 ) -> tuple[pa.Table | None, str | None]:
    """The model's agreement with what it stands for (``audit.model_quality``), over the
    staged records in ``blocks``, and, for a surrogate that cannot stand in for the lender's
    model, why (the engines that need a model are then not run). A degenerate model that makes
    the decisions fails the run."""
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
                            getattr(model, "fidelity", None))
    overall = {r["split"]: r for r in quality.to_pylist() if r["attribute"] == "all"}
    for split, r in overall.items():
        say(f"model vs {'label' if fitted_to_label else 'recorded decisions'} ({split}, {r['n']:,} rows): "
            f"accuracy {r['accuracy']:.3f}, balanced accuracy {r['balanced_accuracy']:.3f}, "
            f"AUC {r['auc'] if r['auc'] is not None else float('nan'):.3f}, "
            f"positive rate {r['positive_rate']:.3f} (target {r['target_positive_rate']:.3f})")
    problem = degenerate(model, spec.model.min_balanced_accuracy) if spec.model.kind == "surrogate" else None
    if problem:
        if spec.model.use_for_decisions:
            raise ModelError(f"{problem}; it makes this audit's decisions (model.use_for_decisions)")
        say(f"WARNING: {problem}; the engines that need a model are not run")
    return quality, problem


class Progress:
    """``engine NAME: i/n pieces`` lines, at most every ``every`` seconds and at the end."""

    def __init__(self, name: str, say, every: float = 10.0):
        self.name, self.say, self.every = name, say, every
        self.last = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == total or now - self.last >= self.every:
            self.say(f"engine {self.name}: {done}/{total} pieces done")
            self.last = now


BROADCAST_LIMIT = 2 * 2 ** 30  # CST at 1M HMDA rows: 0.85 GB (broadcast); at 10M several GB


def state_bytes(obj: Any, depth: int = 0, seen: set[int] | None = None) -> int:
    """The array bytes an engine's state holds (numpy and Arrow, through dataclasses, lists,
    tuples and dicts), each array once however many parts of the state share it: a state above
    ``BROADCAST_LIMIT`` runs its pieces in the task that prepared it instead of being copied to
    every worker (CST's state of 10M HMDA rows, several GB, failed Dask's broadcast and doubled
    the audit's memory)."""
    seen = set() if seen is None else seen
    if isinstance(obj, (np.ndarray, pa.Table, pa.Array, pa.ChunkedArray)):
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return obj.nbytes
    if depth > 6:
        return 0
    if is_dataclass(obj) and not isinstance(obj, type):
        return sum(state_bytes(getattr(obj, f.name), depth + 1, seen) for f in fields(obj))
    if isinstance(obj, (list, tuple)):
        return sum(state_bytes(v, depth + 1, seen) for v in obj)
    if isinstance(obj, dict):
        return sum(state_bytes(v, depth + 1, seen) for v in obj.values())
    return 0


def run_engine_pieces(name: str, spec: AuditSpec, lake_path: str, categories: dict, model: Any,
                      counterfactuals: dict[str, pa.Table] | None, client=None, say=None,
                      lock: str | None = None, spool: str | None = None) -> EngineOutcome:
    """Run one engine over a staged dataset version; pieces fan out on ``client`` if given.
    ``say`` receives the pieces' progress. With ``lock`` (a name on ``client``'s cluster) the
    engine runs while holding that lock: the engines of one run then run one at a time, each
    fanning its pieces out over every worker, so that the memory of one engine (the records
    it reads, the arrays built from them, its state on every worker, its results: 4-5 GB for
    CST or CEC at 10M HMDA records) is never needed next to another's. Its seconds count from
    when it holds the lock. With ``spool`` (a folder) the results are written there as Parquet
    before the lock is let go (:meth:`EngineOutcome.spool`)."""
    engine = get_engine(name)
    params = engine_params(spec, name)
    progress = Progress(name, say or (lambda _message: None))
    # a streamed table's rows go to files where each piece ran (engines.core.engine)
    keep = SectionFiles(str(Path(spool) / name / "sections")) if spool is not None else None

    def run_pieces(st, pieces):
        if client is None or len(pieces) < 2 or state_bytes(st) > BROADCAST_LIMIT:
            parts = []
            for p in pieces:
                parts.append(run_piece(engine, st, p, keep))
                progress(len(parts), len(pieces))
            return parts
        from distributed import as_completed

        state_f = client.scatter(st, broadcast=True)
        futures = {client.submit(run_piece, engine, state_f, p, keep, pure=False): i for i, p in enumerate(pieces)}
        parts = [None] * len(pieces)  # in piece order, whatever order they finish in
        # each piece's tables come here as it finishes and its future is let go at once: the
        # worker that ran it does not keep them until the last piece is done (CST at 10M
        # records: ~0.3 GB per piece), and the state's copies go when the pieces are done
        for done, (future, part) in enumerate(as_completed(futures, with_results=True), start=1):
            parts[futures.pop(future)] = part
            del future, part
            progress(done, len(pieces))
        del state_f
        return parts

    with _holding(client, lock):
        t0 = time.perf_counter()
        state = _prepare(engine, params, spec, lake_path, categories, model, counterfactuals)
        state = spill(engine, state, str(Path(spool) / name / "state") if spool is not None else None)
        release_memory()  # the records read are gone; the state is what the pieces need
        state, parts, n_pieces, sections = run_rounds(engine, state, run_pieces)
        out = engine.combine(state, parts)
        del state, parts
        tables = {t: conform(out[t], schema, t) for t, schema in engine.tables.items() if t not in sections}
        del out
        files, rows = {}, {}
        for t, found in sections.items():
            if keep is None or not found:
                tables[t] = assemble(found, engine.tables[t])
            else:
                files[t], rows[t] = [s.path for s in found], sum(s.rows for s in found)
        outcome = EngineOutcome(name, "succeeded", time.perf_counter() - t0, n_pieces, tables, dict(engine.tables),
                                files=files, rows=rows)
        del tables
        if spool is not None:
            outcome = outcome.spool(Path(spool))
        release_memory()
    return outcome


@dataclass(frozen=True)
class SectionFiles:
    """Writes each section of a streamed table to its own Parquet file under ``folder``, on the
    worker that ran the piece, and hands back the section without its rows."""

    folder: str

    def __call__(self, section: Section) -> Section:
        where = Path(self.folder) / section.name
        where.mkdir(parents=True, exist_ok=True)
        path = str(where / f"{uuid.uuid4().hex}.parquet")
        pq.write_table(section.table, path)
        return replace(section, table=None, path=path)


@contextmanager
def _holding(client, lock: str | None):
    if client is None or lock is None:
        yield
        return
    from distributed import Lock

    with Lock(lock):  # on the cluster of the client or worker this runs in
        yield


def _prepare(engine, params, spec: AuditSpec, lake_path: str, categories: dict, model: Any,
             counterfactuals: dict[str, pa.Table] | None):
    """The engine's state from the staged columns and records it declares (read here and held
    by the engine's data only, so that a column the engine lets go is freed at once and the
    rest when the state is ready)."""
    # no name here holds the records: the engine's data alone does
    return engine.prepare(AuditData(spec, load_lake(lake_path, declared_columns(engine, spec, params),
                                                    getattr(engine, "row_order", True),
                                                    declared_rows(engine, spec, params)),
                                    categories, unpacked(model), counterfactuals), params)


@task(name="engine", cache_policy=NO_CACHE, retries=0)
def engine_task(name: str, spec: AuditSpec, lake_path: str, categories: dict, model: Any,
                counterfactuals: dict[str, pa.Table] | None, lock: str | None = None,
                spool: str | None = None) -> EngineOutcome:
    """One engine as a Prefect task; failures come back as a failed outcome, not an exception.
    ``lock``, ``spool``: see :func:`run_engine_pieces`."""
    from distributed import get_worker, worker_client

    t0 = time.perf_counter()
    try:
        say = get_run_logger().info
        try:
            get_worker()
        except ValueError:  # not on a Dask worker (another task runner): run the pieces here
            return run_engine_pieces(name, spec, lake_path, categories, model, counterfactuals, say=say,
                                     spool=spool)
        # worker_client secedes this task's thread while it waits for its pieces, so the
        # pieces can run on the same workers (no deadlock when every thread holds an engine)
        with worker_client() as client:
            return run_engine_pieces(name, spec, lake_path, categories, model, counterfactuals, client, say, lock,
                                     spool)
    except Exception as exc:  # an engine failure is recorded, the other engines still land
        detail = f"{type(exc).__name__}: {exc}"
        get_run_logger().error("engine %s failed: %s\n%s", name, detail, traceback.format_exc())
        return EngineOutcome(name, "failed", time.perf_counter() - t0, 0, {}, {}, detail)


def new_run_id(spec_name: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{spec_name}-{stamp}-{uuid.uuid4().hex[:6]}"


@flow(name="aequum-audit", log_prints=True)
def audit_flow(spec_path: str, warehouse: str = str(DEFAULT_WAREHOUSE), lake: str = str(DEFAULT_LAKE),
               run_id: str | None = None, engines: list[str] | None = None, check_source: bool = False) -> str:
    """Run a full audit of one spec and return its run_id (written to ``audit.runs``).

    The warehouse is opened for writing only for three short steps (record the run, stage the
    dataset, write the results in one transaction), so readers and BI tools are locked out for
    seconds, not for the whole run. A user or configuration error ends the flow run Failed
    with its message (:func:`~aequum.flows.run_control.user_failure`)."""
    from aequum.flows.guard import user_errors

    try:
        spec_file = Path(spec_path).resolve()
        spec = load_spec(spec_file)
        run_id = run_id or new_run_id(spec.name)
        names = list(engines or spec.engines.run)
        with Warehouse(warehouse) as wh:
            wh.start_run(run_id, spec.name, spec.digest(), code_version(),
                         spec.run_parameters())
        # the engines' results until they are in the warehouse; a folder left by a process that
        # died is removed by the next staging of the spec (flows.staging: orphan .tmp folders)
        spool = Path(lake).resolve() / spec.name / f".results.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            return _audit(spec, spec_file, run_id, names, warehouse, lake, spool, check_source)
        finally:
            shutil.rmtree(spool, ignore_errors=True)
    except user_errors() as exc:
        return user_failure(exc)


def _audit(spec: AuditSpec, spec_file: Path, run_id: str, names: list[str], warehouse: str, lake: str,
           spool: Path, check_source: bool = False) -> str:
    logger = get_run_logger()
    ref: DatasetRef | None = None
    try:
        with Warehouse(warehouse) as wh:
            ref = stage(spec, spec_file.parent, wh, Path(lake), progress=logger.info, check_source=check_source)
        # the source's group counts held the rows staging quarantined: an engine whose groups
        # are too small without them is recorded as failed with the reason, and not run
        unfit = staged_group_problems(spec, ref.lake_path, names)
        size_workers(owned_cluster(), ref.rows_staged, logger.info)
        model, quality, problem = prepare_model(spec, spec_file.parent, ref, logger.info, packed=True)
        cfs = supplied_counterfactuals(spec, spec_file.parent, ref)
        release_memory()  # the flow's process waits for the engines from here on
        skipped = [n for n in names if problem and getattr(get_engine(n), "uses_model", False) and n not in unfit]
        runnable = [n for n in names if n not in skipped and n not in unfit]

        def submit(n: str):
            return engine_task.submit(n, spec, ref.lake_path, ref.categories, model, cfs,
                                      f"aequum-engines-{run_id}", str(spool))

        own = owned_cluster() if ref.rows_staged > RENEW_WORKERS_ROWS else None
        if own is None:
            futures = [submit(n) for n in runnable]
            outcomes: list[EngineOutcome] = [f.result() for f in futures]
            del futures  # a worker keeps a task's result while its future lives
        else:
            outcomes = []
            for i, n in enumerate(runnable):  # one engine at a time, each on fresh workers
                if i:
                    renew_workers(own, logger.info)
                outcomes.append(submit(n).result())
        outcomes += [EngineOutcome(n, "skipped", 0.0, 0, {}, {}, f"not run: {problem}") for n in skipped]
        outcomes += [EngineOutcome(n, "failed", 0.0, 0, {}, {}, f"not run: {why}") for n, why in unfit.items()]
    except BaseException as exc:  # an interrupt (flows.run_control) leaves the run abandoned
        # the signal may reach a worker's task (a lost worker) before it reaches this thread
        interrupted = isinstance(exc, (KeyboardInterrupt, TerminationSignal)) or run_control.interrupt_signalled()
        if interrupted:
            run_control.interrupted()  # ended within seconds, however the unwinding goes
        close_failed_run(warehouse, run_id, ref, INTERRUPTED if interrupted else f"{type(exc).__name__}: {exc}",
                         "abandoned" if interrupted else "failed")
        raise
    extra = {"model_quality": (QUALITY, quality)} if quality is not None else {}
    detection = score_run(spec, spec_file.parent, outcomes, logger.info)  # against the source's truth
    if detection is not None:
        extra["detection"] = (DETECTION, detection)
    rows = sum(n for o in outcomes for n in o.row_counts().values())
    logger.info(f"writing {rows:,} result rows of {len(outcomes)} engine(s) to {warehouse}")
    write_run(warehouse, run_id, outcomes, ref, model, extra)
    for o in outcomes:
        logger.info("engine %s: %s in %.2f s (%d pieces) %s", o.engine, o.status, o.seconds,
                    o.pieces, o.error or o.row_counts())
    return run_id


def close_failed_run(warehouse: str, run_id: str, ref: DatasetRef | None, error: str,
                     status: str = "failed") -> None:
    """Record a run as failed (or abandoned), with none of its rows left from an earlier attempt."""
    with Warehouse(warehouse) as wh, wh.transaction():
        wh.purge_run(run_id)
        wh.finish_run(run_id, status, ref.version if ref else None,
                      ref.fingerprint if ref else None, None, error)


def write_run(warehouse: str, run_id: str, outcomes: list[EngineOutcome], ref: DatasetRef, model,
              extra: dict[str, tuple[pa.Schema, pa.Table]] | None = None) -> None:
    """All result tables, engine statuses and the run's closing record in one transaction that
    first removes every row an earlier attempt of the run left. If the write fails (a full
    disk), nothing of it stays, the run is recorded as failed and the error names the file:
    the run is recorded failed, with none of its rows, before the results are written (a small
    write, while the disk still takes one), so that a disk that then cannot take even the run
    record leaves it failed, not running."""
    from aequum.engines.core.models import model_fingerprint

    failed = [o.engine for o in outcomes if o.status != "succeeded"]
    status = "succeeded" if not failed else ("failed" if len(failed) == len(outcomes) else "partial")
    try:
        with Warehouse(warehouse) as wh:
            with wh.transaction():
                wh.purge_run(run_id)
                wh.finish_run(run_id, "failed", ref.version, ref.fingerprint, None,
                              "writing the results did not complete")
            extra = extra or {}
            for t, (schema, _) in extra.items():
                wh.ensure_result_table(t, schema)
            for o in outcomes:
                for t, schema in o.schemas.items():
                    wh.ensure_result_table(t, schema)
            with wh.transaction():
                wh.purge_run(run_id)
                for t, (_, tbl) in extra.items():
                    wh.insert_run_rows(t, run_id, tbl)
                for o in outcomes:
                    counts = {t: wh.insert_run_rows(t, run_id, o.result(t)) for t in o.row_counts()}
                    wh.record_engine(run_id, o.engine, o.status, round(o.seconds, 3), o.pieces, counts, o.error)
                wh.finish_run(run_id, status, ref.version, ref.fingerprint,
                              None if model is None else model.fingerprint if isinstance(model, PackedModel)
                              else model_fingerprint(model),
                              None if not failed else f"engine(s) failed: {', '.join(failed)}")
            wh.create_views()
    except (duckdb.Error, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        try:
            close_failed_run(warehouse, run_id, ref, f"writing the results failed: {reason}")
        except (duckdb.Error, OSError, WarehouseError):
            pass  # the file cannot take even the run record; the error below says so
        raise WarehouseError(f"could not write the results of run {run_id} to {warehouse}: {reason}; "
                             "nothing of the run was written and it is recorded as failed (if the "
                             "file could take that)") from None


@contextmanager
def dask_runner(address: str | None = None, workers: int | None = None):
    """The Dask task runner of an audit: the scheduler at ``address``, or a LocalCluster of
    ``workers`` processes started here and closed at the end.

    The local workers start in the background (``scale`` does not wait for them), each
    importing this module meanwhile (``preload``: Prefect, the engines' core, torch), so their
    start overlaps the Prefect API's and the staging; the engine tasks wait for them. With the
    default number of workers only one starts here, and the others once staging shows at
    least ``ONE_WORKER_ROWS`` records (:func:`size_workers`): on two cores a second worker's
    start (about 2 CPU-s of imports) delayed the Prefect API's, which a small audit waits for,
    and a small audit's engines do not need it. At the end each worker first drains its
    Prefect log and event queues, so that it exits when asked instead of being killed after a
    timeout."""
    from prefect_dask import DaskTaskRunner

    if address:
        yield DaskTaskRunner(address=address)
        return
    from distributed import LocalCluster

    n = workers or max(1, min(2, os.cpu_count() or 1))
    # the scheduler's HTTP server (its dashboard when bokeh is installed) on a free port: with
    # None it still takes 8787, and a second audit at the same time warned that it was in use
    cluster = LocalCluster(n_workers=0, threads_per_worker=1, processes=True, dashboard_address=":0",
                           preload=[__name__])
    _OWN_CLUSTERS[cluster.scheduler_address] = (cluster, n)
    try:
        cluster.scale(n if workers else 1)
        yield DaskTaskRunner(address=cluster.scheduler_address)
    finally:
        _OWN_CLUSTERS.pop(cluster.scheduler_address, None)
        close_cluster(cluster)


# the local clusters dask_runner started in this process, by scheduler, each with its number
# of workers once the audit's size is known
_OWN_CLUSTERS: dict[str, tuple[Any, int]] = {}
ONE_WORKER_ROWS = 20_000  # below this many staged records a default local cluster keeps one worker


def size_workers(cluster, rows: int, say) -> None:
    """Start the rest of the workers of the run's own default cluster (:func:`dask_runner`)
    when the audit has at least ``ONE_WORKER_ROWS`` staged records; their start overlaps the
    model step. Nothing for another cluster, or one that has its workers."""
    if cluster is None or rows < ONE_WORKER_ROWS:
        return
    planned, running = _OWN_CLUSTERS[cluster.scheduler_address][1], len(cluster.worker_spec)
    if running < planned:
        cluster.scale(planned)
        say(f"{rows:,} staged records: starting {planned - running} more Dask worker(s)")


def owned_cluster():
    """The flow run's Dask cluster if :func:`dask_runner` started it in this process (its
    workers are the run's alone), else None (another task runner, or an external cluster,
    whose workers may serve others)."""
    from prefect.context import get_run_context

    own = _OWN_CLUSTERS.get(getattr(get_run_context().task_runner, "address", None))
    return own[0] if own else None


def renew_workers(cluster, say) -> None:
    """New worker processes for the run's own cluster between two engines of a large audit. An
    engine's preparation over millions of records leaves its worker holding memory that no
    allocator call gives back: at 8.4M staged records, 0.6 GB above a fresh worker after CST
    (Arrow's Parquet reader keeps some of every large read outside its pool; ``release_memory``
    on every worker changed nothing, measured), and the next engine's peak came on top of it.
    The workers' Prefect task logs are sent first (:func:`drain_worker`); they are then retired
    and as many started as at the cluster's start (``Client.restart`` instead left no worker at
    its second call in a 10M audit: the restarted processes did not come back within 120 s).
    Costs the workers' start, about 6 s."""
    from distributed import Client

    t0 = time.perf_counter()
    n = len(cluster.worker_spec)
    with Client(cluster, set_as_default=False) as client:
        client.run(drain_worker)
        cluster.scale(0)
        deadline = time.monotonic() + 60
        while client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster.scale(n)
        client.wait_for_workers(n, timeout=300)
    say(f"started {n} fresh worker(s) for the next engine in {time.perf_counter() - t0:.1f} s")


def run_audit(spec_path: str, warehouse: str = str(DEFAULT_WAREHOUSE), lake: str = str(DEFAULT_LAKE),
              run_id: str | None = None, engines: list[str] | None = None,
              dask_address: str | None = None, workers: int | None = None, server=None,
              check_source: bool = False) -> str:
    """Run ``audit_flow`` on a Dask cluster (the CLI's and the deployment's entry point).
    ``server``: a temporary Prefect API already starting (see :func:`flow_api`); ``check_source``:
    read and fingerprint a source even when its files look unchanged (see ``stage``)."""
    with dask_runner(dask_address, workers) as runner, flow_api(server):
        try:  # a user error ends the flow run Failed with its message, and is raised here
            return flow_result(audit_flow.with_options(task_runner=runner)(
                spec_path=spec_path, warehouse=warehouse, lake=lake, run_id=run_id, engines=engines,
                check_source=check_source, return_state=True))
        finally:
            with suppress(OSError):  # a cluster that is gone has nothing left to send
                drain_workers(runner.address)


@flow(name="aequum-ingest", log_prints=True)
def ingest_flow(spec_path: str, warehouse: str = str(DEFAULT_WAREHOUSE),
                lake: str = str(DEFAULT_LAKE)) -> dict:
    """Stage a spec's source (validate, quarantine, version) without running engines."""
    spec_file = Path(spec_path).resolve()
    spec = load_spec(spec_file)
    with Warehouse(warehouse) as wh:
        ref = stage(spec, spec_file.parent, wh, Path(lake), progress=get_run_logger().info)
    return json.loads(json.dumps(ref.__dict__))
